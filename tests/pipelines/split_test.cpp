#include "wds/split.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/env.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/brace.hpp"
#include "wds/error.hpp"
#include "wds/shardlists.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

// The variables that choose a split policy, cleared for the guard's lifetime and put back after,
// so that neither the machine's environment nor another test decides.
constexpr const char* kPolicyVars[] = {"WDS_SPLIT_POLICY", "WHALE_UNBALANCED_IO_SLICING",
                                       "WHALE_DROP_LAST_FILES"};
class PolicyEnv : public test::ClearedEnv {
 public:
  PolicyEnv() : ClearedEnv(kPolicyVars) {}
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }
};

constexpr const char* kUnbalanced = "WHALE_UNBALANCED_IO_SLICING";
constexpr const char* kDropLast = "WHALE_DROP_LAST_FILES";

TEST(Split, NodeThenWorkerAsWebDataset) {
  // WebDataset's verified example: 12 shards, RANK=1 WORLD_SIZE=3, WORKER=1 NUM_WORKERS=2.
  Strings urls = brace_expand("s{00..11}");
  Strings node = split_by_node(urls, 1, 3);
  EXPECT_EQ(node, (Strings{"s01", "s04", "s07", "s10"}));
  EXPECT_EQ(split_by_worker(node, 1, 2), (Strings{"s04", "s10"}));
}

TEST(Split, EveryShardGoesToExactlyOneConsumer) {
  Strings urls = brace_expand("s{0..22}");
  Strings all;
  for (int r = 0; r < 3; ++r) {
    for (int w = 0; w < 4; ++w) {
      Strings part = split_by_worker(split_by_node(urls, r, 3), w, 4);
      all.insert(all.end(), part.begin(), part.end());
    }
  }
  std::sort(all.begin(), all.end());
  Strings sorted = urls;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(all, sorted);
}

TEST(Split, SingleConsumerGetsEverything) {
  Strings urls{"a", "b"};
  EXPECT_EQ(split_by_node(urls, 0, 1), urls);
  EXPECT_TRUE(split_by_node(Strings{}, 0, 2).empty());
}

