// wds/streams.hpp: canonical streams, an order of the data that does not depend on the number of
// ranks and workers, so that a job can be checkpointed on one world size and resumed on another.
//
//   auto ds = wds::WebDataset("/data/train-{000000..000999}.tar",
//                             {.seed = 7, .shuffle_shards = true, .streams = 48,
//                              .stream_shuffle = 200})
//                 .decode("rgb8").to_tuple("jpg", "cls").batched(64).with_epoch(1000);
//   ... every rank, later:  std::string mine = loader.state();
//   ... gathered on rank 0: std::string all = wds::merge_states({rank0, rank1, ...});
//   ... a job of another size: loader.restore(all);   // each rank takes its streams' states
//
// The order. Each epoch the shards are permuted with (seed, epoch) (when shuffle_shards; else
// they keep their order) and dealt to C streams: stream c reads shards c, c + C, c + 2C, ... of
// the permutation in turn, through its own sample shuffle buffer (stream_shuffle samples) seeded
// from (seed, epoch, c). Sample q of stream c has the global position q * C + c: the global order
// is the streams interleaved round-robin.
//
// The split. With N = ranks x workers consumers, consumer k = worker * ranks + rank owns the
// streams c with c mod N == k, and hands out its streams' samples in global order. So rank r
// owns the streams c with c mod ranks == r, whatever the number of workers, and a Loader's
// ordered round-robin over its workers hands out exactly the rank's share of the global order.
// After every consumer has handed out s samples, what all of them handed out together is the
// first N * s samples of the global order, whatever N is. C must be a multiple of N (an
// invalid_argument Error names the numbers that work) and at most the number of shards.
//
// Epochs. Without with_epoch a pass is one epoch: a stream ends with its last shard, and a
// consumer skips its ended streams. With with_epoch(n) (or a Loader's epoch length) every stream
// flows on into its shards of the next epoch, so streams never end, every rank hands out exactly
// n items per pass, and the global order above holds across epochs.
//
// Why streams and not MosaicML's canonical nodes: tar shards are read front to back, so the unit
// that can move between consumers without rereading is a whole reading position (a shard, a byte
// offset, a shuffle buffer), not a sample index. A stream is such a position; C of them are fixed
// by the dataset's configuration, and any world size that divides C shares them out.
//
// Resume. A consumer's state holds, per stream it owns: the samples the stream handed out, its
// shard and byte offset, its shuffle buffer's RNG and the locations of buffered samples.
// merge_states() puts the states of all ranks (Pipeline::state() or Loader::state(), each
// holding its own streams) together into one; a pipeline or Loader of any size that divides C
// restores from it, each consumer taking its own streams: nothing is read twice or skipped, and
// only the buffered samples are read again (by location). Stages after the streams must hold
// nothing between items (decode, map, to_tuple, batched do; a shuffle() does not: use
// stream_shuffle).
//
// Interleave (read.interleave = k, WebDatasetOptions::interleave_shards): each stream reads k of
// its shards at once, round-robin (wds/tar_samples.hpp); the global order above holds, with each
// stream's own order interleaved, and states move between world sizes as before. Part of the
// configuration: a state of another k is refused.
//
// Memory: each consumer holds C / N shuffle buffers and k * C / N open shards.
// Thread safety: as Pipeline; merge_states is a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wds/distributed.hpp"
#include "wds/pipeline.hpp"
#include "wds/sample.hpp"
#include "wds/tar_samples.hpp"

namespace wds {

struct StreamsOptions {
  std::uint64_t count = 0;            // C, the number of streams (>= 1)
  std::optional<std::uint64_t> seed;  // default: WDS_SEED, else 0
  DistributedOptions distributed;     // default: the launcher's environment
  bool shuffle_shards = false;        // permute the shards with (seed, epoch) before dealing
  std::size_t shuffle = 0;            // each stream's sample shuffle buffer (0: none)
  std::size_t shuffle_initial = 100;  // samples buffered before the first is handed out
  TarSamplesOptions read;             // how shards are opened and read
};

// The samples of `urls` in canonical streams (what WebDataset builds with options.streams).
Pipeline<Sample> CanonicalStreams(std::vector<std::string> urls, StreamsOptions options);

// The streams consumer (rank, worker) of (world_size, num_workers) owns, in increasing order;
// an invalid_argument Error, naming the sizes that work, when count is not a multiple of
// world_size * num_workers.
std::vector<std::uint64_t> owned_streams(std::uint64_t count, int rank, int world_size,
                                         int worker = 0, int num_workers = 1);

// One checkpoint from the states of several consumers (Pipeline::state() or Loader::state() of a
// pipeline with canonical streams, or earlier merges): their streams put together. The states
// must come from one job at one step (the same configuration, apart from rank, world size and
// workers; the same epoch and the same count of items in the pass); a stream held twice, or a
// state holding what a stage after the streams buffered, is an invalid_argument Error. The
// result is a pipeline state that Pipeline::restore() and Loader::restore() take on any number
// of ranks and workers that divides C, once it holds all C streams.
std::string merge_states(const std::vector<std::string>& states);

// What a canonical-streams state holds: C, and the streams it has (for `wds merge-states`).
struct StreamsStateSummary {
  std::uint64_t count = 0;
  std::vector<std::uint64_t> streams;
  std::uint64_t epoch = 0;
  std::uint64_t items_in_pass = 0;  // per rank, as of the state
};
StreamsStateSummary summarize_streams_state(std::string_view state);

}  // namespace wds
