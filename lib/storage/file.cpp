#include "lib/storage/file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "lib/storage/backends.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

class FileSource final : public ByteSource {
 public:
  FileSource(std::string url, std::string path, int fd, bool owns_fd, std::size_t buffer_size,
             std::optional<std::uint64_t> size)
      : ByteSource(std::move(url)),
        path_(std::move(path)),
        fd_(fd),
        owns_fd_(owns_fd),
        buffer_(std::max<std::size_t>(buffer_size, 4096)),
        size_(size) {}
  ~FileSource() override {
    if (owns_fd_) ::close(fd_);
  }

  std::span<const std::byte> read() override {
    std::size_t want = buffer_.size();
    if (left_) want = static_cast<std::size_t>(std::min<std::uint64_t>(want, *left_));
    if (want == 0) return {};
    if (!lent_.empty() || detail::bytes_shared(buffer_)) replace_lent_buffer();
    for (;;) {
      ssize_t n = ::read(fd_, buffer_.data(), want);
      if (n >= 0) {
        if (left_) *left_ -= static_cast<std::uint64_t>(n);
        return buffer_.span().first(static_cast<std::size_t>(n));
      }
      if (errno != EINTR) throw_errno(url(), "read", errno);
    }
  }
  // Lends from the buffer while fewer than kMaxLent earlier buffers are still lent.
  Bytes lend(std::span<const std::byte> part) override {
    if (lent_.size() >= kMaxLent) return Bytes::copy_of(part);
    return detail::lend_bytes(buffer_, part);
  }
  void limit(std::uint64_t length) { left_ = length; }
  std::string local_path() const override { return path_; }
  std::optional<std::uint64_t> size() const override { return size_; }

 private:
  // Buffers whose lent bytes are all freed go back to the heap's recycler (lib/bytes.cpp); a
  // buffer with lent bytes waits in lent_, and a new one (most likely one of those) replaces it.
  void replace_lent_buffer() {
    std::erase_if(lent_, [](const Bytes& b) { return !detail::bytes_shared(b); });
    if (detail::bytes_shared(buffer_)) {
      const std::size_t size = buffer_.size();
      lent_.push_back(std::move(buffer_));
      buffer_ = Bytes(size);
    }
  }

  static constexpr std::size_t kMaxLent = 4;
  std::string path_;  // empty for stdin
  int fd_;
  bool owns_fd_;
  Bytes buffer_;
  std::vector<Bytes> lent_;  // earlier buffers that lent bytes still share
  std::optional<std::uint64_t> size_;
  std::optional<std::uint64_t> left_;  // OpenOptions::length: bytes still to read
};

class FileSink final : public ByteSink {
 public:
  FileSink(std::string url, std::string path)
      : ByteSink(std::move(url)), file_(std::move(path), ".tmp-", this->url()) {}

  void write(std::span<const std::byte> bytes) override {
    if (!file_.is_open()) throw Error::invalid_argument(url(), "", "write after close");
    file_.write(bytes);
  }
  void close() override {
    if (file_.is_open()) file_.commit(false);
  }

 private:
  AtomicFile file_;
};

class StdoutSink final : public ByteSink {
 public:
  StdoutSink() : ByteSink("-") {}
  void write(std::span<const std::byte> bytes) override {
    write_all(STDOUT_FILENO, bytes, url(), "write");
  }
  void close() override {}
};

// For a name that does not exist: what was probably meant, or empty. Only on the error path.
std::string missing_file_hint(const std::string& url) {
  // "{000000...000005}" is not a range, so brace expansion kept it as text.
  std::size_t dots = url.find("...");
  while (dots != std::string::npos) {
    std::size_t open = url.rfind('{', dots);
    std::size_t close = url.find('}', dots);
    if (open != std::string::npos && close != std::string::npos && url.find('}', open) == close) {
      std::string group = url.substr(open, close + 1 - open);
      group.erase(dots - open, 1);
      return " (did you mean " + group + "? a range has two dots)";
    }
    dots = url.find("...", dots + 3);
  }
  return {};
}

}  // namespace

void throw_errno(const std::string& url, const std::string& what, int err) {
  ErrorCode code = ErrorCode::unavailable;
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      code = ErrorCode::not_found;
      break;
    case EACCES:
    case EPERM:
      code = ErrorCode::permission_denied;
      break;
    case EISDIR:
    case EINVAL:
    case ENAMETOOLONG:
      code = ErrorCode::invalid_argument;
      break;
    default:
      break;
  }
  throw Error(code, url, "", what + ": " + std::strerror(err));
}

void write_all(int fd, std::span<const std::byte> bytes, const std::string& url,
               const std::string& what) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(url, what, errno);
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
}

