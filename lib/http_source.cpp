// HTTP(S) streaming over libcurl.
//
// A transfer thread runs curl_easy_perform; its write callback fills a chunk of its own, outside
// any lock, and publishes it to a bounded queue when it holds kChunk bytes (or the attempt
// ends), waiting while the queue is full; so memory stays bounded and the network overlaps the
// reader's work. read() hands out one published chunk at a time; spent chunks are kept for
// reuse rather than reallocated. Each attempt
// asks for the bytes from the first one not yet delivered (a Range request after the first),
// so a broken transfer resumes exactly where it stopped and nothing is delivered twice. The
// retry hook (OpenOptions::on_retry) is called on the transfer thread, outside the lock.
#include "lib/http_source.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "lib/backends.hpp"
#include "lib/upload_sink.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

// libcurl's global state, set up once, and one share handle so that every transfer in the
// process draws on one cache of open connections (kept alive across shards).
class CurlGlobal {
 public:
  static CurlGlobal& get() {
    static CurlGlobal* instance = new CurlGlobal;  // never destroyed: transfers may outlive main
    return *instance;
  }
  CURLSH* share() const noexcept { return share_; }

 private:
  CurlGlobal() {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    share_ = curl_share_init();
    curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, lock);
    curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, unlock);
    curl_share_setopt(share_, CURLSHOPT_USERDATA, this);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  }
  static void lock(CURL*, curl_lock_data data, curl_lock_access, void* self) {
    static_cast<CurlGlobal*>(self)->mutexes_[data].lock();
  }
  static void unlock(CURL*, curl_lock_data data, void* self) {
    static_cast<CurlGlobal*>(self)->mutexes_[data].unlock();
  }

  CURLSH* share_ = nullptr;
  std::mutex mutexes_[CURL_LOCK_DATA_LAST];
};

}  // namespace

ErrorCode http_status_error_code(long status) {
  switch (status) {
    case 404:
    case 410:
      return ErrorCode::not_found;
    case 401:
    case 403:
      return ErrorCode::permission_denied;
    default:
      return ErrorCode::invalid_argument;
  }
}

bool http_status_transient(long status) {
  return status == 429 || status >= 500;
}

void set_connection_options(CURL* handle, const HttpOptions& options) {
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options.connect_timeout.count()));
  curl_easy_setopt(handle, CURLOPT_LOW_SPEED_LIMIT, options.low_speed_bytes);
  curl_easy_setopt(handle, CURLOPT_LOW_SPEED_TIME,
                   static_cast<long>(options.low_speed_time.count()));
  curl_easy_setopt(handle, CURLOPT_SSL_VERIFYPEER, options.verify_tls ? 1L : 0L);
  curl_easy_setopt(handle, CURLOPT_SSL_VERIFYHOST, options.verify_tls ? 2L : 0L);
  if (!options.ca_file.empty()) curl_easy_setopt(handle, CURLOPT_CAINFO, options.ca_file.c_str());
}

namespace {

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end == s.data()) return std::nullopt;
  return v;
}

class HttpStream final : public ByteSource {
 public:
  HttpStream(std::string url, RequestFactory make, HttpOptions options, std::uint64_t offset,
             ErrorBodySummary summary, std::optional<std::uint64_t> length, RetryHook on_retry)
      : ByteSource(std::move(url)),
        make_(std::move(make)),
        options_(std::move(options)),
        summary_(std::move(summary)),
        on_retry_(std::move(on_retry)),
        next_(offset),
        end_(length ? std::optional<std::uint64_t>(offset + *length) : std::nullopt) {
    CurlGlobal::get();
    thread_ = std::thread([this] { run(); });
  }
  ~HttpStream() override {
    stop_ = true;  // aborts a transfer in progress at its next progress callback
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::span<const std::byte> read() override {
    std::unique_lock lock(mu_);
    if (!out_.empty()) {
      out_.clear();
      spare_.push_back(std::move(out_));  // the last chunk handed out is spent now
      out_ = {};
    }
    cv_.wait(lock, [&] { return !ready_.empty() || finished_; });
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(error_);
      return {};
    }
    out_ = std::move(ready_.front());
    ready_.pop_front();
    queued_ -= out_.size();
    cv_.notify_all();
    return {out_.data(), out_.size()};
  }