TEST(Split, OutOfRangeIsAnError) {
  Strings urls{"a"};
  EXPECT_THROW(split_by_node(urls, 3, 3), Error);
  EXPECT_THROW(split_by_node(urls, -1, 3), Error);
  EXPECT_THROW(split_by_node(urls, 0, 0), Error);
  try {
    split_by_worker(urls, 2, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.cause().find("worker 2"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------------
// The policy from the environment: WDS_SPLIT_POLICY, else Whale's variables.

TEST(SplitPolicyFromEnv, NothingSetIsNoPolicy) {
  PolicyEnv env;
  EXPECT_EQ(split_policy_from_env(), std::nullopt);
  EXPECT_EQ(split_policy_from_env(10, 4), std::nullopt);
  PolicyEnv::set("WDS_SPLIT_POLICY", "");  // empty is unset
  EXPECT_EQ(split_policy_from_env(10, 4), std::nullopt);
}

TEST(SplitPolicyFromEnv, WdsSplitPolicy) {
  PolicyEnv env;
  PolicyEnv::set("WDS_SPLIT_POLICY", "drop-last");
  EXPECT_EQ(split_policy_from_env(), SplitPolicy::drop_last);
  EXPECT_EQ(split_policy_from_env(10, 4), SplitPolicy::drop_last);
  PolicyEnv::set("WDS_SPLIT_POLICY", "sideways");
  try {
    split_policy_from_env(10, 4);
    FAIL() << "an unknown policy was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(e.cause().rfind("WDS_SPLIT_POLICY: unknown split policy 'sideways'", 0), 0u)
        << e.what();
  }
}

// Whale's WHALE_UNBALANCED_IO_SLICING=True (some workers get one more file) was ignored, so a job
// that set it for 10 files over 4 workers got the `even` error instead.
TEST(SplitPolicyFromEnv, WhaleUnbalancedIoSlicingWasIgnored) {
  for (const char* yes : {"True", "true", "1"}) {
    SCOPED_TRACE(yes);
    PolicyEnv env;
    PolicyEnv::set(kUnbalanced, yes);
    EXPECT_EQ(split_policy_from_env(), SplitPolicy::unbalanced);
    EXPECT_EQ(split_policy_from_env(10, 4), SplitPolicy::unbalanced);
    EXPECT_EQ(split_policy_from_env(8, 4), SplitPolicy::unbalanced);  // the modulo split anyway
    PolicyEnv::set(kDropLast, "False");
    EXPECT_EQ(split_policy_from_env(10, 4), SplitPolicy::unbalanced);
  }
}

TEST(SplitPolicyFromEnv, WhaleDropLastFilesWasIgnored) {
  for (const char* yes : {"True", "true", "1"}) {
    SCOPED_TRACE(yes);
    PolicyEnv env;
    PolicyEnv::set(kDropLast, yes);
    EXPECT_EQ(split_policy_from_env(), SplitPolicy::drop_last);
    EXPECT_EQ(split_policy_from_env(10, 4), SplitPolicy::drop_last);
    PolicyEnv::set(kUnbalanced, "0");
    EXPECT_EQ(split_policy_from_env(10, 4), SplitPolicy::drop_last);
  }
}

TEST(SplitPolicyFromEnv, WhaleUnbalancedWinsWhenBothAreTrue) {
  PolicyEnv env;
  PolicyEnv::set(kUnbalanced, "True");
  PolicyEnv::set(kDropLast, "True");
  EXPECT_EQ(split_policy_from_env(), SplitPolicy::unbalanced);
  EXPECT_EQ(split_policy_from_env(10, 4), SplitPolicy::unbalanced);
}

// Whale's default, with its variables present and neither true: a list that divides is split
// evenly; one that does not is not split, every worker reading all of it shuffled.
TEST(SplitPolicyFromEnv, WhaleDefaultWhenNeitherIsTrue) {
  const std::vector<std::pair<const char*, const char*>> settings = {
      {"False", "False"}, {"false", "0"}, {"", ""}, {"0", nullptr}, {nullptr, "False"}};
  for (const auto& [unbalanced, drop_last] : settings) {
    SCOPED_TRACE(std::string(unbalanced ? unbalanced : "(unset)") + " / " +
                 (drop_last ? drop_last : "(unset)"));
    PolicyEnv env;
    if (unbalanced) PolicyEnv::set(kUnbalanced, unbalanced);
    if (drop_last) PolicyEnv::set(kDropLast, drop_last);
    EXPECT_EQ(split_policy_from_env(10, 4), SplitPolicy::replicate);
    EXPECT_EQ(split_policy_from_env(3, 4), SplitPolicy::replicate);  // fewer files than workers
    EXPECT_EQ(split_policy_from_env(8, 4), SplitPolicy::even);
    EXPECT_EQ(split_policy_from_env(7, 1), SplitPolicy::even);
    // Without the count the default cannot be chosen: even, which refuses a count that does
    // not divide (naming the policies) rather than guess.
    EXPECT_EQ(split_policy_from_env(), std::nullopt);
  }
}

TEST(SplitPolicyFromEnv, WdsSplitPolicyWinsOverWhaleAndHidesIt) {
  PolicyEnv env;
  PolicyEnv::set("WDS_SPLIT_POLICY", "drop_last");
  PolicyEnv::set(kUnbalanced, "True");
  EXPECT_EQ(split_policy_from_env(10, 4), SplitPolicy::drop_last);
  PolicyEnv::set(kUnbalanced, "yes");  // not read once WDS_SPLIT_POLICY decides
  EXPECT_EQ(split_policy_from_env(10, 4), SplitPolicy::drop_last);
  EXPECT_EQ(split_policy_from_env(), SplitPolicy::drop_last);
}

TEST(SplitPolicyFromEnv, WhaleValuesThatAreNotBooleans) {
  for (const char* name : {kUnbalanced, kDropLast}) {
    for (const char* bad : {"yes", "TRUE", "no", " True", "True ", "2", "-1", "on"}) {
      SCOPED_TRACE(std::string(name) + "='" + bad + "'");
      PolicyEnv env;
      // The other one true: the bad one is still validated, whichever would decide.
      PolicyEnv::set(name == kUnbalanced ? kDropLast : kUnbalanced, "True");
      PolicyEnv::set(name, bad);
      for (bool with_count : {true, false}) {
        try {
          if (with_count) {
            split_policy_from_env(10, 4);
          } else {
            split_policy_from_env();
          }
          ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
          EXPECT_EQ(e.cause(), std::string(name) + "='" + bad +
                                   "' is not a boolean (True, true or 1; False, false, 0 or "
                                   "empty)");
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The same through the pipelines that choose a default policy.

Strings numbered(int n) {
  Strings out;
  for (int i = 0; i < n; ++i) out.push_back("s" + std::to_string(i));
  return out;
}

Strings node_split(int n, int rank, int world) {
  ShardListOptions o;
  o.distributed.rank = rank;
  o.distributed.world_size = world;
  o.seed = 5;
  Pipeline<std::string> p = ShardList(numbered(n), o) | split_by_node();
  Strings out;
  for (std::string& url : p) out.push_back(url);
  return out;
}

TEST(SplitPolicyFromEnv, SplitByNodeFollowsWhale) {
  PolicyEnv env;
  PolicyEnv::set(kUnbalanced, "False");
  PolicyEnv::set(kDropLast, "False");
  std::set<Strings> orders;
  for (int rank = 0; rank < 4; ++rank) {
    Strings mine = node_split(10, rank, 4);  // the default: every rank the whole list
    EXPECT_TRUE(std::is_permutation(mine.begin(), mine.end(), numbered(10).begin()));
    orders.insert(mine);
  }
  EXPECT_GT(orders.size(), 1u);  // shuffled per rank
  EXPECT_EQ(node_split(8, 1, 4), (Strings{"s1", "s5"}));
  PolicyEnv::set(kDropLast, "True");
  EXPECT_EQ(node_split(10, 3, 4), (Strings{"s3", "s7"}));
  PolicyEnv::set(kUnbalanced, "True");
  EXPECT_EQ(node_split(10, 1, 4), (Strings{"s1", "s5", "s9"}));
}

// WebDataset over real shards: which samples each of 4 ranks reads under Whale's variables.
class WhaleWebDataset : public ::testing::Test {
 protected:
  Strings shards(int n) {
    Strings urls;
    for (int s = 0; s < n; ++s) {
      const std::string name = "w" + std::to_string(s);
      std::string tar = test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < 2; ++i) {
          w.write(test::make_sample(name + "_" + std::to_string(i), {{"cls", std::to_string(i)}}));
        }
      });
      urls.push_back(dir_.write(name + ".tar", tar));
    }
    return urls;
  }

  // The sample keys each rank of `world` reads in one pass.
  static std::vector<Strings> read_by_rank(const Strings& urls, int world,
                                           std::optional<SplitPolicy> policy = std::nullopt) {
    std::vector<Strings> out;
    for (int rank = 0; rank < world; ++rank) {
      WebDatasetOptions o;
      o.seed = 3;
      o.distributed.rank = rank;
      o.distributed.world_size = world;
      o.split_policy = policy;
      Pipeline<Sample> ds = WebDataset(urls, o);
      Strings keys;
      for (Sample& s : ds) keys.push_back(s.key());
      out.push_back(std::move(keys));
    }
    return out;
  }

  static Strings all_keys(int n) {
    Strings keys;
    for (int s = 0; s < n; ++s) {
      for (int i = 0; i < 2; ++i) keys.push_back("w" + std::to_string(s) + "_" + std::to_string(i));
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  static Strings sorted_union(const std::vector<Strings>& per_rank) {
    Strings all;
    for (const Strings& keys : per_rank) all.insert(all.end(), keys.begin(), keys.end());
    std::sort(all.begin(), all.end());
    return all;
  }

  PolicyEnv env_;
  test::TempDir dir_;
};

// With Whale's variables both False, 10 files over 4 workers was refused (policy even) where
// Whale gives every worker the whole list, shuffled.
TEST_F(WhaleWebDataset, DefaultWasRefusedForACountThatDoesNotDivide) {
  PolicyEnv::set(kUnbalanced, "False");
  PolicyEnv::set(kDropLast, "False");
  const Strings urls = shards(10);
  std::vector<Strings> per_rank = read_by_rank(urls, 4);
  std::set<Strings> orders;
  for (Strings& keys : per_rank) {
    orders.insert(keys);
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(keys, all_keys(10));
  }
  EXPECT_GT(orders.size(), 1u);
}

TEST_F(WhaleWebDataset, DefaultSplitsACountThatDivides) {
  PolicyEnv::set(kUnbalanced, "False");
  PolicyEnv::set(kDropLast, "False");
  const Strings urls = shards(8);
  std::vector<Strings> per_rank = read_by_rank(urls, 4);
  for (const Strings& keys : per_rank) EXPECT_EQ(keys.size(), 4u);  // 2 shards of 2 samples
  EXPECT_EQ(sorted_union(per_rank), all_keys(8));                   // each read once
}

TEST_F(WhaleWebDataset, UnbalancedAndDropLast) {
  const Strings urls = shards(10);
  PolicyEnv::set(kUnbalanced, "True");
  std::vector<Strings> per_rank = read_by_rank(urls, 4);
  std::vector<std::size_t> counts;
  for (const Strings& keys : per_rank) counts.push_back(keys.size());
  EXPECT_EQ(counts, (std::vector<std::size_t>{6, 6, 4, 4}));
  EXPECT_EQ(sorted_union(per_rank), all_keys(10));

  ::unsetenv(kUnbalanced);
  PolicyEnv::set(kDropLast, "True");
  per_rank = read_by_rank(urls, 4);
  std::set<std::string> seen;
  for (const Strings& keys : per_rank) {
    EXPECT_EQ(keys.size(), 4u);
    seen.insert(keys.begin(), keys.end());
  }
  EXPECT_EQ(seen.size(), 16u);  // 2 of the 10 files dropped, the rest read once
}

TEST_F(WhaleWebDataset, AnOptionWinsOverWhale) {
  const Strings urls = shards(10);
  PolicyEnv::set(kUnbalanced, "True");
  std::vector<Strings> per_rank = read_by_rank(urls, 4, SplitPolicy::drop_last);
  for (const Strings& keys : per_rank) EXPECT_EQ(keys.size(), 4u);
  EXPECT_THROW(read_by_rank(urls, 4, SplitPolicy::even), Error);
}

// ---------------------------------------------------------------------------------------------
// plan_split: the policy in force, where it came from, and who reads what.

DistributedInfo rank_of(int rank, int world) {
  DistributedInfo who;
  who.rank = rank;
  who.world_size = world;
  who.source = "options";
  return who;
}

// What the pipeline stages give worker `worker` of `num_workers` on rank `rank` of `world`.
Strings stage_split(const Strings& urls, int rank, int world, int worker, int num_workers,
                    SplitPolicy policy) {
  ShardListOptions o;
  o.distributed.rank = rank;
  o.distributed.world_size = world;
  o.seed = 5;
  Pipeline<std::string> p = (ShardList(urls, o) | split_by_node({.policy = policy}) |
                             split_by_worker({.policy = worker_split_policy(policy)}))
                                .with_worker(worker, num_workers);
  Strings out;
  for (std::string& url : p) out.push_back(url);
  return out;
}

// 10 shards, 4 ranks of 2 workers: a count that divides neither way. Before plan_split, which
// shards drop_last dropped was only a warning on stderr.
TEST(PlanSplit, DroppedShardsWereOnlyAWarning) {
  PolicyEnv env;
  const Strings urls = numbered(10);
  std::set<std::string> read;
  for (int rank = 0; rank < 4; ++rank) {
    for (int worker = 0; worker < 2; ++worker) {
      SplitPlan plan =
          plan_split(urls, rank_of(rank, 4),
                     {.policy = SplitPolicy::drop_last, .worker = worker, .num_workers = 2});
      EXPECT_EQ(plan.choice.policy, SplitPolicy::drop_last);
      EXPECT_EQ(plan.choice.source, "option");
      EXPECT_EQ(plan.dropped, (Strings{"s8", "s9"}));
      EXPECT_EQ(plan.rank_shards.size(), 2u);
      EXPECT_EQ(plan.shards.size(), 1u);
      EXPECT_EQ(plan.shards, stage_split(urls, rank, 4, worker, 2, SplitPolicy::drop_last));
      read.insert(plan.shards.begin(), plan.shards.end());
    }
  }
  // Everything not dropped is read exactly once (8 workers, 8 distinct shards).
  EXPECT_EQ(read.size(), 8u);
  EXPECT_FALSE(read.contains("s8"));
  EXPECT_FALSE(read.contains("s9"));
}

TEST(PlanSplit, UnbalancedGivesTheFirstRanksOneMore) {
  PolicyEnv env;
  const Strings urls = numbered(10);
  std::vector<std::size_t> per_rank;
  Strings all;
  for (int rank = 0; rank < 4; ++rank) {
    SplitPlan plan = plan_split(urls, rank_of(rank, 4), {.policy = SplitPolicy::unbalanced});
    EXPECT_TRUE(plan.dropped.empty());
    EXPECT_EQ(plan.rank_shards, plan.shards);  // one worker: the rank's share
    EXPECT_EQ(plan.shards, stage_split(urls, rank, 4, 0, 1, SplitPolicy::unbalanced));
    per_rank.push_back(plan.rank_shards.size());
    all.insert(all.end(), plan.rank_shards.begin(), plan.rank_shards.end());
  }
  EXPECT_EQ(per_rank, (std::vector<std::size_t>{3, 3, 2, 2}));
  std::sort(all.begin(), all.end());
  Strings sorted = urls;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(all, sorted);
  // Workers split a rank's 3 shards unbalanced too: 2 and 1.
  SplitPlan w1 = plan_split(urls, rank_of(1, 4),
                            {.policy = SplitPolicy::unbalanced, .worker = 1, .num_workers = 2});
  EXPECT_EQ(w1.rank_shards, (Strings{"s1", "s5", "s9"}));
  EXPECT_EQ(w1.shards, (Strings{"s5"}));
  EXPECT_EQ(w1.worker_policy, SplitPolicy::unbalanced);
}

TEST(PlanSplit, ReplicateAndSplitSamplesGiveEveryRankTheWholeList) {
  PolicyEnv env;
  const Strings urls = numbered(10);
  SplitPlan rep = plan_split(urls, rank_of(3, 4), {.policy = SplitPolicy::replicate});
  EXPECT_EQ(rep.rank_shards, urls);
  EXPECT_TRUE(rep.dropped.empty());
  Strings staged = stage_split(urls, 3, 4, 0, 1, SplitPolicy::replicate);  // in the rank's order
  EXPECT_TRUE(
      std::is_permutation(staged.begin(), staged.end(), rep.shards.begin(), rep.shards.end()));

  SplitPlan samples = plan_split(
      urls, rank_of(3, 4), {.policy = SplitPolicy::split_samples, .worker = 1, .num_workers = 2});
  EXPECT_EQ(samples.worker_policy, SplitPolicy::split_samples);
  EXPECT_EQ(samples.shards, urls);  // every worker reads every shard, keeping its samples
  EXPECT_EQ(samples.shards, stage_split(urls, 3, 4, 1, 2, SplitPolicy::split_samples));
}

TEST(PlanSplit, EvenThatDoesNotDivideIsTheSplitsError) {
  PolicyEnv env;
  const Strings urls = numbered(10);
  try {
    plan_split(urls, rank_of(0, 4));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.cause().find("10 shards do not divide evenly among 4 ranks"), std::string::npos)
        << e.cause();
  }
  SplitPlan plan = plan_split(numbered(8), rank_of(1, 4));
  EXPECT_EQ(plan.choice.policy, SplitPolicy::even);
  EXPECT_EQ(plan.choice.source, "default");
  EXPECT_EQ(plan.rank_shards, (Strings{"s1", "s5"}));
}

// An empty share is reported; refusing it is the stages' business (allow_empty).
TEST(PlanSplit, AnEmptyShareIsReportedNotRefused) {
  PolicyEnv env;
  SplitPlan plan = plan_split(numbered(3), rank_of(1, 2),
                              {.policy = SplitPolicy::unbalanced, .worker = 1, .num_workers = 2});
  EXPECT_EQ(plan.rank_shards, (Strings{"s1"}));
  EXPECT_TRUE(plan.shards.empty());
  EXPECT_THROW(plan_split(numbered(3), rank_of(2, 2)), Error);  // the rank is not in the world
  EXPECT_THROW(plan_split(numbered(3), rank_of(0, 1), {.worker = 2, .num_workers = 2}), Error);
}

// Each level of the policy's precedence, and the name of what decided.
TEST(PlanSplit, SourceOfThePolicyFollowsThePrecedence) {
  PolicyEnv env;
  const Strings urls = numbered(10);
  auto choice = [&] { return plan_split(urls, rank_of(0, 4)).choice; };
  PolicyEnv::set(kUnbalanced, "False");
  PolicyEnv::set(kDropLast, "false");
  EXPECT_EQ(choice().policy, SplitPolicy::replicate);
  EXPECT_EQ(choice().source, "whale_default");
  EXPECT_EQ(plan_split(numbered(8), rank_of(0, 4)).choice.policy, SplitPolicy::even);
  PolicyEnv::set(kDropLast, "1");
  EXPECT_EQ(choice().policy, SplitPolicy::drop_last);
  EXPECT_EQ(choice().source, kDropLast);
  PolicyEnv::set(kUnbalanced, "true");  // the first wins when both are true
  EXPECT_EQ(choice().policy, SplitPolicy::unbalanced);
  EXPECT_EQ(choice().source, kUnbalanced);
  PolicyEnv::set("WDS_SPLIT_POLICY", "drop-last");  // WDS_* over the frameworks
  EXPECT_EQ(choice().policy, SplitPolicy::drop_last);
  EXPECT_EQ(choice().source, "WDS_SPLIT_POLICY");
  SplitPolicyChoice option = choose_split_policy(SplitPolicy::replicate, 10, 4);  // option first
  EXPECT_EQ(option.policy, SplitPolicy::replicate);
  EXPECT_EQ(option.source, "option");
  // The option does not read the environment, so a broken variable does not matter to it.
  PolicyEnv::set("WDS_SPLIT_POLICY", "bogus");
  EXPECT_EQ(choose_split_policy(SplitPolicy::unbalanced, 10, 4).source, "option");
  EXPECT_THROW(choice(), Error);
}

// The example of the issue under a framework on both axes: Paddle fluid's count gives the rank,
// Whale's switch the policy, and the plan is rank 1's share of 10 among 4.
TEST(PlanSplit, PaddleRankWithWhalePolicy) {
  PolicyEnv env;
  test::ClearedEnv launchers(
      std::initializer_list<const char*>{},
      {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
       "SLURM_LOCALID", "PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINERS",
       "PADDLE_INIT_TRAINER_ID", "PADDLE_INIT_NUM_GRADIENT_SERVERS"});
  PolicyEnv::set("PADDLE_TRAINER_ID", "1");
  PolicyEnv::set("PADDLE_TRAINERS", "4");
  PolicyEnv::set(kUnbalanced, "True");
  SplitPlan plan = plan_split(numbered(10), detect_distributed());
  EXPECT_EQ(plan.rank, 1);
  EXPECT_EQ(plan.world_size, 4);
  EXPECT_EQ(plan.choice.source, kUnbalanced);
  EXPECT_EQ(plan.rank_shards, (Strings{"s1", "s5", "s9"}));
  // A launcher's variables win over Paddle's: under torchrun the job is torchrun's.
  PolicyEnv::set("RANK", "0");
  PolicyEnv::set("WORLD_SIZE", "2");
  plan = plan_split(numbered(10), detect_distributed());
  EXPECT_EQ(plan.world_size, 2);
  EXPECT_EQ(plan.rank_shards, (Strings{"s0", "s2", "s4", "s6", "s8"}));
}

// The seed's precedence (wds/distributed.hpp): the option, else WDS_SEED, else 0. The option
// does not read the variable at all.
TEST(PlanSplit, SeedOptionWinsOverWdsSeed) {
  test::ClearedEnv env(std::initializer_list<const char*>{}, {"WDS_SEED"});
  ShardListOptions o;
  EXPECT_EQ(ShardList(numbered(2), o).context().seed, 0u);
  ::setenv("WDS_SEED", "7", 1);
  EXPECT_EQ(ShardList(numbered(2), o).context().seed, 7u);
  ::setenv("WDS_SEED", "seven", 1);
  EXPECT_THROW(ShardList(numbered(2), o), Error);
  o.seed = 5;
  EXPECT_EQ(ShardList(numbered(2), o).context().seed, 5u);
}

}  // namespace
}  // namespace wds
