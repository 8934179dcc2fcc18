// TarReader: the plain members of an uncompressed archive parsed here, everything else by
// libarchive through its read-callback interface.
//
// Most shards are uncompressed tars of ustar (or GNU) headers of regular files with short ASCII
// names. For those, libarchive's per-member work (a byte-at-a-time checksum, each name converted
// to wide characters for its directory check, the entry's bookkeeping) cost more than the rest of
// the reader (bench/README.md, "Object stores, fifth round"), so this reader parses such a header
// itself and copies the data straight from the source's chunk, or has the source lend it
// (read_bytes, ByteSource::lend). At the first header it does not take whole (any other type or
// format, an end or damaged block, a compressed archive) it hands the rest of the stream to
// libarchive, which from then on reads every header and reports every error exactly as it would
// have from the start. A handed-over stream starts mid-archive, so libarchive is first shown a
// synthetic empty member, which the reader consumes unseen.
//
// libarchive pulls chunks through read_callback, which hands it the ByteSource's own buffer, so
// the only copy of a member's bytes is archive_read_data's copy into the caller's buffer. An
// exception thrown by the source cannot cross libarchive's C frames: the callback parks it and
// reports an I/O error, and the reader rethrows the parked error (with the entry named).
#include "wds/tar_reader.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>

#include "lib/tar/format.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds {

struct TarReader::Impl {
  std::unique_ptr<ByteSource> source;
  TarReaderOptions options;
  archive* ar = nullptr;
  // libarchive fills a caller's entry in archive_read_next_header2. Alternating two keeps the
  // previous entry (and its name, for error messages) intact without copying every name.
  archive_entry* entries[2] = {nullptr, nullptr};
  int current = 0;
  enum class State { unopened, plain, archive, finished } state = State::unopened;
  bool plain_allowed = true;  // false: libarchive reads every header (tests compare the two)
  bool plain_start = false;   // the plain path read the first header: no compression
  TarEntry entry;
  bool have_entry = false;
  std::uint64_t data_done = 0;  // bytes of the current entry's data read so far
  bool sparse = false;          // the current entry is a sparse file
  std::exception_ptr source_error;
  std::uint64_t raw_bytes = 0;  // bytes delivered by the source so far
  // The source's first bytes: when a decompressor fails while libarchive is still choosing
  // the format, it drops its filters, and only these tell which compression it was.
  unsigned char magic[6] = {};
  // Where the last entry's data (padded to 512) ends in the uncompressed archive, 0 if unknown.
  std::int64_t last_data_end = 0;

  // The plain path's place in the stream: the source's current chunk, how much of it is
  // consumed, and the archive offset of its first unconsumed byte.
  std::span<const std::byte> chunk;
  std::size_t used = 0;
  std::uint64_t position = 0;
  // A header that straddles chunks, gathered: its first `carried` bytes (the chunk before is
  // gone by the time the rest arrives).
  std::array<std::byte, kTarBlock> carry{};
  std::size_t carried = 0;
  std::uint64_t padding = 0;  // the plain entry's bytes after its data, up to the next header
  // What libarchive is fed before the source's next chunks: the synthetic member (handed over
  // mid-archive), the carried bytes, the rest of the current chunk.
  std::array<std::byte, kTarBlock> synthetic{};
  std::span<const std::byte> feed[3];
  int fed = 3;
  // Added to libarchive's offsets: where the stream it reads starts in the archive.
  std::int64_t archive_base = 0;
  std::optional<std::uint64_t> total;  // source->size(), once known

  Impl(std::unique_ptr<ByteSource> s, TarReaderOptions o) : source(std::move(s)), options(o) {}
  ~Impl() {
    if (ar) archive_read_free(ar);
    for (archive_entry* e : entries) {
      if (e) archive_entry_free(e);
    }
  }

  // The source's next chunk; every read of the source goes through here.
  std::span<const std::byte> pull() {
    std::span<const std::byte> c = source->read();
    for (std::size_t i = 0; i < c.size() && raw_bytes + i < sizeof magic; ++i) {
      magic[raw_bytes + i] = static_cast<unsigned char>(c[i]);
    }
    raw_bytes += c.size();
    return c;
  }

