// Upload sinks: s3:// and http(s):// spool the written bytes to an unlinked temporary file and
// upload it on close() with libcurl (S3 signed by lib/s3's SigV4 signer, as a multipart upload
// above a threshold); pipe: feeds a shell command's standard input.
//
// Spooling hashes as it writes: the SHA-256 of the whole object (needed only while the object
// can still go up in one PUT, so it stops past the threshold) and of every part_size piece, so
// that close() reads the file once, to send it. Each request is made afresh for every attempt
// (a signature covers the time) and its body is read from the file with pread, so an attempt
// can start over, and curl can rewind, at no cost.
#include "lib/upload_sink.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "lib/backends.hpp"
#include "lib/file_source.hpp"
#include "lib/http_source.hpp"
#include "lib/pipe_source.hpp"
#include "lib/s3.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kMinPart = 5 * kMiB;         // S3: every part but the last
constexpr std::uint64_t kMaxPart = 5 * 1024 * kMiB;  // S3: 5 GiB per part or single PUT
constexpr std::uint64_t kMaxParts = 10000;           // S3: parts per upload
constexpr std::size_t kSpoolBuffer = 1 << 20;        // writes gathered before write(2)
constexpr std::size_t kMaxResponseBody = 64 * 1024;  // kept of any response's body
constexpr int kAbortRetries = 2;                     // AbortMultipartUpload, best effort

// ---- SHA-256 ----------------------------------------------------------------------------------

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_) throw Error(ErrorCode::unavailable, "", "", "OpenSSL: out of memory");
    reset();
  }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void reset() {
    if (!EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr)) failed();
  }
  void update(const void* data, std::size_t n) {
    if (n && !EVP_DigestUpdate(ctx_, data, n)) failed();
  }
  // The lowercase hex digest; the object is reset for the next message.
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!EVP_DigestFinal_ex(ctx_, md, &len)) failed();
    reset();
    return s3::to_hex(md, len);
  }

 private:
  [[noreturn]] static void failed() {
    throw Error(ErrorCode::unavailable, "", "", "OpenSSL SHA-256 failed");
  }
  EVP_MD_CTX* ctx_;
};

// ---- the spool file ---------------------------------------------------------------------------

std::string temp_dir() {
  const char* d = std::getenv("TMPDIR");
  return d && *d ? d : "/tmp";
}

// An unlinked file open for reading and writing: O_TMPFILE where the file system has it, else
// mkstemp and unlink at once.
int open_spool(const std::string& url) {
  const std::string dir = temp_dir();
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
    throw_errno(url, "create a spool file in " + dir, errno);
  }
  std::string name = dir + "/wds-upload-XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) throw_errno(url, "create a spool file in " + dir, errno);
  ::unlink(name.c_str());
  return fd;
}

void write_all(int fd, const std::byte* p, std::size_t n, const std::string& url) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno(url, "write to the spool file in " + temp_dir(), errno);
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Reads exactly n bytes at offset, or throws.
void pread_all(int fd, std::byte* p, std::size_t n, std::uint64_t offset, const std::string& url) {
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno(url, "read the spool file", errno);
    if (r == 0)
      throw Error(ErrorCode::unavailable, url, "", "the spool file is shorter than written");
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

// ---- HTTP requests over libcurl ---------------------------------------------------------------

void curl_init_once() {
  static const bool done = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return true;
  }();
  (void)done;
}

struct Request {
  std::string method;                // "PUT", "POST", "DELETE"
  std::string url;                   // as sent
  std::vector<std::string> headers;  // "Name: value"
};
// Called for every attempt, so that a signed request gets a fresh date.
using MakeRequest = std::function<Request()>;

// A request body: length bytes of the file from offset, or `memory` when fd < 0.
struct Body {
  int fd = -1;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string_view memory;
};

struct Response {
  long status = 0;
  std::string body;  // the first kMaxResponseBody bytes
  std::string etag;  // the ETag header, as sent (quotes included)
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Sends requests for one sink on one curl handle (so its connection is reused), with the
// retries and error mapping of the HTTP source.
class Client {
 public:
  using Summary = std::function<std::string(const std::string& body)>;

