// wds/tar_reader.hpp: TarReader, a streaming reader of tar archives (one entry at a time).
//
//   wds::TarReader tar(wds::open_url("shard.tar"));
//   while (const wds::TarEntry* e = tar.next()) {
//     if (e->type != wds::EntryType::file) continue;   // unread data is skipped
//     wds::Bytes data(e->size);                         // see TarEntry::size_verified
//     tar.read_data(data.span());
//   }
//
// Reads ustar, pax and GNU tar (long names, sparse files), plain or compressed with gzip, bzip2,
// xz/lzma or zstd, recognised by content, not by name. Memory use does not depend on the
// archive's size, and read_data() copies a member's bytes once, from the source's chunk into the
// caller's buffer. In an uncompressed archive the plain headers (ustar or GNU, regular files and
// directories, ASCII names) are parsed here; from the first other header on, libarchive reads
// the stream through its callback interface.
//
// Errors: next() and read_data() throw wds::Error naming the source URL and the entry:
// corrupt_data for a damaged or truncated archive (including "empty file" for 0 bytes and
// "not a tar archive" for other data), or the error the ByteSource threw. After an error the
// reader is finished: next() returns nullptr. Hostile headers are refused, not trusted: a size
// the source cannot hold (next(), when the source's size is known and the archive is not
// compressed), a size above TarReaderOptions::max_member_size (read_data), and a malformed pax
// extended header (which libarchive would only warn about, dropping e.g. its path record, so
// that the member would get its ustar name where Python's tarfile uses the pax one).
//
// After the end-of-archive blocks the reader reads on to the source's end, so that what only
// shows there surfaces (a command's exit status, a transfer's missing bytes), but at most
// kMaxTrailingBytes: a source that never ends (/dev/zero, an endless pipe or HTTP body) ends
// the archive there.
//
// A compressed archive whose decompressor fails (a .tar.gz cut short, or missing only its
// 8-byte trailer) is a corrupt_data "truncated or corrupt gzip stream" error. libarchive's
// decompressors work ahead of the tar reader (64 KiB for gzip) and drop that window's output
// on such an error, so the members in the last window are lost even when their bytes were
// complete.
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

#include "wds/bytes.hpp"
#include "wds/source.hpp"

namespace wds {

enum class EntryType { file, directory, symlink, hardlink, other };

struct TarEntry {
  std::string name;        // the member's path as stored (pax/GNU long names resolved)
  std::uint64_t size = 0;  // bytes of data (0 for non-files)
  EntryType type = EntryType::other;
  std::uint64_t offset = 0;  // offset of the entry's first header in the uncompressed archive
  // True when `size` bytes may be allocated before reading them: the archive is not compressed,
  // the source is known to hold that many more bytes and size is within max_member_size.
  // Otherwise a header may declare any size up to 2^63 whatever the bytes behind it: read the
  // data in pieces (read_data accepts consecutive ones), growing the buffer as they arrive.
  bool size_verified = false;
};

struct TarReaderOptions {
  bool require_end_marker = true;
  // The largest member whose data read_data reads; a larger one is a corrupt_data error
  // ("member X declares N bytes, above the limit M"). WebDataset members are sample fields
  // that are read whole into memory, so a size beyond a few GiB is far more likely a damaged
  // or hostile header than a real field; 4 GiB still holds any image, audio clip or short
  // video. Raise it for larger fields; std::numeric_limits<std::uint64_t>::max() removes it.
  std::uint64_t max_member_size = std::uint64_t{4} << 30;
};

// Bytes read after the end-of-archive blocks before the reader stops waiting for the source's
// end: 1 MiB, the record size of `tar -b 2048`; GNU tar pads to 10 KiB records by default.
inline constexpr std::uint64_t kMaxTrailingBytes = std::uint64_t{1} << 20;

namespace detail {
struct TarReaderAccess;  // lib/tar/format.hpp: tests read a tar with libarchive alone
}  // namespace detail

class TarReader {
 public:
  explicit TarReader(std::unique_ptr<ByteSource> source, TarReaderOptions options = {});
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  // Advances to the next entry; nullptr at the end of the archive. The entry, and the bytes its
  // name views, stay valid until the next call.
  const TarEntry* next();
  // Reads the current entry's next dst.size() bytes into `dst`: all of its data at once, or
  // in consecutive pieces that add up to at most entry.size. Data not read is skipped by
  // next(). A member above TarReaderOptions::max_member_size is refused at the first call.
  void read_data(std::span<std::byte> dst);
  // The same for the next n bytes, in Bytes of their own: lent by the source without a copy
  // when they lie in its current chunk (ByteSource::lend), else read into new Bytes.
  Bytes read_bytes(std::size_t n);

  const ByteSource& source() const noexcept;
  const std::string& url() const noexcept;

 private:
  friend struct detail::TarReaderAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wds