  static la_ssize_t read_callback(archive* ar, void* self, const void** buffer) {
    auto* impl = static_cast<Impl*>(self);
    return read_chunk_for_archive(ar, impl->source_error, buffer, [impl] {
      while (impl->fed < 3) {
        std::span<const std::byte> piece = impl->feed[impl->fed++];
        if (!piece.empty()) return piece;
      }
      return impl->pull();
    });
  }

  std::optional<std::uint64_t> source_size() {
    if (!total) total = source->size();
    return total;
  }

  // Throws the parked source error if there is one (adding `member` and `where`), else a
  // corrupt_data error.
  [[noreturn]] void fail(const std::string& member, std::string cause,
                         const std::string& where = "") {
    state = State::finished;
    have_entry = false;
    if (source_error) {
      std::exception_ptr parked = std::exchange(source_error, nullptr);
      try {
        std::rethrow_exception(parked);
      } catch (const Error& e) {
        // Keep the source's category and cause; add the member being read.
        throw Error(e.code(), e.url().empty() ? source->url() : e.url(),
                    e.member().empty() ? member : e.member(), e.cause() + where);
      }
    }
    throw Error::corrupt_data(source->url(), member, std::move(cause) + where);
  }

  // The compression of the archive ("gzip", ...), or null for none.
  const char* compression() const {
    if (plain_start) return nullptr;  // the plain path read its start: no compression
    if (ar && archive_filter_count(ar) > 1) return archive_filter_name(ar, 0);
    auto starts = [&](std::initializer_list<unsigned char> m) {
      return raw_bytes >= m.size() && std::equal(m.begin(), m.end(), magic);
    };
    if (starts({0x1f, 0x8b})) return "gzip";
    if (starts({'B', 'Z', 'h'})) return "bzip2";
    if (starts({0xfd, '7', 'z', 'X', 'Z', 0x00})) return "xz";
    if (starts({0x28, 0xb5, 0x2f, 0xfd})) return "zstd";
    if (starts({0x04, 0x22, 0x4d, 0x18})) return "lz4";
    return nullptr;
  }
  // Known once a header was read (filters are chosen before the first one).
  bool compressed() const { return ar && archive_filter_count(ar) > 1; }

  // True if libarchive's current error comes from the decompressor rather than the tar format:
  // its messages name the compression ("truncated gzip input", "Lzma library error: ..."), and
  // some of its failures set none (gzip's missing trailer).
  bool decompressor_failed() const {
    if (!compression()) return false;
    const char* msg = archive_error_string(ar);
    if (!msg) return true;
    const std::string lower = lowercase(msg);
    for (const char* word :
         {"gzip", "bzip", "lzma", "lzip", "xz", "zstd", "lz4", "truncated input", "decompress"}) {
      if (lower.find(word) != std::string::npos) return true;
    }
    return false;
  }

  std::string archive_message() const {
    const char* msg = archive_error_string(ar);
    if (decompressor_failed()) {
      return "truncated or corrupt " + std::string(compression()) + " stream" +
             (msg ? " (" + std::string(msg) + ")" : std::string());
    }
    return msg ? msg : "unknown libarchive error";
  }

  // Hands the stream on to libarchive from the plain path's position: the carried bytes and the
  // rest of the chunk first, then the source. At the start of the archive libarchive also
  // recognises compression; mid-archive the archive is known to be plain, and libarchive (which
  // takes the first header it sees for an archive's start) first reads a synthetic empty member.
  void open_archive() {
    const std::string previous = have_entry ? entry.name : std::string();
    const bool mid_archive = position > 0;
    ar = archive_read_new();
    entries[0] = archive_entry_new();
    entries[1] = archive_entry_new();
    if (!ar || !entries[0] || !entries[1]) {
      throw Error::unavailable(source->url(), "", "out of memory");
    }
    if (!mid_archive) enable_builtin_filters(ar);  // compression is recognised by content
    archive_read_support_format_tar(ar);
    state = State::archive;
    if (mid_archive) write_synthetic_header(synthetic);
    feed[0] = mid_archive ? std::span<const std::byte>(synthetic) : std::span<const std::byte>();
    feed[1] = std::span<const std::byte>(carry.data(), carried);
    feed[2] = chunk.subspan(used);
    fed = 0;
    archive_base = mid_archive ? static_cast<std::int64_t>(position - kTarBlock) : 0;
    int rc = archive_read_open2(ar, this, nullptr, read_callback, nullptr, nullptr);
    if (rc == ARCHIVE_OK && mid_archive) rc = archive_read_next_header2(ar, entries[current]);
    if (rc != ARCHIVE_OK) fail_header(rc, previous);
  }

