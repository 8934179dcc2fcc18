// What reading a sample by its index shares with the indexed dataset's own local reads.
#pragma once

#include <cstdint>
#include <string>

#include "wds/error.hpp"

namespace wds {

// The error for a read of `length` bytes at `offset` that found only `got`: the shard ends
// before what its index names, so the index is stale (corrupt_data naming `url`).
Error shard_ends_before_index(const std::string& url, std::uint64_t offset, std::uint64_t got,
                              std::uint64_t length);

}  // namespace wds
