// wds/split.hpp: which shards each rank and worker reads, and what to do when they do not divide.
//
//   urls = wds::split_by_node(urls, rank, world_size);       // urls[rank::world_size]
//   urls = wds::split_by_worker(urls, worker, num_workers);  // then [worker::num_workers]
//
// 12 shards, rank 1 of 3, worker 1 of 2: the rank gets s01 s04 s07 s10, the worker s04 s10.
// These are WebDataset's splitters on a list. assign_shards is the policy core behind them and
// behind the pipeline stages of the same names (wds/shardlists.hpp):
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
// The policy between ranks is the first of these that is given:
//   1. the option (WebDatasetOptions::split_policy, SplitOptions::policy, `wds --split-policy`);
//   2. WDS_SPLIT_POLICY (a policy name; empty is unset);
//   3. Whale's variables, when either is set (Whale, Alibaba Cloud PAI's framework, documents
//      them for a file list that does not divide among its workers):
//        WHALE_UNBALANCED_IO_SLICING true  -> unbalanced (wins when both are true)
//        WHALE_DROP_LAST_FILES true        -> drop_last
//        neither true                      -> Whale's default: even when the count divides, else
//                                             replicate (each rank reads the whole list, in its
//                                             own seeded order)
//      True, true and 1 are true; False, false, 0 and empty are false;
//   4. even.
// Lower sources are not read once one is given. The workers within a rank split its shards
// unbalanced unless the policy is split_samples. Rank and world size: wds/distributed.hpp.
//
// What is in force, and what it gives one rank and worker, without reading anything:
//
//   wds::SplitPlan plan = wds::plan_split(urls, wds::detect_distributed(), {.num_workers = 2});
//   plan.choice.policy, plan.choice.source   // drop_last, "WDS_SPLIT_POLICY"
//   plan.shards, plan.dropped                // this worker's shards; those no rank reads
//
// The pipeline stages decide with the same functions (choose_split_policy, assign_shards), so
// the plan is what they do on the same list; with shuffle_shards, give the epoch's order.
//
// Errors: invalid_argument Error for an id outside [0, count), an unknown policy name (naming
// WDS_SPLIT_POLICY when it came from there), a Whale variable that is not a boolean (naming it),
// or `even` with a count that does not divide (plan_split too: that split cannot run).
// Thread safety: pure functions, except that split_policy_from_env reads the environment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wds/distributed.hpp"

namespace wds {

enum class SplitPolicy { even, unbalanced, drop_last, replicate, split_samples };

std::string_view to_string(SplitPolicy policy) noexcept;
// "even", "unbalanced", "drop_last", "replicate", "split_samples" (also with '-' for '_').
SplitPolicy parse_split_policy(std::string_view name);
// The default policy the environment gives for splitting `shards` shards among `consumers`
// ranks: WDS_SPLIT_POLICY, else Whale's variables (above), else nullopt (the caller's default,
// even).
std::optional<SplitPolicy> split_policy_from_env(std::size_t shards, int consumers);
// The same where the count is not known: Whale's default is then nullopt (even), which is right
// for a count that divides and an error naming the policies for one that does not.
std::optional<SplitPolicy> split_policy_from_env();

// The policy between ranks and what decided it, for `shards` shards among `consumers` ranks:
// `option` if given, else the environment (above), else even.
struct SplitPolicyChoice {
  SplitPolicy policy = SplitPolicy::even;
  // "option", "WDS_SPLIT_POLICY", "WHALE_UNBALANCED_IO_SLICING", "WHALE_DROP_LAST_FILES",
  // "whale_default" (Whale's variables present, neither true) or "default" (nothing given).
  std::string source = "default";
};
SplitPolicyChoice choose_split_policy(std::optional<SplitPolicy> option, std::size_t shards,
                                      int consumers);

// How the workers of a rank split its shards under `rank_policy`: split_samples stays
// split_samples (every worker reads the rank's shards), anything else is unbalanced.
SplitPolicy worker_split_policy(SplitPolicy rank_policy) noexcept;

// The order an epoch's shards are read in: 0, 1, ..., count - 1, or with `shuffle` the
// permutation of (seed, epoch), the same on every rank and worker (ShardList's shuffle, and the
// deal of canonical streams, wds/streams.hpp).
std::vector<std::size_t> epoch_shard_order(std::size_t count, bool shuffle, std::uint64_t seed,
                                           std::uint64_t epoch);

struct ShardAssignment {
  std::vector<std::size_t> indices;  // positions in the list, in order
  std::size_t dropped = 0;           // shards no consumer reads (drop_last): the list's last ones
};

// The shards consumer `id` of `count` reads out of `n` under `policy`. `what` names the
// consumers in messages ("rank", "worker").
ShardAssignment assign_shards(std::size_t n, int id, int count, SplitPolicy policy,
                              std::string_view what = "rank");

struct SplitPlanOptions {
  std::optional<SplitPolicy> policy{};  // between ranks; unset: choose_split_policy's
  int worker = 0;
  int num_workers = 1;
};

// Who reads what in one pass over `urls` (in the pass's order: with shuffle_shards, the epoch's
// permutation). Shard lists keep that order; replicate and split_samples give every rank the
// whole list (replicate's pipeline stage then orders each copy with the rank's own seed), and
// split_samples then keeps every world_size * num_workers-th sample. An empty share is reported,
// not refused (the stages refuse it unless allow_empty).
struct SplitPlan {
  SplitPolicyChoice choice;  // between ranks
  SplitPolicy worker_policy = SplitPolicy::unbalanced;
  int rank = 0;
  int world_size = 1;
  int worker = 0;
  int num_workers = 1;
  std::vector<std::string> rank_shards;  // what the rank reads (all its workers)
  std::vector<std::string> shards;       // what this worker reads
  std::vector<std::string> dropped;      // what no rank reads (drop_last)
};
SplitPlan plan_split(const std::vector<std::string>& urls, const DistributedInfo& who,
                     const SplitPlanOptions& options = {});

std::vector<std::string> split_by_node(const std::vector<std::string>& urls, int rank,
                                       int world_size,
                                       SplitPolicy policy = SplitPolicy::unbalanced);
std::vector<std::string> split_by_worker(const std::vector<std::string>& urls, int worker,
                                         int num_workers,
                                         SplitPolicy policy = SplitPolicy::unbalanced);

}  // namespace wds