  // An empty regular file's ustar header, its checksum written as tar writes it.
  static void write_synthetic_header(std::array<std::byte, kTarBlock>& h) {
    char* p = reinterpret_cast<char*>(h.data());
    std::memset(p, 0, kTarBlock);
    std::memcpy(p, "wds-handover", 12);
    std::memcpy(p + 100, "0000644", 8);  // mode, uid, gid, size, mtime (with their NULs)
    std::memcpy(p + 108, "0000000", 8);
    std::memcpy(p + 116, "0000000", 8);
    std::memcpy(p + 124, "00000000000", 12);
    std::memcpy(p + 136, "00000000000", 12);
    std::memset(p + 148, ' ', 8);
    p[156] = '0';
    std::memcpy(p + 257,
                "ustar\0"
                "00",
                8);
    unsigned sum = 0;
    for (std::size_t i = 0; i < kTarBlock; ++i) sum += static_cast<unsigned char>(p[i]);
    for (int i = 5; i >= 0; --i, sum >>= 3) p[148 + i] = static_cast<char>('0' + (sum & 7));
    p[154] = '\0';
  }

  // ---- the plain path

  // The next header's 512 bytes: in place when the chunk holds them, else gathered into
  // `carry`; nullptr if the stream ends first (what there was stays in `carry`) or the first
  // chunk is shorter than a header.
  const std::byte* gather_header() {
    if (carried == 0 && chunk.size() - used >= kTarBlock) return chunk.data() + used;
    if (raw_bytes == 0) {
      // The first header is taken only from the first chunk: else libarchive reads the archive
      // from its start in the source's own chunks, and counts them as it would have alone.
      chunk = pull();
      return chunk.size() >= kTarBlock ? chunk.data() : nullptr;
    }
    while (carried < kTarBlock) {
      if (used == chunk.size()) {
        chunk = pull();
        used = 0;
        if (chunk.empty()) return nullptr;
      }
      const std::size_t n = std::min(kTarBlock - carried, chunk.size() - used);
      std::memcpy(carry.data() + carried, chunk.data() + used, n);
      carried += n;
      used += n;
    }
    return carry.data();
  }