  Client(std::string url, HttpOptions options, Summary summary)
      : url_(std::move(url)), options_(std::move(options)), summary_(std::move(summary)) {
    curl_init_once();
    handle_ = curl_easy_init();
    if (!handle_) throw Error(ErrorCode::unavailable, url_, "", "curl_easy_init failed");
  }
  ~Client() { curl_easy_cleanup(handle_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends the request (with `body` when given) until it gets a 2xx answer, and returns that.
  // `what` names the request in errors ("PUT", "UploadPart 2 of 3"). With
  // error_body_is_transient, a 2xx whose body is an S3 <Error> document counts as a failure to
  // retry (CompleteMultipartUpload's way of failing late). Retries: options.max_retries, or
  // `retries` when set.
  Response send(const std::string& what, const MakeRequest& make, const std::optional<Body>& body,
                bool error_body_is_transient = false, std::optional<int> retries = std::nullopt) {
    const int max_retries = retries ? *retries : options_.max_retries;
    int failures = 0;
    for (;;) {
      Request request = make();
      Attempt a;
      if (body) a.body = &*body;
      curl_slist* headers = nullptr;
      for (const std::string& h : options_.headers) headers = curl_slist_append(headers, h.c_str());
      for (const std::string& h : request.headers) headers = curl_slist_append(headers, h.c_str());
      char errbuf[CURL_ERROR_SIZE] = {0};
      CURL* h = handle_;
      curl_easy_reset(h);
      curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
      curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
      // Not followed: a redirected upload would carry a signature or credentials elsewhere.
      curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
      curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
      set_connection_options(h, options_);
      curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
      curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
      curl_easy_setopt(h, CURLOPT_HEADERDATA, &a);
      curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
      curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
      if (body) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body->length));
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, &a);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, &a);
        curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
      }
      CURLcode rc = curl_easy_perform(h);
      // Nothing of this attempt's stays on the handle, which outlives it.
      curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
      curl_slist_free_all(headers);
      if (a.read_errno) throw_errno(url_, what + ": read the spool file", a.read_errno);
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a.response.status);
      const long status = a.response.status;

      std::string failure;
      if (rc == CURLE_OK && status >= 200 && status < 300) {
        if (!error_body_is_transient || !s3::is_error_document(a.response.body)) {
          return std::move(a.response);
        }
        failure = "HTTP " + std::to_string(status) + " with an error: " + summarize(a.response);
      } else if (rc == CURLE_OK && !http_status_transient(status)) {
        throw Error(http_status_error_code(status), url_, "",
                    what + ": HTTP " + std::to_string(status) + ": " + summarize(a.response));
      } else if (rc == CURLE_OK) {
        failure = "HTTP " + std::to_string(status) + ": " + summarize(a.response);
      } else if (rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT) {
        throw Error(ErrorCode::invalid_argument, url_, "", what + ": " + curl_easy_strerror(rc));
      } else if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
                 rc == CURLE_SSL_CERTPROBLEM) {
        // Trying again cannot make a certificate trusted.
        throw Error(
            ErrorCode::permission_denied, url_, "",
            what + ": " + curl_easy_strerror(rc) + (errbuf[0] ? std::string(": ") + errbuf : ""));
      } else {
        failure =
            std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : "");
      }
      if (++failures > max_retries) {
        throw Error(ErrorCode::unavailable, url_, "",
                    what + ": " + failure + " (gave up after " + std::to_string(failures) +
                        " attempts in a row)");
      }
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
          options_.initial_backoff * (1LL << std::min(failures - 1, 20)), options_.max_backoff));
    }
  }

 private:
  struct Attempt {
    const Body* body = nullptr;
    std::uint64_t sent = 0;  // bytes of the body handed to curl
    int read_errno = 0;
    Response response;
  };

  static std::size_t on_read(char* buffer, std::size_t size, std::size_t n, void* user) {
    auto* a = static_cast<Attempt*>(user);
    const Body& b = *a->body;
    std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(size * n, b.length - a->sent));
    if (want == 0) return 0;
    if (b.fd < 0) {
      std::memcpy(buffer, b.memory.data() + a->sent, want);
      a->sent += want;
      return want;
    }
    for (;;) {
      ssize_t r = ::pread(b.fd, buffer, want, static_cast<off_t>(b.offset + a->sent));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        a->read_errno = r < 0 ? errno : EIO;  // 0: the file is shorter than it was written
        return CURL_READFUNC_ABORT;
      }
      a->sent += static_cast<std::uint64_t>(r);
      return static_cast<std::size_t>(r);
    }
  }

  // curl rewinds the body to send it again (a reused connection that turned out dead).
  static int on_seek(void* user, curl_off_t offset, int origin) {
    auto* a = static_cast<Attempt*>(user);
    if (origin != SEEK_SET) return CURL_SEEKFUNC_CANTSEEK;
    if (offset < 0 || static_cast<std::uint64_t>(offset) > a->body->length) {
      return CURL_SEEKFUNC_FAIL;
    }
    a->sent = static_cast<std::uint64_t>(offset);
    return CURL_SEEKFUNC_OK;
  }

  static std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
    auto* a = static_cast<Attempt*>(user);
    std::string_view line(data, size * n);
    if (line.rfind("HTTP/", 0) == 0) {  // a new response (after "100 Continue", say)
      a->response.etag.clear();
      a->response.body.clear();
      return size * n;
    }
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return size * n;
    std::string name(trim(line.substr(0, colon)));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name == "etag") a->response.etag = std::string(trim(line.substr(colon + 1)));
    return size * n;
  }

  static std::size_t on_write(char* data, std::size_t size, std::size_t n, void* user) {
    auto* a = static_cast<Attempt*>(user);
    std::string& body = a->response.body;
    body.append(data,
                std::min(size * n, kMaxResponseBody - std::min(body.size(), kMaxResponseBody)));
    return size * n;
  }

  std::string summarize(const Response& r) const {
    if (r.body.empty()) return "(no body)";
    if (summary_) return summary_(r.body);
    std::string s = r.body.substr(0, 200);
    for (char& c : s) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    return s;
  }

  std::string url_;
  HttpOptions options_;
  Summary summary_;
  CURL* handle_ = nullptr;
};

