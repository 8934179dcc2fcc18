// The local shard cache behind CacheOptions (wds/remote.hpp).
#pragma once

#include <memory>
#include <string>

#include "wds/remote.hpp"
#include "wds/source.hpp"

namespace wds {

// The cache file for `url` in `dir` (whether or not it exists).
std::string cache_path(const std::string& dir, const std::string& url);

// Opens `url` through the cache: the cached file if complete and whole (each block verified
// against its checksum as it is read; a damaged or truncated entry is deleted, warned about
// through options.on_retry as attempt 0, else on stderr, and the shard read from the server),
// else `open_remote()` with the bytes copied to the cache as they stream. A cache directory
// that cannot be written is warned about once per process and read past.
std::unique_ptr<ByteSource> open_cached(
    const std::string& url, const OpenOptions& options, const CacheOptions& cache,
    const std::function<std::unique_ptr<ByteSource>(const OpenOptions&)>& open_remote);

// Removes least recently used complete files until the total is at most max_bytes.
void evict_cache(const std::string& dir, std::uint64_t max_bytes);

}  // namespace wds