  // Moves past what is left of the current entry: its unread data and its padding.
  void skip_rest(std::string_view previous) {
    const std::uint64_t needed = entry.size - data_done + padding;
    std::uint64_t left = needed;
    while (left > 0) {
      if (used == chunk.size()) {
        try {
          chunk = pull();
        } catch (...) {
          source_error = std::current_exception();
          fail("", "", " (reading the header" + where_after(previous) + ")");
        }
        used = 0;
        if (chunk.empty()) {
          // As libarchive says it when it skips.
          fail("",
               "bad tar header after member '" + std::string(previous) +
                   "': Truncated input file (needed " + std::to_string(needed) + " bytes, only " +
                   std::to_string(needed - left) + " available)",
               " at byte " + std::to_string(position) + " of the archive");
        }
      }
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size() - used));
      used += n;
      position += n;
      left -= n;
    }
    data_done = entry.size;
    padding = 0;
  }

  // The next entry if its header is plain (format.hpp, parse_plain_header); nullptr to hand the
  // stream over to libarchive at that header.
  const TarEntry* next_plain() {
    if (have_entry) skip_rest(entry.name);
    const std::byte* h = nullptr;
    try {
      h = gather_header();
    } catch (...) {
      source_error = std::current_exception();
      fail("", "", " (reading the header" + where_after(have_entry ? entry.name : "") + ")");
    }
    if (!h) return nullptr;
    const std::optional<PlainHeader> plain = parse_plain_header(h);
    if (!plain) return nullptr;
    if (position == 0) plain_start = true;
    if (plain->prefix.empty()) {
      entry.name.assign(plain->name);
    } else {
      entry.name.assign(plain->prefix).append(1, '/').append(plain->name);
    }
    entry.offset = position;
    if (carried > 0) {
      carried = 0;
    } else {
      used += kTarBlock;
    }
    position += kTarBlock;
    entry.type = plain->directory ? EntryType::directory : EntryType::file;
    entry.size = plain->size;
    sparse = false;
    verify_size(static_cast<std::int64_t>(position));
    last_data_end = static_cast<std::int64_t>(position + round_up_block(entry.size));
    padding = round_up_block(entry.size) - entry.size;
    have_entry = true;
    data_done = 0;
    return &entry;
  }

  void read_plain(std::span<std::byte> dst) {
    std::size_t done = 0;
    while (done < dst.size()) {
      if (used == chunk.size()) {
        try {
          chunk = pull();
        } catch (...) {
          source_error = std::current_exception();
          fail(entry.name, "");
        }
        used = 0;
        if (chunk.empty()) {
          // As libarchive says it, counting the bytes of the calls before that succeeded.
          fail(entry.name, "Truncated tar archive (read " + std::to_string(data_done) + " of " +
                               std::to_string(entry.size) + " bytes of the member)");
        }
      }
      const std::size_t n = std::min(dst.size() - done, chunk.size() - used);
      std::memcpy(dst.data() + done, chunk.data() + used, n);
      used += n;
      done += n;
      position += n;
    }
    data_done += done;
  }

  static std::string where_after(std::string_view previous) {
    return previous.empty() ? std::string(" at the start of the archive")
                            : " after member '" + std::string(previous) + "'";
  }

  // Sets entry.size_verified, and refuses a size the source cannot hold; the entry's data
  // starts at `data_at` of the archive (-1 if unknown).
  void verify_size(std::int64_t data_at) {
    entry.size_verified = false;
    if (!sparse && !compressed() && entry.size > 0) {
      // Uncompressed, the data follows the header in the source: a size the source cannot
      // hold is a damaged or hostile header, refused before anyone allocates it. (A source
      // opened at an offset holds less than size() - data_at: a check that may pass too much,
      // never too little.)
      const std::optional<std::uint64_t> size = source_size();
      if (size && data_at >= 0) {
        const std::uint64_t left = *size > static_cast<std::uint64_t>(data_at)
                                       ? *size - static_cast<std::uint64_t>(data_at)
                                       : 0;
        if (entry.size > left) {
          fail(std::string(entry.name), "member declares " + std::to_string(entry.size) +
                                            " bytes, but the source holds only " +
                                            std::to_string(left) +
                                            " more: a damaged header or a truncated archive");
        }
        entry.size_verified = entry.size <= options.max_member_size;
      }
    } else if (entry.size == 0) {
      entry.size_verified = true;
    }
  }

  // Classifies a failure to read a header (or to start reading): the source's own error, an
  // empty input, data that is no tar at all, or a damaged archive.
  [[noreturn]] void fail_header(int rc, std::string_view previous) {
    std::string where = where_after(previous);
    if (source_error) fail("", "", " (reading the header" + where + ")");
    if (raw_bytes == 0) fail("", "empty file (0 bytes), not a tar archive");
    std::string msg = archive_message();
    if (msg.find("Unrecognized archive format") != std::string::npos) {
      fail("", "not a tar archive (no tar header at the start, after decompression)");
    }
    if (decompressor_failed()) {
      // The decompressor runs ahead of the tar reader, so its errors surface at a header, which
      // is not where the damage is: say how far the compressed input went instead.
      fail("", msg + " after " + std::to_string(raw_bytes) + " compressed bytes (" +
                   (previous.empty() ? std::string("before the first member")
                                     : "after member '" + std::string(previous) + "'") +
                   "; the decompressor works ahead of the tar reader)");
    }
    if (rc == ARCHIVE_RETRY) msg += " (a header's checksum does not match)";
    std::int64_t pos = archive_filter_bytes(ar, 0);
    fail("", "bad tar header" + where + ": " + msg,
         pos >= 0 ? " at byte " + std::to_string(pos + archive_base) + " of the archive" : "");
  }

  const TarEntry* next() {
    if (state == State::finished) return nullptr;
    if (state == State::unopened) state = plain_allowed ? State::plain : State::archive;
    if (state == State::plain) {
      if (const TarEntry* e = next_plain()) return e;
      open_archive();
    } else if (!ar) {
      open_archive();
    }
    return next_archive();
  }

  const TarEntry* next_archive() {
    // Error messages name the previous entry: entry.name until it is replaced below.
    const std::string_view previous = have_entry ? entry.name : std::string_view();
    have_entry = false;
    current ^= 1;
    archive_entry* e = entries[current];
    int rc = archive_read_next_header2(ar, e);
    if (rc == ARCHIVE_EOF) {
      if (source_error) fail("", "");
      // libarchive consumes the end-of-archive blocks when they are there, so the position at
      // EOF is past the last member's data only if the archive was closed properly.
      if (options.require_end_marker && archive_filter_bytes(ar, 0) + archive_base <
                                            last_data_end + static_cast<std::int64_t>(kTarBlock)) {
        fail("", "the archive ends without its end-of-archive blocks" +
                     (previous.empty() ? std::string()
                                       : " after member '" + std::string(previous) + "'") +
                     ": truncated?");
      }
      // Read the source to its end (normally just the record padding), so that what only shows
      // there surfaces: a command's exit status, a transfer's missing bytes. But not forever: a
      // source that never ends (/dev/zero, `yes |`, an endless body) ends after
      // kMaxTrailingBytes, and what follows the end-of-archive blocks is no part of the archive.
      try {
        std::uint64_t trailing = 0;
        while (trailing < kMaxTrailingBytes) {
          std::span<const std::byte> rest = pull();
          if (rest.empty()) break;
          trailing += rest.size();
        }
      } catch (...) {
        source_error = std::current_exception();
        fail("", "", " (after the end of the archive)");
      }
      state = State::finished;
      return nullptr;
    }
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) fail_header(rc, previous);  // RETRY > WARN
    if (rc == ARCHIVE_WARN && !harmless_warning(ar)) {
      const char* bad = archive_entry_pathname(e);
      if (!bad) bad = archive_entry_pathname_utf8(e);
      fail(bad ? bad : "",
           "malformed tar header: " + archive_message() +
               (previous.empty() ? std::string(" (the first member)")
                                 : " (the member after '" + std::string(previous) + "')"));
    }
    // A ustar name is raw bytes, which the plain form returns unchanged. A non-ASCII pax name
    // (UTF-8) has no plain form under the "C" locale; then the UTF-8 form is the name, so the
    // reader needs no Utf8Locale (which would make libarchive's per-name conversion to wide
    // characters, for its directory check, a little dearer).
    const char* name = archive_entry_pathname(e);
    if (!name) name = archive_entry_pathname_utf8(e);
    entry.name = name ? std::string_view(name) : std::string_view();
    entry.offset = static_cast<std::uint64_t>(archive_read_header_position(ar) + archive_base);
    switch (archive_entry_filetype(e)) {
      case AE_IFREG:
        entry.type = archive_entry_hardlink(e) ? EntryType::hardlink : EntryType::file;
        break;
      case AE_IFDIR:
        entry.type = EntryType::directory;
        break;
      case AE_IFLNK:
        entry.type = EntryType::symlink;
        break;
      default:
        entry.type = archive_entry_hardlink(e) ? EntryType::hardlink : EntryType::other;
    }
    entry.size = entry.type == EntryType::file && archive_entry_size_is_set(e)
                     ? static_cast<std::uint64_t>(archive_entry_size(e))
                     : 0;
    // Sparse members store fewer bytes than their size says; their end is not known here.
    sparse = archive_entry_sparse_count(e) > 0;
    const std::int64_t at = archive_filter_bytes(ar, 0);
    const std::int64_t data_at = at >= 0 ? at + archive_base : -1;
    verify_size(data_at);
    // Sizes are below 2^63 (libarchive refuses larger ones), so this cannot overflow.
    last_data_end = sparse ? 0 : data_at + static_cast<std::int64_t>(round_up_block(entry.size));
    have_entry = true;
    data_done = 0;
    return &entry;
  }

  Bytes read_bytes(std::size_t n) {
    check_read(n);
    // Smaller members are copied: not worth a chunk kept alive for them.
    constexpr std::size_t kMinLend = 4096;
    if (state == State::plain && n >= kMinLend && chunk.size() - used >= n) {
      Bytes out = source->lend(chunk.subspan(used, n));
      used += n;
      position += n;
      data_done += n;
      return out;
    }
    Bytes out(n);
    read_checked(out.span());
    return out;
  }

  void read_data(std::span<std::byte> dst) {
    check_read(dst.size());
    read_checked(dst);
  }

  // What read_data and read_bytes refuse before reading: no entry, more than its data left, a
  // member above max_member_size (at its first read).
  void check_read(std::size_t n) {
    if (!have_entry) {
      throw Error::invalid_argument(source->url(), "", "read_data called without a current entry");
    }
    if (n > entry.size - data_done) {
      throw Error::invalid_argument(source->url(), std::string(entry.name),
                                    "read_data asks for " + std::to_string(n) +
                                        " bytes, the member has " +
                                        std::to_string(entry.size - data_done) + " of its " +
                                        std::to_string(entry.size) + " left");
    }
    if (data_done == 0 && entry.size > options.max_member_size) {
      fail(std::string(entry.name),
           "member declares " + std::to_string(entry.size) + " bytes, above the limit " +
               std::to_string(options.max_member_size) + " (TarReaderOptions::max_member_size)");
    }
  }

  void read_checked(std::span<std::byte> dst) {
    if (state == State::plain) return read_plain(dst);
    std::size_t done = 0;
    while (done < dst.size()) {
      la_ssize_t n = archive_read_data(ar, dst.data() + done, dst.size() - done);
      if (n < 0) {
        fail(std::string(entry.name), archive_message() + " (read " +
                                          std::to_string(data_done + done) + " of " +
                                          std::to_string(entry.size) + " bytes of the member)");
      }
      if (n == 0 && sparse) {
        // libarchive fills the holes between a sparse member's data blocks with zeros, but
        // not one at its end (GNU tar's `truncate -s 1M f`): that hole is zeros too.
        std::memset(dst.data() + done, 0, dst.size() - done);
        done = dst.size();
        break;
      }
      if (n == 0) {
        fail(std::string(entry.name), "member data ended after " +
                                          std::to_string(data_done + done) + " of " +
                                          std::to_string(entry.size) + " bytes");
      }
      done += static_cast<std::size_t>(n);
    }
    data_done += done;
  }
};

void detail::TarReaderAccess::read_every_header_with_libarchive(TarReader& reader) {
  reader.impl_->plain_allowed = false;
}

bool detail::TarReaderAccess::on_plain_path(const TarReader& reader) {
  return reader.impl_->state == TarReader::Impl::State::plain;
}

TarReader::TarReader(std::unique_ptr<ByteSource> source, TarReaderOptions options) {
  if (!source) throw Error::invalid_argument("TarReader: null source");
  impl_ = std::make_unique<Impl>(std::move(source), options);
}
TarReader::~TarReader() = default;

const TarEntry* TarReader::next() {
  return impl_->next();
}
void TarReader::read_data(std::span<std::byte> dst) {
  impl_->read_data(dst);
}
Bytes TarReader::read_bytes(std::size_t n) {
  return impl_->read_bytes(n);
}
const ByteSource& TarReader::source() const noexcept {
  return *impl_->source;
}
const std::string& TarReader::url() const noexcept {
  return impl_->source->url();
}

}  // namespace wds
