#include "lib/storage/http_client.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>
#include <thread>

#include "lib/storage/file.hpp"
#include "lib/storage/s3_xml.hpp"
#include "lib/text.hpp"

namespace wds::http {
namespace {

std::string prefix(const std::string& what) {
  return what.empty() ? std::string() : what + ": ";
}

// Collects a whole response (its first `keep` bytes).
class Collector final : public ResponseHandler {
 public:
  explicit Collector(std::size_t keep) : keep_(keep) {}
  void on_status(long status) override {
    response.status = status;
    response.body.clear();
    response.etag.clear();
    response.retry_after.reset();
    response.link.clear();
  }
  void on_header(std::string_view name, std::string_view value) override {
    if (name == "etag") response.etag = std::string(value);
    if (name == "retry-after") response.retry_after = std::string(value);
    if (name == "link") response.link = std::string(value);
  }
  bool on_body(std::span<const std::byte> bytes) override {
    std::size_t room = keep_ - std::min(response.body.size(), keep_);
    response.body.append(reinterpret_cast<const char*>(bytes.data()), std::min(bytes.size(), room));
    return true;
  }

  Response response;

 private:
  std::size_t keep_;
};

// A uniform number in [0, 1), from a generator of the thread's own: seeded apart in every
// thread and process, so that clients do not draw the same waits.
double uniform_01() {
  thread_local std::minstd_rand rng(static_cast<std::minstd_rand::result_type>(
      std::random_device{}() ^ std::hash<std::thread::id>{}(std::this_thread::get_id())));
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

int month_of(std::string_view name) {
  static constexpr std::string_view kMonths[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                                 "jul", "aug", "sep", "oct", "nov", "dec"};
  for (int i = 0; i < 12; ++i) {
    if (equals_ignoring_case(name, kMonths[i])) return i;
  }
  return -1;
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now) {
  value = trim(value);
  if (value.empty()) return std::nullopt;
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::uint64_t seconds = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (ec == std::errc::result_out_of_range)
      seconds = 1u << 30;  // capped by the caller
    else if (ec != std::errc() || end != value.data() + value.size())
      return std::nullopt;
    return std::chrono::milliseconds(std::min<std::uint64_t>(seconds, 1u << 30) * 1000);
  }
  // "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"
  const std::string text(value);
  char month[4] = {0};
  int day = 0, year = 0, h = 0, m = 0, sec = 0, n = 0;
  bool ok = false;
  if (text.find(',') != std::string::npos) {
    const char* rest = text.c_str() + text.find(',') + 1;
    ok = std::sscanf(rest, " %2d %3[A-Za-z] %4d %2d:%2d:%2d GMT%n", &day, month, &year, &h, &m,
                     &sec, &n) == 6 ||
         std::sscanf(rest, " %2d-%3[A-Za-z]-%4d %2d:%2d:%2d GMT%n", &day, month, &year, &h, &m,
                     &sec, &n) == 6;
    if (ok && year < 100) year += year < 70 ? 2000 : 1900;  // RFC 850's two digits
  } else {
    ok = std::sscanf(text.c_str(), "%*3[A-Za-z] %3[A-Za-z] %2d %2d:%2d:%2d %4d%n", month, &day, &h,
                     &m, &sec, &year, &n) == 6;
  }
  const int mon = ok ? month_of(month) : -1;
  if (mon < 0 || day < 1 || day > 31 || h > 23 || m > 59 || sec > 60 || year < 1970) {
    return std::nullopt;
  }
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon;
  tm.tm_mday = day;
  tm.tm_hour = h;
  tm.tm_min = m;
  tm.tm_sec = sec;
  const auto at = std::chrono::system_clock::from_time_t(::timegm(&tm));
  if (at <= now) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(at - now);
}

std::optional<std::chrono::milliseconds> retry_after_of(long status,
                                                        const std::optional<std::string>& header) {
  if ((status != 429 && status != 503) || !header) return std::nullopt;
  return parse_retry_after(*header);
}

bool is_throttling(long status, const std::optional<std::string>& retry_after,
                   std::string_view body) {
  if (status == 429) return true;
  return status == 503 && (retry_after || body.find("SlowDown") != std::string_view::npos);
}

RetryWait retry_wait(const HttpOptions& options, int failures,
                     std::optional<std::chrono::milliseconds> retry_after, double uniform) {
  using std::chrono::milliseconds;
  const milliseconds b = std::min<milliseconds>(
      options.initial_backoff * (1LL << std::clamp(failures - 1, 0, 20)), options.max_backoff);
  const milliseconds half = b / 2;
  const milliseconds spread(
      static_cast<long long>(static_cast<double>(half.count()) * std::clamp(uniform, 0.0, 1.0)));
  RetryWait out{.wait = std::min(b - half + spread, b)};
  if (retry_after && *retry_after > out.wait) {
    const milliseconds cap = std::max(options.max_retry_after, out.wait);
    out.asked = std::min(*retry_after, cap);
    out.wait = std::min(*out.asked + spread, cap);
  }
  return out;
}

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
      throw Error::invalid_argument(url_, "", prefix(what) + outcome.error);
    case Kind::untrusted:
      // Trying again cannot make a certificate trusted.
      throw Error::permission_denied(url_, "", prefix(what) + outcome.error);
    case Kind::redirects:
      // A redirect loop (or a chain too long) stays one: not retried.
      throw Error::invalid_argument(url_, "", prefix(what) + outcome.error + " (a redirect loop?)");
    case Kind::aborted:
    case Kind::failed:
      break;
  }
  return outcome.error;
}

