// wds/indexed_dataset.hpp: IndexedDataset, random access to the samples of indexed tar shards,
// and ChunkedSampler, a distributed sampler that keeps each rank on few shards at a time.
//
// IndexedDataset reads each shard's index (DALI's format, wds/index.hpp, at
// default_index_path(shard)) and numbers all samples across the shards in order: sample i of
// the dataset is sample i - start(s) of shard s. get(i) reads just that sample, one bounded read
// per member: a pread on a cached descriptor for local shards, a Range request for HTTP and S3.
//
// ChunkedSampler: random access with locality. PyTorch's DistributedSampler scatters every
// rank's indices over all shards; ChunkedSampler treats each shard as a chunk. Per epoch it
// permutes the chunk order (Rng(derive_seed(seed, {seed_purpose::sampler, epoch, 1}))), shuffles
// the indices inside each chunk (Rng(derive_seed(seed, {seed_purpose::sampler, epoch, 2,
// shard}))), concatenates them, and gives each rank one CONTIGUOUS part of that list, of equal
// length: padded by repeating the list's head, or cut with drop_last, as DistributedSampler
// pads. So a rank reads whole shards, mostly sequentially in cache terms, and few of them.
//
//   wds::IndexedDataset ds(wds::expand_urls("/data/train-{000000..000099}.tar"),
//                          {.build_missing = true});
//   wds::ChunkedSampler sampler(ds, {.num_replicas = world, .rank = rank, .seed = 7});
//   for (std::uint64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);
//     for (std::uint64_t i : sampler.indices()) train_on(ds.get(i));
//   }
//
// Over a wids-indexed set (wds/wids_index.hpp), the shard list and each shard's sample count
// come from the wids index, so size(), the numbering and a ChunkedSampler are known without
// reading any shard or its DALI index; a shard's DALI index is read (or built, with
// build_missing) when one of its samples is first read, and must list as many samples as the
// wids index says (else corrupt_data "index is stale", naming both):
//
//   wds::IndexedDataset ds(wds::read_wids_index("/data/train.json"), {.build_missing = true});
//   ds.size();      // the sum of the wids nsamples: nothing else read
//   ds.get(12345);  // reads (or builds) the DALI index of the shard holding sample 12345
//
// Staleness: on load, a local shard's index that is older than the shard (mtime) or names bytes
// beyond the shard's end is a corrupt_data "index is stale" error (delete it, or rebuild it with
// build_missing); every get() checks the tar headers in front of the members it reads.
//
// Errors: wds::Error. A missing index is not_found unless build_missing; get() out of range is
// invalid_argument; a ChunkedSampler with num_replicas < 1 or a rank outside [0, num_replicas)
// is invalid_argument.
//
// Thread safety: IndexedDataset's const methods, get() included, may be called from several
// threads at once (the descriptor cache is locked; pread needs no lock). ChunkedSampler: const
// methods may be called concurrently; set_epoch may not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wds/index.hpp"
#include "wds/sample.hpp"
#include "wds/source.hpp"
#include "wds/wids_index.hpp"

namespace wds {

struct IndexedDatasetOptions {
  OpenOptions open;
  // Build an index that is missing (by streaming the shard once) and, for a local shard, write
  // it next to the shard (atomically; if the directory is not writable, a warning on stderr and
  // the index is kept in memory). Otherwise a missing index is a not_found error.
  bool build_missing = false;
  // Local shards keep at most this many descriptors open, least recently used closed first.
  // 0: open and close the shard on every get().
  std::size_t max_open_shards = 8;
};

class IndexedDataset {
 public:
  IndexedDataset(std::vector<std::string> shard_urls, IndexedDatasetOptions options = {});
  // The shards of a wids index, each shard's DALI index loaded when first needed (above).
  explicit IndexedDataset(const WidsIndex& index, IndexedDatasetOptions options = {});
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  // Samples in all shards.
  std::uint64_t size() const noexcept;
  // Sample i (0 <= i < size()); out of range: invalid_argument.
  Sample get(std::uint64_t i) const;
  // (shard number, index in that shard) of sample i, by binary search over the shards' starts.
  std::pair<std::size_t, std::uint64_t> locate(std::uint64_t i) const;

  std::size_t num_shards() const noexcept;
  std::uint64_t shard_size(std::size_t shard) const;
  // The first dataset index of the shard's samples.
  std::uint64_t shard_start(std::size_t shard) const;
  const std::string& shard_url(std::size_t shard) const;
  // The shard's DALI index (over a wids index: read or built now if not yet).
  const ShardIndex& shard_index(std::size_t shard) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ChunkedSamplerOptions {
  int num_replicas = 1;
  int rank = 0;
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
};

class ChunkedSampler {
 public:
  // The chunks are the dataset's shards.
  ChunkedSampler(const IndexedDataset& dataset, ChunkedSamplerOptions options = {});
  // The chunks are consecutive index ranges of these sizes, starting at 0.
  ChunkedSampler(std::vector<std::uint64_t> chunk_sizes, ChunkedSamplerOptions options = {});

  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
  std::uint64_t epoch() const noexcept { return epoch_; }
  // Indices per rank: ceil(n / num_replicas), or floor with drop_last.
  std::uint64_t size() const noexcept { return num_samples_; }
  std::uint64_t total_size() const noexcept {
    return num_samples_ * static_cast<std::uint64_t>(options_.num_replicas);
  }
  // This rank's indices for the current epoch, in order.
  std::vector<std::uint64_t> indices() const;

 private:
  std::vector<std::uint64_t> sizes_;
  std::vector<std::uint64_t> starts_;  // first index of each chunk
  std::uint64_t dataset_size_ = 0;
  ChunkedSamplerOptions options_;
  std::uint64_t num_samples_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace wds
