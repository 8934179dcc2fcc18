// hf:// files of the Hugging Face Hub: reads through the HTTP byte sources from the Hub's
// resolve URLs (following its redirect to the CDN, where the token does not go), listings
// through its tree API page by page, and a branch or tag pinned to its commit once per process
// (lib/storage/hf.hpp has the URLs, the token and the JSON).
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

#include "lib/fork.hpp"
#include "lib/sha256.hpp"
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
  Bytes lend(std::span<const std::byte> part) override { return inner_->lend(part); }

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
// an anonymous caller never sees what a token listed). Never destroyed: the lock is held across
// fork().
template <class T>
class Memo {
 public:
  Memo() { detail::hold_across_fork(mu_); }
  ~Memo() = delete;  // made with new, never destroyed
  Memo(const Memo&) = delete;
  Memo& operator=(const Memo&) = delete;

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

// What one process of a job resolved, kept in the cache directory (CacheOptions::dir) for the
// job's other processes on the machine (or sharing the directory): a branch's commit, per job,
// and a listing at a commit, which never changes. So a job of many ranks and workers asks the
// Hub once per machine, not once per process. Files are named by a hash of what was asked (the
// token included); the first process to publish one wins, so all agree. Anything that fails
// here (a read-only directory) only leaves the answer unshared.
class SharedAnswers {
 public:
  explicit SharedAnswers(const BackendOptions& options)
      : dir_(options_of<CacheOptions>(options).dir) {}

  // The job's id: WDS_JOB_ID, else the launcher's (torchrun, SLURM, Open MPI, PMIx); none: a
  // branch is resolved per process, as a new job must see the branch as it is now.
  static std::optional<std::string> job_id() {
    for (const char* name : {"WDS_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
                             "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}) {
      const char* value = std::getenv(name);
      if (value != nullptr && *value != '\0') return std::string(name) + "=" + value;
    }
    return std::nullopt;
  }

  bool enabled() const { return !dir_.empty(); }

  std::optional<std::string> find(std::string_view kind, const std::string& key) const {
    std::ifstream in(path(kind, key), std::ios::binary);
    if (!in) return std::nullopt;
    std::string value((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (value.empty()) return std::nullopt;
    return value;
  }

  // Publishes `value` unless another process did first; returns the value published.
  std::string publish(std::string_view kind, const std::string& key, const std::string& value) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    const std::filesystem::path final_path = path(kind, key);
    // Written whole under a name of its own, then linked into place: a reader never sees part
    // of it, and link() (unlike rename) fails when the name exists.
    const std::string temp =
        final_path.string() + ".tmp." + std::to_string(::getpid()) + "." +
        std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      out << value;
      if (!out.flush()) {
        std::filesystem::remove(temp, ec);
        return value;
      }
    }
    const int linked = ::link(temp.c_str(), final_path.c_str());
    const int err = errno;
    std::filesystem::remove(temp, ec);
    if (linked != 0 && err == EEXIST) {
      if (std::optional<std::string> theirs = find(kind, key)) return *theirs;
    }
    return value;
  }

 private:
  std::filesystem::path path(std::string_view kind, const std::string& key) const {
    return std::filesystem::path(dir_) /
           ("hf-" + std::string(kind) + "-" + sha256_hex(key).substr(0, 32));
  }
  std::string dir_;
};

// A listing as a shared answer holds it: one URL per line.
std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += (text.empty() ? "" : "\n") + line;
  return text;
}
std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    lines.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

// The commit to read at: a branch or tag resolved once per process (once per job with a cache
// directory and a job id), so that every shard reads the same commit even when the branch moves
// meanwhile.
std::string pinned_revision(const Context& c, const std::string& url, const RetryHook& on_retry,
                            SharedAnswers shared) {
  const std::string revision = revision_of(c);
  if (!c.options.pin_revision || hf::is_commit(revision)) return revision;
  static auto& commits = *new Memo<std::string>;
  const std::string api = hf::api_url(c.config.endpoint, c.location, "revision", revision);
  const std::string key = api + "\n" + c.config.token;
  if (std::optional<std::string> known = commits.find(key)) return *known;
  const std::optional<std::string> job = shared.enabled() ? SharedAnswers::job_id() : std::nullopt;
  const std::string job_key = job ? *job + "\n" + key : std::string();
  if (job) {
    std::optional<std::string> known = shared.find("revision", job_key);
    if (known && hf::is_commit(*known)) return commits.store(key, *known);
  }
  const http::Response r = api_get(c, url, api, "revision " + revision, on_retry);
  std::string commit;
  try {
    commit = hf::parse_commit(r.body);
  } catch (const Error& e) {
    rethrow_for(url, e);
  }
  if (job) {
    std::string published = shared.publish("revision", job_key, commit);
    if (hf::is_commit(published)) commit = std::move(published);
  }
  return commits.store(key, commit);
}

std::unique_ptr<ByteSource> open_hf_source(const std::string& url, const OpenOptions& options) {
  Context c = context_for(url, options);
  if (c.location.path.empty() || c.location.path.back() == '/') {
    throw Error::invalid_argument(
        url, "", "names no file (a folder is listed by resolve_urls, with a trailing '/' or '*')");
  }
  const std::string revision =
      pinned_revision(c, url, options.on_retry, SharedAnswers(options.backend_options));
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

  static auto& listings = *new Memo<std::vector<std::string>>;
  const std::string key = hf::api_url(c.config.endpoint, c.location, "tree", revision_of(c), path) +
                          "\n" + c.config.token;
  if (std::optional<std::vector<std::string>> known = listings.find(key)) return *known;

  SharedAnswers shared(options.backend_options);
  const std::string revision = pinned_revision(c, pattern, options.on_retry, shared);
  std::string page = hf::api_url(c.config.endpoint, c.location, "tree", revision, folder) +
                     (recursive ? "?recursive=true" : "");
  // At a commit the listing never changes: another process's is as good as ours.
  const bool share = shared.enabled() && hf::is_commit(revision);
  const std::string shared_key = page + "\n" + path + "\n" + c.config.token;
  if (share) {
    if (std::optional<std::string> known = shared.find("listing", shared_key)) {
      std::vector<std::string> urls = split_lines(*known);
      const bool valid = !urls.empty() && std::all_of(urls.begin(), urls.end(), [](auto& u) {
        return u.starts_with("hf://");
      });
      if (valid) return listings.store(key, std::move(urls));
    }
  }
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
  if (share) shared.publish("listing", shared_key, join_lines(urls));
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