// ---- spooling sinks ---------------------------------------------------------------------------

// Spools written bytes to an unlinked temporary file; close() hands the file to upload().
// Hashing (for S3): the SHA-256 of the whole while it is at most whole_hash_limit bytes, and
// of every part_size piece.
class SpoolSink : public ByteSink {
 public:
  struct Hashing {
    std::uint64_t whole_limit = 0;
    std::uint64_t part_size = 0;
  };

  SpoolSink(std::string url, std::optional<Hashing> hashing)
      : ByteSink(std::move(url)), fd_(open_spool(this->url())), hashing_(hashing) {
    if (hashing_) {
      whole_ = std::make_unique<Sha256>();
      part_ = std::make_unique<Sha256>();
    }
  }
  ~SpoolSink() override {
    if (fd_ >= 0) ::close(fd_);  // the file was never linked: it is gone with its descriptor
  }

  void write(std::span<const std::byte> bytes) override {
    if (closed_) throw Error(ErrorCode::invalid_argument, url(), "", "write after close");
    if (error_) throw *error_;
    try {
      if (hashing_) hash(bytes);
      size_ += bytes.size();
      if (buffer_.size() + bytes.size() > kSpoolBuffer) flush();
      if (bytes.size() >= kSpoolBuffer) {
        write_all(fd_, bytes.data(), bytes.size(), url());
      } else {
        buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
      }
    } catch (const Error& e) {
      error_ = e;  // the spool is incomplete: close() must not upload it
      throw;
    }
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    if (error_) {
      throw Error(error_->code(), url(), "",
                  "nothing was uploaded: an earlier write failed (" + error_->cause() + ")");
    }
    flush();
    std::vector<std::byte>().swap(buffer_);
    if (hashing_) {
      if (part_filled_ > 0) part_hashes_.push_back(part_->hex());
      if (whole_valid_) whole_hash_ = whole_->hex();
    }
    struct CloseFd {
      int& fd;
      ~CloseFd() {
        ::close(fd);
        fd = -1;
      }
    } close_fd{fd_};
    upload();
  }

 protected:
  virtual void upload() = 0;

