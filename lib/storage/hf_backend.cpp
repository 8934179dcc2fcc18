// hf:// files of the Hugging Face Hub: reads through the HTTP byte sources from the Hub's
// resolve URLs (following its redirect to the CDN, where the token does not go), listings
// through its tree API page by page, and a branch or tag pinned to its commit once per process
// (lib/storage/hf.hpp has the URLs, the token and the JSON).
#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "lib/storage/backends.hpp"
#include "lib/storage/hf.hpp"
#include "lib/storage/http_client.hpp"
#include "lib/storage/http_source.hpp"
#include "lib/storage/s3_backend.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

// Kept of an API answer: a tree page of 1000 entries is a few hundred KiB.
constexpr std::size_t kMaxApiBody = std::size_t{16} << 20;

struct Context {
  hf::Location location;
  hf::Config config;
  HfOptions options;
  HttpOptions http;
  std::shared_ptr<http::Transport> transport;
};

Context context_for(const std::string& url, const OpenOptions& options) {
  Context c;
  c.location = hf::parse_hf_url(url);  // its errors name the URL
  c.options = options_of<HfOptions>(options.backend_options);
  try {
    c.config = hf::resolve_config(c.options);
  } catch (const Error& e) {
    rethrow_for(url, e);
  }
  c.http = options_of<HttpOptions>(options.backend_options);
  c.transport = http::transport_for(options.backend_options);
  return c;
}

// The revision as asked for: the URL's, else HfOptions::revision, else main.
std::string revision_of(const Context& c) {
  if (c.location.revision) return *c.location.revision;
  return c.options.revision.empty() ? std::string("main") : c.options.revision;
}

// The token goes to the endpoint only: not to a next-page link elsewhere (and curl drops it on
// a redirect to another host).
std::vector<std::string> auth_for(const Context& c, const std::string& url) {
  if (c.config.token.empty() || url.rfind(c.config.endpoint + "/", 0) != 0) return {};
  return {"Authorization: Bearer " + c.config.token};
}

http::Summary summary() {
  return [](const std::string& body) { return hf::error_summary(body); };
}

// What a 401 or 403 adds: how to give a token, or that the one given does not do.
std::string access_hint(const Context& c) {
  if (c.config.token.empty()) {
    return " (a private or gated repository needs a token: set HF_TOKEN, or log in with "
           "`hf auth login`)";
  }
  return " (the token from " + c.config.token_source +
         " cannot read it; a gated repository also needs its conditions accepted on the Hub)";
}

[[noreturn]] void rethrow_with_hint(const Context& c, const std::string& url, const Error& e) {
  if (e.code() == ErrorCode::permission_denied) {
    throw Error(e.code(), url, e.member(), e.cause() + access_hint(c));
  }
  rethrow_for(url, e);
}

// A byte source whose access errors say how to give a token.
class AccessHintSource final : public ByteSource {
 public:
  AccessHintSource(std::unique_ptr<ByteSource> inner, std::string hint)
      : ByteSource(inner->url()), inner_(std::move(inner)), hint_(std::move(hint)) {}

  std::span<const std::byte> read() override {
    try {
      return inner_->read();
    } catch (const Error& e) {
      if (e.code() != ErrorCode::permission_denied) throw;
      throw Error(e.code(), e.url(), e.member(), e.cause() + hint_);
    }
  }
  std::optional<std::uint64_t> size() const override { return inner_->size(); }

 private:
  std::unique_ptr<ByteSource> inner_;
  std::string hint_;
};

// One API request (`what` names it in errors), retried as every request is.
http::Response api_get(const Context& c, const std::string& url, const std::string& api,
                       const std::string& what, const RetryHook& on_retry) {
  try {
    http::Client client(url, c.http, c.transport, summary(), on_retry);
    client.keep_body(kMaxApiBody);
    http::Response r = client.send(what, [&] {
      http::Request request = client.request("GET", api, auth_for(c, api));
      request.follow_redirects = true;  // a renamed repository
      return request;
    });
    if (r.body.size() >= kMaxApiBody) {
      throw Error::corrupt_data(url, "", what + ": an answer larger than 16 MiB");
    }
    return r;
  } catch (const Error& e) {
    rethrow_with_hint(c, url, e);
  }
}

