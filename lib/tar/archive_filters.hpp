// What every libarchive reader of ours (the tar reader, the indexer) shares: the decompressors
// it enables, and the bridge from its read callback to our chunks.
#pragma once

#include <archive.h>

#include <cerrno>
#include <cstddef>
#include <exception>
#include <span>

namespace wds {

// The decompressors built into libarchive, so that a shard never makes us run an external
// program, and the tar reader and the indexer recognise the same compressed shards.
inline void enable_builtin_filters(archive* ar) {
  archive_read_support_filter_gzip(ar);
  archive_read_support_filter_bzip2(ar);
  archive_read_support_filter_xz(ar);
  archive_read_support_filter_lzma(ar);
  archive_read_support_filter_zstd(ar);
  archive_read_support_filter_lz4(ar);
}

// The body of a libarchive read callback: hands libarchive the chunk `read()` gives (which must
// stay valid until the next call). An exception cannot cross libarchive's C frames, so one that
// read() throws is parked in `parked`, for the caller to rethrow, and libarchive is told of a
// failure.
template <class Read>
la_ssize_t read_chunk_for_archive(archive* ar, std::exception_ptr& parked, const void** out,
                                  Read&& read) {
  try {
    std::span<const std::byte> chunk = read();
    *out = chunk.data();
    return static_cast<la_ssize_t>(chunk.size());
  } catch (...) {
    parked = std::current_exception();
    archive_set_error(ar, EIO, "source failed");
    return -1;
  }
}

}  // namespace wds