  int fd() const noexcept { return fd_; }
  std::uint64_t size() const noexcept { return size_; }
  // The SHA-256 of everything written, if it was at most whole_limit bytes.
  const std::optional<std::string>& whole_hash() const noexcept { return whole_hash_; }
  // The SHA-256 of each part_size piece, the last one possibly shorter.
  const std::vector<std::string>& part_hashes() const noexcept { return part_hashes_; }

  // The SHA-256 of a range of the spooled bytes, read back from the file.
  std::string hash_range(std::uint64_t offset, std::uint64_t length) {
    Sha256 sha;
    std::vector<std::byte> chunk(std::min<std::uint64_t>(length, 4 * kMiB));
    while (length > 0) {
      std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(length, chunk.size()));
      pread_all(fd_, chunk.data(), n, offset, url());
      sha.update(chunk.data(), n);
      offset += n;
      length -= n;
    }
    return sha.hex();
  }

 private:
  void hash(std::span<const std::byte> bytes) {
    if (whole_valid_) {
      if (size_ + bytes.size() > hashing_->whole_limit) {
        whole_valid_ = false;  // too big for one PUT: only the parts' hashes are needed
      } else {
        whole_->update(bytes.data(), bytes.size());
      }
    }
    while (!bytes.empty()) {
      std::size_t take = static_cast<std::size_t>(
          std::min<std::uint64_t>(bytes.size(), hashing_->part_size - part_filled_));
      part_->update(bytes.data(), take);
      part_filled_ += take;
      bytes = bytes.subspan(take);
      if (part_filled_ == hashing_->part_size) {
        part_hashes_.push_back(part_->hex());
        part_filled_ = 0;
      }
    }
  }

  void flush() {
    if (buffer_.empty()) return;
    write_all(fd_, buffer_.data(), buffer_.size(), url());
    buffer_.clear();
  }

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

// ---- http(s):// ------------------------------------------------------------------------------

class HttpSink final : public SpoolSink {
 public:
  HttpSink(std::string url, const SinkOptions& options)
      : SpoolSink(url, std::nullopt),
        client_(std::move(url), options_of(options.backend_options, &options.http), nullptr) {}

 private:
  void upload() override {
    const std::string target = url();
    client_.send(
        "PUT",
        [&] {
          return Request{"PUT", target, {}};
        },
        Body{.fd = fd(), .offset = 0, .length = size(), .memory = {}});
  }

  Client client_;
};

// ---- s3:// ------------------------------------------------------------------------------------

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// An error from a helper that names no URL (or another one), as an error about `url`.
[[noreturn]] void rethrow_for(const std::string& url, const Error& e) {
  std::string cause = e.cause();
  if (!e.url().empty() && e.url() != url) cause += " (" + e.url() + ")";
  throw Error(e.code(), url, e.member(), cause);
}

struct S3Target {
  s3::Location location;
  s3::Credentials credentials;
  std::string region;
  s3::Endpoint endpoint;
};

class S3Sink final : public SpoolSink {
 public:
  S3Sink(std::string url, S3Target target, const SinkOptions& options, std::uint64_t single_limit,
         std::uint64_t part_size)
      : SpoolSink(url, Hashing{single_limit, part_size}),
        target_(std::move(target)),
        single_limit_(single_limit),
        part_size_(part_size),
        path_(target_.endpoint.bucket_path + "/" + target_.location.key),
        client_(std::move(url), options_of(options.backend_options, &options.http),
                [](const std::string& body) { return s3::error_summary(body); }) {}

 private:
  using Query = std::vector<std::pair<std::string, std::string>>;

  MakeRequest signed_request(std::string method, Query query, std::string payload_sha256) const {
    return [this, method = std::move(method), query = std::move(query),
            payload_sha256 = std::move(payload_sha256)] {
      s3::Request r;
      r.method = method;
      r.host = target_.endpoint.host;
      r.path = path_;
      r.query = query;
      r.payload_sha256 = payload_sha256;
      Request out{method, s3::request_url(r, target_.endpoint.scheme), {}};
      for (const auto& [name, value] :
           s3::sign(r, target_.credentials, target_.region, "s3", s3::amz_date_now())) {
        if (name != "host") out.headers.push_back(name + ": " + value);  // curl sends Host
      }
      return out;
    };
  }