std::chrono::milliseconds Client::retry(const std::string& what, const std::string& failure,
                                        std::optional<std::uint64_t> at, std::optional<int> retries,
                                        std::optional<std::chrono::milliseconds> retry_after,
                                        bool throttled) {
  const int max_retries = retries ? *retries : options_.max_retries;
  if (++failures_ > max_retries) {
    throw Error::unavailable(url_, "",
                             prefix(what) + failure + " (gave up after " +
                                 std::to_string(failures_) + " attempts in a row" +
                                 (at ? ", at byte " + std::to_string(*at) : "") + ")");
  }
  const RetryWait w = retry_wait(options_, failures_, retry_after, uniform_01());
  std::string asked;
  if (w.asked) {
    asked = ", in " + std::to_string(w.asked->count()) + " ms as Retry-After asked";
    if (w.wait > *w.asked) asked += ", plus " + std::to_string((w.wait - *w.asked).count()) + " ms";
  }
  if (on_retry_) {
    const std::string cause = prefix(what) + failure + " (retry " + std::to_string(failures_) +
                              " of at most " + std::to_string(max_retries) +
                              (at ? ", from byte " + std::to_string(*at) : "") +
                              (throttled ? ", throttled" : "") + asked + ")";
    if (throttled) {
      on_retry_(Throttled(ErrorCode::unavailable, url_, "", cause), failures_);
    } else {
      on_retry_(Error::unavailable(url_, "", cause), failures_);
    }
  }
  return w.wait;
}

Response Client::send(const std::string& what, const std::function<Request()>& make,
                      const std::function<bool(const std::string& body)>& is_error,
                      std::optional<int> retries) {
  failures_ = 0;
  for (;;) {
    Collector collector(keep_body_);
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
    std::this_thread::sleep_for(retry(what, why, std::nullopt, retries,
                                      retry_after_of(r.status, r.retry_after),
                                      is_throttling(r.status, r.retry_after, r.body)));
  }
}

}  // namespace wds::http

namespace wds {

bool is_throttled(const Error& cause) noexcept {
  return dynamic_cast<const http::Throttled*>(&cause) != nullptr;
}

}  // namespace wds
