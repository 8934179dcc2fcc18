// wds/tar_reader.hpp: TarReader, a streaming reader of tar archives (one entry at a time).
//
//   wds::TarReader tar(wds::open_url("shard.tar"));
//   while (const wds::TarEntry* e = tar.next()) {
//     if (e->type != wds::EntryType::file) continue;   // unread data is skipped
//     wds::Bytes data(e->size);
//     tar.read_data(data.span());
//   }
//
// Reads ustar, pax and GNU tar (long names, sparse files), plain or compressed with gzip, bzip2,
// xz/lzma or zstd, recognised by content, not by name. It pulls from its ByteSource through
// libarchive's callback interface, so memory use does not depend on the archive's size, and
// read_data() copies a member's bytes once, from the source's chunk into the caller's buffer.
//
// Errors: next() and read_data() throw wds::Error naming the source URL and the entry:
// corrupt_data for a damaged or truncated archive (including "empty file" for 0 bytes and
// "not a tar archive" for other data), or the error the ByteSource threw. After an error the
// reader is finished: next() returns nullptr.
//
// An archive that ends at a member boundary without the two zero blocks that close every tar is
// taken as truncated (a copy cut at a 512-byte boundary looks exactly like that), unlike GNU tar
// and Python, which accept it silently. TarReaderOptions::require_end_marker = false accepts it.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "wds/source.hpp"

namespace wds {

enum class EntryType { file, directory, symlink, hardlink, other };

struct TarEntry {
  std::string name;        // the member's path as stored (pax/GNU long names resolved)
  std::uint64_t size = 0;  // bytes of data (0 for non-files)
  EntryType type = EntryType::other;
  std::uint64_t offset = 0;  // offset of the entry's first header in the uncompressed archive
};

struct TarReaderOptions {
  bool require_end_marker = true;
};

class TarReader {
 public:
  explicit TarReader(std::unique_ptr<ByteSource> source, TarReaderOptions options = {});
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  // Advances to the next entry; nullptr at the end of the archive. The entry, and the bytes its
  // name views, stay valid until the next call.
  const TarEntry* next();
  // Reads the current entry's data into `dst`, which must be exactly entry.size bytes. At most
  // once per entry; data not read is skipped by next().
  void read_data(std::span<std::byte> dst);

  const ByteSource& source() const noexcept;
  const std::string& url() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wds