  void upload() override {
    if (size() <= single_limit_) {
      client_.send("PUT", signed_request("PUT", {}, *whole_hash()),
                   Body{.fd = fd(), .offset = 0, .length = size(), .memory = {}});
    } else {
      multipart();
    }
  }

  void multipart() {
    // Parts of part_size_ (their hashes are ready), unless that makes more than S3 allows:
    // then bigger parts, hashed now from the file.
    std::uint64_t part = part_size_;
    std::vector<std::string> hashes = part_hashes();
    if ((size() + part - 1) / part > kMaxParts) {
      part = ((size() + kMaxParts - 1) / kMaxParts + kMiB - 1) / kMiB * kMiB;
      if (part > kMaxPart) {
        throw Error(
            ErrorCode::invalid_argument, url(), "",
            "an S3 object holds at most 5 TiB; " + std::to_string(size()) + " bytes were written");
      }
      hashes.clear();
      for (std::uint64_t at = 0; at < size(); at += part) {
        hashes.push_back(hash_range(at, std::min(part, size() - at)));
      }
    }
    const std::size_t n = hashes.size();

    Response created =
        client_.send("CreateMultipartUpload",
                     signed_request("POST", {{"uploads", ""}}, s3::sha256_hex("")), Body{});
    std::string upload_id;
    try {
      upload_id = s3::parse_upload_id(created.body);
    } catch (const Error& e) {
      rethrow_for(url(), e);
    }

    try {
      std::string xml = "<CompleteMultipartUpload>";
      for (std::size_t i = 0; i < n; ++i) {
        const std::string number = std::to_string(i + 1);
        const std::string what = "UploadPart " + number + " of " + std::to_string(n);
        const std::uint64_t at = i * part;
        Response r = client_.send(
            what,
            signed_request("PUT", {{"partNumber", number}, {"uploadId", upload_id}}, hashes[i]),
            Body{.fd = fd(), .offset = at, .length = std::min(part, size() - at), .memory = {}});
        if (r.etag.empty()) {
          throw Error(ErrorCode::corrupt_data, url(), "", what + ": the answer has no ETag");
        }
        xml += "<Part><PartNumber>" + number + "</PartNumber><ETag>" + xml_escape(r.etag) +
               "</ETag></Part>";
      }
      xml += "</CompleteMultipartUpload>";
      client_.send("CompleteMultipartUpload",
                   signed_request("POST", {{"uploadId", upload_id}}, s3::sha256_hex(xml)),
                   Body{.fd = -1, .offset = 0, .length = xml.size(), .memory = xml},
                   /*error_body_is_transient=*/true);
    } catch (const Error& e) {
      abort_upload(upload_id, e);
    }
  }

  // Aborts the multipart upload, so that its parts are not kept (and billed), and throws the
  // error that ended it, saying if the abort failed too.
  [[noreturn]] void abort_upload(const std::string& upload_id, const Error& cause) {
    try {
      client_.send("AbortMultipartUpload",
                   signed_request("DELETE", {{"uploadId", upload_id}}, s3::sha256_hex("")),
                   std::nullopt, false, kAbortRetries);
    } catch (const Error& e) {
      throw Error(cause.code(), cause.url(), cause.member(),
                  cause.cause() + " (and AbortMultipartUpload of upload " + upload_id +
                      " failed too: " + e.cause() + "; its parts remain until it is aborted)");
    }
    throw cause;
  }

  S3Target target_;
  std::uint64_t single_limit_;
  std::uint64_t part_size_;
  std::string path_;
  Client client_;
};

// ---- pipe: ------------------------------------------------------------------------------------

