#include "lib/http_client.hpp"

#include <algorithm>
#include <thread>

#include "lib/file_source.hpp"
#include "lib/s3_xml.hpp"

namespace wds::http {
namespace {

constexpr std::size_t kMaxResponseBody = 64 * 1024;  // kept of any response's body

std::string prefix(const std::string& what) {
  return what.empty() ? std::string() : what + ": ";
}

// Collects a whole response (its first kMaxResponseBody bytes).
class Collector final : public ResponseHandler {
 public:
  void on_status(long status) override {
    response.status = status;
    response.body.clear();
    response.etag.clear();
  }
  void on_header(std::string_view name, std::string_view value) override {
    if (name == "etag") response.etag = std::string(value);
  }
  bool on_body(std::span<const std::byte> bytes) override {
    std::size_t room = kMaxResponseBody - std::min(response.body.size(), kMaxResponseBody);
    response.body.append(reinterpret_cast<const char*>(bytes.data()), std::min(bytes.size(), room));
    return true;
  }

  Response response;
};

}  // namespace

ErrorCode status_error_code(long status) {
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

bool status_transient(long status) {
  return status == 429 || status >= 500;
}

std::shared_ptr<Transport> transport_for(const BackendOptions& options) {
  const TransportOption* set = options.get<TransportOption>();
  return set && set->transport ? set->transport : curl_transport();
}

Client::Client(std::string url, HttpOptions options, std::shared_ptr<Transport> transport,
               Summary summary, RetryHook on_retry)
    : url_(std::move(url)),
      options_(std::move(options)),
      summary_(std::move(summary)),
      on_retry_(std::move(on_retry)) {
  try {
    connection_ = transport->connect(options_);
  } catch (const Error& e) {
    throw Error(e.code(), url_, "", e.cause());
  }
}

Request Client::request(std::string method, std::string url,
                        const std::vector<std::string>& headers, const Body* body) const {
  Request r;
  r.method = std::move(method);
  r.url = std::move(url);
  r.headers = options_.headers;
  r.headers.insert(r.headers.end(), headers.begin(), headers.end());
  r.body = body;
  return r;
}

std::string Client::summarize(const std::string& body) const {
  if (body.empty()) return "(no body)";
  if (summary_) return summary_(body);
  return xml::error_excerpt(body);  // an HTML page's text, not its markup
}

std::string Client::failure(const Outcome& outcome, const std::string& what,
                            const std::string& body) {
  using Kind = Outcome::Kind;
  if (outcome.read_errno)
    throw_errno(url_, prefix(what) + "read the spool file", outcome.read_errno);
  switch (outcome.kind) {
    case Kind::responded: {
      std::string text = "HTTP " + std::to_string(outcome.status) + ": " + summarize(body);
      if (!status_transient(outcome.status)) {
        throw Error(status_error_code(outcome.status), url_, "", prefix(what) + text);
      }
      return text;
    }
    case Kind::bad_url:
      throw Error(ErrorCode::invalid_argument, url_, "", prefix(what) + outcome.error);
    case Kind::untrusted:
      // Trying again cannot make a certificate trusted.
      throw Error(ErrorCode::permission_denied, url_, "", prefix(what) + outcome.error);
    case Kind::aborted:
    case Kind::failed:
      break;
  }
  return outcome.error;
}

std::chrono::milliseconds Client::retry(const std::string& what, const std::string& failure,
                                        std::optional<std::uint64_t> at,
                                        std::optional<int> retries) {
  const int max_retries = retries ? *retries : options_.max_retries;
  if (++failures_ > max_retries) {
    throw Error(ErrorCode::unavailable, url_, "",
                prefix(what) + failure + " (gave up after " + std::to_string(failures_) +
                    " attempts in a row" + (at ? ", at byte " + std::to_string(*at) : "") + ")");
  }
  if (on_retry_) {
    on_retry_(Error(ErrorCode::unavailable, url_, "",
                    prefix(what) + failure + " (retry " + std::to_string(failures_) +
                        " of at most " + std::to_string(max_retries) +
                        (at ? ", from byte " + std::to_string(*at) : "") + ")"),
              failures_);
  }
  return std::min<std::chrono::milliseconds>(
      options_.initial_backoff * (1LL << std::min(failures_ - 1, 20)), options_.max_backoff);
}

Response Client::send(const std::string& what, const std::function<Request()>& make,
                      const std::function<bool(const std::string& body)>& is_error,
                      std::optional<int> retries) {
  failures_ = 0;
  for (;;) {
    Collector collector;
    Outcome outcome = perform(make(), collector);
    Response& r = collector.response;
    if (outcome.kind == Outcome::Kind::responded) r.status = outcome.status;
    std::string why;
    if (outcome.kind == Outcome::Kind::responded && r.status >= 200 && r.status < 300) {
      if (!is_error || !is_error(r.body)) return std::move(r);
      why = "HTTP " + std::to_string(r.status) + " with an error: " + summarize(r.body);
    } else {
      why = failure(outcome, what, r.body);
    }
    std::this_thread::sleep_for(retry(what, why, std::nullopt, retries));
  }
}

}  // namespace wds::http
