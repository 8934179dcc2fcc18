// wds expand PATTERN...: one URL per line.
#include <cstddef>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tools/cli_checks.hpp"
#include "tools/commands.hpp"
#include "wds/brace.hpp"
#include "wds/source.hpp"

namespace wds::tool {

namespace {

struct ExpandArgs {
  std::vector<std::string> patterns;
  ExpandOptions limits;
  bool list = false;
};

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
  cmd->footer(
      "Examples:\n"
      "  wds expand 'train-{000..002}.tar::val-{a,b}.tar'\n"
      "  wds expand --list '/data/train/' 's3://bucket/shards/train-*.tar'");
  cmd->callback([args] {
    for (const std::string& p : args->patterns) {
      const std::vector<std::string> urls =
          args->list ? resolve_urls(p, {}, args->limits) : expand_urls(p, args->limits);
      for (const std::string& url : urls) {
        std::fwrite(url.data(), 1, url.size(), stdout);
        std::fputc('\n', stdout);
      }
    }
  });
}

}  // namespace wds::tool
