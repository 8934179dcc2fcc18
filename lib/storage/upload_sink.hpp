// Upload sinks (internal): the spool every upload writes to first, and the http(s):// sink. The
// s3:// sink is in lib/storage/s3_sink.cpp and the pipe: sink in lib/storage/pipe.cpp, each with its
// backend; what they do is described in wds/sink.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/sha256.hpp"
#include "wds/error.hpp"
#include "wds/sink.hpp"

namespace wds {

// s3://bucket/key: spooled, then one signed PUT or a multipart upload on close().
// invalid_argument for a malformed URL or one naming no object; permission_denied without
// credentials (checked here, before anything is written).
std::unique_ptr<ByteSink> open_s3_sink(const std::string& url, const SinkOptions& options);

// http(s)://host/path: spooled, then one PUT on close().
std::unique_ptr<ByteSink> open_http_sink(const std::string& url, const SinkOptions& options);

// pipe:CMD: CMD's standard input. permission_denied unless options.allow_pipe or
// WDS_ALLOW_PIPE=1.
std::unique_ptr<ByteSink> open_pipe_sink(const std::string& url, const SinkOptions& options);

// Spools written bytes to an unlinked temporary file in $TMPDIR (else /tmp); close() hands the
// file to upload(). Hashing (for S3): the SHA-256 of the whole while it is at most whole_limit
// bytes, and of every part_size piece, so that close() reads the file once, to send it.
class SpoolSink : public ByteSink {
 public:
  struct Hashing {
    std::uint64_t whole_limit = 0;
    std::uint64_t part_size = 0;
  };

  SpoolSink(std::string url, std::optional<Hashing> hashing);
  ~SpoolSink() override;

  void write(std::span<const std::byte> bytes) override;
  void close() override;

 protected:
  virtual void upload() = 0;

  int fd() const noexcept { return fd_; }
  std::uint64_t size() const noexcept { return size_; }
  // The SHA-256 of everything written, if it was at most whole_limit bytes.
  const std::optional<std::string>& whole_hash() const noexcept { return whole_hash_; }
  // The SHA-256 of each part_size piece, the last one possibly shorter.
  const std::vector<std::string>& part_hashes() const noexcept { return part_hashes_; }

  // The SHA-256 of a range of the spooled bytes, read back from the file.
  std::string hash_range(std::uint64_t offset, std::uint64_t length);

 private:
  void hash(std::span<const std::byte> bytes);
  void flush();

  int fd_;
  std::optional<Error> error_;  // of a failed write
  std::optional<Hashing> hashing_;
  std::vector<std::byte> buffer_;
  std::uint64_t size_ = 0;
  bool closed_ = false;
  std::unique_ptr<Sha256> whole_, part_;
  bool whole_valid_ = true;
  std::uint64_t part_filled_ = 0;
  std::optional<std::string> whole_hash_;
  std::vector<std::string> part_hashes_;
};

}  // namespace wds
