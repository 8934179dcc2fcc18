// TarWriter over libarchive's write-callback interface; the sink's exceptions are parked across
// libarchive's C frames the same way TarReader parks the source's.
#include "wds/tar_writer.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <exception>
#include <utility>
#include <vector>

#include "lib/tar/format.hpp"
#include "wds/error.hpp"

namespace wds {

struct TarWriter::Impl {
  std::unique_ptr<ByteSink> sink;
  TarWriterOptions options;
  archive* ar = nullptr;
  archive_entry* entry = nullptr;
  std::exception_ptr sink_error;
  bool closed = false;

  Impl(std::unique_ptr<ByteSink> s, TarWriterOptions o) : sink(std::move(s)), options(o) {}
  ~Impl() {
    if (entry) archive_entry_free(entry);
    if (ar) archive_write_free(ar);  // without close(): the sink is destroyed uncommitted
  }

  static la_ssize_t write_callback(archive* ar, void* self, const void* buffer, size_t length) {
    auto* impl = static_cast<Impl*>(self);
    try {
      impl->sink->write({static_cast<const std::byte*>(buffer), length});
      return static_cast<la_ssize_t>(length);
    } catch (...) {
      impl->sink_error = std::current_exception();
      archive_set_error(ar, EIO, "sink failed");
      return -1;
    }
  }

  [[noreturn]] void fail(const std::string& member, const std::string& what) {
    if (sink_error) std::rethrow_exception(std::exchange(sink_error, nullptr));
    const char* msg = archive_error_string(ar);
    throw Error::invalid_argument(sink->url(), member,
                                  what + ": " + (msg ? msg : "unknown libarchive error"));
  }

  void open() {
    Utf8Locale utf8;
    ar = archive_write_new();
    entry = archive_entry_new();
    if (!ar || !entry) throw Error::unavailable(sink->url(), "", "out of memory");
    switch (options.format) {
      case TarFormat::ustar:
        archive_write_set_format_ustar(ar);
        break;
      case TarFormat::pax:
        archive_write_set_format_pax_restricted(ar);
        break;
      case TarFormat::gnu:
        archive_write_set_format_gnutar(ar);
        break;
    }
    int rc = ARCHIVE_OK;
    switch (options.compression) {
      case Compression::none:
        break;
      case Compression::gzip:
        rc = archive_write_add_filter_gzip(ar);
        break;
      case Compression::bzip2:
        rc = archive_write_add_filter_bzip2(ar);
        break;
      case Compression::xz:
        rc = archive_write_add_filter_xz(ar);
        break;
      case Compression::zstd:
        rc = archive_write_add_filter_zstd(ar);
        break;
    }
    if (rc != ARCHIVE_OK) fail("", "cannot enable compression");
    // Padding to a 10240-byte record suits plain tar; after a compressor it is trailing garbage
    // that zstd refuses.
    if (options.compression != Compression::none) {
      archive_write_set_bytes_in_last_block(ar, 1);
    } else {
      // Fewer, larger writes; the end is still padded to a multiple of 10240 (tar's record),
      // so the bytes are the same as with the default block size.
      archive_write_set_bytes_per_block(ar, 64 * 1024);
      archive_write_set_bytes_in_last_block(ar, 10240);
    }
    if (archive_write_open2(ar, this, nullptr, write_callback, nullptr, nullptr) != ARCHIVE_OK) {
      fail("", "cannot start archive");
    }
  }

  void check_open(std::string_view name) {
    if (closed) {
      throw Error::invalid_argument(sink->url(), std::string(name), "write after close");
    }
  }

