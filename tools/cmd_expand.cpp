// wds expand PATTERN...: one URL per line.
#include <cstdio>
#include <string>
#include <vector>

#include "tools/commands.hpp"
#include "wds/brace.hpp"

namespace wds::tool {

void add_expand(CLI::App& app) {
  auto* cmd = app.add_subcommand("expand", "Print the URLs that patterns expand to, one per line.");
  auto patterns = std::make_shared<std::vector<std::string>>();
  cmd->add_option("PATTERN", *patterns, "URL patterns (braces, '::', ${NAME})")->required();
  cmd->footer("Example: wds expand 'train-{000..002}.tar::val-{a,b}.tar'");
  cmd->callback([patterns] {
    for (const std::string& p : *patterns) {
      for (const std::string& url : expand_urls(p)) {
        std::fwrite(url.data(), 1, url.size(), stdout);
        std::fputc('\n', stdout);
      }
    }
  });
}

}  // namespace wds::tool
