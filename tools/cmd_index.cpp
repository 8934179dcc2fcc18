// wds index SHARD...: writes DALI-format (v1.2) indexes next to local shards, or to -o; with
// --format wids, one wids shard index (sample counts, sizes, MD5s) for all the shards.
#include <cstdio>

#include "tools/commands.hpp"
#include "wds/error.hpp"
#include "wds/index.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"
#include "wds/wids_index.hpp"

namespace wds::tool {
namespace {

struct IndexOptions {
  std::vector<std::string> patterns;
  std::string output;  // dali: only with one shard; wids: required
  std::string format = "dali";
  std::string name;  // wids: the index's "name"
};

void write_text(const std::string& dest, const std::string& text) {
  auto sink = open_sink(dest);
  sink->write(std::as_bytes(std::span(text)));
  sink->close();
}

void run_wids_index(const IndexOptions& o, const std::vector<std::string>& urls) {
  if (o.output.empty()) {
    throw Error::invalid_argument(
        "--format wids writes one index for all the shards: name it with -o (e.g. -o "
        "train.json; - for stdout)");
  }
  WidsIndex index;
  index.name = o.name;
  for (const std::string& url : urls) {
    index.shards.push_back(build_wids_entry(url));
    const WidsShard& s = index.shards.back();
    std::fprintf(stderr, "%s: %llu samples, %llu bytes\n", url.c_str(),
                 static_cast<unsigned long long>(s.nsamples),
                 static_cast<unsigned long long>(s.filesize.value_or(0)));
  }
  // Urls are written relative to where the index goes; stdout has no place, so they stay.
  write_text(o.output, format_wids_index(index, o.output == "-" ? "" : o.output));
  if (o.output != "-") {
    std::fprintf(stderr, "%zu shards, %llu samples -> %s\n", index.shards.size(),
                 static_cast<unsigned long long>(index.total_samples()), o.output.c_str());
  }
}

void run_index(const IndexOptions& o) {
  std::vector<std::string> urls;
  for (const std::string& p : o.patterns) {
    std::vector<std::string> expanded = resolve_urls(p);
    urls.insert(urls.end(), expanded.begin(), expanded.end());
  }
  if (o.format == "wids") return run_wids_index(o, urls);
  if (!o.name.empty()) throw Error::invalid_argument("--name is for --format wids");
  if (!o.output.empty() && urls.size() != 1) {
    throw Error::invalid_argument(
        "-o takes one shard; without it, each "
        "index is written next to its shard");
  }
  for (const std::string& url : urls) {
    std::string text = format_index(build_index(url));
    std::string dest = o.output.empty() ? default_index_path(url) : o.output;
    write_text(dest, text);
    if (dest != "-") std::fprintf(stderr, "%s -> %s\n", url.c_str(), dest.c_str());
  }
}

}  // namespace

void add_index(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "index",
      "Write an index per shard (sample keys, member offsets and sizes) in the format "
      "NVIDIA DALI's webdataset reader reads (wds2idx v1.2), or with --format wids one "
      "wids shard index (JSON: each shard's sample count, size and MD5) for all the shards.");
  auto o = std::make_shared<IndexOptions>();
  cmd->add_option("SHARD", o->patterns, "shards (patterns are expanded); dali: uncompressed")
      ->required();
  cmd->add_option("-o,--output", o->output,
                  "dali: where to write the index of a single shard (- for stdout); default: "
                  "next to the shard, named as DALI names it (train-000001.tar -> "
                  "train-000001.idx). wids: the index file (required; shard urls below its "
                  "directory are written relative to it)");
  cmd->add_option("--format", o->format, "dali (an index per shard) or wids (one for all)")
      ->check(CLI::IsMember({"dali", "wids"}))
      ->capture_default_str();
  cmd->add_option("--name", o->name, "wids: the dataset's name, written as \"name\"");
  cmd->footer(
      "Examples: wds index 'data/train-{000000..000099}.tar'\n"
      "          wds index --format wids -o data/train.json 'data/train-{000000..000099}.tar'");
  cmd->callback([o] { run_index(*o); });
}

}  // namespace wds::tool
