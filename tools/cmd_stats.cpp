// wds stats INPUT-PATTERN...: samples, payload bytes and extensions per shard, and totals.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/dataset_tools.hpp"
#include "tools/progress.hpp"
#include "wds/error.hpp"
#include "wds/tar_samples.hpp"

namespace wds::tool {
namespace {

struct StatsOptions {
  std::vector<std::string> patterns;
  bool json = false;
};

struct Counts {
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;
  std::map<std::string, std::uint64_t> extensions;  // samples that have each one

  void add(const Counts& other) {
    samples += other.samples;
    bytes += other.bytes;
    for (const auto& [ext, n] : other.extensions) extensions[ext] += n;
  }
};

std::string dump(const nlohmann::ordered_json& j) {
  // Keys and names are bytes from the archive: replace invalid UTF-8 rather than fail.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Adds the counts to `j`, after what it already holds ("url", or "total" and "shards").
void add_json(nlohmann::ordered_json& j, const Counts& c) {
  j["samples"] = c.samples;
  j["bytes"] = c.bytes;
  j["extensions"] = nlohmann::ordered_json::object();
  for (const auto& [ext, n] : c.extensions) j["extensions"][ext] = n;
}

// "120 samples, 4.5 MB (4500000 bytes); cls 120, jpg 120"
std::string to_text(const Counts& c) {
  std::string s = std::to_string(c.samples) + " samples, " +
                  human_bytes(static_cast<double>(c.bytes)) + " (" + std::to_string(c.bytes) +
                  " bytes)";
  const char* sep = "; ";
  for (const auto& [ext, n] : c.extensions) {
    s += sep + ext + " " + std::to_string(n);
    sep = ", ";
  }
  return s;
}

void print_line(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
}

void run_stats(const StatsOptions& o) {
  std::vector<std::string> urls = resolve_patterns(o.patterns);
  Counts total;
  Progress progress("stats");
  for (const std::string& url : urls) {
    Counts shard;
    TarSamples samples({url});
    while (std::optional<Sample> s = samples.next()) {
      shard.samples += 1;
      shard.bytes += s->payload_bytes();
      for (const Field& f : s->fields()) shard.extensions[f.ext] += 1;
      progress.add(1, s->payload_bytes());
    }
    total.add(shard);
    progress.done();  // the shard's line goes on a clean line; the bar comes back after it
    if (o.json) {
      nlohmann::ordered_json j;
      j["url"] = url;
      add_json(j, shard);
      print_line(dump(j));
    } else {
      print_line(url + ": " + to_text(shard));
    }
    std::fflush(stdout);
  }
  if (o.json) {
    nlohmann::ordered_json j;
    j["total"] = true;
    j["shards"] = urls.size();
    add_json(j, total);
    print_line(dump(j));
  } else {
    print_line("total: " + std::to_string(urls.size()) + " shards, " + to_text(total));
  }
  if (std::fflush(stdout) != 0) throw Error::unavailable("-", "", "cannot write output");
}

}  // namespace

void add_stats(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "stats",
      "Count per shard the samples, their payload bytes and how many samples have each "
      "extension; then the totals.");
  auto o = std::make_shared<StatsOptions>();
  cmd->add_option("INPUT-PATTERN", o->patterns, "shard URL patterns, read in order")->required();
  cmd->add_flag("--json", o->json,
                "one JSON object per line: per shard {\"url\", \"samples\", \"bytes\", "
                "\"extensions\": {ext: samples}}, then {\"total\": true, \"shards\", "
                "\"samples\", \"bytes\", \"extensions\"}");
  cmd->footer(
      "Payload bytes are the fields' sizes, without tar headers and padding.\n\n"
      "Examples:\n"
      "  wds stats 'train-{000000..000099}.tar'\n"
      "  wds stats --json 'train-*.tar' | tail -1");
  cmd->callback([o] { run_stats(*o); });
}

}  // namespace wds::tool
