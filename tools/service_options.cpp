#include "tools/service_options.hpp"

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "tools/cli_checks.hpp"
#include "wds/error.hpp"

namespace wds::tool {

void add_trainer_options(CLI::App& cmd, TrainerOptions& t) {
  auto* service =
      cmd.add_option("--service", t.service,
                     "act as a trainer of the data service: take batches from these producers "
                     "(wds serve), in this order, instead of reading shards");
  cmd.add_option("--credits", t.credits, "with --service: batches in flight per producer")
      ->check(in_range(1, 1024))
      ->capture_default_str()
      ->needs(service);
  cmd.add_option("--timeout", t.timeout,
                 "with --service: seconds without a word from a producer before it is taken "
                 "for gone (an error)")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str()
      ->needs(service);
  cmd.add_option("--token-file", t.token_file,
                 "with --service: the token the producers require (default: WDS_SERVICE_TOKEN, "
                 "else the file WDS_SERVICE_TOKEN_FILE names)")
      ->needs(service);
  cmd.add_flag("--no-shared-memory", t.no_shared_memory,
               "with --service: decline a producer's shared memory (batches then come as copies "
               "over the socket even from this host)")
      ->needs(service);
}

void check_trainer_use(const CLI::App& cmd, const PipelineOptions& p, const TrainerOptions& t,
                       const std::set<std::string>& also) {
  if (t.service.empty()) {
    // The patterns are optional only for a trainer; as CLI11 says it for required ones.
    if (p.patterns.empty()) throw CLI::RequiredError("URL-PATTERN");
    return;
  }
  if (!p.patterns.empty()) {
    throw Error::invalid_argument(
        "--service takes batches from the producers, which read the shards: give the URL "
        "patterns to wds serve, not here (got '" +
        p.patterns.front() + "')");
  }
  static const std::set<std::string> kTrainers = {
      "--service", "--credits", "--timeout",    "--token-file", "--no-shared-memory",
      "--rank",    "--epoch",   "--world-size", "--passes",     "--help"};
  for (const CLI::Option* o : cmd.get_options()) {
    if (o->count() == 0) continue;
    const std::string name = o->get_name();
    if (kTrainers.count(name) || also.count(name)) continue;
    throw Error::invalid_argument(
        name +
        " belongs to the server: with --service, give it to wds serve (a trainer "
        "takes only --rank, --world-size, --epoch, --passes, --credits, --timeout, "
        "--token-file and --no-shared-memory)");
  }
}

#if WDS_TOOL_SERVICE
ServiceLoaderOptions trainer_options(const PipelineOptions& p, const TrainerOptions& t) {
  ServiceLoaderOptions o;
  std::stringstream list(t.service);
  for (std::string address; std::getline(list, address, ',');) {
    if (!address.empty()) o.servers.push_back(address);
  }
  if (o.servers.empty()) {
    throw Error::invalid_argument(
        "--service needs at least one producer address (tcp://HOST:PORT or ipc://PATH)");
  }
  o.rank = p.rank;
  o.world_size = p.world_size;
  o.credits = t.credits;
  o.shared_memory = !t.no_shared_memory;
  o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(t.timeout * 1000)));
  if (!t.token_file.empty()) o.token = read_service_token(t.token_file, "--token-file");
  return o;
}
#endif

}  // namespace wds::tool
