// Shard indexes in DALI's wds2idx format: building one by streaming the shard through
// libarchive, reading and writing the text, and reading one sample back by bounded reads that
// also check the tar headers in front of each member (so a rewritten shard is noticed).
#include "wds/index.hpp"

#include "lib/tar/archive_filters.hpp"
#include "lib/text.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <optional>
#include <utility>

#include "lib/storage/file.hpp"
#include "wds/error.hpp"
#include "wds/tar_samples.hpp"

namespace wds {
namespace {

constexpr std::uint64_t kBlock = 512;

// n rounded up to whole blocks. A size near 2^64 (only a crafted header declares one) gives
// 2^64 - 1, no multiple of 512, rather than wrapping round to a small one.
std::uint64_t round_up_block(std::uint64_t n) {
  if (n > std::numeric_limits<std::uint64_t>::max() - (kBlock - 1)) {
    return std::numeric_limits<std::uint64_t>::max();
  }
  return (n + kBlock - 1) / kBlock * kBlock;
}

// libarchive returns ARCHIVE_WARN for a header it read only in part (a malformed pax record is
// dropped, so the member keeps its ustar name); only a name without a form in the current
// locale is harmless, its UTF-8 form being used instead.
bool harmless_warning(archive* ar) {
  const char* msg = archive_error_string(ar);
  return msg && std::string_view(msg).find("can't be converted") != std::string_view::npos;
}

bool is_local_url(const std::string& url) {
  if (url == "-") return false;
  std::string scheme = url_scheme(url);
  return scheme.empty() || scheme == "file";
}

bool has_space(std::string_view s) {
  return s.find_first_of(" \t\n\r\v\f") != std::string_view::npos;
}

// ---------------------------------------------------------------------------------------------
// Building: libarchive over either a local file descriptor (with a skip callback, so member data
// is seeked over rather than read) or any ByteSource.

struct IndexInput {
  std::string url;
  std::unique_ptr<ByteSource> source;  // when not a local file
  int fd = -1;                         // a local file
  std::uint64_t file_size = 0;
  std::uint64_t pos = 0;
  Bytes buffer;
  std::uint64_t raw_bytes = 0;
  std::exception_ptr error;  // parked: exceptions cannot cross libarchive's C frames

  ~IndexInput() {
    if (fd >= 0) ::close(fd);
  }

  static la_ssize_t read_cb(archive* ar, void* self, const void** out) {
    auto* in = static_cast<IndexInput*>(self);
    return read_chunk_for_archive(ar, in->error, out, [in] {
      std::span<const std::byte> chunk;
      if (in->source) {
        chunk = in->source->read();
      } else {
        for (;;) {
          ssize_t n =
              ::pread(in->fd, in->buffer.data(), in->buffer.size(), static_cast<off_t>(in->pos));
          if (n >= 0) {
            in->pos += static_cast<std::uint64_t>(n);
            chunk = in->buffer.span().first(static_cast<std::size_t>(n));
            break;
          }
          if (errno != EINTR) throw_errno(in->url, "read", errno);
        }
      }
      in->raw_bytes += chunk.size();
      return chunk;
    });
  }

