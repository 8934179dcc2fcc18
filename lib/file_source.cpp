#include "lib/file_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "lib/backends.hpp"
#include "lib/listing.hpp"
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
    for (;;) {
      ssize_t n = ::read(fd_, buffer_.data(), want);
      if (n >= 0) {
        if (left_) *left_ -= static_cast<std::uint64_t>(n);
        return buffer_.span().first(static_cast<std::size_t>(n));
      }
      if (errno != EINTR) throw_errno(url(), "read", errno);
    }
  }
  void limit(std::uint64_t length) { left_ = length; }
  std::string local_path() const override { return path_; }
  std::optional<std::uint64_t> size() const override { return size_; }

 private:
  std::string path_;  // empty for stdin
  int fd_;
  bool owns_fd_;
  Bytes buffer_;
  std::optional<std::uint64_t> size_;
  std::optional<std::uint64_t> left_;  // OpenOptions::length: bytes still to read
};

class FileSink final : public ByteSink {
 public:
  FileSink(std::string url, std::string path)
      : ByteSink(std::move(url)), file_(std::move(path), ".tmp-", this->url()) {}

  void write(std::span<const std::byte> bytes) override {
    if (!file_.is_open()) throw Error(ErrorCode::invalid_argument, url(), "", "write after close");
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

void pread_all(int fd, std::span<std::byte> out, std::uint64_t offset, const std::string& url,
               const std::string& what) {
  while (!out.empty()) {
    ssize_t r = ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno(url, what, errno);
    if (r == 0) {
      throw Error(ErrorCode::unavailable, url, "",
                  what + ": the file ended " + std::to_string(out.size()) + " bytes early");
    }
    out = out.subspan(static_cast<std::size_t>(r));
    offset += static_cast<std::uint64_t>(r);
  }
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
      throw Error(ErrorCode::invalid_argument, url, "", "standard input cannot start at an offset");
    }
    auto in = std::make_unique<FileSource>(url, "", STDIN_FILENO, false, options.buffer_size,
                                           std::nullopt);
    if (options.length) in->limit(*options.length);
    return in;
  }
  std::string path = file_url_to_path(url);
  if (path.empty()) throw Error(ErrorCode::invalid_argument, url, "", "URL names no file");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      if (std::string hint = missing_file_hint(url); !hint.empty()) {
        throw Error(ErrorCode::not_found, url, "",
                    "open: " + std::string(std::strerror(err)) + hint);
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
    throw Error(ErrorCode::invalid_argument, url, "",
                "is a directory, not a shard; give " + url + "/ to list its shards");
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
  if (path.empty()) throw Error(ErrorCode::invalid_argument, url, "", "URL names no file");
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