std::size_t pread_upto(int fd, std::span<std::byte> out, std::uint64_t offset,
                       const std::string& url, const std::string& what) {
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno(url, what, errno);
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

void pread_all(int fd, std::span<std::byte> out, std::uint64_t offset, const std::string& url,
               const std::string& what) {
  const std::size_t got = pread_upto(fd, out, offset, url, what);
  if (got < out.size()) {
    throw Error::unavailable(
        url, "", what + ": the file ended " + std::to_string(out.size() - got) + " bytes early");
  }
}

bool is_local_url(const std::string& url) {
  if (url == "-") return false;
  const std::string scheme = url_scheme(url);
  return scheme.empty() || scheme == "file";
}

AtomicFile::AtomicFile(std::string path, std::string_view marker, std::string url, std::string kind)
    : path_(std::move(path)), url_(std::move(url)) {
  static std::atomic<unsigned> counter{0};
  temp_ =
      path_ + std::string(marker) + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_errno(url_, "create " + (kind.empty() ? "" : kind + " ") + temp_, errno);
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  write_all(fd_, bytes, url_, "write");
}

void AtomicFile::commit(bool sync) {
  int fd = fd_;
  fd_ = -1;
  const bool synced = !sync || ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 || !synced) {
    if (synced) err = errno;
    ::unlink(temp_.c_str());
    throw_errno(url_, synced ? "close" : "fsync", err);
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    err = errno;
    ::unlink(temp_.c_str());
    throw_errno(url_, "rename into place", err);
  }
}

void AtomicFile::abandon() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
  fd_ = -1;
}

std::string file_url_to_path(const std::string& url) {
  if (url.rfind("file:", 0) != 0 && url.rfind("FILE:", 0) != 0) return url;
  std::string rest = url.substr(5);
  if (rest.rfind("//", 0) == 0) {
    // file://host/path: like Python's url2pathname, the host part is dropped.
    std::size_t slash = rest.find('/', 2);
    rest = slash == std::string::npos ? std::string() : rest.substr(slash);
  }
  return percent_decode(rest);
}

std::unique_ptr<ByteSource> open_file_source(const std::string& url, const OpenOptions& options) {
  if (url == "-") {
    if (options.offset != 0) {
      throw Error::invalid_argument(url, "", "standard input cannot start at an offset");
    }
    auto in = std::make_unique<FileSource>(url, "", STDIN_FILENO, false, options.buffer_size,
                                           std::nullopt);
    if (options.length) in->limit(*options.length);
    return in;
  }
  std::string path = file_url_to_path(url);
  if (path.empty()) throw Error::invalid_argument(url, "", "URL names no file");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      if (std::string hint = missing_file_hint(url); !hint.empty()) {
        throw Error::not_found(url, "", "open: " + std::string(std::strerror(err)) + hint);
      }
    }
    throw_errno(url, "open", err);
  }
  // The source owns fd from here on, so every failure below closes it.
  struct stat st {};
  int stat_rc = ::fstat(fd, &st);
  int stat_err = errno;
  std::optional<std::uint64_t> size;
  if (stat_rc == 0 && S_ISREG(st.st_mode)) size = static_cast<std::uint64_t>(st.st_size);
  auto source = std::make_unique<FileSource>(url, path, fd, true, options.buffer_size, size);
  if (stat_rc != 0) throw_errno(url, "stat", stat_err);
  if (S_ISDIR(st.st_mode)) {
    throw Error::invalid_argument(
        url, "", "is a directory, not a shard; give " + url + "/ to list its shards");
  }
  if (size) ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (options.offset != 0 && ::lseek(fd, static_cast<off_t>(options.offset), SEEK_SET) < 0) {
    throw_errno(url, "seek to byte " + std::to_string(options.offset), errno);
  }
  if (options.length) source->limit(*options.length);
  return source;
}

std::unique_ptr<ByteSink> open_file_sink(const std::string& url) {
  if (url == "-") return std::make_unique<StdoutSink>();
  std::string path = file_url_to_path(url);
  if (path.empty()) throw Error::invalid_argument(url, "", "URL names no file");
  return std::make_unique<FileSink>(url, path);
}

Backend file_backend() {
  return Backend{
      .schemes = {"", "file"},
      .open = open_file_source,
      .list = [](const std::string& pattern, const OpenOptions&) { return list_local(pattern); },
      .open_sink = [](const std::string& url, const SinkOptions&) { return open_file_sink(url); },
      .local = true,
  };
}

}  // namespace wds

// ---------------------------------------------------------------------------------------------
// Listing local shards: directory listings and glob patterns.

