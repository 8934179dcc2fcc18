// wds/split.hpp: which shards a rank and a worker read (WebDataset's split_by_node and
// split_by_worker on a list of shard URLs).
//
//   urls = wds::split_by_node(urls, rank, world_size);       // urls[rank::world_size]
//   urls = wds::split_by_worker(urls, worker, num_workers);  // then [worker::num_workers]
//
// 12 shards, rank 1 of 3, worker 1 of 2: the rank gets s01 s04 s07 s10, the worker s04 s10.
//
// Errors: an invalid_argument Error if count < 1 or index is not in [0, count).
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace wds {

std::vector<std::string> split_by_node(const std::vector<std::string>& urls, int rank,
                                       int world_size);
std::vector<std::string> split_by_worker(const std::vector<std::string>& urls, int worker,
                                         int num_workers);

}  // namespace wds
