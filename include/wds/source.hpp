// wds/source.hpp: ByteSource, the one seam through which every shard's bytes arrive.
//
// A ByteSource hands out a shard's bytes as a sequence of chunks that it owns. The tar reader
// pulls from it and never learns where the bytes come from, so a new transport (HTTP, S3, a
// pipe, a cache, a fault-injecting test double) plugs in without touching the reader.
//
//   std::unique_ptr<wds::ByteSource> src = wds::open_url("/data/shard-000000.tar");
//   for (auto chunk = src->read(); !chunk.empty(); chunk = src->read()) consume(chunk);
//
// open_url picks the source by the URL's scheme: a plain path or file:// URL opens a local file,
// "-" reads standard input, and further schemes are added with register_backend (reading,
// listing and writing together, wds/backend.hpp); the same table serves the built-in ones.
//
// Errors: open_url and read() throw wds::Error naming the URL (not_found, permission_denied,
// unavailable for I/O failures, invalid_argument for an unknown scheme).
//
// Thread safety: a ByteSource is used by one thread at a time. open_url and register_backend
// may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "wds/brace.hpp"
#include "wds/bytes.hpp"
#include "wds/error.hpp"

namespace wds {

// Told of a network request about to be retried: `cause` is the transient failure (naming the
// source's URL), `attempt` the number of failed attempts in a row so far (1 at the first
// retry; it starts again after an attempt that delivered bytes), at most
// HttpOptions::max_retries. A request whose retries have run out is not retried: its error
// reaches the reader instead. `attempt` 0 is a warning that needs no retry: a damaged cache
// entry about to be fetched again, or a cache directory that cannot be used (once).
using RetryHook = std::function<void(const Error& cause, int attempt)>;

// True when a retry hook's `cause` is the server throttling: HTTP 429, or 503 with Retry-After
// or S3's SlowDown. The pipelines' metrics count these apart (SourceMetrics::throttled).
bool is_throttled(const Error& cause) noexcept;

// The default of OpenOptions::parallel_parts: WDS_PARALLEL_PARTS when set to a number >= 1,
// else 4.
std::size_t default_parallel_parts();

// The options of the backends and of the cache, one slot per options type: a backend looks up
// its own type, so a new backend (a user's too) gets options without a field in OpenOptions or
// SinkOptions. The built-in ones (wds/remote.hpp) are set the same way:
//   open.backend_options.set(wds::S3Options{.endpoint = "http://127.0.0.1:9000"});
//   open.backend_options.set(wds::CacheOptions{.dir = "/var/cache/shards"});
//   const MyOptions* mine = options.backend_options.get<MyOptions>();  // null: not set
// A type not set: the backend's defaults, and no cache.
class BackendOptions {
 public:
  template <class T>
  BackendOptions& set(T value) {
    slots_[std::type_index(typeid(T))] = std::make_shared<const T>(std::move(value));
    return *this;
  }
  // The value set for T, or null.
  template <class T>
  const T* get() const {
    auto it = slots_.find(std::type_index(typeid(T)));
    return it == slots_.end() ? nullptr : static_cast<const T*>(it->second.get());
  }
  // Removes the value set for T, if any.
  template <class T>
  BackendOptions& erase() {
    slots_.erase(std::type_index(typeid(T)));
    return *this;
  }

