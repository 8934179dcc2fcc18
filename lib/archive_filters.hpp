// The decompressors every libarchive reader of ours enables: the ones built into libarchive,
// so that a shard never makes us run an external program, and the tar reader and the indexer
// recognise the same compressed shards.
#pragma once

#include <archive.h>

namespace wds {

inline void enable_builtin_filters(archive* ar) {
  archive_read_support_filter_gzip(ar);
  archive_read_support_filter_bzip2(ar);
  archive_read_support_filter_xz(ar);
  archive_read_support_filter_lzma(ar);
  archive_read_support_filter_zstd(ar);
  archive_read_support_filter_lz4(ar);
}

}  // namespace wds
