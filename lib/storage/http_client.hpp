// The one HTTP client (internal) behind reads, listings and uploads: a connection from the
// transport (lib/storage/http_transport.hpp), HttpOptions' extra headers, the retry policy
// (exponential backoff with jitter on 5xx, 429 and network failures, Retry-After honoured, up to
// max_retries attempts in a row, the retry hook told of each, throttling marked as such) and the
// mapping of failures to wds::Error. Streaming reads (lib/storage/http_source.cpp) run their own
// loop around perform() or start() to resume with Range requests; everything else sends whole
// requests with send().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/storage/http_transport.hpp"
#include "wds/error.hpp"
#include "wds/remote.hpp"
#include "wds/source.hpp"

namespace wds::http {

// How an HTTP status that is an error is reported: 404 and 410 as not_found, 401 and 403 as
// permission_denied, any other as invalid_argument (meaningful for statuses that are not
// transient).
ErrorCode status_error_code(long status);
// True for the statuses worth trying again: 429 and 5xx.
bool status_transient(long status);

// How long a Retry-After header's value asks to wait: delay-seconds or an HTTP date (IMF-fixdate,
// RFC 850 or asctime form) relative to `now`; a date in the past is 0; nullopt if malformed.
std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value,
    std::chrono::system_clock::time_point now = std::chrono::system_clock::now());
// The Retry-After of a response worth honouring (429 and 503), else nullopt.
std::optional<std::chrono::milliseconds> retry_after_of(long status,
                                                        const std::optional<std::string>& header);

// True when a failed response is the server asking to slow down rather than failing: 429, or
// 503 with Retry-After or S3's SlowDown code in its body. Such retries are counted apart
// (wds::is_throttled).
bool is_throttling(long status, const std::optional<std::string>& retry_after,
                   std::string_view body);

// How long to wait before the retry after `failures` failed attempts in a row (1 or more), as
// the retry policy's parts: its first is the wait, the rest only for messages.
struct RetryWait {
  std::chrono::milliseconds wait{0};
  std::optional<std::chrono::milliseconds> asked{};  // Retry-After, capped, when it decided
};
// "Equal jitter" over the exponential backoff b = min(initial_backoff * 2^(failures-1),
// max_backoff): b/2 plus `uniform` (in [0, 1)) times b/2, so that clients that failed together
// do not retry in lockstep. A `retry_after` longer than that is waited instead (capped at
// max_retry_after, or the backoff when longer), plus the same random part as far as the cap
// allows: never less than the server asked.
RetryWait retry_wait(const HttpOptions& options, int failures,
                     std::optional<std::chrono::milliseconds> retry_after, double uniform);

// Turns an error response's body into a short message ("NoSuchKey: ...").
using Summary = std::function<std::string(const std::string& body)>;

// The transport set in `options` (TransportOption), else curl's.
std::shared_ptr<Transport> transport_for(const BackendOptions& options);

// A whole response to send().
struct Response {
  long status = 0;
  std::string body;                        // the first 64 KiB
  std::string etag;                        // the ETag header, as sent (quotes included)
  std::optional<std::string> retry_after;  // the Retry-After header
  std::string link;                        // the Link header (paginated listings)
};

// The cause a retry hook is told of when the server throttles (is_throttling).
class Throttled final : public Error {
 public:
  using Error::Error;
};

class Client {
 public:
  // `url` names the resource in errors; `summary` shortens error bodies (null: their first
  // bytes); `on_retry` is told of each retry.
  Client(std::string url, HttpOptions options, std::shared_ptr<Transport> transport,
         Summary summary = nullptr, RetryHook on_retry = nullptr);

  const std::string& url() const noexcept { return url_; }
  const HttpOptions& options() const noexcept { return options_; }

  // A request with HttpOptions::headers, then `headers`.
  Request request(std::string method, std::string url, const std::vector<std::string>& headers,
                  const Body* body = nullptr) const;

  // One attempt, on this client's connection.
  Outcome perform(const Request& request, ResponseHandler& handler) {
    return connection_->perform(request, handler);
  }
  // One attempt, moved on by the caller's steps (Connection::start).
  std::unique_ptr<Transfer> start(const Request& request, ResponseHandler& handler) {
    return connection_->start(request, handler);
  }

  // Sends the request made by `make` (afresh for every attempt: a signature covers the time)
  // until a 2xx answer, and returns that. `what` names it in errors ("PUT", "UploadPart 2 of
  // 3"). With error_body_is_transient, a 2xx whose body `is_error` (an S3 <Error> document)
  // counts as a failure to retry. Retries: options.max_retries, or `retries` when set.
  Response send(const std::string& what, const std::function<Request()>& make,
                const std::function<bool(const std::string& body)>& is_error = nullptr,
                std::optional<int> retries = std::nullopt);

  // What an attempt that did not succeed means: throws the error of a failure that retrying
  // cannot mend (a 4xx, a bad URL, an untrusted certificate, an unreadable body); returns the
  // description of a transient one. `body`: the error response's body.
  std::string failure(const Outcome& outcome, const std::string& what, const std::string& body);

  // Counts a failed attempt: throws `unavailable` once max_retries (or `retries`) attempts in a
  // row have failed; else tells the retry hook and returns how long to wait before the next
  // (retry_wait, with a random part of its own). `at`: the byte the next attempt starts from,
  // for messages. `throttled` (is_throttling): the hook's cause says so (wds::is_throttled).
  std::chrono::milliseconds retry(
      const std::string& what, const std::string& failure,
      std::optional<std::uint64_t> at = std::nullopt, std::optional<int> retries = std::nullopt,
      std::optional<std::chrono::milliseconds> retry_after = std::nullopt, bool throttled = false);
  // An attempt delivered bytes: the count of failures in a row starts again.
  void progressed() noexcept { failures_ = 0; }

  std::string summarize(const std::string& body) const;

  // Responses to send() keep the first `bytes` of their body (64 KiB unless set).
  void keep_body(std::size_t bytes) noexcept { keep_body_ = bytes; }

 private:
  std::string url_;
  HttpOptions options_;
  std::unique_ptr<Connection> connection_;
  Summary summary_;
  RetryHook on_retry_;
  int failures_ = 0;
  std::size_t keep_body_ = 64 * 1024;
};

}  // namespace wds::http
