#include "wds/split.hpp"

#include "wds/error.hpp"

namespace wds {
namespace {

std::vector<std::string> every_nth(const std::vector<std::string>& urls, int index, int count,
                                   const char* index_name, const char* count_name) {
  if (count < 1 || index < 0 || index >= count) {
    throw Error(ErrorCode::invalid_argument, "", "",
                std::string(index_name) + " " + std::to_string(index) + " is not in [0, " +
                    count_name + " " + std::to_string(count) + ")");
  }
  std::vector<std::string> out;
  out.reserve(urls.size() / static_cast<std::size_t>(count) + 1);
  for (std::size_t i = static_cast<std::size_t>(index); i < urls.size();
       i += static_cast<std::size_t>(count)) {
    out.push_back(urls[i]);
  }
  return out;
}

}  // namespace

std::vector<std::string> split_by_node(const std::vector<std::string>& urls, int rank,
                                       int world_size) {
  return every_nth(urls, rank, world_size, "rank", "world size");
}

std::vector<std::string> split_by_worker(const std::vector<std::string>& urls, int worker,
                                         int num_workers) {
  return every_nth(urls, worker, num_workers, "worker", "number of workers");
}

}  // namespace wds
