// The producer's state file: its tag, who wrote it, the world size and each rank's position.
#include "service/state_file.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "wds/error.hpp"
#include "wds/state.hpp"

namespace wds::detail {
namespace {

constexpr std::string_view kStateTag = "wds-service-state-1";
// The largest world size a start message can carry (protocol.cpp).
constexpr std::uint64_t kMaxWorldSize = std::uint64_t{1} << 30;

}  // namespace

void write_state_file(const std::string& path, int producer, int producers, int world_size,
                      const std::vector<std::pair<int, std::string>>& ranks,
                      const std::function<void(const std::string&)>& log) {
  StateWriter out;
  out.put(kStateTag);
  out.put(static_cast<std::uint64_t>(producer));
  out.put(static_cast<std::uint64_t>(producers));
  out.put(static_cast<std::uint64_t>(world_size));
  out.put(static_cast<std::uint64_t>(ranks.size()));
  for (const auto& [rank, state] : ranks) {
    out.put(static_cast<std::uint64_t>(rank));
    out.put(std::string_view(state));
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << out.str();
    if (!f.flush()) {
      log("cannot write " + tmp);
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) log("cannot rename " + tmp + " to " + path + ": " + ec.message());
}

SavedPositions read_state_file(const std::string& path, int this_producer, int this_producers) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    throw Error::not_found(path, "", "cannot read the server state file");
  }
  std::stringstream buffer;
  buffer << f.rdbuf();
  const std::string text = buffer.str();  // the reader keeps a view of it
  SavedPositions saved;
  try {
    StateReader in(text);
    if (in.get_string() != kStateTag) throw std::invalid_argument("not a server state");
    const auto producer = in.get_u64();
    const auto producers = in.get_u64();
    if (producer != static_cast<std::uint64_t>(this_producer) ||
        producers != static_cast<std::uint64_t>(this_producers)) {
      throw Error::invalid_argument(
          path, "",
          "the state was saved by producer " + std::to_string(producer) + " of " +
              std::to_string(producers) + ", this server is producer " +
              std::to_string(this_producer) + " of " + std::to_string(this_producers));
    }
    // Every count is checked before it is used: the file may be damaged or not ours.
    const auto world = in.get_u64();
    const auto n = in.get_u64();
    if (world > kMaxWorldSize || (world == 0 && n != 0)) {
      throw Error::corrupt_data(path, "",
                                "not a server state file: world size " + std::to_string(world) +
                                    " is not in [1, " + std::to_string(kMaxWorldSize) + "]");
    }
    if (n > world) {
      throw Error::corrupt_data(path, "",
                                "not a server state file: positions for " + std::to_string(n) +
                                    " ranks of a world of " + std::to_string(world));
    }
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto rank = in.get_u64();
      if (rank >= world) {
        throw Error::corrupt_data(path, "",
                                  "not a server state file: rank " + std::to_string(rank) +
                                      " of a world of " + std::to_string(world));
      }
      std::string state = in.get_string();
      if (!state.empty() && !saved.ranks.emplace(static_cast<int>(rank), std::move(state)).second) {
        throw Error::corrupt_data(
            path, "", "not a server state file: rank " + std::to_string(rank) + " twice");
      }
    }
    saved.world_size = static_cast<int>(world);
    if (!in.at_end()) throw std::invalid_argument("trailing values");
  } catch (const Error& e) {
    if (e.url() == path) throw;
    throw Error::corrupt_data(path, "", "not a server state file: " + e.cause());
  } catch (const std::exception& e) {
    throw Error::corrupt_data(path, "", std::string("not a server state file: ") + e.what());
  }
  return saved;
}

}  // namespace wds::detail