// write(2) to a pipe whose reader may be gone, without the SIGPIPE that would end the process:
// the signal is blocked in this thread for the call, and one it raised is taken back.
ssize_t write_no_sigpipe(int fd, const void* data, std::size_t n) {
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigemptyset(&pending);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  ::sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  ssize_t rc = ::write(fd, data, n);
  int err = errno;
  // Also after a partial write: the reader went away during it.
  sigemptyset(&pending);
  ::sigpending(&pending);
  if (!was_pending && sigismember(&pending, SIGPIPE) == 1) {
    timespec zero{};
    while (::sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return rc;
}

class PipeSink final : public ByteSink {
 public:
  PipeSink(std::string url, const std::string& command)
      : ByteSink(std::move(url)),
        command_(spawn_shell(this->url(), command, ShellPipe::to_stdin)) {}

  void write(std::span<const std::byte> bytes) override {
    if (error_) throw *error_;
    if (command_.fd() < 0) throw Error(ErrorCode::invalid_argument, url(), "", "write after close");
    while (!bytes.empty()) {
      ssize_t n = write_no_sigpipe(command_.fd(), bytes.data(), bytes.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        if (err != EPIPE) throw_errno(url(), "write to the command", err);
        // The command stopped reading: it has exited, or is about to.
        std::optional<int> status = command_.wait();
        std::string why = status ? describe_exit_status(*status) : std::string("status unknown");
        error_.emplace(ErrorCode::unavailable, url(), "",
                       "the command stopped reading its input (" + why + ")");
        throw *error_;
      }
      bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
  }

  void close() override {
    if (error_) throw *error_;
    if (command_.fd() < 0) return;
    // Closing the pipe ends the command's input.
    if (auto failure = command_.finish()) {
      throw Error(ErrorCode::unavailable, url(), "", std::move(*failure));
    }
  }

 private:
  // Destroyed without close(), it stops the command before its input ends, so that the command
  // does not take what it was given for the whole.
  ShellCommand command_;
  std::optional<Error> error_;  // the command's early exit, thrown again by write and close
};

}  // namespace

std::unique_ptr<ByteSink> open_s3_sink(const std::string& url, const SinkOptions& options) {
  S3Target t;
  t.location = s3::parse_s3_url(url);  // its errors name the URL (never credentials in it)
  if (t.location.key.empty() || t.location.key.back() == '/') {
    throw Error(ErrorCode::invalid_argument, url, "", "names no object (s3://bucket/key)");
  }
  const S3Options& s3o = options_of(options.backend_options, &options.s3);
  try {
    t.credentials = s3::resolve_credentials(s3o.profile);
    t.region = s3o.region.empty() ? s3::resolve_region(s3o.profile) : s3o.region;
    t.endpoint = s3::resolve_endpoint(t.location.bucket, s3o.endpoint, t.region);
  } catch (const Error& e) {
    rethrow_for(url, e);
  }
  if (t.endpoint.scheme != "http" && t.endpoint.scheme != "https") {
    throw Error(
        ErrorCode::invalid_argument, url, "",
        "the S3 endpoint must be an http:// or https:// URL, not " + t.endpoint.scheme + "://");
  }
  // Up to 5 GiB go in one PUT; parts are at least 5 MiB and at most 5 GiB.
  const std::uint64_t single = std::min(options.multipart_threshold, kMaxPart);
  const std::uint64_t part = std::clamp(options.part_size, kMinPart, kMaxPart);
  return std::make_unique<S3Sink>(url, std::move(t), options, single, part);
}

std::unique_ptr<ByteSink> open_http_sink(const std::string& url, const SinkOptions& options) {
  curl_init_once();
  CURLU* u = curl_url();
  if (!u) throw Error(ErrorCode::unavailable, url, "", "curl_url: out of memory");
  char* host = nullptr;
  CURLUcode rc = curl_url_set(u, CURLUPART_URL, url.c_str(), 0);
  if (rc == CURLUE_OK) rc = curl_url_get(u, CURLUPART_HOST, &host, 0);
  const bool has_host = rc == CURLUE_OK && host && *host;
  curl_free(host);
  curl_url_cleanup(u);
  // curl takes "http:///x" for "http://x"; here it is a URL without a host.
  const std::size_t sep = url.find("://");
  if (sep != std::string::npos && url.compare(sep + 3, 1, "/") == 0) rc = CURLUE_NO_HOST;
  if (!has_host || rc != CURLUE_OK) {
    throw Error(
        ErrorCode::invalid_argument, url, "",
        std::string("not an upload URL: ") + (rc == CURLUE_OK ? "no host" : curl_url_strerror(rc)));
  }
  return std::make_unique<HttpSink>(url, options);
}

std::unique_ptr<ByteSink> open_pipe_sink(const std::string& url, const SinkOptions& options) {
  std::string command = pipe_command(url, options.allow_pipe, "SinkOptions::allow_pipe");
  return std::make_unique<PipeSink>(url, command);
}

}  // namespace wds
