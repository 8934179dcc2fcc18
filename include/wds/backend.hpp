// wds/backend.hpp: a storage backend as one unit: reading, listing and writing for its schemes.
//
// The built-in backends (local files and "-", http/https, s3, pipe) are registered this way too,
// and a user's backend goes through the same table: open_url reads with its `open`,
// resolve_urls lists its patterns with `list`, open_sink (so TarWriter and ShardWriter) writes
// with `open_sink`.
//
//   struct MemOptions { Store* store; };
//   wds::register_backend({
//       .schemes = {"mem"},
//       .open = [](const std::string& url, const wds::OpenOptions& o) {
//         const MemOptions* mem = o.backend_options.get<MemOptions>();  // its own options slot
//         ...
//       },
//       .list = [](const std::string& pattern, const wds::OpenOptions& o) { ... },
//       .open_sink = [](const std::string& url, const wds::SinkOptions& o) { ... },
//   });
//   wds::OpenOptions open;
//   open.backend_options.set(MemOptions{&store});
//
// Errors: each function throws wds::Error naming the URL when it cannot do its job.
// Thread safety: register_backend may be called concurrently with open_url, resolve_urls and
// open_sink; the functions of a backend may be called from several threads at once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wds/sink.hpp"
#include "wds/source.hpp"

namespace wds {

// Makes a source for `url`; must throw wds::Error (naming the URL) if it cannot.
using SourceFactory =
    std::function<std::unique_ptr<ByteSource>(const std::string& url, const OpenOptions& options)>;
// The URLs a pattern (one that ends in '/' or holds '*', see resolve_urls) names, sorted; must
// throw wds::Error (not_found when nothing matches) rather than return an empty list.
using ListFactory =
    std::function<std::vector<std::string>(const std::string& pattern, const OpenOptions& options)>;
// Makes a sink for `url`; must throw wds::Error (naming the URL) if it cannot.
using SinkFactory =
    std::function<std::unique_ptr<ByteSink>(const std::string& url, const SinkOptions& options)>;

struct Backend {
  // The URL schemes it serves (letters, digits, '+', '-', '.'; matched without regard to case);
  // "" is a plain path.
  std::vector<std::string> schemes;
  // Any of these may be empty: its URLs cannot be read, listed or written then
  // (invalid_argument naming the scheme).
  SourceFactory open{};
  ListFactory list{};
  SinkFactory open_sink{};
  // Bytes that are already on local disk: the cache (CacheOptions) does not copy them.
  bool local = false;
};

// Makes `backend` serve its schemes, replacing whatever served them before, built-in backends
// included. invalid_argument if it names no scheme, or has none of open, list and open_sink.
void register_backend(Backend backend);

}  // namespace wds