 private:
  // Values are shared: copying options (once per shard opened) copies pointers only.
  std::unordered_map<std::type_index, std::shared_ptr<const void>> slots_;
};

struct OpenOptions {
  // Start at this byte of the resource (for resuming inside a shard). Sources that cannot seek
  // throw an invalid_argument Error when it is not 0.
  std::uint64_t offset = 0;
  // Read at most this many bytes from offset (an HTTP Range with an end, a bounded pread):
  // how an index reads just one sample. Unset: to the end.
  std::optional<std::uint64_t> length;
  // Read size for local files; bound on buffered bytes for network sources.
  std::size_t buffer_size = std::size_t{1} << 20;
  // pipe: URLs run a shell command; they are refused unless allowed here or by WDS_ALLOW_PIPE=1.
  bool allow_pipe = false;
  // Called before each retry of a network request (http, https, s3; also when they go through
  // the cache); null: nothing. It runs on the source's transfer thread, not the thread calling
  // read(), and may run for several sources at once: keep it short and thread-safe. An
  // exception it throws ends the transfer with that error.
  RetryHook on_retry;
  // Options of the backends, by type (above): HttpOptions, S3Options, AzureOptions
  // (wds/remote.hpp), a user backend's own; and CacheOptions, which caches remote shards (not
  // local files) on local disk.
  BackendOptions backend_options;
  // Network sources (http, https, s3): parallel ranged GETs past one connection's cap (S3's
  // advice; a connection gives 50-200 MB/s). A resource is asked for whole; when its first
  // min(4 MiB, part_size) bytes arrive slower than single_stream_rate (bytes per second; not
  // counting the time a full buffer waited for the reader) and more than part_size remain,
  // that GET stops a part further on and the rest is read by up to parallel_parts ranged GETs
  // at once, each on its own connection, handed out in order. Each part buffers up to
  // part_size and at most parallel_parts + 2 parts are held: a source buffers at most
  // (parallel_parts + 2) x part_size (48 MiB by default). Each part is retried and resumed with
  // Range requests on its own, as a whole stream is. parallel_parts 1: one GET;
  // single_stream_rate 0: parts whatever the rate. A fast connection (the loopback, a LAN)
  // reads on with its one GET, as parts would cost threads and buffers for nothing; so do the
  // next shards from a host (16, doubling up to 256 while it lasts) after parts of a shard there
  // downloaded less than 1.5 times as fast as its first GET alone (a shared bottleneck: a busy
  // server, the network, or a reader slower than one connection).
  std::size_t parallel_parts = default_parallel_parts();
  std::uint64_t part_size = std::uint64_t{8} << 20;
  std::uint64_t single_stream_rate = 250'000'000;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // The next chunk of bytes, or an empty span at the end of the stream (and on every call after
  // it). The view stays valid until the next read() or the source's destruction. A source that
  // cannot deliver its bytes in full (a truncated transfer, a failed command) throws rather
  // than ending early.
  virtual std::span<const std::byte> read() = 0;

  // The bytes `part` of the chunk the last read() returned, as Bytes that outlive the next
  // read(): lent without a copy when the source can (its chunk then stays alive, and out of its
  // reuse, until the last such Bytes is freed; the HTTP and file sources lend from a few chunks
  // at a time, and all sources together from at most detail::max_shared_bytes()), else copied,
  // as this default does.
  virtual Bytes lend(std::span<const std::byte> part) { return Bytes::copy_of(part); }

  // The URL the source was opened for, for error messages and Sample::url().
  const std::string& url() const noexcept { return url_; }
  // The local file behind the source, if there is one (Sample::local_path()); else empty.
  virtual std::string local_path() const { return {}; }
  // The total size of the resource in bytes, when known up front.
  virtual std::optional<std::uint64_t> size() const { return std::nullopt; }

 protected:
  explicit ByteSource(std::string url) : url_(std::move(url)) {}

 private:
  std::string url_;
};

// Opens `url` with the backend registered for its scheme ("http" in "http://h/x.tar", "pipe"
// in "pipe:cat x.tar"; wds/backend.hpp). A string without a scheme is a local path; "-" is stdin.
std::unique_ptr<ByteSource> open_url(const std::string& url, const OpenOptions& options = {});

// expand_urls(pattern), then every URL that ends in '/' or holds '*' is listed by its scheme's
// backend: a local directory or glob (regular files, sorted), s3://bucket/prefix/ and
// s3://bucket/x-*.tar (ListObjectsV2 with pagination, one level, sorted), or what a registered
// backend's list gives; a scheme whose backend cannot list is an invalid_argument Error. Other
// URLs are kept as they are.
// `expand` limits the brace expansion (wds/brace.hpp).
std::vector<std::string> resolve_urls(std::string_view pattern, const OpenOptions& options = {},
                                      const ExpandOptions& expand = {});

// The scheme of `url` ("" for a plain path, "file" for file://...), lowercased.
std::string url_scheme(std::string_view url);

// A source over bytes in memory, handed out in chunks of `chunk_size` (for tests and for data
// already in memory).
std::unique_ptr<ByteSource> open_memory(std::string url, Bytes data,
                                        std::size_t chunk_size = std::size_t{1} << 20);

}  // namespace wds