namespace wds {
namespace {

bool has_glob_magic(std::string_view s) {
  return s.find_first_of("*?[") != std::string_view::npos;
}

// The part of a file: URL before its path ("file://host", "file://", "file:"), or "" for a
// plain path. file_url_to_path gives the path after it.
std::string url_prefix(const std::string& pattern) {
  if (url_scheme(pattern) != "file") return "";
  if (pattern.compare(5, 2, "//") != 0) return pattern.substr(0, 5);
  return pattern.substr(0, std::min(pattern.find('/', 7), pattern.size()));
}

// `path` as written after `prefix`: file_url_to_path decodes %XX, so in a URL a literal '%' is
// escaped.
std::string escape_path(const std::string& prefix, std::string_view path) {
  if (prefix.empty()) return std::string(path);
  std::string out;
  for (char c : path) {
    if (c == '%') {
      out += "%25";
    } else {
      out += c;
    }
  }
  return out;
}

bool is_hidden(std::string_view name) {
  return !name.empty() && name.front() == '.';
}

// Whether `path` (relative to dirfd) is a regular file, following symbolic links. A name that
// vanished or a dangling link is not; other failures are errors.
bool is_regular_file(int dirfd, const char* path, const std::string& pattern) {
  struct stat st {};
  if (::fstatat(dirfd, path, &st, 0) == 0) return S_ISREG(st.st_mode);
  if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return false;
  throw_errno(pattern, std::string("stat ") + path, errno);
}

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

std::vector<std::string> list_directory(const std::string& pattern, const std::string& prefix,
                                        const std::string& dir) {
  std::unique_ptr<DIR, DirCloser> d(::opendir(dir.c_str()));
  if (!d) throw_errno(pattern, "open directory", errno);
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d.get());
    if (e == nullptr) {
      if (errno != 0) throw_errno(pattern, "read directory", errno);
      break;
    }
    std::string_view name(e->d_name);
    if (is_hidden(name)) continue;  // also "." and ".."
    bool regular = e->d_type == DT_REG;
    // A link or a file system without d_type needs a stat to tell.
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      regular = is_regular_file(::dirfd(d.get()), e->d_name, pattern);
    }
    if (regular) names.emplace_back(name);
  }
  if (names.empty()) {
    throw Error::not_found(pattern, "", "no files match: the directory holds no regular files");
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> out;
  out.reserve(names.size());
  // The pattern is kept as written; only the names found need escaping in a URL.
  for (const std::string& name : names) out.push_back(pattern + escape_path(prefix, name));
  return out;
}

// glob's error callback takes no context argument; one glob runs per thread at a time.
thread_local int glob_errno = 0;
thread_local std::string glob_error_path;

int on_glob_error(const char* path, int err) {
  // A directory missing on one branch of "a/*/b/*.tar" just does not match there.
  if (err == ENOENT || err == ENOTDIR) return 0;
  glob_errno = err;
  glob_error_path = path;
  return 1;  // stop: a directory we cannot read might hold matches
}

struct GlobFree {
  void operator()(glob_t* g) const { ::globfree(g); }
};

std::vector<std::string> list_glob(const std::string& pattern, const std::string& prefix,
                                   const std::string& path_pattern) {
  glob_t g{};
  glob_errno = 0;
  glob_error_path.clear();
  // GLOB_NOSORT: glob sorts by the locale's collation; the result is sorted bytewise below.
  int rc = ::glob(path_pattern.c_str(), GLOB_NOSORT, on_glob_error, &g);
  std::unique_ptr<glob_t, GlobFree> owner(&g);
  if (rc == GLOB_ABORTED) {
    throw_errno(pattern, "read directory " + glob_error_path, glob_errno ? glob_errno : EIO);
  }
  if (rc == GLOB_NOSPACE) throw std::bad_alloc();
  std::vector<std::string> paths;
  if (rc == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) {
      if (is_regular_file(AT_FDCWD, g.gl_pathv[i], pattern)) paths.emplace_back(g.gl_pathv[i]);
    }
  }
  if (paths.empty()) throw Error::not_found(pattern, "", "no files match");
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const std::string& p : paths) out.push_back(prefix + escape_path(prefix, p));
  return out;
}

}  // namespace

std::vector<std::string> list_local(const std::string& pattern) {
  if (pattern.empty()) throw Error::invalid_argument(pattern, "", "empty pattern");
  std::string prefix = url_prefix(pattern);
  // file_url_to_path knows "file:" and "FILE:" only; the scheme matches in any case.
  std::string path = prefix.empty() ? pattern : file_url_to_path("file:" + pattern.substr(5));
  if (path.empty()) throw Error::invalid_argument(pattern, "", "URL names no path");
  if (path.back() == '/' && !has_glob_magic(path)) return list_directory(pattern, prefix, path);
  // "shards-*/" lists the files of every matching directory, as "dir/" lists one.
  if (path.back() == '/') path += '*';
  return list_glob(pattern, prefix, path);
}

bool is_listing_pattern(std::string_view url) {
  if (url.empty() || url == "-") return false;
  std::string scheme = url_scheme(url);
  if (scheme == "pipe") return false;
  if (url.back() == '/' || url.find('*') != std::string_view::npos) return true;
  return (scheme.empty() || scheme == "file") && has_glob_magic(url);
}

}  // namespace wds