  // Skips at most to the end of the file, so that a truncated shard shows as truncated.
  static la_int64_t skip_cb(archive*, void* self, la_int64_t request) {
    auto* in = static_cast<IndexInput*>(self);
    std::uint64_t left = in->file_size > in->pos ? in->file_size - in->pos : 0;
    auto n = std::min<std::uint64_t>(static_cast<std::uint64_t>(request), left);
    in->pos += n;
    return static_cast<la_int64_t>(n);
  }
};

struct ArchiveHandle {
  archive* ar = archive_read_new();
  ~ArchiveHandle() {
    if (ar) archive_read_free(ar);
  }
};

[[noreturn]] void fail_build(IndexInput& in, archive* ar, const std::string& member,
                             const std::string& what) {
  if (in.error) {
    std::exception_ptr parked = std::exchange(in.error, nullptr);
    try {
      std::rethrow_exception(parked);
    } catch (const Error& e) {
      throw Error(e.code(), e.url().empty() ? in.url : e.url(),
                  e.member().empty() ? member : e.member(), e.cause() + " (" + what + ")");
    }
  }
  if (in.raw_bytes == 0) {
    throw Error(ErrorCode::corrupt_data, in.url, member, "empty file (0 bytes), not a tar archive");
  }
  const char* msg = archive_error_string(ar);
  std::string cause = msg ? msg : "unknown libarchive error";
  if (cause.find("Unrecognized archive format") != std::string::npos) {
    cause = "not a tar archive";
  }
  throw Error(ErrorCode::corrupt_data, in.url, member, what + ": " + cause);
}

// ---------------------------------------------------------------------------------------------
// Tar headers, for the staleness check of read_indexed_sample.

struct TarHeader {
  char type = 0;
  std::string name;  // ustar prefix + '/' + name
  std::optional<std::uint64_t> size;
};

std::string_view field(const std::byte* h, std::size_t off, std::size_t len) {
  const char* p = reinterpret_cast<const char*>(h) + off;
  std::size_t n = 0;
  while (n < len && p[n] != '\0') ++n;
  return {p, n};
}

std::optional<std::uint64_t> numeric_field(const std::byte* h, std::size_t off, std::size_t len) {
  const auto* p = reinterpret_cast<const unsigned char*>(h) + off;
  if (p[0] & 0x80) {  // GNU base-256
    std::uint64_t v = p[0] & 0x3f;
    for (std::size_t i = 1; i < len; ++i) {
      if (v > (std::numeric_limits<std::uint64_t>::max() >> 8)) return std::nullopt;
      v = (v << 8) | p[i];
    }
    return v;
  }
  std::size_t i = 0;
  while (i < len && (p[i] == ' ' || p[i] == '\0')) ++i;
  std::uint64_t v = 0;
  bool any = false;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i) {
    v = v * 8 + (p[i] - '0');
    any = true;
  }
  if (!any) return std::nullopt;
  return v;
}

// A 512-byte block that is a tar header with a valid checksum.
std::optional<TarHeader> parse_header(const std::byte* h) {
  std::optional<std::uint64_t> stored = numeric_field(h, 148, 8);
  if (!stored) return std::nullopt;
  std::uint64_t unsigned_sum = 0;
  std::int64_t signed_sum = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    auto b = static_cast<unsigned char>(h[i]);
    if (i >= 148 && i < 156) b = ' ';
    unsigned_sum += b;
    signed_sum += static_cast<signed char>(b);
  }
  if (*stored != unsigned_sum && static_cast<std::int64_t>(*stored) != signed_sum) {
    return std::nullopt;
  }
  TarHeader out;
  out.type = static_cast<char>(h[156]);
  out.size = numeric_field(h, 124, 12);
  std::string_view name = field(h, 0, 100);
  if (field(h, 257, 5) == "ustar") {
    std::string_view prefix = field(h, 345, 155);
    if (!prefix.empty()) {
      out.name = std::string(prefix) + "/" + std::string(name);
      return out;
    }
  }
  out.name = name;
  return out;
}

// The pax extended header records that matter here. False if the records are malformed (as
// libarchive, which the streaming reader uses, finds them).
bool parse_pax(std::string_view data, std::optional<std::string>& path,
               std::optional<std::uint64_t>& size) {
  while (!data.empty()) {
    std::size_t space = data.find(' ');
    if (space == std::string_view::npos) return false;
    std::size_t len = 0;
    auto [p, ec] = std::from_chars(data.data(), data.data() + space, len);
    if (ec != std::errc() || p != data.data() + space || len <= space + 1 || len > data.size() ||
        data[len - 1] != '\n') {
      return false;
    }
    std::string_view record = data.substr(space + 1, len - space - 2);  // without the '\n'
    data.remove_prefix(len);
    std::size_t eq = record.find('=');
    if (eq == std::string_view::npos) return false;
    std::string_view key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") {
      path = std::string(value);
    } else if (key == "size") {
      std::uint64_t v = 0;
      auto [q, e2] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (e2 == std::errc() && q == value.data() + value.size()) size = v;
    }
  }
  return true;
}

