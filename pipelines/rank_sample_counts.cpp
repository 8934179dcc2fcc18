// count_rank_samples (wds/wids_index.hpp): what each rank reads, from the shards' sample counts,
// by the same split functions the pipeline stages use.
#include <algorithm>
#include <limits>

#include "wds/error.hpp"
#include "wds/wids_index.hpp"

namespace wds {
namespace {

std::uint64_t add(std::uint64_t a, std::uint64_t b) {
  if (b > std::numeric_limits<std::uint64_t>::max() - a) {
    throw Error::invalid_argument("the shards' sample counts overflow 64 bits");
  }
  return a + b;
}

}  // namespace

RankSampleCounts count_rank_samples(const std::vector<std::uint64_t>& shard_samples, int world_size,
                                    const RankSampleCountOptions& options) {
  if (world_size < 1 || options.num_workers < 1) {
    throw Error::invalid_argument("world_size " + std::to_string(world_size) + " and num_workers " +
                                  std::to_string(options.num_workers) + " must be at least 1");
  }
  RankSampleCounts out;
  out.choice = choose_split_policy(options.policy, shard_samples.size(), world_size);
  // The pass's order: ShardList's, which the rank split then cuts.
  const std::vector<std::size_t> order =
      epoch_shard_order(shard_samples.size(), options.shuffle_shards, options.seed, options.epoch);
  std::uint64_t total = 0;
  for (std::uint64_t n : shard_samples) total = add(total, n);
  out.per_rank.resize(static_cast<std::size_t>(world_size));
  for (int rank = 0; rank < world_size; ++rank) {
    // assign_shards refuses an uneven `even`, as the pipeline does.
    const ShardAssignment mine =
        assign_shards(order.size(), rank, world_size, out.choice.policy, "rank");
    std::uint64_t n = 0;
    if (out.choice.policy == SplitPolicy::split_samples) {
      // Every consumer (rank x worker) reads all samples and keeps those whose position in the
      // pass, modulo the consumers, is its id: the rank's workers are ids r*W .. r*W + W - 1.
      const auto consumers =
          static_cast<std::uint64_t>(world_size) * static_cast<std::uint64_t>(options.num_workers);
      for (int w = 0; w < options.num_workers; ++w) {
        const std::uint64_t id =
            static_cast<std::uint64_t>(rank) * static_cast<std::uint64_t>(options.num_workers) +
            static_cast<std::uint64_t>(w);
        n += total / consumers + (id < total % consumers ? 1 : 0);
      }
    } else {
      for (std::size_t k : mine.indices) n = add(n, shard_samples[order[k]]);
    }
    if (rank == 0) {
      for (std::size_t k = order.size() - mine.dropped; k < order.size(); ++k) {
        out.dropped += shard_samples[order[k]];
      }
    }
    out.per_rank[static_cast<std::size_t>(rank)] = n;
  }
  out.equal = *std::min_element(out.per_rank.begin(), out.per_rank.end());
  return out;
}

}  // namespace wds
