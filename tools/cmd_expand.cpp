// wds expand PATTERN...: one URL per line; with a rank or split option, only the URLs this rank
// and worker read (or those no rank reads), and on stderr the split policy and what decided it.
#include <cstddef>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/cli_checks.hpp"
#include "tools/commands.hpp"
#include "wds/brace.hpp"
#include "wds/distributed.hpp"
#include "wds/error.hpp"
#include "wds/source.hpp"
#include "wds/split.hpp"

namespace wds::tool {

namespace {

struct ExpandArgs {
  std::vector<std::string> patterns;
  ExpandOptions limits;
  bool list = false;
  // The split: any of these shows this rank's share instead of the whole list.
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> worker;
  std::optional<int> num_workers;
  std::string split_policy;
  bool plan = false;
  bool dropped = false;
};

void print_lines(const std::vector<std::string>& urls) {
  for (const std::string& url : urls) {
    std::fwrite(url.data(), 1, url.size(), stdout);
    std::fputc('\n', stdout);
  }
}

// One line for a person: who this is, the policy in force and where it came from, the counts,
// and the dropped shards by name (the URLs themselves are on stdout).
void describe(const SplitPlan& plan, const DistributedInfo& who, std::size_t total) {
  std::string line =
      "wds: rank " + std::to_string(plan.rank) + " of " + std::to_string(plan.world_size) + " (" +
      who.source + "), worker " + std::to_string(plan.worker) + " of " +
      std::to_string(plan.num_workers) + ": policy " + std::string(to_string(plan.choice.policy)) +
      " (" + plan.choice.source + "); the rank reads " + std::to_string(plan.rank_shards.size()) +
      " of " + std::to_string(total) + " shards, the worker " + std::to_string(plan.shards.size()) +
      "; " + std::to_string(plan.dropped.size()) + " dropped";
  for (std::size_t i = 0; i < plan.dropped.size(); ++i) {
    line += (i == 0 ? ": " : " ") + plan.dropped[i];
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

void add_expand(CLI::App& app) {
  auto* cmd = app.add_subcommand("expand", "Print the URLs that patterns expand to, one per line.");
  auto args = std::make_shared<ExpandArgs>();
  cmd->add_option("PATTERN", args->patterns, "URL patterns (braces, '::', ${NAME})")->required();
  cmd->add_option("--max-names", args->limits.max_names,
                  "refuse a pattern that expands to more names than this")
      ->check(at_least<std::size_t>(1))
      ->capture_default_str();
  cmd->add_flag("--list", args->list,
                "print what the other commands read: the files of a local directory (a URL "
                "ending in '/') or glob ('*'), the objects under an s3:// prefix or glob");
  auto* rank = cmd->add_option("--rank", args->rank,
                               "print only the URLs this rank reads (with --world-size; "
                               "default: from the launcher's variables)")
                   ->check(at_least<int>(0));
  auto* world = cmd->add_option("--world-size", args->world_size, "number of ranks (with --rank)")
                    ->check(at_least<int>(1));
  rank->needs(world);
  world->needs(rank);
  cmd->add_option("--worker", args->worker, "and only what this worker of the rank reads")
      ->check(at_least<int>(0));
  cmd->add_option("--num-workers", args->num_workers, "workers per rank (default 1)")
      ->check(at_least<int>(1));
  cmd->add_option("--split-policy", args->split_policy,
                  "even, unbalanced, drop_last, replicate, split_samples (default: "
                  "WDS_SPLIT_POLICY, else Whale's WHALE_* variables, else even)");
  cmd->add_flag("--plan", args->plan,
                "split with the rank and policy the environment gives (implied by the options "
                "above); the policy and its source go to stderr");
  cmd->add_flag("--dropped", args->dropped,
                "print the URLs no rank reads (drop_last) instead of this worker's");
  cmd->footer(
      "Examples:\n"
      "  wds expand 'train-{000..002}.tar::val-{a,b}.tar'\n"
      "  wds expand --list '/data/train/' 's3://bucket/shards/train-*.tar'\n"
      "  wds expand --rank 1 --world-size 4 --split-policy drop_last 'train-{000..009}.tar'\n"
      "  WHALE_DROP_LAST_FILES=True wds expand --plan --dropped 'train-{000..009}.tar'");
  cmd->callback([args] {
    const bool split = args->plan || args->dropped || args->rank || args->worker ||
                       args->num_workers || !args->split_policy.empty();
    std::vector<std::string> all;
    for (const std::string& p : args->patterns) {
      const std::vector<std::string> urls =
          args->list ? resolve_urls(p, {}, args->limits) : expand_urls(p, args->limits);
      if (!split) {
        print_lines(urls);
      } else {
        all.insert(all.end(), urls.begin(), urls.end());
      }
    }
    if (!split) return;
    const int num_workers = args->num_workers.value_or(1);
    const int worker = args->worker.value_or(0);
    if (worker >= num_workers) {
      throw Error::invalid_argument("--worker " + std::to_string(worker) +
                                    " must be below --num-workers " + std::to_string(num_workers) +
                                    " (workers are numbered from 0)");
    }
    const DistributedInfo who =
        detect_distributed({.rank = args->rank, .world_size = args->world_size});
    SplitPlanOptions options{.worker = worker, .num_workers = num_workers};
    if (!args->split_policy.empty()) options.policy = parse_split_policy(args->split_policy);
    const SplitPlan plan = plan_split(all, who, options);
    describe(plan, who, all.size());
    print_lines(args->dropped ? plan.dropped : plan.shards);
  });
}

}  // namespace wds::tool