  std::optional<std::uint64_t> size() const override {
    std::lock_guard lock(mu_);
    return total_;
  }

 private:
  // What one response said about itself; reset for every response (redirects send several).
  struct Attempt {
    HttpStream* self = nullptr;
    std::uint64_t start = 0;  // the absolute byte asked for
    long status = 0;
    bool checked = false;  // the status was looked at (on the first body byte)
    bool error_body = false;
    std::string body;        // of an error response, first bytes only
    std::uint64_t skip = 0;  // bytes to drop: the server ignored our Range
    bool progressed = false;
    std::optional<std::uint64_t> length, range_start, range_total;
    std::exception_ptr permanent;
  };

  static std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
    auto* a = static_cast<Attempt*>(user);
    std::string_view line(data, size * n);
    if (line.rfind("HTTP/", 0) == 0) {  // a new response: forget the previous one's headers
      a->length.reset();
      a->range_start.reset();
      a->range_total.reset();
      return size * n;
    }
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return size * n;
    std::string name = lowercase(line.substr(0, colon));
    std::string_view value = line.substr(colon + 1);
    if (name == "content-length") {
      a->length = parse_u64(value);
    } else if (name == "content-range") {
      // "bytes START-END/TOTAL" (TOTAL may be '*')
      std::size_t bytes = value.find("bytes");
      if (bytes != std::string_view::npos) {
        std::string_view rest = value.substr(bytes + 5);
        a->range_start = parse_u64(rest);
        std::size_t slash = rest.find('/');
        if (slash != std::string_view::npos) a->range_total = parse_u64(rest.substr(slash + 1));
      }
    }
    return size * n;
  }

  // Called by curl about once a second even when no byte arrives: a stalled transfer stops
  // here at once when the source is destroyed, instead of at the low-speed timeout.
  static int on_progress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<HttpStream*>(self)->stop_.load() ? 1 : 0;
  }

  static std::size_t on_write(char* data, std::size_t size, std::size_t n, void* user) {
    auto* a = static_cast<Attempt*>(user);
    return a->self->write(*a, data, size * n) ? size * n : 0;
  }

  // Looks at the response once its body starts: deliver, skip, or keep as an error body.
  void check(Attempt& a, CURL* handle) {
    a.checked = true;
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &a.status);
    if (a.status < 200 || a.status >= 300) {
      a.error_body = true;
      return;
    }
    std::lock_guard lock(mu_);
    if (a.status == 206) {
      if (!a.range_start || *a.range_start != a.start) {
        a.permanent = std::make_exception_ptr(
            Error(ErrorCode::corrupt_data, url(), "",
                  "asked for bytes from " + std::to_string(a.start) + ", the server sent " +
                      (a.range_start ? "bytes from " + std::to_string(*a.range_start)
                                     : std::string("a partial answer without Content-Range"))));
        return;
      }
      if (a.range_total && !total_) total_ = a.range_total;
    } else {
      // A full answer: to a Range request, the server ignored it; skip what we already have.
      a.skip = a.start;
      if (a.length && !total_) total_ = a.length;
    }
  }

  bool write(Attempt& a, const char* data, std::size_t n) {
    if (!a.checked) check(a, handle_);
    if (a.permanent) return false;
    if (a.error_body) {
      a.body.append(data,
                    std::min<std::size_t>(n, 2048 - std::min<std::size_t>(a.body.size(), 2048)));
      return true;
    }
    std::size_t drop = static_cast<std::size_t>(std::min<std::uint64_t>(a.skip, n));
    a.skip -= drop;
    data += drop;
    n -= drop;
    if (end_) {  // a server that ignored our Range end sends more than asked: stop there
      if (next_ >= *end_) return false;
      n = static_cast<std::size_t>(std::min<std::uint64_t>(n, *end_ - next_));
    }
    if (n == 0) return true;
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    fill_.insert(fill_.end(), bytes, bytes + n);  // no lock: the chunk is not published yet
    next_ += n;
    a.progressed = true;
    return fill_.size() < kChunk || publish();
  }

  // Hands the filled chunk to the reader, waiting while the queue holds buffer_bytes.
  bool publish() {
    if (fill_.empty()) return true;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queued_ < options_.buffer_bytes || cancelled_; });
    if (cancelled_) return false;
    queued_ += fill_.size();
    ready_.push_back(std::move(fill_));
    fill_ = {};
    if (!spare_.empty()) {
      fill_ = std::move(spare_.back());
      spare_.pop_back();
    }
    fill_.reserve(kChunk + 256 * 1024);
    cv_.notify_all();
    return true;
  }

  bool cancelled() {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

  std::string summarize(const std::string& body) const {
    if (summary_) return summary_(body);
    std::string s = body.substr(0, 200);
    for (char& c : s) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    return s;
  }

  void run() {
    try {
      transfer();
    } catch (...) {
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
  }

  void transfer() {
    handle_ = curl_easy_init();
    if (!handle_) throw Error(ErrorCode::unavailable, url(), "", "curl_easy_init failed");
    struct Cleanup {
      CURL* h;
      ~Cleanup() { curl_easy_cleanup(h); }
    } cleanup{handle_};
    int failures = 0;
    for (;;) {
      if (cancelled()) return;
      HttpRequest request = make_();
      Attempt a;
      a.self = this;
      a.start = next_;
      curl_slist* headers = nullptr;
      for (const std::string& h : options_.headers) headers = curl_slist_append(headers, h.c_str());
      for (const std::string& h : request.headers) headers = curl_slist_append(headers, h.c_str());
      if (end_ && a.start >= *end_) return;  // everything asked for is delivered
      std::string range = "Range: bytes=" + std::to_string(a.start) + "-" +
                          (end_ ? std::to_string(*end_ - 1) : std::string());
      if (a.start > 0 || end_) headers = curl_slist_append(headers, range.c_str());
      char errbuf[CURL_ERROR_SIZE] = {0};
      curl_easy_reset(handle_);
      curl_easy_setopt(handle_, CURLOPT_URL, request.url.c_str());
      curl_easy_setopt(handle_, CURLOPT_HTTPHEADER, headers);
      curl_easy_setopt(handle_, CURLOPT_SHARE, CurlGlobal::get().share());
      curl_easy_setopt(handle_, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(handle_, CURLOPT_FOLLOWLOCATION, 1L);
      curl_easy_setopt(handle_, CURLOPT_MAXREDIRS, 5L);
      curl_easy_setopt(handle_, CURLOPT_PROTOCOLS_STR, "http,https");
      curl_easy_setopt(handle_, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
      set_connection_options(handle_, options_);
      curl_easy_setopt(handle_, CURLOPT_BUFFERSIZE, 256L * 1024);
      curl_easy_setopt(handle_, CURLOPT_ERRORBUFFER, errbuf);
      curl_easy_setopt(handle_, CURLOPT_HEADERFUNCTION, on_header);
      curl_easy_setopt(handle_, CURLOPT_HEADERDATA, &a);
      curl_easy_setopt(handle_, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(handle_, CURLOPT_XFERINFOFUNCTION, on_progress);
      curl_easy_setopt(handle_, CURLOPT_XFERINFODATA, this);
      curl_easy_setopt(handle_, CURLOPT_WRITEFUNCTION, on_write);
      curl_easy_setopt(handle_, CURLOPT_WRITEDATA, &a);
      CURLcode rc = curl_easy_perform(handle_);
      curl_slist_free_all(headers);
      if (!publish() || cancelled()) return;
      if (a.permanent) std::rethrow_exception(a.permanent);
      if (end_ && next_ >= *end_) return;  // all asked for (we may have cut the body short)
      if (!a.checked) curl_easy_getinfo(handle_, CURLINFO_RESPONSE_CODE, &a.status);

      std::string failure;
      if (rc == CURLE_OK && a.status >= 200 && a.status < 300) {
        std::optional<std::uint64_t> total = end_ ? end_ : size();
        if (!total || next_ >= *total) return;  // complete
        failure = "the body ended after " + std::to_string(next_) + " of " +
                  std::to_string(*total) + " bytes";
      } else if (rc == CURLE_OK && a.status == 416 && a.start > 0) {
        return;  // nothing left after the bytes already delivered
      } else if (rc == CURLE_OK && a.status >= 300 && !http_status_transient(a.status)) {
        throw Error(http_status_error_code(a.status), url(), "",
                    "HTTP " + std::to_string(a.status) + ": " + summarize(a.body));
      } else if (rc == CURLE_OK) {
        failure = "HTTP " + std::to_string(a.status) + ": " + summarize(a.body);
      } else if (rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT) {
        throw Error(ErrorCode::invalid_argument, url(), "", curl_easy_strerror(rc));
      } else if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
                 rc == CURLE_SSL_CERTPROBLEM) {
        // Trying again cannot make a certificate trusted.
        throw Error(
            ErrorCode::permission_denied, url(), "",
            std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : ""));
      } else {
        failure =
            std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : "");
      }
      // Transient: try again from the first byte not delivered. Attempts that made progress
      // do not count against the limit.
      if (a.progressed) failures = 0;
      if (++failures > options_.max_retries) {
        throw Error(ErrorCode::unavailable, url(), "",
                    failure + " (gave up after " + std::to_string(failures) +
                        " attempts in a row, at byte " + std::to_string(next_) + ")");
      }
      if (on_retry_) {
        on_retry_(Error(ErrorCode::unavailable, url(), "",
                        failure + " (retry " + std::to_string(failures) + " of at most " +
                            std::to_string(options_.max_retries) + ", from byte " +
                            std::to_string(next_) + ")"),
                  failures);
      }
      std::chrono::milliseconds backoff = std::min<std::chrono::milliseconds>(
          options_.initial_backoff * (1LL << std::min(failures - 1, 20)), options_.max_backoff);
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, backoff, [&] { return cancelled_; });
    }
  }

  RequestFactory make_;
  const HttpOptions options_;
  ErrorBodySummary summary_;
  RetryHook on_retry_;      // called on this source's transfer thread
  CURL* handle_ = nullptr;  // the transfer thread's
  mutable std::mutex mu_;
  std::condition_variable cv_;
  static constexpr std::size_t kChunk = 256 * 1024;
  std::vector<std::byte> fill_;                // the transfer thread's chunk being filled
  std::deque<std::vector<std::byte>> ready_;   // published, not yet read
  std::vector<std::vector<std::byte>> spare_;  // read and spent, for reuse
  std::size_t queued_ = 0;                     // bytes in ready_
  std::vector<std::byte> out_;                 // handed to the reader by the last read()
  std::uint64_t next_;                         // absolute position of the next byte to deliver
  std::optional<std::uint64_t> end_;           // one past the last byte asked for
  std::optional<std::uint64_t> total_;
  bool finished_ = false;
  bool cancelled_ = false;
  std::atomic<bool> stop_{false};  // cancelled_, readable without the lock
  std::exception_ptr error_;
  std::thread thread_;  // last: started when everything else is ready
};

}  // namespace

