// The WebDataset builder: the standard stages in WebDataset's order.
#include "wds/webdataset.hpp"

#include "wds/brace.hpp"
#include "wds/stages.hpp"

namespace wds {

Pipeline<Sample> WebDataset(std::vector<std::string> urls, WebDatasetOptions options) {
  TarSamplesOptions read;
  read.handler = options.handler;
  read.open = options.open;
  read.tar = options.tar;

  if (options.resampled) {
    // Each rank and worker draws its own stream (seeded by rank and worker): nothing to split.
    ResampledShardsOptions source;
    source.seed = options.seed;
    source.distributed = options.distributed;
    source.nshards = options.nshards;
    Pipeline<std::string> shards = ResampledShards(std::move(urls), source);
    if (options.shard_shuffle > 0) shards = shards | shuffle(options.shard_shuffle);
    return shards | tar_samples(read);
  }

  ShardListOptions source;
  source.seed = options.seed;
  source.distributed = options.distributed;
  source.shuffle = options.shuffle_shards;
  const SplitPolicy policy = options.split_policy
                                 ? *options.split_policy
                                 : split_policy_from_env().value_or(SplitPolicy::even);
  const bool sample_level = policy == SplitPolicy::split_samples;
  Pipeline<std::string> shards =
      ShardList(std::move(urls), source) |
      split_by_node({.policy = policy, .allow_empty = options.allow_empty}) |
      split_by_worker(
          {.policy = sample_level ? SplitPolicy::split_samples : SplitPolicy::unbalanced,
           .allow_empty = options.allow_empty});
  if (options.shard_shuffle > 0) shards = shards | shuffle(options.shard_shuffle);
  Pipeline<Sample> samples = shards | tar_samples(read);
  if (sample_level) samples = samples | split_samples();
  return samples;
}

Pipeline<Sample> WebDataset(std::string_view urls, WebDatasetOptions options) {
  return WebDataset(expand_urls(urls), std::move(options));
}

}  // namespace wds
