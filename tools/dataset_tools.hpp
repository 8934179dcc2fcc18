// The wds tool's dataset commands: create, reshard, cat, extract and stats, and what they share.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/progress.hpp"
#include "wds/error.hpp"
#include "wds/source.hpp"
#include "wds/tar_writer.hpp"

namespace wds::tool {

void add_create(CLI::App& app);
void add_reshard(CLI::App& app);
void add_cat(CLI::App& app);
void add_extract(CLI::App& app);
void add_stats(CLI::App& app);

// Every URL the patterns name, in order (braces, '::', directories, globs, S3 prefixes).
inline std::vector<std::string> resolve_patterns(const std::vector<std::string>& patterns) {
  std::vector<std::string> urls;
  for (const std::string& p : patterns) {
    std::vector<std::string> some = resolve_urls(p);
    urls.insert(urls.end(), some.begin(), some.end());
  }
  return urls;
}

// Creates the directory that OUTPUT-PATTERN's shards go to, as the sinks do not. A numbered
// directory ("out-%d/x.tar") is left to the user.
inline void make_output_directory(const std::string& pattern) {
  const std::filesystem::path dir = std::filesystem::path(pattern).parent_path();
  if (dir.empty() || dir.string().find('%') != std::string::npos) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw Error::unavailable(dir.string(), "",
                             "cannot create the output directory: " + ec.message());
  }
}

// What create and reshard wrote: one shard, its samples and payload bytes.
struct ShardCount {
  std::string path;
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;
};

// Writes `sample` through `writer` and counts it, and its payload, against the shard it went to.
inline void write_counted(ShardWriter& writer, const Sample& sample,
                          std::vector<ShardCount>& counts, Progress& progress) {
  writer.write(sample);
  if (counts.size() < writer.shards().size()) counts.push_back({writer.shards().back()});
  counts.back().samples += 1;
  counts.back().bytes += sample.payload_bytes();
  progress.add(1, sample.payload_bytes());
}

// One line per shard on stdout ("PATH<TAB>N samples<TAB>B bytes"), then the totals.
inline void print_shard_counts(const std::vector<ShardCount>& shards) {
  std::uint64_t samples = 0, bytes = 0;
  for (const ShardCount& s : shards) {
    std::printf("%s\t%llu samples\t%llu bytes\n", s.path.c_str(),
                static_cast<unsigned long long>(s.samples),
                static_cast<unsigned long long>(s.bytes));
    samples += s.samples;
    bytes += s.bytes;
  }
  std::printf("total: %zu shards, %llu samples, %llu bytes\n", shards.size(),
              static_cast<unsigned long long>(samples), static_cast<unsigned long long>(bytes));
  std::fflush(stdout);
}

}  // namespace wds::tool
