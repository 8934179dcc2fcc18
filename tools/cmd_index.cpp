// wds index SHARD...: writes DALI-format (v1.2) indexes next to local shards, or to -o.
#include <cstdio>

#include "tools/commands.hpp"
#include "wds/error.hpp"
#include "wds/index.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"

namespace wds::tool {
namespace {

struct IndexOptions {
  std::vector<std::string> patterns;
  std::string output;  // only with one shard: "-" for stdout, or a path
};

void run_index(const IndexOptions& o) {
  std::vector<std::string> urls;
  for (const std::string& p : o.patterns) {
    std::vector<std::string> expanded = resolve_urls(p);
    urls.insert(urls.end(), expanded.begin(), expanded.end());
  }
  if (!o.output.empty() && urls.size() != 1) {
    throw Error::invalid_argument(
        "-o takes one shard; without it, each "
        "index is written next to its shard");
  }
  for (const std::string& url : urls) {
    std::string text = format_index(build_index(url));
    std::string dest = o.output.empty() ? default_index_path(url) : o.output;
    auto sink = open_sink(dest);
    sink->write(std::as_bytes(std::span(text)));
    sink->close();
    if (dest != "-") std::fprintf(stderr, "%s -> %s\n", url.c_str(), dest.c_str());
  }
}

}  // namespace

void add_index(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "index",
      "Write an index per shard (sample keys, member offsets and sizes) in the format "
      "NVIDIA DALI's webdataset reader reads (wds2idx v1.2).");
  auto o = std::make_shared<IndexOptions>();
  cmd->add_option("SHARD", o->patterns, "uncompressed shards (patterns are expanded)")->required();
  cmd->add_option("-o,--output", o->output,
                  "where to write the index of a single shard (- for stdout); default: next to "
                  "the shard, named as DALI names it (train-000001.tar -> train-000001.idx)");
  cmd->footer("Example: wds index 'data/train-{000000..000099}.tar'");
  cmd->callback([o] { run_index(*o); });
}

}  // namespace wds::tool