std::unique_ptr<ByteSource> open_http_stream(std::string url, RequestFactory make,
                                             const HttpOptions& options, std::uint64_t offset,
                                             ErrorBodySummary summary,
                                             std::optional<std::uint64_t> length,
                                             RetryHook on_retry) {
  return std::make_unique<HttpStream>(std::move(url), std::move(make), options, offset,
                                      std::move(summary), length, std::move(on_retry));
}

std::string http_get_body(const std::string& url, const RequestFactory& make,
                          const HttpOptions& options, ErrorBodySummary summary,
                          RetryHook on_retry) {
  auto stream = open_http_stream(url, make, options, 0, std::move(summary), std::nullopt,
                                 std::move(on_retry));
  std::string body;
  for (auto chunk = stream->read(); !chunk.empty(); chunk = stream->read()) {
    body.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
  }
  return body;
}

std::unique_ptr<ByteSource> open_http_source(const std::string& url, const OpenOptions& options) {
  const HttpOptions& http = options_of(options.backend_options, options.http.get());
  RequestFactory make = [url] { return HttpRequest{url, {}}; };
  return open_http_stream(url, make, http, options.offset, nullptr, options.length,
                          options.on_retry);
}

Backend http_backend() {
  return Backend{
      .schemes = {"http", "https"},
      .open = open_http_source,
      .open_sink = open_http_sink,
  };
}

}  // namespace wds
