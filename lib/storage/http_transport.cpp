// The libcurl transport: one easy handle per Connection, all sharing one connection cache.
#include "lib/storage/http_transport.hpp"

#include <curl/curl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>

#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds::http {
namespace {

// libcurl's global state, set up once, and one share handle so that every transfer in the
// process draws on one cache of open connections (kept alive across shards and uploads).
//
// A process forked from this one (a DataLoader's worker) gets a share handle of its own. The
// connections it inherits are its parent's, and its siblings' too: two processes that send
// requests on one connection read each other's responses. The inherited handle is left
// untouched, never cleaned up: curl would end TLS sessions the parent still uses, and its locks
// may be held by a thread fork() did not copy.
class CurlGlobal {
 public:
  // Never destroyed: transfers may outlive main.
  static CurlGlobal& get() {
    static const bool once = [] {
      current().store(new CurlGlobal, std::memory_order_release);
      // In the child, at once: it has one thread until it makes more.
      pthread_atfork(nullptr, nullptr, [] {
        auto* own = new CurlGlobal;
        own->inherited_ = current().load(std::memory_order_acquire);
        current().store(own, std::memory_order_release);
      });
      return true;
    }();
    (void)once;
    return *current().load(std::memory_order_acquire);
  }
  CURLSH* share() const noexcept { return share_; }

 private:
  static std::atomic<CurlGlobal*>& current() {
    static std::atomic<CurlGlobal*> instance{nullptr};
    return instance;
  }

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
  CurlGlobal* inherited_ = nullptr;  // the parent's, in a forked child: kept, never used
};

// The state of one perform() that curl's callbacks reach.
struct Call {
  ResponseHandler* handler;
  const Body* body;
  std::uint64_t sent = 0;  // bytes of the body handed to curl
  int read_errno = 0;
  bool stepped = false;  // moved on by Transfer::step, which may pause it
  bool paused = false;   // the write callback paused the transfer
  CURL* handle = nullptr;
};

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* call = static_cast<Call*>(user);
  std::string_view line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {  // "HTTP/1.1 206 Partial Content": a new response
    std::string_view rest =
        line.substr(line.find(' ') == std::string_view::npos ? line.size() : line.find(' ') + 1);
    long status = 0;
    std::from_chars(rest.data(), rest.data() + rest.size(), status);
    call->handler->on_status(status);
    return size * n;
  }
  std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  call->handler->on_header(lowercase(trim(line.substr(0, colon))), trim(line.substr(colon + 1)));
  return size * n;
}

// Whether the response on `h` came over HTTP/1.x.
bool http1(CURL* h) {
  long version = 0;
  curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &version);
  return version == CURL_HTTP_VERSION_1_0 || version == CURL_HTTP_VERSION_1_1;
}

std::size_t on_write(char* data, std::size_t size, std::size_t n, void* user) {
  auto* call = static_cast<Call*>(user);
  // curl reads on while the socket has bytes (up to 100 reads of 256 KiB in one step), so a
  // stepped transfer pauses once its caller has enough for now. Pausing by returning
  // CURL_WRITEFUNC_PAUSE has curl copy the rest of its read into a buffer of its own until the
  // next step (bench/README.md, "Object stores"). So over HTTP/1 the read in hand is taken whole
  // (curl hands it over in pieces of 16 KiB) and receiving is paused after it, which ends curl's
  // loop before its next read. Both directions: with one, curl reads once more at its next perform.
  // Over HTTP/2 only a refused piece closes the stream's flow-control window, so there the next
  // piece is refused.
  if (call->stepped && !call->paused && call->handler->paused()) {
    call->paused = true;  // enough before this piece (over HTTP/2, or a piece curl kept)
    return CURL_WRITEFUNC_PAUSE;
  }
  if (!call->handler->on_body({reinterpret_cast<const std::byte*>(data), size * n})) return 0;
  if (call->stepped && !call->paused && !call->body && call->handler->paused() &&
      http1(call->handle)) {
    call->paused = true;
    curl_easy_pause(call->handle, CURLPAUSE_ALL);
  }
  return size * n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<Call*>(user)->handler->cancelled() ? 1 : 0;
}

std::size_t on_read(char* buffer, std::size_t size, std::size_t n, void* user) {
  auto* call = static_cast<Call*>(user);
  const Body& b = *call->body;
  std::size_t want =
      static_cast<std::size_t>(std::min<std::uint64_t>(size * n, b.length - call->sent));
  if (want == 0) return 0;
  if (b.fd < 0) {
    std::memcpy(buffer, b.memory.data() + call->sent, want);
    call->sent += want;
    return want;
  }
  for (;;) {
    ssize_t r = ::pread(b.fd, buffer, want, static_cast<off_t>(b.offset + call->sent));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      call->read_errno = r < 0 ? errno : EIO;  // 0: the file is shorter than it was written
      return CURL_READFUNC_ABORT;
    }
    call->sent += static_cast<std::uint64_t>(r);
    return static_cast<std::size_t>(r);
  }
}

