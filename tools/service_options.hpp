// The options with which wds ls and wds bench act as a data service's trainer (--service), and
// the checks that keep the server's options on the server.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <set>
#include <string>

#include "tools/pipeline_options.hpp"
#include "wds/service.hpp"

namespace wds::tool {

struct TrainerOptions {
  std::string service;  // ADDR[,ADDR...]: empty, not a trainer
  std::size_t credits = ServiceLoaderOptions{}.credits;
  double timeout = 30;  // seconds
  std::string token_file;
  bool no_shared_memory = false;
};

// Adds --service, --credits, --timeout, --token-file and --no-shared-memory (all but the first
// need --service).
void add_trainer_options(CLI::App& cmd, TrainerOptions& t);

// With --service: no URL pattern, and no option but --rank, --world-size, --epoch, --passes,
// the trainer's own and `also` (the command's output options): the rest are the server's.
// Without: URL patterns are required. Throws with a message naming the option.
void check_trainer_use(const CLI::App& cmd, const PipelineOptions& p, const TrainerOptions& t,
                       const std::set<std::string>& also);

// The ServiceLoader's options: servers, rank and world size (unset: the launcher's variables),
// credits, timeout, shared memory, and the token from --token-file (unset:
// WDS_SERVICE_TOKEN[_FILE]).
ServiceLoaderOptions trainer_options(const PipelineOptions& p, const TrainerOptions& t);

}  // namespace wds::tool
