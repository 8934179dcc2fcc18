// detect_distributed: rank and world size from explicit options or the launcher's environment.
#include "wds/distributed.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "wds/error.hpp"

namespace wds {
namespace {

// Strict, so that a typo in a launcher script fails loudly instead of becoming rank 0:
// from_chars already refuses whitespace and '+', and the whole text must be consumed.
int parse_int(std::string_view name, std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ptr == end && ec == std::errc()) return value;
  std::string shown = std::string(name) + "='" + std::string(text) + "'";
  if (ptr == end && ec == std::errc::result_out_of_range)
    throw Error::invalid_argument(shown + " does not fit in an int");
  throw Error::invalid_argument(shown + " is not a whole number");
}

std::string show(std::string_view name, int value) {
  return std::string(name) + "=" + std::to_string(value);
}

void check_world_size(std::string_view name, int size) {
  if (size < 1) throw Error::invalid_argument(show(name, size) + " is less than 1");
}

// size_desc says where the world size came from, so the message points at the right variable.
void check_rank(std::string_view name, int rank, int size, const std::string& size_desc) {
  if (rank < 0) throw Error::invalid_argument(show(name, rank) + " is negative");
  if (rank >= size) throw Error::invalid_argument(show(name, rank) + " is not below " + size_desc);
}

int parse_local_rank(const char* name, const char* text) {
  int local = parse_int(name, text);
  if (local < 0) throw Error::invalid_argument(show(name, local) + " is negative");
  return local;
}

DistributedInfo from_options(const DistributedOptions& options) {
  constexpr std::string_view rank_name = "DistributedOptions::rank";
  constexpr std::string_view size_name = "DistributedOptions::world_size";
  if (!options.world_size) {
    throw Error::invalid_argument(std::string(rank_name) + " is set but " + std::string(size_name) +
                                  " is not (give both or neither)");
  }
  if (!options.rank) {
    throw Error::invalid_argument(std::string(size_name) + " is set but " + std::string(rank_name) +
                                  " is not (give both or neither)");
  }
  DistributedInfo info;
  info.rank = *options.rank;
  info.world_size = *options.world_size;
  info.source = "options";
  check_world_size(size_name, info.world_size);
  check_rank(rank_name, info.rank, info.world_size, show(size_name, info.world_size));
  return info;
}

struct PairSource {
  const char* source;    // DistributedInfo::source
  const char* launcher;  // for messages: who normally sets these variables
  const char* rank_var;
  const char* size_var;
  const char* local_var;  // nullptr when the source has none
};

// Sources with one rank and one size variable, and optionally a local rank variable.
std::optional<DistributedInfo> from_pair(const PairSource& s) {
  const char* rank = std::getenv(s.rank_var);
  const char* size = std::getenv(s.size_var);
  // The rank and size variables decide whether a launcher is there; a local-rank variable
  // alone does not (scripts often export LOCAL_RANK by hand under other launchers).
  if (!rank && !size) return std::nullopt;
  const char* local = s.local_var ? std::getenv(s.local_var) : nullptr;
  const std::string sets = std::string(" (") + s.launcher + " sets ";
  if (!size) {
    throw Error::invalid_argument(std::string(s.rank_var) + " is set but " + s.size_var +
                                  " is not" + sets + "both)");
  }
  if (!rank) {
    throw Error::invalid_argument(std::string(s.size_var) + " is set but " + s.rank_var +
                                  " is not" + sets + "both)");
  }
  DistributedInfo info;
  info.rank = parse_int(s.rank_var, rank);
  info.world_size = parse_int(s.size_var, size);
  check_world_size(s.size_var, info.world_size);
  check_rank(s.rank_var, info.rank, info.world_size, show(s.size_var, info.world_size));
  if (local) info.local_rank = parse_local_rank(s.local_var, local);
  info.source = s.source;
  return info;
}

// A value made only of an optional '-' and ASCII digits: what parse_int would take, or refuse
// only for not fitting in an int.
bool looks_like_a_number(std::string_view text) {
  if (!text.empty() && text.front() == '-') text.remove_prefix(1);
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Paddle's world size is PADDLE_TRAINERS_NUM or PADDLE_TRAINERS; a launcher may set both, and then
// they must agree. Some launchers set PADDLE_TRAINERS to the comma-separated list of trainer
// endpoints (its length is the world size); the fluid documents set it to the number of trainers
// (`trainers = int(os.getenv("PADDLE_TRAINERS", "1"))`): one whole number is a count.
std::optional<DistributedInfo> from_paddle() {
  const char* id = std::getenv("PADDLE_TRAINER_ID");
  const char* num = std::getenv("PADDLE_TRAINERS_NUM");
  const char* trainers = std::getenv("PADDLE_TRAINERS");
  if (!id && !num && !trainers) return std::nullopt;
  if (!id) {
    throw Error::invalid_argument(std::string(num ? "PADDLE_TRAINERS_NUM" : "PADDLE_TRAINERS") +
                                  " is set but PADDLE_TRAINER_ID is not");
  }
  if (!num && !trainers) {
    throw Error::invalid_argument(
        "PADDLE_TRAINER_ID is set but neither PADDLE_TRAINERS_NUM nor PADDLE_TRAINERS is");
  }
  DistributedInfo info;
  info.rank = parse_int("PADDLE_TRAINER_ID", id);
  std::string size_desc;
  if (num) {
    info.world_size = parse_int("PADDLE_TRAINERS_NUM", num);
    check_world_size("PADDLE_TRAINERS_NUM", info.world_size);
    size_desc = show("PADDLE_TRAINERS_NUM", info.world_size);
  }
  if (trainers && looks_like_a_number(trainers)) {
    const int count = parse_int("PADDLE_TRAINERS", trainers);
    check_world_size("PADDLE_TRAINERS", count);
    if (num && count != info.world_size)
      throw Error::invalid_argument(show("PADDLE_TRAINERS", count) + " but " + size_desc);
    if (!num) {
      info.world_size = count;
      size_desc = show("PADDLE_TRAINERS", count);
    }
  } else if (trainers) {
    // An empty element ("a,,b", a trailing comma, an empty value) is a broken list, not a
    // smaller world.
    std::string_view list = trainers;
    int count = 0;
    for (;;) {
      std::size_t comma = list.find(',');
      if (list.substr(0, comma).empty()) {
        throw Error::invalid_argument(std::string("PADDLE_TRAINERS='") + trainers +
                                      "' has an empty endpoint");
      }
      ++count;
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
    const std::string lists = "PADDLE_TRAINERS lists " + std::to_string(count) +
                              (count == 1 ? " endpoint" : " endpoints");
    if (num && count != info.world_size) throw Error::invalid_argument(lists + " but " + size_desc);
    if (!num) {
      info.world_size = count;
      size_desc = "the world size " + std::to_string(count) + " (" + lists + ")";
    }
  }
  check_rank("PADDLE_TRAINER_ID", info.rank, info.world_size, size_desc);
  info.source = "paddle";
  return info;
}

}  // namespace

DistributedInfo detect_distributed(const DistributedOptions& options) {
  if (options.rank || options.world_size) return from_options(options);
  static constexpr PairSource pairs[] = {
      {"torchrun", "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"openmpi", "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"pmi", "the PMI launcher", "PMI_RANK", "PMI_SIZE", nullptr},
      {"slurm", "srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const PairSource& s : pairs) {
    if (auto info = from_pair(s)) return *info;
  }
  if (auto info = from_paddle()) return *info;
  // Paddle's v2 cluster training (paddle.init reads PADDLE_INIT_*). PADDLE_INIT_TRAINER_COUNT is
  // the number of threads (or GPUs) within one trainer, not of trainers: it is not read.
  static constexpr PairSource paddle_v2 = {"paddle_v2", "Paddle v2 cluster training",
                                           "PADDLE_INIT_TRAINER_ID",
                                           "PADDLE_INIT_NUM_GRADIENT_SERVERS", nullptr};
  if (auto info = from_pair(paddle_v2)) return *info;
  return DistributedInfo{};
}

}  // namespace wds