// curl rewinds the body to send it again (a reused connection that turned out dead).
int on_seek(void* user, curl_off_t offset, int origin) {
  auto* call = static_cast<Call*>(user);
  if (origin != SEEK_SET) return CURL_SEEKFUNC_CANTSEEK;
  if (offset < 0 || static_cast<std::uint64_t>(offset) > call->body->length) {
    return CURL_SEEKFUNC_FAIL;
  }
  call->sent = static_cast<std::uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

// What one request on an easy handle needs while it runs: the state curl's callbacks reach, its
// header list and curl's error message.
struct CurlRequest {
  Call call;
  curl_slist* headers = nullptr;
  char errbuf[CURL_ERROR_SIZE] = {0};

  CurlRequest(const Request& request, ResponseHandler& handler) : call{&handler, request.body} {
    for (const std::string& h : request.headers) headers = curl_slist_append(headers, h.c_str());
  }
  ~CurlRequest() { curl_slist_free_all(headers); }
  CurlRequest(const CurlRequest&) = delete;
  CurlRequest& operator=(const CurlRequest&) = delete;

  // Sets the handle up for `request` (nothing of an earlier request's stays on it).
  void configure(CURL* h, const Request& request, const HttpOptions& options) {
    curl_easy_reset(h);
    call.handle = h;
    curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
    if (request.method != "GET") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_SHARE, CurlGlobal::get().share());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, request.follow_redirects ? 1L : 0L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(options.connect_timeout.count()));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, options.low_speed_bytes);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.low_speed_time.count()));
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, options.verify_tls ? 1L : 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, options.verify_tls ? 2L : 0L);
    if (!options.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, options.ca_file.c_str());
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &call);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &call);
    // The progress callback runs about once a second even when no byte arrives, so that a
    // stalled transfer ends at once when its reader is gone.
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &call);
    if (request.body) {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body->length));
      curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(h, CURLOPT_READDATA, &call);
      curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
      curl_easy_setopt(h, CURLOPT_SEEKDATA, &call);
      curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
    }
  }

  // How the request ended, from curl's result; and nothing of this request's stays on the
  // handle, which outlives it.
  Outcome finish(CURL* h, CURLcode rc) {
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
    Outcome out;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out.status);
    out.read_errno = call.read_errno;
    out.error = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : "");
    switch (rc) {
      case CURLE_OK:
        out.kind = Outcome::Kind::responded;
        out.error.clear();
        break;
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
        out.kind = Outcome::Kind::bad_url;
        out.error = curl_easy_strerror(rc);
        break;
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
        out.kind = Outcome::Kind::untrusted;
        break;
      case CURLE_TOO_MANY_REDIRECTS:
        out.kind = Outcome::Kind::redirects;
        break;
      case CURLE_WRITE_ERROR:
      case CURLE_ABORTED_BY_CALLBACK:
        out.kind = Outcome::Kind::aborted;
        break;
      default:
        out.kind = call.read_errno ? Outcome::Kind::aborted : Outcome::Kind::failed;
        break;
    }
    return out;
  }
};

// A request stepped by its caller through a multi handle of the connection's own: curl moves it
// on only inside step(), so the response handler runs on the caller's thread and no thread
// waits for the network in its place.
class CurlTransfer final : public Transfer {
 public:
  CurlTransfer(CURLM* multi, CURL* handle, const Request& request, ResponseHandler& handler,
               const HttpOptions& options)
      : multi_(multi), handle_(handle), request_(request, handler) {
    request_.call.stepped = true;
    request_.configure(handle_, request, options);
    if (CURLMcode rc = curl_multi_add_handle(multi_, handle_); rc != CURLM_OK) {
      ended_ = request_.finish(handle_, CURLE_OUT_OF_MEMORY);
      ended_->error = std::string("curl_multi_add_handle: ") + curl_multi_strerror(rc);
      return;
    }
    added_ = true;
    int running = 0;
    curl_multi_perform(multi_, &running);  // the request goes out (a new connection: starts)
  }
  ~CurlTransfer() override {
    if (!added_) return;
    // A transfer removed before its end closes its connection rather than returning it.
    curl_multi_remove_handle(multi_, handle_);
    request_.finish(handle_, CURLE_OK);
  }