// What the shard holds in front of a member's data: its name and size after any pax ('x') or GNU
// long-name ('L', 'K') headers, and where its first header starts.
struct MemberHeader {
  std::string name;
  std::optional<std::uint64_t> size;
  std::uint64_t first_header = 0;
  bool extended = false;  // extension headers were found
};

// `buf` holds the bytes [base, data_offset): the member's header is its last block. Walks back
// over extension headers: a block that is a valid header of type x/L/K whose data ends exactly
// where the next header starts. An extension header right in front of the next one that
// declares data, or one with malformed pax records, is a corrupt_data error naming `url` and
// `member`.
std::optional<MemberHeader> read_member_header(std::span<const std::byte> buf, std::uint64_t base,
                                               std::uint64_t data_offset, const std::string& url,
                                               const std::string& member) {
  const std::size_t header_at = buf.size() - kBlock;
  std::optional<TarHeader> h = parse_header(buf.data() + header_at);
  if (!h) return std::nullopt;
  if (h->type != '0' && h->type != '\0' && h->type != '7') return std::nullopt;
  MemberHeader out;
  out.name = h->name;
  out.size = h->size;
  out.first_header = data_offset - kBlock;
  std::optional<std::string> pax_path, gnu_path;
  std::optional<std::uint64_t> pax_size;
  std::size_t pos = header_at;
  for (bool found = true; found;) {
    found = false;
    for (std::size_t k = 1; k * kBlock <= pos; ++k) {
      const std::size_t at = pos - k * kBlock;
      std::optional<TarHeader> x = parse_header(buf.data() + at);
      if (!x || (x->type != 'x' && x->type != 'L' && x->type != 'K') || !x->size) continue;
      // Its data must end where the next header starts, inside the buffer: compared before any
      // arithmetic on the size, which a crafted header can set to anything up to 2^64 - 1.
      const std::uint64_t room = (k - 1) * kBlock;
      if (*x->size > room && k == 1) {
        throw Error(ErrorCode::corrupt_data, url, member,
                    "the extension header at byte " + std::to_string(base + at) + " declares " +
                        std::to_string(*x->size) +
                        " bytes of data, but the next header follows it directly: a damaged or "
                        "hostile header");
      }
      if (*x->size > room || round_up_block(*x->size) != room) continue;
      std::string_view data(reinterpret_cast<const char*>(buf.data() + at + kBlock),
                            static_cast<std::size_t>(*x->size));
      if (x->type == 'x') {
        if (!parse_pax(data, pax_path, pax_size)) {
          throw Error(ErrorCode::corrupt_data, url, member,
                      "malformed pax extended header at byte " + std::to_string(base + at));
        }
      } else if (x->type == 'L' && !gnu_path) {
        gnu_path = std::string(data.substr(0, data.find('\0')));
      }
      pos = at;
      found = true;
      out.extended = true;
      break;
    }
  }
  out.first_header = base + pos;
  if (pax_path) {
    out.name = *pax_path;
  } else if (gnu_path) {
    out.name = *gnu_path;
  }
  if (pax_size) out.size = pax_size;
  return out;
}

[[noreturn]] void stale(const ShardInfo& shard, const std::string& member, const std::string& why) {
  throw Error(ErrorCode::corrupt_data, shard.url, member,
              "index is stale: " + why + " (the shard changed since its index was built?)");
}

