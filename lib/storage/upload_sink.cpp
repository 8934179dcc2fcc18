// The spool every upload writes to first, and the http(s):// sink: a plain PUT of the spooled
// file through the HTTP client. The spool's body is read with pread for every attempt, so an
// attempt can start over, and curl can rewind, at no cost.
#include "lib/storage/upload_sink.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "lib/storage/backends.hpp"
#include "lib/storage/file.hpp"
#include "lib/storage/http_client.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::size_t kSpoolBuffer = 1 << 20;  // writes gathered before write(2)

std::string temp_dir() {
  const char* d = std::getenv("TMPDIR");
  return d && *d ? d : "/tmp";
}

// An unlinked file open for reading and writing: O_TMPFILE where the file system has it, else
// mkstemp and unlink at once.
int open_spool(const std::string& url) {
  const std::string dir = temp_dir();
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
    throw_errno(url, "create a spool file in " + dir, errno);
  }
  std::string name = dir + "/wds-upload-XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) throw_errno(url, "create a spool file in " + dir, errno);
  ::unlink(name.c_str());
  return fd;
}

// ---- http(s):// ------------------------------------------------------------------------------

class HttpSink final : public SpoolSink {
 public:
  HttpSink(std::string url, const SinkOptions& options)
      : SpoolSink(url, std::nullopt),
        client_(std::move(url), options_of<HttpOptions>(options.backend_options),
                http::transport_for(options.backend_options)) {}

 private:
  void upload() override {
    const std::string target = url();
    const http::Body body{.fd = fd(), .offset = 0, .length = size()};
    client_.send("PUT", [&] { return client_.request("PUT", target, {}, &body); });
  }

  http::Client client_;
};

}  // namespace

SpoolSink::SpoolSink(std::string url, std::optional<Hashing> hashing)
    : ByteSink(std::move(url)), fd_(open_spool(this->url())), hashing_(hashing) {
  if (hashing_) {
    whole_ = std::make_unique<Sha256>();
    part_ = std::make_unique<Sha256>();
  }
}

SpoolSink::~SpoolSink() {
  if (fd_ >= 0) ::close(fd_);  // the file was never linked: it is gone with its descriptor
}

void SpoolSink::write(std::span<const std::byte> bytes) {
  if (closed_) throw Error::invalid_argument(url(), "", "write after close");
  if (error_) throw *error_;
  try {
    if (hashing_) hash(bytes);
    size_ += bytes.size();
    if (buffer_.size() + bytes.size() > kSpoolBuffer) flush();
    if (bytes.size() >= kSpoolBuffer) {
      write_all(fd_, bytes, url(), "write to the spool file in " + temp_dir());
    } else {
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    }
  } catch (const Error& e) {
    error_ = e;  // the spool is incomplete: close() must not upload it
    throw;
  }
}

void SpoolSink::close() {
  if (closed_) return;
  closed_ = true;
  if (error_) {
    throw Error(error_->code(), url(), "",
                "nothing was uploaded: an earlier write failed (" + error_->cause() + ")");
  }
  flush();
  std::vector<std::byte>().swap(buffer_);
  if (hashing_) {
    if (part_filled_ > 0) part_hashes_.push_back(part_->hex());
    if (whole_valid_) whole_hash_ = whole_->hex();
  }
  struct CloseFd {
    int& fd;
    ~CloseFd() {
      ::close(fd);
      fd = -1;
    }
  } close_fd{fd_};
  upload();
}

std::string SpoolSink::hash_range(std::uint64_t offset, std::uint64_t length) {
  Sha256 sha;
  std::vector<std::byte> chunk(std::min<std::uint64_t>(length, 4 * kMiB));
  while (length > 0) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(length, chunk.size()));
    pread_all(fd_, std::span(chunk).first(n), offset, url(), "read the spool file");
    sha.update(chunk.data(), n);
    offset += n;
    length -= n;
  }
  return sha.hex();
}

void SpoolSink::hash(std::span<const std::byte> bytes) {
  if (whole_valid_) {
    if (size_ + bytes.size() > hashing_->whole_limit) {
      whole_valid_ = false;  // too big for one PUT: only the parts' hashes are needed
    } else {
      whole_->update(bytes.data(), bytes.size());
    }
  }
  while (!bytes.empty()) {
    std::size_t take = static_cast<std::size_t>(
        std::min<std::uint64_t>(bytes.size(), hashing_->part_size - part_filled_));
    part_->update(bytes.data(), take);
    part_filled_ += take;
    bytes = bytes.subspan(take);
    if (part_filled_ == hashing_->part_size) {
      part_hashes_.push_back(part_->hex());
      part_filled_ = 0;
    }
  }
}

void SpoolSink::flush() {
  if (buffer_.empty()) return;
  write_all(fd_, buffer_, url(), "write to the spool file in " + temp_dir());
  buffer_.clear();
}

std::unique_ptr<ByteSink> open_http_sink(const std::string& url, const SinkOptions& options) {
  if (std::optional<std::string> problem = http::url_problem(url)) {
    throw Error::invalid_argument(url, "", "not an upload URL: " + *problem);
  }
  return std::make_unique<HttpSink>(url, options);
}

}  // namespace wds
