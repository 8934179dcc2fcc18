// The pipeline options that wds ls and wds bench share, and the pipeline they describe.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "wds/error.hpp"
#include "wds/pipeline.hpp"
#include "wds/sample.hpp"

namespace wds::tool {

struct PipelineOptions {
  std::vector<std::string> patterns;
  std::optional<int> rank;
  std::optional<int> world_size;
  int worker = 0;
  int num_workers = 1;
  std::optional<std::uint64_t> seed;
  bool shuffle_shards = false;
  std::size_t shard_shuffle = 0;
  std::size_t shuffle = 0;
  bool resampled = false;
  std::optional<std::uint64_t> epoch;
  std::uint64_t passes = 1;
  std::string split_policy;
  bool allow_empty = false;
  std::string on_error = "raise";
  std::string cache_dir;
  std::uint64_t cache_size = 0;
};

// Adds URL-PATTERN... and every pipeline option to `cmd`.
void add_pipeline_options(CLI::App& cmd, PipelineOptions& o);

// The handler an --on-error choice names: raise, warn or ignore.
ErrorHandler handler_named(const std::string& name);

// WebDataset over the expanded patterns, configured by `o`.
Pipeline<Sample> make_pipeline(const PipelineOptions& o);

}  // namespace wds::tool
