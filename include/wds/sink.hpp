// wds/sink.hpp: ByteSink, where written shards go.
//
//   auto sink = wds::open_sink("/data/out-000000.tar");   // or "-" for stdout
//   sink->write(bytes);
//   sink->close();   // reports any error; a sink destroyed without close() discards
//
// A file sink writes to "<path>.tmp-<pid>-<n>" and renames it into place on close(), so a reader
// never sees a half-written shard under the final name and a failed write leaves nothing behind.
//
// Errors: wds::Error naming the URL.
// Thread safety: a ByteSink is used by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace wds {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  ByteSink(const ByteSink&) = delete;
  ByteSink& operator=(const ByteSink&) = delete;

  virtual void write(std::span<const std::byte> bytes) = 0;
  // Flushes and commits. Must be called once, after the last write.
  virtual void close() = 0;

  const std::string& url() const noexcept { return url_; }

 protected:
  explicit ByteSink(std::string url) : url_(std::move(url)) {}

 private:
  std::string url_;
};

// A plain path, file:// URL, or "-" for standard output.
std::unique_ptr<ByteSink> open_sink(const std::string& url);

// A sink that appends to `out` in memory. `out` must outlive the sink.
std::unique_ptr<ByteSink> open_memory_sink(std::string url, std::string& out);

}  // namespace wds