// Memos shared by every thread of the process, keyed by what was asked and the token (so
// an anonymous caller never sees what a token listed).
template <class T>
class Memo {
 public:
  std::optional<T> find(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = values_.find(key);
    return it == values_.end() ? std::nullopt : std::optional<T>(it->second);
  }
  // The first value stored for `key` wins, so that threads racing agree.
  T store(const std::string& key, T value) {
    std::lock_guard lock(mu_);
    return values_.emplace(key, std::move(value)).first->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, T> values_;
};

// The commit to read at: a branch or tag resolved once per process, so that every shard reads
// the same commit even when the branch moves meanwhile.
std::string pinned_revision(const Context& c, const std::string& url, const RetryHook& on_retry) {
  const std::string revision = revision_of(c);
  if (!c.options.pin_revision || hf::is_commit(revision)) return revision;
  static Memo<std::string> commits;
  const std::string api = hf::api_url(c.config.endpoint, c.location, "revision", revision);
  const std::string key = api + "\n" + c.config.token;
  if (std::optional<std::string> known = commits.find(key)) return *known;
  const http::Response r = api_get(c, url, api, "revision " + revision, on_retry);
  try {
    return commits.store(key, hf::parse_commit(r.body));
  } catch (const Error& e) {
    rethrow_for(url, e);
  }
}

std::unique_ptr<ByteSource> open_hf_source(const std::string& url, const OpenOptions& options) {
  Context c = context_for(url, options);
  if (c.location.path.empty() || c.location.path.back() == '/') {
    throw Error::invalid_argument(
        url, "", "names no file (a folder is listed by resolve_urls, with a trailing '/' or '*')");
  }
  const std::string revision = pinned_revision(c, url, options.on_retry);
  const std::string file_url =
      hf::resolve_url(c.config.endpoint, c.location, revision, c.location.path);
  auto source = open_http_body(
      url,
      [file_url, headers = auth_for(c, file_url)] {
        return http::Request{.url = file_url, .headers = headers};
      },
      c.http, options.offset, summary(), options.length, options.on_retry, c.transport,
      parts_of(options));
  return std::make_unique<AccessHintSource>(std::move(source), access_hint(c));
}

std::vector<std::string> list_hf(const std::string& pattern, const OpenOptions& options) {
  Context c = context_for(pattern, options);
  const std::string& path = c.location.path;
  const std::size_t star = path.find('*');
  const std::string before = path.substr(0, star == std::string::npos ? path.size() : star);
  const std::size_t cut = before.rfind('/');
  const std::string folder = cut == std::string::npos ? std::string() : before.substr(0, cut);
  // One level, as a directory listing is, unless the glob reaches into subfolders.
  const bool recursive = star != std::string::npos && path.find('/', star) != std::string::npos;

  static Memo<std::vector<std::string>> listings;
  const std::string key = hf::api_url(c.config.endpoint, c.location, "tree", revision_of(c), path) +
                          "\n" + c.config.token;
  if (std::optional<std::vector<std::string>> known = listings.find(key)) return *known;

  const std::string revision = pinned_revision(c, pattern, options.on_retry);
  std::string page = hf::api_url(c.config.endpoint, c.location, "tree", revision, folder) +
                     (recursive ? "?recursive=true" : "");
  std::vector<std::string> urls;
  for (int n = 1;; ++n) {
    const http::Response r =
        api_get(c, pattern, page, "tree page " + std::to_string(n), options.on_retry);
    std::vector<hf::TreeEntry> entries;
    try {
      entries = hf::parse_tree(r.body);
    } catch (const Error& e) {
      rethrow_for(pattern, e);
    }
    for (const hf::TreeEntry& e : entries) {
      if (!e.is_file) continue;
      const bool match =
          star != std::string::npos
              ? ::fnmatch(path.c_str(), e.path.c_str(), FNM_PATHNAME) == 0
              : e.path.rfind(path, 0) == 0 && e.path.find('/', path.size()) == std::string::npos;
      if (match) urls.push_back(hf::hf_url(c.location, revision, e.path));
    }
    std::optional<std::string> next = hf::next_link(r.link);
    if (!next || next->empty()) break;
    if (next->front() == '/') *next = c.config.endpoint + *next;
    if (*next == page) {
      throw Error::corrupt_data(pattern, "", "the Hub's tree page links to itself as the next");
    }
    page = std::move(*next);
  }
  if (urls.empty()) throw Error::not_found(pattern, "", "no files match");
  std::sort(urls.begin(), urls.end());
  return listings.store(key, std::move(urls));
}

}  // namespace

Backend hf_backend() {
  return Backend{
      .schemes = {"hf"},
      .open = open_hf_source,
      .list = list_hf,
  };
}

}  // namespace wds
