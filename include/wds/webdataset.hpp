// wds/webdataset.hpp: WebDataset, the whole reading pipeline in one call.
//
//   auto ds = wds::WebDataset("/data/train-{000000..000999}.tar",
//                             {.seed = 7, .shuffle_shards = true})
//                 .shuffle(1000)
//                 .with_epoch(10000);
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (wds::Sample& s : ds) train(s);     // exactly 10000 samples per rank per epoch
//
// With streams = C, the source is CanonicalStreams instead (wds/streams.hpp): resumable on
// another world size, with the sample shuffle inside each stream.
//
// The stages, in WebDataset's order: the shard URLs (ShardList, permuted before the split when
// shuffle_shards; or ResampledShards when resampled) -> split_by_node -> split_by_worker ->
// a shuffle buffer over the worker's shard URLs (shard_shuffle) -> tar_samples (reading
// interleave_shards shards at once, round-robin), and with the split_samples policy,
// split_samples. Rank and world size come from the options or the
// launcher's environment (wds/distributed.hpp); the worker from a loader or with_worker().
//
// Differences from Python webdataset, on purpose:
// - The default node splitter is split_by_node with the `even` policy, not single_node_only: a
//   multi-rank job works out of the box when the shards divide, and says what to choose when
//   they do not.
// - Seeds: everything is seeded from (seed, epoch, rank, worker); the default seed is WDS_SEED,
//   else 0, never the clock. The shard order changes every epoch.
// - resampled: each rank and worker draws its own seeded stream; no splitter discards draws.
// - with_epoch continues the stream across passes instead of restarting it (wds/pipeline.hpp).
//
// With join, shard sets holding other fields of the same samples (a column store: captions or
// embeddings beside the images) are read in lockstep with the first (wds/join.hpp).
//
// Thread safety: as Pipeline.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wds/distributed.hpp"
#include "wds/filters.hpp"
#include "wds/join.hpp"
#include "wds/pipeline.hpp"
#include "wds/sample.hpp"
#include "wds/split.hpp"
#include "wds/tar_samples.hpp"

namespace wds {

struct WebDatasetOptions {
  std::optional<std::uint64_t> seed;  // default: WDS_SEED, else 0
  DistributedOptions distributed;     // default: the launcher's environment
  // Between ranks; default: WDS_SPLIT_POLICY, else Whale's variables, else even (wds/split.hpp).
  std::optional<SplitPolicy> split_policy;
  bool allow_empty = false;              // a rank or worker may get no shard
  bool shuffle_shards = false;           // permute all shards with (seed, epoch) before the split
  std::size_t shard_shuffle = 0;         // a shuffle buffer over this worker's shard URLs
  bool resampled = false;                // draw shards with replacement, forever
  std::optional<std::uint64_t> nshards;  // resampled: shards per pass instead of forever
  // Canonical streams (wds/streams.hpp): the shards are dealt to this many streams, each with
  // its own sample shuffle buffer of stream_shuffle samples, in an order that does not depend on
  // the world size, so a state can be resumed on any number of ranks and workers dividing it.
  // 0: off (the split above). Takes the place of split_policy, shard_shuffle and resampled.
  std::uint64_t streams = 0;
  std::size_t stream_shuffle = 0;
  ErrorHandler handler = reraise_exception;  // for shards that fail to open or read
  // Remote shards opened ahead of their turn (TarSamplesOptions::read_ahead); unset: its default.
  std::optional<std::size_t> read_ahead;
  // Shards each worker reads at once, taking one sample from each in turn (round-robin; the
  // order is TarSamplesOptions::interleave's), so that samples of several shards reach the
  // sample shuffle buffer together. 1: one shard after another, as WebDataset. Recorded in the
  // state: a state saved with another value is refused. Costs a source buffer per open shard.
  std::size_t interleave_shards = 1;
  OpenOptions open;
  TarReaderOptions tar;
  // Shard sets joined by key (wds/join.hpp): patterns (or "::" lists), each expanded like the
  // first; shard i of each is read with shard i of the first, and a sample holds the fields of
  // all. The first set's list is the one split, shuffled, resampled or dealt to streams.
  std::vector<std::string> join;
};

// A pattern is expanded with resolve_urls (braces, "::", ${NAME}, then directory, glob and S3
// listings, with options.open); a vector is taken as it is.
Pipeline<Sample> WebDataset(std::vector<std::string> urls, WebDatasetOptions options = {});
Pipeline<Sample> WebDataset(std::string_view urls, WebDatasetOptions options = {});

}  // namespace wds
