// The backend table behind open_url, resolve_urls and open_sink, and the in-memory source.
#include "wds/source.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include "lib/fork.hpp"
#include "lib/storage/backends.hpp"
#include "lib/storage/cache.hpp"
#include "lib/storage/file.hpp"
#include "lib/text.hpp"
#include "wds/brace.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

struct BackendTable {
  std::mutex mu;
  // Entries are never changed in place: a registration swaps in a new one, so a caller keeps
  // using the backend it looked up while another thread registers.
  std::map<std::string, std::shared_ptr<const Backend>> by_scheme;

  BackendTable() {
    detail::hold_across_fork(mu);  // taken per URL opened, by any thread
    for (Backend b : {file_backend(), http_backend(), s3_backend(), pipe_backend(), azure_backend(),
                      gcs_backend(), hf_backend()}) {
      add(b);
    }
  }
  void add(const Backend& backend) {
    auto shared = std::make_shared<const Backend>(backend);
    for (const std::string& scheme : backend.schemes) by_scheme[lowercase(scheme)] = shared;
  }
};

BackendTable& backends() {
  // Never destroyed: a loader's worker thread may still open a shard while the process exits.
  static auto* table = new BackendTable;
  return *table;
}

class MemorySource final : public ByteSource {
 public:
  MemorySource(std::string url, Bytes data, std::size_t chunk_size, std::uint64_t offset)
      : ByteSource(std::move(url)),
        data_(std::move(data)),
        chunk_(std::max<std::size_t>(chunk_size, 1)),
        pos_(std::min<std::uint64_t>(offset, data_.size())) {}

  std::span<const std::byte> read() override {
    std::size_t n = std::min(chunk_, data_.size() - pos_);
    std::span<const std::byte> out = data_.span().subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::optional<std::uint64_t> size() const override { return data_.size(); }
  // Shares the data: it is all in memory anyway.
  Bytes lend(std::span<const std::byte> part) override { return detail::lend_bytes(data_, part); }

 private:
  Bytes data_;
  std::size_t chunk_;
  std::size_t pos_;
};

}  // namespace

std::string url_scheme(std::string_view url) {
  // RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":". One letter is not taken as a scheme,
  // so that "c:/x.tar"-like relative names stay paths.
  std::size_t colon = url.find(':');
  if (colon == std::string_view::npos || colon < 2) return "";
  if (!std::isalpha(static_cast<unsigned char>(url[0]))) return "";
  for (std::size_t i = 1; i < colon; ++i) {
    unsigned char c = static_cast<unsigned char>(url[i]);
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return "";
  }
  return lowercase(url.substr(0, colon));
}

std::pair<std::string, std::string> split_authority(const std::string& url) {
  const std::size_t sep = url.find("://");
  if (sep == std::string::npos || url_scheme(url).empty()) return {"", url};
  const std::size_t slash = url.find('/', sep + 3);
  if (slash == std::string::npos) return {url, "/"};
  return {url.substr(0, slash), url.substr(slash)};
}

std::shared_ptr<const Backend> find_backend(const std::string& scheme) {
  BackendTable& table = backends();
  std::lock_guard lock(table.mu);
  auto it = table.by_scheme.find(scheme);
  return it == table.by_scheme.end() ? nullptr : it->second;
}

std::string schemes_that(bool (*has)(const Backend&)) {
  BackendTable& table = backends();
  std::lock_guard lock(table.mu);
  std::string out;
  for (const auto& [scheme, backend] : table.by_scheme) {
    if (!has(*backend)) continue;
    if (!out.empty()) out += ", ";
    out += scheme.empty() ? std::string("local paths") : scheme + ":";
  }
  return out;
}

void register_backend(Backend backend) {
  if (backend.schemes.empty()) {
    throw Error::invalid_argument("register_backend: no scheme given");
  }
  if (!backend.open && !backend.list && !backend.open_sink) {
    throw Error(
        ErrorCode::invalid_argument, "", "",
        "register_backend: no open, list or open_sink for '" + backend.schemes.front() + "'");
  }
  BackendTable& table = backends();
  std::lock_guard lock(table.mu);
  table.add(backend);
}

std::unique_ptr<ByteSource> open_url(const std::string& url, const OpenOptions& options) {
  if (url.empty()) throw Error::invalid_argument(url, "", "empty URL");
  std::string scheme = url == "-" ? "" : url_scheme(url);
  std::shared_ptr<const Backend> backend = find_backend(scheme);
  if (!backend || !backend->open) {
    throw Error::invalid_argument(url, "",
                                  "no source for URL scheme '" + scheme +
                                      "' (register one with wds::register_backend; write ./" + url +
                                      " if this is a local path)");
  }
  // Remote shards go through the cache when one is set; local files need none.
  const CacheOptions* cache = options.backend_options.get<CacheOptions>();
  if (cache && !backend->local) {
    // By value: a damaged cache entry calls it again later, from read().
    return open_cached(url, options, *cache,
                       [url, backend](const OpenOptions& o) { return backend->open(url, o); });
  }
  return backend->open(url, options);
}

std::vector<std::string> resolve_urls(std::string_view pattern, const OpenOptions& options,
                                      const ExpandOptions& expand) {
  std::vector<std::string> out;
  for (std::string& url : expand_urls(pattern, expand)) {
    if (!is_listing_pattern(url)) {
      out.push_back(std::move(url));
      continue;
    }
    std::string scheme = url_scheme(url);
    std::shared_ptr<const Backend> backend = find_backend(scheme);
    if (!backend || !backend->list) {
      throw Error::invalid_argument(
          url, "",
          "cannot list '" + scheme + "' URLs (listed are: " + schemes_that([](const Backend& b) {
            return bool(b.list);
          }) + ")");
    }
    std::vector<std::string> listed = backend->list(url, options);
    out.insert(out.end(), std::make_move_iterator(listed.begin()),
               std::make_move_iterator(listed.end()));
  }
  return out;
}

std::unique_ptr<ByteSource> open_memory(std::string url, Bytes data, std::size_t chunk_size) {
  return std::make_unique<MemorySource>(std::move(url), std::move(data), chunk_size, 0);
}

}  // namespace wds
