// service/state_file.hpp: the producer's state file, the positions its trainers acknowledged.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace wds::detail {

// What a state file holds besides who wrote it: the job's world size and a position per rank.
struct SavedPositions {
  int world_size = 0;
  std::map<int, std::string> ranks;  // only ranks with a position
};

// Writes the positions (rank, state; an empty state for a rank with none yet) of producer
// `producer` of `producers` to `path`: to a temporary file renamed over the old one, so a
// producer killed while writing leaves the previous file whole. A failure is a line for `log`.
void write_state_file(const std::string& path, int producer, int producers, int world_size,
                      const std::vector<std::pair<int, std::string>>& ranks,
                      const std::function<void(const std::string&)>& log);

// Reads a file write_state_file wrote for the same producer of the same producers. Throws
// not_found if it cannot be read, invalid_argument if another producer wrote it, corrupt_data
// naming `path` if it is not such a file (every count is checked before it is used).
SavedPositions read_state_file(const std::string& path, int producer, int producers);

}  // namespace wds::detail
