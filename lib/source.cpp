// The scheme table behind open_url, and the in-memory source.
#include "wds/source.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include "lib/cache.hpp"
#include "lib/file_source.hpp"
#include "lib/http_source.hpp"
#include "lib/listing.hpp"
#include "lib/pipe_source.hpp"
#include "wds/brace.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

struct SchemeTable {
  std::mutex mu;
  std::map<std::string, SourceFactory> factories;

  SchemeTable() {
    factories[""] = open_file_source;
    factories["file"] = open_file_source;
    factories["http"] = open_http_source;
    factories["https"] = open_http_source;
    factories["s3"] = open_s3_source;
    factories["pipe"] = open_pipe_source;
  }
};

SchemeTable& schemes() {
  static SchemeTable table;
  return table;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
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

void register_scheme(std::string scheme, SourceFactory factory) {
  if (!factory) {
    throw Error(ErrorCode::invalid_argument, "", "",
                "register_scheme: empty factory for '" + scheme + "'");
  }
  SchemeTable& table = schemes();
  std::lock_guard lock(table.mu);
  table.factories[lowercase(scheme)] = std::move(factory);
}

std::unique_ptr<ByteSource> open_url(const std::string& url, const OpenOptions& options) {
  if (url.empty()) throw Error(ErrorCode::invalid_argument, url, "", "empty URL");
  std::string scheme = url == "-" ? "" : url_scheme(url);
  SourceFactory factory;
  {
    SchemeTable& table = schemes();
    std::lock_guard lock(table.mu);
    auto it = table.factories.find(scheme);
    if (it != table.factories.end()) factory = it->second;
  }
  if (!factory) {
    throw Error(ErrorCode::invalid_argument, url, "",
                "no source for URL scheme '" + scheme +
                    "' (register one with wds::register_scheme; write ./" + url +
                    " if this is a local path)");
  }
  // Remote shards go through the cache when one is set; local files need none.
  if (options.cache && !scheme.empty() && scheme != "file") {
    return open_cached(url, options, *options.cache,
                       [&](const OpenOptions& o) { return factory(url, o); });
  }
  return factory(url, options);
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
    std::vector<std::string> listed;
    if (scheme.empty() || scheme == "file") {
      listed = list_local(url);
    } else if (scheme == "s3") {
      listed = list_s3(url, options);
    } else {
      throw Error(ErrorCode::invalid_argument, url, "",
                  "cannot list '" + scheme + "' URLs (only local directories and globs, and s3)");
    }
    out.insert(out.end(), std::make_move_iterator(listed.begin()),
               std::make_move_iterator(listed.end()));
  }
  return out;
}

std::unique_ptr<ByteSource> open_memory(std::string url, Bytes data, std::size_t chunk_size) {
  return std::make_unique<MemorySource>(std::move(url), std::move(data), chunk_size, 0);
}

}  // namespace wds