// Bytes of extension headers read in front of a member's header: enough for a pax header holding
// the path and a few other records.
std::uint64_t extension_window(const IndexMember& m) {
  return kBlock + round_up_block(std::max<std::uint64_t>(m.name.size(), 256) + 512);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

ShardIndex build_index(const std::string& url, const OpenOptions& options) {
  IndexInput in;
  in.url = url;
  bool seekable = false;
  if (is_local_url(url)) {
    std::string path = file_url_to_path(url);
    in.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (in.fd < 0) throw_errno(url, "open", errno);
    struct stat st {};
    if (::fstat(in.fd, &st) != 0) throw_errno(url, "stat", errno);
    if (S_ISDIR(st.st_mode)) {
      throw Error(ErrorCode::invalid_argument, url, "", "is a directory, not a shard");
    }
    seekable = S_ISREG(st.st_mode);
    in.file_size = static_cast<std::uint64_t>(st.st_size);
    in.buffer = Bytes(std::max<std::size_t>(options.buffer_size, 4096));
  } else {
    OpenOptions whole = options;
    whole.offset = 0;
    whole.length.reset();
    in.source = open_url(url, whole);
  }

  ArchiveHandle h;
  archive* ar = h.ar;
  if (!ar) throw Error(ErrorCode::unavailable, url, "", "out of memory");
  // The decompressors are enabled only to recognise a compressed shard and refuse it.
  enable_builtin_filters(ar);
  archive_read_support_format_tar(ar);
  archive_read_set_callback_data(ar, &in);
  archive_read_set_read_callback(ar, IndexInput::read_cb);
  if (seekable) archive_read_set_skip_callback(ar, IndexInput::skip_cb);
  if (archive_read_open1(ar) != ARCHIVE_OK) fail_build(in, ar, "", "opening the archive");
  if (archive_filter_count(ar) > 1 || archive_filter_code(ar, 0) != ARCHIVE_FILTER_NONE) {
    const char* filter = archive_filter_name(ar, 0);
    throw Error(ErrorCode::invalid_argument, url, "",
                std::string("the shard is compressed (") + (filter ? filter : "?") +
                    "): indexes need uncompressed shards, as DALI's do");
  }

  ShardIndex index;
  std::string last_name;
  std::int64_t last_data_end = 0;
  for (;;) {
    archive_entry* e = nullptr;
    int rc = archive_read_next_header(ar, &e);
    if (rc == ARCHIVE_EOF) {
      if (in.error) fail_build(in, ar, "", "reading the archive");
      if (archive_filter_bytes(ar, 0) < last_data_end + static_cast<std::int64_t>(kBlock)) {
        throw Error(ErrorCode::corrupt_data, url, last_name,
                    "the archive ends without its end-of-archive blocks: truncated?");
      }
      break;
    }
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
      fail_build(in, ar, "",
                 last_name.empty() ? "reading the first header"
                                   : "reading the header after member '" + last_name + "'");
    }
    const char* cname = archive_entry_pathname(e);
    if (!cname) cname = archive_entry_pathname_utf8(e);
    std::string name = cname ? cname : "";
    if (rc == ARCHIVE_WARN && !harmless_warning(ar)) {
      fail_build(in, ar, name, "malformed tar header");
    }
    last_name = name;
    const std::int64_t data_at = archive_filter_bytes(ar, 0);
    const bool file = archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e);
    const std::uint64_t size = file && archive_entry_size_is_set(e)
                                   ? static_cast<std::uint64_t>(archive_entry_size(e))
                                   : 0;
    // A size the shard cannot hold is a damaged or hostile header (libarchive would only notice
    // when skipping); checked before the arithmetic below, which it could overflow.
    const std::optional<std::uint64_t> total = seekable
                                                   ? std::optional<std::uint64_t>(in.file_size)
                                                   : (in.source ? in.source->size() : std::nullopt);
    if (total && data_at >= 0 && size > *total - std::min(*total, std::uint64_t(data_at))) {
      throw Error(ErrorCode::corrupt_data, url, name,
                  "member declares " + std::to_string(size) + " bytes, but the shard holds only " +
                      std::to_string(*total - std::min(*total, std::uint64_t(data_at))) +
                      " more: a damaged header or a truncated shard");
    }
    // libarchive refuses sizes of 2^63 and more, so this cannot overflow.
    last_data_end = data_at + static_cast<std::int64_t>(round_up_block(size));
    // Skipped members do not end a sample: WebDataset filters them out before grouping.
    if (!file || is_meta_member(name)) continue;
    std::optional<KeyExt> parts = split_member_name(name);
    if (!parts) continue;
    if (archive_entry_sparse_count(e) > 0) {
      throw Error(ErrorCode::invalid_argument, url, name,
                  "a sparse member cannot be indexed (its data is not stored contiguously)");
    }
    if (data_at < 0 || static_cast<std::uint64_t>(data_at) % kBlock != 0) {
      throw Error(ErrorCode::corrupt_data, url, name,
                  "member data at byte " + std::to_string(data_at) + ", not a multiple of 512");
    }
    if (index.samples.empty() || index.samples.back().key != parts->key) {
      index.samples.push_back(IndexedSample{std::string(parts->key), {}});
    }
    index.samples.back().members.push_back(IndexMember{
        std::string(parts->ext), static_cast<std::uint64_t>(data_at), size, std::move(name)});
  }
  return index;
}

