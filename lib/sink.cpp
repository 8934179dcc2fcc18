// File, stdout and in-memory sinks, and the choice of a sink by URL.
#include "wds/sink.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "lib/file_source.hpp"
#include "lib/upload_sink.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

void write_all(int fd, std::span<const std::byte> bytes, const std::string& url) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(url, "write", errno);
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
}

class FileSink final : public ByteSink {
 public:
  FileSink(std::string url, std::string path) : ByteSink(std::move(url)), path_(std::move(path)) {
    static std::atomic<unsigned> counter{0};
    tmp_ = path_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_errno(this->url(), "create " + tmp_, errno);
  }
  ~FileSink() override {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(tmp_.c_str());
    }
  }
  void write(std::span<const std::byte> bytes) override {
    if (fd_ < 0) throw Error(ErrorCode::invalid_argument, url(), "", "write after close");
    write_all(fd_, bytes, url());
  }
  void close() override {
    if (fd_ < 0) return;
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      int err = errno;
      ::unlink(tmp_.c_str());
      throw_errno(url(), "close", err);
    }
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      int err = errno;
      ::unlink(tmp_.c_str());
      throw_errno(url(), "rename into place", err);
    }
  }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
};

class StdoutSink final : public ByteSink {
 public:
  StdoutSink() : ByteSink("-") {}
  void write(std::span<const std::byte> bytes) override { write_all(STDOUT_FILENO, bytes, url()); }
  void close() override {}
};

class MemorySink final : public ByteSink {
 public:
  MemorySink(std::string url, std::string& out) : ByteSink(std::move(url)), out_(out) {}
  void write(std::span<const std::byte> bytes) override {
    out_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  void close() override {}

 private:
  std::string& out_;
};

}  // namespace

std::unique_ptr<ByteSink> open_sink(const std::string& url) {
  return open_sink(url, SinkOptions{});
}

std::unique_ptr<ByteSink> open_sink(const std::string& url, const SinkOptions& options) {
  if (url == "-") return std::make_unique<StdoutSink>();
  std::string scheme = url_scheme(url);
  if (scheme == "s3") return open_s3_sink(url, options);
  if (scheme == "http" || scheme == "https") return open_http_sink(url, options);
  if (scheme == "pipe") return open_pipe_sink(url, options);
  if (!scheme.empty() && scheme != "file") {
    throw Error(ErrorCode::invalid_argument, url, "",
                "no sink for URL scheme '" + scheme +
                    "' (local paths, file:, -, s3:, http:, https: and pipe: are written)");
  }
  std::string path = file_url_to_path(url);
  if (path.empty()) throw Error(ErrorCode::invalid_argument, url, "", "URL names no file");
  return std::make_unique<FileSink>(url, path);
}

std::unique_ptr<ByteSink> open_memory_sink(std::string url, std::string& out) {
  return std::make_unique<MemorySink>(std::move(url), out);
}

}  // namespace wds
