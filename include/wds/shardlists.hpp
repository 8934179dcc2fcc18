// wds/shardlists.hpp: the pipeline's shard sources and shard stages, with WebDataset's names
// (its shardlists module), and tar_samples, the stage from shard URLs to samples.
//
//   auto ds = wds::ShardList("/data/train-{000000..000099}.tar", {.seed = 7, .shuffle = true})
//           | wds::split_by_node() | wds::split_by_worker() | wds::tar_samples()
//           | wds::shuffle(1000);
//
// Sources (Pipeline<std::string> of shard URLs):
//   ShardList        the URLs, in order or (shuffle = true) permuted with (seed, epoch) before
//                    any split, the same permutation on every rank, so ranks never overlap
//                    and each reads different shards every epoch.
//   ResampledShards  URLs drawn with replacement, forever or nshards per pass, from a stream
//                    seeded by (seed, epoch, rank, worker): every rank and worker its own.
// Shard stages (URLs in, URLs out), run at the start of each pass on the whole list:
//   split_by_node    this rank's share, by policy (wds/split.hpp); default WDS_SPLIT_POLICY,
//                    else Whale's variables, else even. replicate orders each rank's copy with its
//                    own seed.
//   split_by_worker  this worker's share of the rank's shards; default unbalanced (a loader
//                    merges its workers, so unequal shares do not unbalance ranks).
//   single_node_only an error when world_size > 1 (WebDataset's default node splitter).
//   split_with(fn)   your own: fn(urls, context) returns the URLs this consumer reads.
// A rank or worker left with no shard is an invalid_argument Error, unless allow_empty.
// tar_samples (URLs in, samples out): reads each shard with wds::TarSamples, counting shards,
// bytes, read time, retries, samples and dropped items in its pipeline's metrics()
// (TarSamplesOptions::metrics, when the chain runs without a Pipeline).
//
// Stages are written one way, here as in wds/filters.hpp and wds/transforms.hpp: a value with
// `StreamPtr<Out> operator()(StreamPtr<In>) const`, which `pipeline | stage` and the methods call.
//
// Thread safety: stages are values; each running copy is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wds/distributed.hpp"
#include "wds/filters.hpp"
#include "wds/pipeline.hpp"
#include "wds/sample.hpp"
#include "wds/split.hpp"
#include "wds/tar_samples.hpp"

namespace wds {

struct ShardListOptions {
  std::optional<std::uint64_t> seed;  // default: WDS_SEED if set, else 0
  DistributedOptions distributed;     // rank and world size; default: from the environment
  bool shuffle = false;               // permute with (seed, epoch) before any split
};

// A pattern is expanded with resolve_urls (braces, "::", ${NAME}, then directory, glob and S3
// listings); a vector is taken as it is. An empty list is an error.
Pipeline<std::string> ShardList(std::vector<std::string> urls, ShardListOptions options = {});
Pipeline<std::string> ShardList(std::string_view pattern, ShardListOptions options = {});

struct ResampledShardsOptions {
  std::optional<std::uint64_t> seed;
  DistributedOptions distributed;
  std::optional<std::uint64_t> nshards;  // URLs per pass; unset: infinite
};
Pipeline<std::string> ResampledShards(std::vector<std::string> urls,
                                      ResampledShardsOptions options = {});
Pipeline<std::string> ResampledShards(std::string_view pattern,
                                      ResampledShardsOptions options = {});

struct SplitOptions {
  std::optional<SplitPolicy> policy;  // unset: the stage's default (see above)
  bool allow_empty = false;
};

// A shard stage: at the start of each pass it takes the whole upstream list of URLs and hands
// out the list `split` computes from it (a splitter needs the count to apply its policy).
struct SplitStage {
  std::string name;  // for the pipeline's configuration (wds/state.hpp)
  Splitter split;
  std::vector<std::pair<std::string, std::string>> settings;  // likewise
  StreamPtr<std::string> operator()(StreamPtr<std::string> up) const;
};
SplitStage split_by_node(SplitOptions options = {});
SplitStage split_by_worker(SplitOptions options = {});
SplitStage single_node_only();
// Splitter (wds/pipeline.hpp): fn(urls, context) -> the urls this consumer reads.
SplitStage split_with(Splitter splitter);

struct TarSamplesStage {
  TarSamplesOptions options;
  StreamPtr<Sample> operator()(StreamPtr<std::string> up) const;
};
TarSamplesStage tar_samples(TarSamplesOptions options = {});

// The seed a source uses when none is given: WDS_SEED if set (a whole number), else 0.
std::uint64_t default_seed();

// Pipeline's methods for these stages (declared in wds/pipeline.hpp).
template <class T>
auto Pipeline<T>::split_by_node() const {
  return then(wds::split_by_node());
}
template <class T>
auto Pipeline<T>::split_by_node(SplitOptions options) const {
  return then(wds::split_by_node(std::move(options)));
}
template <class T>
auto Pipeline<T>::split_by_worker() const {
  return then(wds::split_by_worker());
}
template <class T>
auto Pipeline<T>::split_by_worker(SplitOptions options) const {
  return then(wds::split_by_worker(std::move(options)));
}
template <class T>
auto Pipeline<T>::single_node_only() const {
  return then(wds::single_node_only());
}
template <class T>
auto Pipeline<T>::split_with(Splitter splitter) const {
  return then(wds::split_with(std::move(splitter)));
}
template <class T>
auto Pipeline<T>::tar_samples() const {
  return then(wds::tar_samples());
}
template <class T>
auto Pipeline<T>::tar_samples(TarSamplesOptions options) const {
  return then(wds::tar_samples(std::move(options)));
}

}  // namespace wds