std::string format_index(const ShardIndex& index) {
  std::string out = "v1.2 " + std::to_string(index.samples.size()) + "\n";
  for (const IndexedSample& s : index.samples) {
    if (s.members.empty()) {
      throw Error(ErrorCode::invalid_argument, "", s.key,
                  "an index entry without members cannot be written");
    }
    bool first = true;
    for (const IndexMember& m : s.members) {
      if (m.ext.empty() || has_space(m.ext) || m.name.empty() || has_space(m.name)) {
        throw Error(ErrorCode::invalid_argument, "", m.name,
                    "the index format cannot hold an empty extension or a name with whitespace");
      }
      if (!first) out += ' ';
      first = false;
      out += m.ext;
      out += ' ';
      out += std::to_string(m.offset);
      out += ' ';
      out += std::to_string(m.size);
      out += ' ';
      out += m.name;
    }
    out += '\n';
  }
  return out;
}

ShardIndex parse_index(std::string_view text, const std::string& where) {
  std::size_t line_no = 0;
  auto bad = [&](const std::string& why) -> Error {
    return Error(ErrorCode::corrupt_data, where, "",
                 "malformed index: line " + std::to_string(line_no) + ": " + why);
  };
  auto next_line = [&](std::string_view& line) {
    if (text.empty()) return false;
    std::size_t nl = text.find('\n');
    line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    return true;
  };
  auto tokens = [](std::string_view line) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() &&
             std::string_view(" \t\r\v\f").find(line[i]) != std::string_view::npos)
        ++i;
      std::size_t j = i;
      while (j < line.size() &&
             std::string_view(" \t\r\v\f").find(line[j]) == std::string_view::npos)
        ++j;
      if (j > i) out.push_back(line.substr(i, j - i));
      i = j;
    }
    return out;
  };
  auto number = [&](std::string_view s, const char* what) {
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) {
      throw bad(std::string(what) + " '" + std::string(s) + "' is not a non-negative integer");
    }
    return v;
  };

  std::string_view line;
  if (!next_line(line)) {
    line_no = 1;
    throw bad("empty index, no version line");
  }
  std::vector<std::string_view> head = tokens(line);
  if (head.empty()) throw bad("no version signature");
  int group = 0;
  if (head[0] == "v1.2") {
    group = 4;
  } else if (head[0] == "v1.1") {
    group = 3;
  } else {
    throw bad("unsupported index version '" + std::string(head[0]) + "' (v1.1 and v1.2 are)");
  }
  if (head.size() != 2) throw bad("expected '" + std::string(head[0]) + " <num_samples>'");
  const std::uint64_t count = number(head[1], "sample count");

  ShardIndex index;
  index.samples.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(count, 1 << 20)));
  for (std::uint64_t i = 0; i < count; ++i) {
    if (!next_line(line)) {
      ++line_no;
      throw bad("the index ends after " + std::to_string(i) + " of the " + std::to_string(count) +
                " samples its first line announces");
    }
    std::vector<std::string_view> t = tokens(line);
    if (t.empty()) throw bad("no members for the sample");
    if (t.size() % group != 0) {
      throw bad(group == 4 ? "expected groups of '<ext> <offset> <size> <name>'"
                           : "expected groups of '<ext> <offset> <size>'");
    }
    IndexedSample s;
    for (std::size_t k = 0; k < t.size(); k += group) {
      IndexMember m;
      m.ext = t[k];
      m.offset = number(t[k + 1], "offset");
      m.size = number(t[k + 2], "size");
      if (m.offset % kBlock != 0) {
        throw bad("offset " + std::to_string(m.offset) + " is not a multiple of 512");
      }
      if (m.offset == 0) throw bad("offset 0 leaves no room for the member's tar header");
      if (m.size > std::numeric_limits<std::uint64_t>::max() - m.offset) {
        throw bad("offset + size overflows");
      }
      if (group == 4) {
        m.name = t[k + 3];
        std::optional<KeyExt> parts = split_member_name(m.name);
        if (!parts) throw bad("member name '" + m.name + "' has no key.extension form");
        if (parts->ext != m.ext) {
          throw bad("extension '" + m.ext + "' does not match member name '" + m.name + "'");
        }
        if (k == 0) {
          s.key = parts->key;
        } else if (parts->key != s.key) {
          throw bad("member '" + m.name + "' does not belong to sample '" + s.key + "'");
        }
      }
      s.members.push_back(std::move(m));
    }
    index.samples.push_back(std::move(s));
  }
  while (next_line(line)) {
    if (!tokens(line).empty()) {
      throw bad("more lines than the " + std::to_string(count) +
                " samples the first line announces");
    }
  }
  return index;
}

