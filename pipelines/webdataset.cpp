// The WebDataset builder: the standard stages in WebDataset's order.
#include "wds/webdataset.hpp"

#include "wds/brace.hpp"
#include "wds/error.hpp"
#include "wds/shardlists.hpp"
#include "wds/streams.hpp"

namespace wds {
namespace {

// The joined sets expanded, each checked against the first's length here, where the patterns
// can be named.
std::shared_ptr<const ShardJoin> join_shard_sets(const std::vector<std::string>& urls,
                                                 const std::vector<std::string>& patterns,
                                                 const OpenOptions& open) {
  std::vector<std::vector<std::string>> columns;
  for (const std::string& pattern : patterns) {
    columns.push_back(resolve_urls(pattern, open));
    if (columns.back().size() != urls.size()) {
      throw Error::invalid_argument(
          "join: '" + pattern + "' has " + std::to_string(columns.back().size()) +
          " shards, the first shard set " + std::to_string(urls.size()) +
          ": shard i of each is read with shard i of the first, so the counts must be equal");
    }
  }
  return std::make_shared<const ShardJoin>(urls, std::move(columns));
}

}  // namespace

Pipeline<Sample> WebDataset(std::vector<std::string> urls, WebDatasetOptions options) {
  TarSamplesOptions read;
  read.handler = options.handler;
  read.open = options.open;
  read.tar = options.tar;
  if (options.read_ahead) read.read_ahead = *options.read_ahead;
  read.interleave = options.interleave_shards;
  if (!options.join.empty()) read.join = join_shard_sets(urls, options.join, options.open);

  if (options.streams > 0) {
    if (options.resampled || options.split_policy || options.shard_shuffle > 0 ||
        options.allow_empty) {
      throw Error::invalid_argument(
          "streams: canonical streams deal the shards themselves, so resampled, "
          "split_policy, shard_shuffle and allow_empty do not apply; leave them unset "
          "(shuffle samples with stream_shuffle)");
    }
    StreamsOptions streams;
    streams.count = options.streams;
    streams.seed = options.seed;
    streams.distributed = options.distributed;
    streams.shuffle_shards = options.shuffle_shards;
    streams.shuffle = options.stream_shuffle;
    streams.read = read;
    return CanonicalStreams(std::move(urls), std::move(streams));
  }
  if (options.stream_shuffle > 0) {
    throw Error::invalid_argument(
        "stream_shuffle is the sample shuffle of canonical streams: set streams too, or "
        "shuffle samples with .shuffle(n)");
  }

  if (options.resampled) {
    if (options.split_policy || options.shuffle_shards || options.allow_empty) {
      throw Error::invalid_argument(
          "resampled: every rank and worker draws its own shards, so split_policy, "
          "shuffle_shards and allow_empty do not apply; leave them unset");
    }
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
  // The world size is known now and the list's length never changes, so the environment's
  // policy (Whale's default depends on whether the count divides) is decided once.
  const DistributedInfo who = detect_distributed(options.distributed);
  const SplitPolicy policy =
      choose_split_policy(options.split_policy, urls.size(), who.world_size).policy;
  const bool sample_level = policy == SplitPolicy::split_samples;
  if (sample_level && options.shard_shuffle > 0) {
    // Every consumer must read the samples in the same order for the modulo split to cover
    // each once; a shard shuffle buffer is seeded per rank and worker.
    throw Error::invalid_argument(
        "split_samples needs every consumer to read shards in the same order: use "
        "shuffle_shards (one permutation for all) instead of shard_shuffle");
  }
  // Refuse an uneven split now rather than at the first pass: both numbers are known.
  assign_shards(urls.size(), who.rank, who.world_size, policy, "rank");
  Pipeline<std::string> shards =
      ShardList(std::move(urls), source) |
      split_by_node({.policy = policy, .allow_empty = options.allow_empty}) |
      split_by_worker({.policy = worker_split_policy(policy), .allow_empty = options.allow_empty});
  if (options.shard_shuffle > 0) shards = shards | shuffle(options.shard_shuffle);
  Pipeline<Sample> samples = shards | tar_samples(read);
  if (sample_level) samples = samples | split_samples();
  return samples;
}

Pipeline<Sample> WebDataset(std::string_view urls, WebDatasetOptions options) {
  std::vector<std::string> list = resolve_urls(urls, options.open);
  return WebDataset(std::move(list), std::move(options));
}

}  // namespace wds
