// The shard-splitting policy core.
#include "wds/split.hpp"

#include <cstdlib>

#include "wds/error.hpp"

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
  throw Error(ErrorCode::invalid_argument, "", "",
              "unknown split policy '" + std::string(name) +
                  "' (choose even, unbalanced, drop_last, replicate or split_samples)");
}

std::optional<SplitPolicy> split_policy_from_env() {
  const char* value = std::getenv("WDS_SPLIT_POLICY");
  if (!value || !*value) return std::nullopt;
  try {
    return parse_split_policy(value);
  } catch (const Error& e) {
    throw Error(e.code(), "", "", "WDS_SPLIT_POLICY: " + e.cause());
  }
}

ShardAssignment assign_shards(std::size_t n, int id, int count, SplitPolicy policy,
                              std::string_view what) {
  const std::string who(what);
  if (count < 1 || id < 0 || id >= count) {
    throw Error(ErrorCode::invalid_argument, "", "",
                who + " " + std::to_string(id) + " is not in [0, " + std::to_string(count) + ")");
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
        throw Error(ErrorCode::invalid_argument, "", "",
                    std::to_string(n) + " shards do not divide evenly among " +
                        std::to_string(count) + " " + who +
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

}  // namespace wds