std::string default_index_path(const std::string& shard_url) {
  std::size_t slash = shard_url.rfind('/');
  std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  // As wds2idx.py: the first dot after the file name's first character.
  std::size_t dot = shard_url.find('.', base + 1);
  return (dot == std::string::npos ? shard_url : shard_url.substr(0, dot)) + ".idx";
}

bool index_is_older(const std::string& index_path, const std::string& shard_path) {
  struct stat si {
  }, ss{};
  std::string ip = file_url_to_path(index_path), sp = file_url_to_path(shard_path);
  if (::stat(ip.c_str(), &si) != 0) throw_errno(index_path, "stat", errno);
  if (::stat(sp.c_str(), &ss) != 0) throw_errno(shard_path, "stat", errno);
  if (si.st_mtim.tv_sec != ss.st_mtim.tv_sec) return si.st_mtim.tv_sec < ss.st_mtim.tv_sec;
  return si.st_mtim.tv_nsec < ss.st_mtim.tv_nsec;
}

void check_index_bounds(const ShardIndex& index, std::uint64_t shard_size,
                        const std::string& shard_url) {
  for (const IndexedSample& s : index.samples) {
    for (const IndexMember& m : s.members) {
      if (m.offset + m.size > shard_size) {
        throw Error(ErrorCode::corrupt_data, shard_url, m.name,
                    "index is stale: the member ends at byte " + std::to_string(m.offset + m.size) +
                        ", beyond the shard's " + std::to_string(shard_size) + " bytes");
      }
    }
  }
}

