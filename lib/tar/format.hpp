// The tar format as every tar unit of ours reads and writes it: the block size, libarchive's
// set-up (the decompressors, the bridge from its read callback to our chunks, which of its
// warnings are harmless, the locale its pax names need), and a parser of raw ustar/pax/GNU
// headers where libarchive is not used: an indexed read, which checks the headers in front of a
// member it reads by offset, and the streaming reader's plain members.
#pragma once

#include <archive.h>
#include <locale.h>

#include <cerrno>
#include <clocale>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "wds/tar_reader.hpp"

namespace wds {

constexpr std::uint64_t kTarBlock = 512;

// n rounded up to whole blocks. A size near 2^64 (only a crafted header declares one) gives
// 2^64 - 1, no multiple of 512, rather than wrapping round to a small one.
std::uint64_t round_up_block(std::uint64_t n);

// ---------------------------------------------------------------------------------------------
// libarchive

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

// libarchive returns ARCHIVE_WARN for a header it read only in part: a malformed pax record is
// dropped (and the member keeps its ustar name), a bad sparse map ignored. Only a name that has
// no form in the current locale is harmless: the UTF-8 form is used instead.
bool harmless_warning(archive* ar);

// Makes this thread use the C.UTF-8 character type while it lives. libarchive converts member
// names from the process locale to UTF-8 when it writes pax headers; under the "C" locale most
// programs run in, a non-ASCII name cannot be converted and the write fails (or crashes in
// libarchive 3.6 when only the UTF-8 form is set). uselocale() is per thread, so holding this
// around the writer's libarchive calls fixes the conversion without touching the rest of the
// program.
class Utf8Locale {
 public:
  Utf8Locale() {
    static const locale_t utf8 = ::newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
    if (utf8) previous_ = ::uselocale(utf8);
  }
  ~Utf8Locale() {
    if (previous_) ::uselocale(previous_);
  }
  Utf8Locale(const Utf8Locale&) = delete;
  Utf8Locale& operator=(const Utf8Locale&) = delete;

 private:
  locale_t previous_ = static_cast<locale_t>(0);
};

// ---------------------------------------------------------------------------------------------
// Raw headers

// A header the streaming reader parses itself (lib/tar/reader.cpp): one that libarchive would
// read to the same entry, for any header state before it. A 512-byte block whose checksum
// matches the unsigned sum, with the ustar ("ustar\0" "00") or GNU ("ustar  \0") magic, a GNU
// header without sparse map or real size, type '0', '\0' (a regular file) or '5' (a directory,
// of size 0), a name of printable ASCII that (for a file) does not end in '/', a ustar prefix
// that does not end in '/' either, and every numeric field plain octal (leading spaces, digits,
// then NULs or spaces; no base-256), as libarchive's format bid checks them. Anything else is
// nullopt: libarchive reads it.
struct PlainHeader {
  std::string_view prefix;  // the ustar prefix, "" if none: the name is prefix + '/' + name
  std::string_view name;
  bool directory = false;
  std::uint64_t size = 0;
};
std::optional<PlainHeader> parse_plain_header(const std::byte* h);

namespace detail {
// For tests: makes a TarReader that has not read yet leave every header to libarchive, as it
// did before it parsed plain headers itself, so that the two can be compared.
struct TarReaderAccess {
  static void read_every_header_with_libarchive(TarReader& reader);
  // True while the reader parses the headers itself (it has not handed the stream over).
  static bool on_plain_path(const TarReader& reader);
};
}  // namespace detail

// What a shard holds in front of a member's data: its name and size after any pax ('x') or GNU
// long-name ('L', 'K') headers, and where its first header starts.
struct MemberHeader {
  std::string name;
  std::optional<std::uint64_t> size;
  std::uint64_t first_header = 0;
  bool extended = false;  // extension headers were found
};

// `buf` holds the shard's bytes [base, data_offset): the member's header is its last block.
// nullopt when that block is not the checksummed header of a regular file. Walks back over
// extension headers: a block that is a valid header of type x/L/K whose data ends exactly where
// the next header starts. An extension header right in front of the next one that declares
// data, or one with malformed pax records, is a corrupt_data error naming `url` and `member`.
std::optional<MemberHeader> read_member_header(std::span<const std::byte> buf, std::uint64_t base,
                                               std::uint64_t data_offset, const std::string& url,
                                               const std::string& member);

}  // namespace wds
