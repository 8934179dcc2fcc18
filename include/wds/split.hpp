// wds/split.hpp: which shards each rank and worker reads, and what to do when they do not divide.
//
//   urls = wds::split_by_node(urls, rank, world_size);       // urls[rank::world_size]
//   urls = wds::split_by_worker(urls, worker, num_workers);  // then [worker::num_workers]
//
// 12 shards, rank 1 of 3, worker 1 of 2: the rank gets s01 s04 s07 s10, the worker s04 s10.
// These are WebDataset's splitters on a list. assign_shards is the policy core behind them and
// behind the pipeline stages of the same names (wds/stages.hpp):
//
//   policy        when the count does not divide among the consumers
//   even          an error naming the other policies (the default; with one consumer, or a
//                 count that divides, it is the plain modulo split)
//   unbalanced    the modulo split: the first (count % consumers) consumers get one more
//   drop_last     equal shares: the last (count % consumers) shards are dropped (and reported)
//   replicate     every consumer reads every shard (the caller orders them per consumer); the
//                 only choice when there are fewer shards than consumers
//   split_samples every consumer reads every shard and keeps the samples whose index modulo the
//                 number of consumers is its id (for a few big shards)
//
// Errors: invalid_argument Error for an id outside [0, count), an unknown policy name, or `even`
// with a count that does not divide.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wds {

enum class SplitPolicy { even, unbalanced, drop_last, replicate, split_samples };

std::string_view to_string(SplitPolicy policy) noexcept;
// "even", "unbalanced", "drop_last", "replicate", "split_samples" (also with '-' for '_').
SplitPolicy parse_split_policy(std::string_view name);
// The policy named by the environment variable WDS_SPLIT_POLICY, if set.
std::optional<SplitPolicy> split_policy_from_env();

struct ShardAssignment {
  std::vector<std::size_t> indices;  // positions in the list, in order
  std::size_t dropped = 0;           // shards no consumer reads (drop_last)
};

// The shards consumer `id` of `count` reads out of `n` under `policy`. `what` names the
// consumers in messages ("rank", "worker").
ShardAssignment assign_shards(std::size_t n, int id, int count, SplitPolicy policy,
                              std::string_view what = "rank");

std::vector<std::string> split_by_node(const std::vector<std::string>& urls, int rank,
                                       int world_size,
                                       SplitPolicy policy = SplitPolicy::unbalanced);
std::vector<std::string> split_by_worker(const std::vector<std::string>& urls, int worker,
                                         int num_workers,
                                         SplitPolicy policy = SplitPolicy::unbalanced);

}  // namespace wds