Sample read_indexed_sample(const std::shared_ptr<const ShardInfo>& shard,
                           const IndexedSample& entry, const RangeReader& read) {
  if (entry.members.empty()) {
    throw Error(ErrorCode::invalid_argument, shard->url, entry.key, "index entry has no members");
  }
  std::optional<Sample> sample;
  for (const IndexMember& m : entry.members) {
    if (m.offset < kBlock || m.offset % kBlock != 0) {
      stale(*shard, m.name, "member data offset " + std::to_string(m.offset) + " is not valid");
    }
    const std::uint64_t header_at = m.offset - kBlock;
    std::uint64_t before = std::min(header_at, extension_window(m));
    Bytes bytes = read(header_at - before, before + kBlock + m.size);
    auto head = [&] { return bytes.span().first(static_cast<std::size_t>(before + kBlock)); };
    const std::string label = m.name.empty() ? m.ext : m.name;
    std::optional<MemberHeader> h =
        read_member_header(head(), header_at - before, m.offset, shard->url, label);
    // A long name whose extension headers hold more than the window: one more, larger read.
    if (h && !m.name.empty() && h->name != m.name && !h->extended && before < header_at) {
      before = std::min<std::uint64_t>(header_at, std::uint64_t{1} << 16);
      bytes = read(header_at - before, before + kBlock + m.size);
      h = read_member_header(head(), header_at - before, m.offset, shard->url, label);
    }
    if (!h) {
      stale(*shard, label,
            "no header of a regular file in front of the data at byte " + std::to_string(m.offset));
    }
    if (!m.name.empty() && h->name != m.name) {
      stale(*shard, m.name,
            "the member at byte " + std::to_string(m.offset) + " is '" + h->name + "'");
    }
    if (h->size != m.size) {
      stale(*shard, label,
            "the member at byte " + std::to_string(m.offset) + " has " +
                (h->size ? std::to_string(*h->size) : std::string("an unreadable number of")) +
                " bytes, the index says " + std::to_string(m.size));
    }
    std::optional<KeyExt> parts = split_member_name(h->name);
    if (!parts || (m.name.empty() && parts->ext != m.ext)) {
      stale(*shard, h->name,
            "the member at byte " + std::to_string(m.offset) + " is '" + h->name +
                "', not a member with extension '" + m.ext + "'");
    }
    if (!sample) {
      std::string key = entry.key.empty() ? std::string(parts->key) : entry.key;
      sample.emplace(std::move(key), shard, h->first_header);
    } else if (parts->key != sample->key()) {
      stale(*shard, h->name, "the member does not belong to sample '" + sample->key() + "'");
    }
    std::string ext = m.ext;
    ext = lowercase(ext);
    if (is_reserved_field(ext)) {
      throw Error(ErrorCode::corrupt_data, shard->url, label,
                  "extension '" + ext +
                      "' is the name of a sample's own metadata (__key__, __url__, "
                      "__local_path__)");
    }
    Bytes data = Bytes::copy_of(bytes.span().subspan(static_cast<std::size_t>(before + kBlock)));
    if (!sample->add(ext, std::move(data))) {
      throw Error(ErrorCode::corrupt_data, shard->url, label,
                  "duplicate extension '" + ext + "' in sample '" + sample->key() + "'");
    }
  }
  return std::move(*sample);
}

Sample read_indexed_sample(const std::string& url, const IndexedSample& entry,
                           const OpenOptions& options) {
  auto shard = std::make_shared<const ShardInfo>(
      ShardInfo{url, is_local_url(url) ? file_url_to_path(url) : std::string()});
  RangeReader read = [&](std::uint64_t offset, std::uint64_t length) {
    OpenOptions range = options;
    range.offset = offset;
    range.length = length;
    std::unique_ptr<ByteSource> src = open_url(url, range);
    // An index can declare any size: the source must hold it before it is allocated. (Some
    // sources give the size of the resource, some of the range from the offset: `length`
    // cannot exceed either.)
    const std::optional<std::uint64_t> total = src->size();
    if (total && length > *total) {
      throw Error(ErrorCode::corrupt_data, url, "",
                  "index is stale: it needs " + std::to_string(length) + " bytes from byte " +
                      std::to_string(offset) + ", the shard has " + std::to_string(*total));
    }
    Bytes out;
    try {
      out = Bytes(static_cast<std::size_t>(length));
    } catch (const std::bad_alloc&) {
      throw Error(ErrorCode::unavailable, url, "",
                  "out of memory for the " + std::to_string(length) + " bytes the index names");
    }
    std::uint64_t got = 0;
    for (auto chunk = src->read(); !chunk.empty(); chunk = src->read()) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), length - got));
      if (n) std::memcpy(out.data() + got, chunk.data(), n);
      got += n;
      if (got == length) break;
    }
    if (got < length) {
      throw Error(ErrorCode::corrupt_data, url, "",
                  "index is stale: the shard ends at byte " + std::to_string(offset + got) +
                      ", before byte " + std::to_string(offset + length) + " the index needs");
    }
    return out;
  };
  return read_indexed_sample(shard, entry, read);
}

}  // namespace wds
