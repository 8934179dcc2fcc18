// Building a shard's index: libarchive streams the shard, over a local file descriptor (with a
// skip callback, so member data is seeked over rather than read) or any ByteSource.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <optional>
#include <utility>

#include "lib/storage/file.hpp"
#include "lib/tar/format.hpp"
#include "wds/error.hpp"
#include "wds/index.hpp"
#include "wds/tar_samples.hpp"

namespace wds {
namespace {

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
    throw Error::corrupt_data(in.url, member, "empty file (0 bytes), not a tar archive");
  }
  const char* msg = archive_error_string(ar);
  std::string cause = msg ? msg : "unknown libarchive error";
  if (cause.find("Unrecognized archive format") != std::string::npos) {
    cause = "not a tar archive";
  }
  throw Error::corrupt_data(in.url, member, what + ": " + cause);
}

}  // namespace

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
      throw Error::invalid_argument(url, "", "is a directory, not a shard");
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
  if (!ar) throw Error::unavailable(url, "", "out of memory");
  // The decompressors are enabled only to recognise a compressed shard and refuse it.
  enable_builtin_filters(ar);
  archive_read_support_format_tar(ar);
  archive_read_set_callback_data(ar, &in);
  archive_read_set_read_callback(ar, IndexInput::read_cb);
  if (seekable) archive_read_set_skip_callback(ar, IndexInput::skip_cb);
  if (archive_read_open1(ar) != ARCHIVE_OK) fail_build(in, ar, "", "opening the archive");
  if (archive_filter_count(ar) > 1 || archive_filter_code(ar, 0) != ARCHIVE_FILTER_NONE) {
    const char* filter = archive_filter_name(ar, 0);
    throw Error::invalid_argument(url, "",
                                  std::string("the shard is compressed (") +
                                      (filter ? filter : "?") +
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
      if (archive_filter_bytes(ar, 0) < last_data_end + static_cast<std::int64_t>(kTarBlock)) {
        throw Error::corrupt_data(url, last_name,
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
      throw Error::corrupt_data(
          url, name,
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
      throw Error::invalid_argument(
          url, name, "a sparse member cannot be indexed (its data is not stored contiguously)");
    }
    if (data_at < 0 || static_cast<std::uint64_t>(data_at) % kTarBlock != 0) {
      throw Error::corrupt_data(
          url, name, "member data at byte " + std::to_string(data_at) + ", not a multiple of 512");
    }
    if (index.samples.empty() || index.samples.back().key != parts->key) {
      index.samples.push_back(IndexedSample{std::string(parts->key), {}});
    }
    index.samples.back().members.push_back(IndexMember{
        std::string(parts->ext), static_cast<std::uint64_t>(data_at), size, std::move(name)});
  }
  return index;
}

}  // namespace wds
