// The shard-splitting policy core.
#include "wds/split.hpp"

#include <cstddef>
#include <cstdlib>
#include <utility>

#include "wds/error.hpp"
#include "wds/random.hpp"

namespace wds {

std::string_view to_string(SplitPolicy policy) noexcept {
  switch (policy) {
    case SplitPolicy::even:
      return "even";
    case SplitPolicy::unbalanced:
      return "unbalanced";
    case SplitPolicy::drop_last:
      return "drop_last";
    case SplitPolicy::replicate:
      return "replicate";
    case SplitPolicy::split_samples:
      return "split_samples";
  }
  return "even";
}

SplitPolicy parse_split_policy(std::string_view name) {
  std::string n(name);
  for (char& c : n) {
    if (c == '-') c = '_';
  }
  for (SplitPolicy p : {SplitPolicy::even, SplitPolicy::unbalanced, SplitPolicy::drop_last,
                        SplitPolicy::replicate, SplitPolicy::split_samples}) {
    if (n == to_string(p)) return p;
  }
  throw Error::invalid_argument(
      "unknown split policy '" + std::string(name) +
      "' (choose even, unbalanced, drop_last, replicate or split_samples)");
}

namespace {

std::optional<SplitPolicy> wds_split_policy() {
  const char* value = std::getenv("WDS_SPLIT_POLICY");
  if (!value || !*value) return std::nullopt;
  try {
    return parse_split_policy(value);
  } catch (const Error& e) {
    throw Error(e.code(), "", "", "WDS_SPLIT_POLICY: " + e.cause());
  }
}

// A Whale switch: unset, or the spellings Python scripts write for a bool. An empty value is
// false (a script that clears the switch), not unset: Whale's variables are then present.
std::optional<bool> whale_switch(const char* name) {
  const char* value = std::getenv(name);
  if (!value) return std::nullopt;
  const std::string_view v = value;
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0" || v.empty()) return false;
  throw Error::invalid_argument(std::string(name) + "='" + std::string(v) +
                                "' is not a boolean (True, true or 1; False, false, 0 or empty)");
}

// Whale's documents (Alibaba Cloud PAI, "data sharding" of Whale) give three ways for a file list
// that does not divide among the workers: not split and shuffled (the default), some workers one
// more file, or the rest dropped. A list that divides is split evenly whatever the variables say.
// Whale's policy when its variables are present, without its default (which needs the shape).
struct WhaleChoice {
  bool present = false;
  std::optional<SplitPolicy> policy;  // unset: Whale's default
};

WhaleChoice whale_choice() {
  // Both are read (and validated) before either decides, so a typo in the second is not hidden
  // by the first.
  const std::optional<bool> unbalanced = whale_switch("WHALE_UNBALANCED_IO_SLICING");
  const std::optional<bool> drop_last = whale_switch("WHALE_DROP_LAST_FILES");
  WhaleChoice out;
  out.present = unbalanced.has_value() || drop_last.has_value();
  if (unbalanced.value_or(false)) {
    out.policy = SplitPolicy::unbalanced;  // the first wins when both are true
  } else if (drop_last.value_or(false)) {
    out.policy = SplitPolicy::drop_last;
  }
  return out;
}

// The environment's choice (WDS_SPLIT_POLICY, then Whale), or nullopt. Whale's default needs the
// shape; without it (`shape` unset) it is left to the caller's default, even.
std::optional<SplitPolicyChoice> env_choice(std::optional<std::pair<std::size_t, int>> shape) {
  if (auto policy = wds_split_policy()) return SplitPolicyChoice{*policy, "WDS_SPLIT_POLICY"};
  const WhaleChoice whale = whale_choice();
  if (!whale.present) return std::nullopt;
  if (whale.policy) {
    return SplitPolicyChoice{*whale.policy, *whale.policy == SplitPolicy::unbalanced
                                                ? "WHALE_UNBALANCED_IO_SLICING"
                                                : "WHALE_DROP_LAST_FILES"};
  }
  if (!shape) return std::nullopt;
  // Whale's default: a list that divides is split evenly; one that does not is not split, and
  // every worker reads all of it in its own random order (replicate's per-rank order).
  const auto [shards, consumers] = *shape;
  const bool divides = consumers >= 1 && shards % static_cast<std::size_t>(consumers) == 0;
  return SplitPolicyChoice{divides ? SplitPolicy::even : SplitPolicy::replicate, "whale_default"};
}

}  // namespace

std::optional<SplitPolicy> split_policy_from_env() {
  auto choice = env_choice(std::nullopt);
  return choice ? std::optional(choice->policy) : std::nullopt;
}

std::optional<SplitPolicy> split_policy_from_env(std::size_t shards, int consumers) {
  auto choice = env_choice(std::pair(shards, consumers));
  return choice ? std::optional(choice->policy) : std::nullopt;
}

SplitPolicyChoice choose_split_policy(std::optional<SplitPolicy> option, std::size_t shards,
                                      int consumers) {
  if (option) return {*option, "option"};
  return env_choice(std::pair(shards, consumers)).value_or(SplitPolicyChoice{});
}

SplitPolicy worker_split_policy(SplitPolicy rank_policy) noexcept {
  return rank_policy == SplitPolicy::split_samples ? SplitPolicy::split_samples
                                                   : SplitPolicy::unbalanced;
}

std::vector<std::size_t> epoch_shard_order(std::size_t count, bool shuffle, std::uint64_t seed,
                                           std::uint64_t epoch) {
  std::vector<std::size_t> order(count);
  for (std::size_t i = 0; i < count; ++i) order[i] = i;
  if (shuffle) {
    // Only seed and epoch go in: the same permutation on every rank and worker.
    Rng rng(derive_seed(seed, {seed_purpose::shard_order, epoch}));
    rng.shuffle(order.begin(), order.end());
  }
  return order;
}

ShardAssignment assign_shards(std::size_t n, int id, int count, SplitPolicy policy,
                              std::string_view what) {
  const std::string who(what);
  if (count < 1 || id < 0 || id >= count) {
    throw Error::invalid_argument(who + " " + std::to_string(id) + " is not in [0, " +
                                  std::to_string(count) + ")");
  }
  const auto c = static_cast<std::size_t>(count);
  const auto i = static_cast<std::size_t>(id);
  ShardAssignment out;
  std::size_t limit = n;
  switch (policy) {
    case SplitPolicy::replicate:
    case SplitPolicy::split_samples:
      out.indices.resize(n);
      for (std::size_t k = 0; k < n; ++k) out.indices[k] = k;
      return out;
    case SplitPolicy::even:
      if (n % c != 0) {
        throw Error::invalid_argument(
            std::to_string(n) + " shards do not divide evenly among " + std::to_string(count) +
            " " + who +
            "s (policy 'even'); choose a split policy (option or WDS_SPLIT_POLICY): "
            "unbalanced (some get one more shard), drop_last (equal shares, " +
            std::to_string(n % c) + (n % c == 1 ? " shard" : " shards") +
            " dropped), replicate (every one reads every shard), or "
            "split_samples (every one reads every shard, keeps every " +
            std::to_string(count) + "th sample)");
      }
      break;
    case SplitPolicy::drop_last:
      out.dropped = n % c;
      limit = n - out.dropped;
      break;
    case SplitPolicy::unbalanced:
      break;
  }
  out.indices.reserve(limit / c + 1);
  for (std::size_t k = i; k < limit; k += c) out.indices.push_back(k);
  return out;
}

namespace {

std::vector<std::string> pick(const std::vector<std::string>& urls, const ShardAssignment& a) {
  std::vector<std::string> out;
  out.reserve(a.indices.size());
  for (std::size_t k : a.indices) out.push_back(urls[k]);
  return out;
}

}  // namespace

std::vector<std::string> split_by_node(const std::vector<std::string>& urls, int rank,
                                       int world_size, SplitPolicy policy) {
  return pick(urls, assign_shards(urls.size(), rank, world_size, policy, "rank"));
}

std::vector<std::string> split_by_worker(const std::vector<std::string>& urls, int worker,
                                         int num_workers, SplitPolicy policy) {
  return pick(urls, assign_shards(urls.size(), worker, num_workers, policy, "worker"));
}

SplitPlan plan_split(const std::vector<std::string>& urls, const DistributedInfo& who,
                     const SplitPlanOptions& options) {
  SplitPlan plan;
  plan.choice = choose_split_policy(options.policy, urls.size(), who.world_size);
  plan.worker_policy = worker_split_policy(plan.choice.policy);
  plan.rank = who.rank;
  plan.world_size = who.world_size;
  plan.worker = options.worker;
  plan.num_workers = options.num_workers;
  const ShardAssignment ranks =
      assign_shards(urls.size(), who.rank, who.world_size, plan.choice.policy, "rank");
  plan.rank_shards = pick(urls, ranks);
  plan.dropped.assign(urls.end() - static_cast<std::ptrdiff_t>(ranks.dropped), urls.end());
  plan.shards =
      pick(plan.rank_shards, assign_shards(plan.rank_shards.size(), options.worker,
                                           options.num_workers, plan.worker_policy, "worker"));
  return plan;
}

}  // namespace wds