  std::optional<Outcome> step(std::chrono::milliseconds wait) override {
    if (ended_) return ended_;
    if (request_.call.paused) {
      request_.call.paused = false;
      curl_easy_pause(handle_, CURLPAUSE_CONT);  // hands over the kept piece (or pauses again)
    }
    if (std::optional<Outcome> done = perform()) return done;
    if (request_.call.paused) return std::nullopt;  // the caller has enough for now
    if (wait.count() > 0) {
      curl_multi_poll(multi_, nullptr, 0, static_cast<int>(wait.count()), nullptr);
      return perform();
    }
    return std::nullopt;
  }

 private:
  std::optional<Outcome> perform() {
    int running = 0;
    if (CURLMcode rc = curl_multi_perform(multi_, &running); rc != CURLM_OK) {
      return end(CURLE_OUT_OF_MEMORY,
                 std::string("curl_multi_perform: ") + curl_multi_strerror(rc));
    }
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
      if (m->msg == CURLMSG_DONE && m->easy_handle == handle_) return end(m->data.result, "");
    }
    return std::nullopt;
  }
  Outcome end(CURLcode rc, const std::string& error) {
    curl_multi_remove_handle(multi_, handle_);
    added_ = false;
    ended_ = request_.finish(handle_, rc);
    if (!error.empty()) ended_->error = error;
    return *ended_;
  }

  CURLM* multi_;
  CURL* handle_;
  CurlRequest request_;
  bool added_ = false;
  std::optional<Outcome> ended_;
};

class CurlConnection final : public Connection {
 public:
  explicit CurlConnection(const HttpOptions& options) : options_(options) {
    handle_ = curl_easy_init();
    if (!handle_) throw Error::unavailable("curl_easy_init failed");
  }
  ~CurlConnection() override {
    curl_easy_cleanup(handle_);
    if (multi_) curl_multi_cleanup(multi_);
  }

  Outcome perform(const Request& request, ResponseHandler& handler) override {
    CurlRequest r(request, handler);
    r.configure(handle_, request, options_);
    CURLcode rc = curl_easy_perform(handle_);
    return r.finish(handle_, rc);
  }

  std::unique_ptr<Transfer> start(const Request& request, ResponseHandler& handler) override {
    if (!multi_) {
      multi_ = curl_multi_init();
      if (!multi_) throw Error::unavailable("curl_multi_init failed");
    }
    return std::make_unique<CurlTransfer>(multi_, handle_, request, handler, options_);
  }

 private:
  const HttpOptions options_;
  CURL* handle_ = nullptr;
  CURLM* multi_ = nullptr;  // for start(): made on first use
};

class CurlTransport final : public Transport {
 public:
  std::unique_ptr<Connection> connect(const HttpOptions& options) override {
    CurlGlobal::get();
    return std::make_unique<CurlConnection>(options);
  }
};

}  // namespace

// By default a started request runs whole in its first step.
std::unique_ptr<Transfer> Connection::start(const Request& request, ResponseHandler& handler) {
  class PerformOnStep final : public Transfer {
   public:
    PerformOnStep(Connection& c, const Request& r, ResponseHandler& h) : c_(c), r_(r), h_(h) {}
    std::optional<Outcome> step(std::chrono::milliseconds) override { return c_.perform(r_, h_); }

   private:
    Connection& c_;
    const Request& r_;
    ResponseHandler& h_;
  };
  return std::make_unique<PerformOnStep>(*this, request, handler);
}

std::optional<std::string> url_problem(const std::string& url) {
  CurlGlobal::get();
  CURLU* u = curl_url();
  if (!u) throw Error::unavailable(url, "", "curl_url: out of memory");
  char* host = nullptr;
  CURLUcode rc = curl_url_set(u, CURLUPART_URL, url.c_str(), 0);
  if (rc == CURLUE_OK) rc = curl_url_get(u, CURLUPART_HOST, &host, 0);
  const bool has_host = rc == CURLUE_OK && host && *host;
  curl_free(host);
  curl_url_cleanup(u);
  // curl takes "http:///x" for "http://x"; here it is a URL without a host.
  const std::size_t sep = url.find("://");
  if (sep != std::string::npos && url.compare(sep + 3, 1, "/") == 0) rc = CURLUE_NO_HOST;
  if (has_host && rc == CURLUE_OK) return std::nullopt;
  return rc == CURLUE_OK ? std::string("no host") : std::string(curl_url_strerror(rc));
}

std::shared_ptr<Transport> curl_transport() {
  static const std::shared_ptr<Transport> transport = std::make_shared<CurlTransport>();
  return transport;
}

}  // namespace wds::http