  void write_entry(std::string_view name, unsigned type, std::span<const std::byte> data,
                   std::string_view link, bool hard) {
    check_open(name);
    Utf8Locale utf8;  // pax headers hold UTF-8 names
    std::string path(name);
    archive_entry_clear(entry);
    archive_entry_set_pathname(entry, path.c_str());
    archive_entry_set_filetype(entry, type);
    archive_entry_set_perm(entry, type == AE_IFDIR ? 0755 : static_cast<mode_t>(options.mode));
    archive_entry_set_size(entry, static_cast<la_int64_t>(data.size()));
    archive_entry_set_mtime(entry, options.mtime ? *options.mtime : std::time(nullptr), 0);
    archive_entry_set_uid(entry, 0);
    archive_entry_set_gid(entry, 0);
    if (!link.empty()) {
      std::string target(link);
      if (hard) {
        archive_entry_set_hardlink(entry, target.c_str());
      } else {
        archive_entry_set_symlink(entry, target.c_str());
      }
    }
    if (archive_write_header(ar, entry) != ARCHIVE_OK) fail(path, "cannot write member header");
    if (!data.empty()) {
      la_ssize_t n = archive_write_data(ar, data.data(), data.size());
      if (n < 0 || static_cast<std::size_t>(n) != data.size()) fail(path, "cannot write data");
    }
  }
};

TarWriter::TarWriter(std::unique_ptr<ByteSink> sink, TarWriterOptions options) {
  if (!sink) throw Error::invalid_argument("TarWriter: null sink");
  impl_ = std::make_unique<Impl>(std::move(sink), options);
  impl_->open();
}

TarWriter::~TarWriter() = default;

void TarWriter::write(const Sample& sample) {
  const std::string& key = sample.key();
  auto refuse = [&](const std::string& why) {
    throw Error::invalid_argument(impl_->sink->url(), key, "cannot write key: " + why);
  };
  if (key.empty()) refuse("empty key");
  if (key.front() == '/') refuse("absolute path");
  for (std::string_view rest = key;;) {
    std::size_t slash = rest.find('/');
    std::string_view part = rest.substr(0, slash);
    if (part == "..") refuse("'..' component");
    if (slash == std::string_view::npos) {
      if (part.empty()) refuse("ends with '/'");
      if (part.find('.') != std::string_view::npos) {
        refuse("'.' in the last path component (the reader would split the key there)");
      }
      break;
    }
    rest.remove_prefix(slash + 1);
  }
  std::vector<const Field*> fields;
  for (const Field& f : sample.fields()) fields.push_back(&f);
  std::sort(fields.begin(), fields.end(),
            [](const Field* a, const Field* b) { return a->ext < b->ext; });
  for (const Field* f : fields) write_file(key + "." + f->ext, f->data.span());
}

void TarWriter::write_file(std::string_view name, std::span<const std::byte> data) {
  impl_->write_entry(name, AE_IFREG, data, {}, false);
}
void TarWriter::write_directory(std::string_view name) {
  impl_->write_entry(name, AE_IFDIR, {}, {}, false);
}
void TarWriter::write_symlink(std::string_view name, std::string_view target) {
  impl_->write_entry(name, AE_IFLNK, {}, target, false);
}
void TarWriter::write_hardlink(std::string_view name, std::string_view target) {
  impl_->write_entry(name, AE_IFREG, {}, target, true);
}

void TarWriter::close() {
  if (impl_->closed) return;
  impl_->closed = true;
  Utf8Locale utf8;
  if (archive_write_close(impl_->ar) != ARCHIVE_OK) impl_->fail("", "cannot finish archive");
  impl_->sink->close();
}

namespace {

// The pattern with its one integer conversion applied; anything else is refused.
std::string shard_name(const std::string& pattern, std::uint64_t index) {
  std::size_t pct = pattern.find('%');
  std::size_t end = pct;
  if (pct != std::string::npos) {
    end = pct + 1;
    while (end < pattern.size() &&
           (std::isdigit(static_cast<unsigned char>(pattern[end])) || pattern[end] == '0')) {
      ++end;
    }
  }
  if (pct == std::string::npos || end >= pattern.size() || pattern[end] != 'd' ||
      pattern.find('%', end) != std::string::npos) {
    throw Error::invalid_argument(
        pattern, "", "a shard pattern needs exactly one integer conversion such as %06d");
  }
  std::string spec = pattern.substr(pct, end - pct) + "llu";
  char number[64];
  std::snprintf(number, sizeof number, spec.c_str(), static_cast<unsigned long long>(index));
  return pattern.substr(0, pct) + number + pattern.substr(end + 1);
}

}  // namespace

ShardWriter::ShardWriter(std::string pattern, ShardWriterOptions options)
    : pattern_(std::move(pattern)), options_(options), index_(options.first_index) {
  shard_name(pattern_, 0);  // check the pattern now
  if (options_.max_count == 0) {
    throw Error::invalid_argument(pattern_, "", "max_count must be at least 1");
  }
}

ShardWriter::~ShardWriter() = default;  // an unclosed shard is discarded by its sink

void ShardWriter::open_next() {
  if (current_) current_->close();
  std::string name = shard_name(pattern_, index_++);
  current_ = std::make_unique<TarWriter>(open_sink(name, options_.sink), options_.tar);
  shards_.push_back(std::move(name));
  count_ = size_ = 0;
}

void ShardWriter::write(const Sample& sample) {
  if (closed_) throw Error::invalid_argument(pattern_, "", "write after close");
  const std::uint64_t bytes = sample.payload_bytes();
  if (!current_ || count_ >= options_.max_count ||
      (count_ > 0 && size_ + bytes > options_.max_size)) {
    open_next();
  }
  current_->write(sample);
  ++count_;
  size_ += bytes;
}

void ShardWriter::close() {
  if (closed_) return;
  closed_ = true;
  if (current_) current_->close();
}

}  // namespace wds
