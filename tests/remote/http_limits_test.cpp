// The HTTP client's limits against answers that must not be retried forever or too soon: a
// server that trickles (the low-speed limit), 429/503 with Retry-After, redirect loops, and the
// backoff's jitter.
// Through curl against a tiny loopback server (tests/support/script_server.hpp), or through the
// scripted transport where timing is what is checked.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "lib/storage/http_client.hpp"
#include "lib/storage/http_source.hpp"
#include "tests/support/fake_transport.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/script_server.hpp"
#include "wds/remote.hpp"
#include "wds/source.hpp"

namespace wds {
namespace {

using namespace std::chrono_literals;

std::string drain(ByteSource& src) {
  std::string out;
  for (auto c = src.read(); !c.empty(); c = src.read()) {
    out.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  return out;
}

struct Retries {
  std::mutex mu;
  std::vector<std::string> causes;
};

// `http` for the URL, the retry hook recording each cause; it ends the read (by throwing) after
// `give_up_after` retries, so that a client that would retry forever fails here instead.
OpenOptions with(HttpOptions http, const std::shared_ptr<Retries>& retries,
                 int give_up_after = 1000) {
  OpenOptions open;
  open.backend_options.set(std::move(http));
  open.on_retry = [retries, give_up_after](const Error& e, int) {
    std::lock_guard lock(retries->mu);
    retries->causes.push_back(e.what());
    if (static_cast<int>(retries->causes.size()) > give_up_after) {
      throw Error::unavailable(e.url(), "", "the test gave up: retried without end");
    }
  };
  return open;
}

TEST(LowSpeedLimit, ATricklingServerEndsInAnErrorNamingTheUrlAndTheSpeed) {
  // Range requests resume where the last attempt stopped: every attempt delivers new bytes.
  test::ScriptServer server([](const std::string& request) {
    const std::size_t size = 5000;
    std::size_t from = 0;
    if (std::size_t at = request.find("Range: bytes="); at != std::string::npos) {
      from = std::stoul(request.substr(at + 13));
    }
    return test::Reply{.head = from == 0
                                   ? std::string("HTTP/1.1 200 OK\r\n")
                                   : "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " +
                                         std::to_string(from) + "-" + std::to_string(size - 1) +
                                         "/" + std::to_string(size) + "\r\n",
                       .body = std::string(size - from, 'x'),
                       .bytes_per_second = 10};
  });
  HttpOptions http;
  http.low_speed_bytes = 1000;
  http.low_speed_time = 1s;
  http.max_retries = 2;
  http.initial_backoff = 10ms;
  auto retries = std::make_shared<Retries>();
  const std::string url = server.url("/slow.tar");
  std::string what;
  EXPECT_EQ(test::error_code([&] { drain(*open_url(url, with(http, retries, 6))); }, &what),
            ErrorCode::unavailable);
  EXPECT_NE(what.find(url), std::string::npos) << what;
  EXPECT_NE(what.find("1000 bytes/s"), std::string::npos) << what;  // the limit it fell below
  EXPECT_NE(what.find("gave up after 3 attempts"), std::string::npos) << what;
  EXPECT_EQ(server.requests().size(), 3u);
  std::lock_guard lock(retries->mu);
  EXPECT_EQ(retries->causes.size(), 2u);
}

// A body read on the reader's thread is moved on by read(): each step of curl stops once a chunk
// is ready, in the middle of what curl read from the socket, whose rest must come next. The
// server sends its whole body at once and the reader is late, so every read of curl's is full.
// The parameter: the body has a length, else it is chunked (HTTP chunks of uneven sizes, so
// that steps also stop between the pieces of one read that curl's decoder hands over apart).
class BodyOnTheReader : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(LengthAndChunked, BodyOnTheReader, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Chunked" : "Length"; });

TEST_P(BodyOnTheReader, ArrivesWholeAndInOrderWhenEachStepStopsInsideCurlsRead) {
  const std::size_t size = 6 * 1000 * 1000 + 17;
  std::string data(size, '\0');
  for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<char>((i * 7 + i / 4099) % 251);
  const bool chunked = GetParam();
  test::ScriptServer server([&](const std::string&) {
    return test::Reply{.head = "HTTP/1.1 200 OK\r\n",
                       .body = data,
                       .chunked = chunked
                                      ? std::vector<std::size_t>{1, 700, 16385, 100000, 3, 300001}
                                      : std::vector<std::size_t>{}};
  });
  record_one_get_host("http://127.0.0.1:" + std::to_string(server.port()));
  HttpOptions http;
  http.max_retries = 0;  // a step that lost its place would fail here, not be mended by a retry
  auto src = open_url(server.url("/a.tar"), with(http, std::make_shared<Retries>()));
  std::size_t reads = 0;
  const std::string got = test::read_late(*src, &reads);
  EXPECT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
  EXPECT_GE(reads, size / (512 * 1024));  // handed out a chunk at a time
  EXPECT_EQ(server.requests().size(), 1u);
}

// The parameter: the body is read on the reader's thread (from a host where one GET per shard
// does), else by a transfer thread.
class SlowReader : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(ByThreadAndOnTheReader, SlowReader, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "OnReader" : "Thread"; });

TEST_P(SlowReader, TimeWaitingForItIsNotSlowness) {
  // The transfer waits while the reader holds the buffer (or, on the reader's thread, does not
  // move while the reader is away); that time is not the server's speed, so two attempts cut in
  // a row after delivering fast are progress, not failures.
  const std::size_t size = 1200000;
  std::string data(size, '\0');
  for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 7 % 251);
  auto fake = std::make_shared<test::FakeTransport>([&data, size](const test::FakeRequest& r) {
    const std::optional<std::string> range = r.header("Range");
    const std::size_t from = range ? std::stoul(range->substr(6)) : 0;
    test::FakeResponse out{.status = range ? 206 : 200, .body = data.substr(from)};
    if (range) {
      out.headers = {{"content-range", "bytes " + std::to_string(from) + "-" +
                                           std::to_string(size - 1) + "/" + std::to_string(size)}};
    }
    if (from < 1100000) out.cut_after = 540000;  // two full chunks (the second one waits)
    return out;
  });
  HttpOptions http;
  http.buffer_bytes = 1;  // the transfer waits for the reader after each chunk
  http.low_speed_bytes = 1000000;
  http.max_retries = 1;
  http.initial_backoff = 0ms;
  auto retries = std::make_shared<Retries>();
  OpenOptions open = with(http, retries);
  open.backend_options.set(http::TransportOption{fake});
  const std::string host = GetParam() ? "http://one-get.fake.test" : "http://fake.test";
  if (GetParam()) record_one_get_host(host);
  auto src = open_url(host + "/a.tar", open);
  std::string got;
  for (auto c = src->read(); !c.empty(); c = src->read()) {
    got.append(reinterpret_cast<const char*>(c.data()), c.size());
    if (got.size() < 1080000) std::this_thread::sleep_for(700ms);  // a slow reader
  }
  EXPECT_EQ(got, data);
  EXPECT_EQ(fake->requests().size(), 3u);
}

TEST(RetryAfter, A429IsRetriedNoSoonerThanItAsks) {
  using Clock = std::chrono::steady_clock;
  auto times = std::make_shared<std::vector<Clock::time_point>>();
  auto fake = std::make_shared<test::FakeTransport>([times](const test::FakeRequest&) {
    times->push_back(Clock::now());  // under the transport's lock
    if (times->size() == 1) {
      return test::FakeResponse{
          .status = 429, .headers = {{"retry-after", "2"}}, .body = "slow down"};
    }
    return test::FakeResponse{.status = 200, .body = "payload"};
  });
  HttpOptions http;
  http.initial_backoff = 10ms;
  auto retries = std::make_shared<Retries>();
  OpenOptions open = with(http, retries);
  open.backend_options.set(http::TransportOption{fake});
  EXPECT_EQ(drain(*open_url("http://fake.test/a.tar", open)), "payload");
  ASSERT_EQ(times->size(), 2u);
  EXPECT_GE((*times)[1] - (*times)[0], 1950ms);
  std::lock_guard lock(retries->mu);
  ASSERT_EQ(retries->causes.size(), 1u);
  EXPECT_NE(retries->causes[0].find("in 2000 ms as Retry-After asked"), std::string::npos)
      << retries->causes[0];
}

TEST(RetryAfter, IsCappedAndOnlyHonouredOn429And503) {
  auto fake = std::make_shared<test::FakeTransport>([n = 0](const test::FakeRequest&) mutable {
    switch (n++) {
      case 0:
        return test::FakeResponse{.status = 503, .headers = {{"retry-after", "3600"}}};
      case 1:
        return test::FakeResponse{.status = 500, .headers = {{"retry-after", "3600"}}};
      default:
        return test::FakeResponse{.status = 200, .body = "ok"};
    }
  });
  HttpOptions http;
  http.initial_backoff = 10ms;
  http.max_retry_after = 300ms;
  auto retries = std::make_shared<Retries>();
  OpenOptions open = with(http, retries);
  open.backend_options.set(http::TransportOption{fake});
  EXPECT_EQ(drain(*open_url("http://fake.test/a.tar", open)), "ok");
  std::lock_guard lock(retries->mu);
  ASSERT_EQ(retries->causes.size(), 2u);
  EXPECT_NE(retries->causes[0].find("in 300 ms as Retry-After asked"), std::string::npos)
      << retries->causes[0];
  EXPECT_EQ(retries->causes[1].find("Retry-After"), std::string::npos) << retries->causes[1];
}

TEST(RetryAfter, SecondsAndTheThreeDateForms) {
  // Sun, 06 Nov 1994 08:49:37 GMT
  const auto at = std::chrono::system_clock::from_time_t(784111777);
  const auto now = at - 5s;
  EXPECT_EQ(http::parse_retry_after("120", now), 120000ms);
  EXPECT_EQ(http::parse_retry_after(" 0 ", now), 0ms);
  EXPECT_EQ(http::parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), 5000ms);
  EXPECT_EQ(http::parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now), 5000ms);
  EXPECT_EQ(http::parse_retry_after("Sun Nov  6 08:49:37 1994", now), 5000ms);
  EXPECT_EQ(http::parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", at + 1h), 0ms);  // past
  EXPECT_EQ(http::parse_retry_after("soon", now), std::nullopt);
  EXPECT_EQ(http::parse_retry_after("-5", now), std::nullopt);
  EXPECT_EQ(http::parse_retry_after("Sun, 06 Foo 1994 08:49:37 GMT", now), std::nullopt);
  EXPECT_EQ(http::parse_retry_after("", now), std::nullopt);
}

TEST(Redirects, ALoopFailsOnceAsAPermanentErrorNamingTheUrl) {
  test::ScriptServer server([](const std::string&) {
    return test::Reply{.head = "HTTP/1.1 302 Found\r\nLocation: /loop.tar\r\n"};
  });
  HttpOptions http;
  http.initial_backoff = 10ms;
  http.max_retries = 3;
  auto retries = std::make_shared<Retries>();
  const std::string url = server.url("/loop.tar");
  std::string what;
  EXPECT_EQ(test::error_code([&] { drain(*open_url(url, with(http, retries))); }, &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find(url), std::string::npos) << what;
  EXPECT_NE(what.find("redirect"), std::string::npos) << what;
  EXPECT_EQ(server.requests().size(), 6u);  // the request and its 5 redirects, once
  std::lock_guard lock(retries->mu);
  EXPECT_TRUE(retries->causes.empty());
}

TEST(Jitter, WaitsStayWithinHalfToAllOfTheBackoff) {
  HttpOptions o;
  o.initial_backoff = 200ms;
  o.max_backoff = 10000ms;
  // b = 200 ms * 2^(failures - 1), capped: waits in [b/2, b].
  EXPECT_EQ(http::retry_wait(o, 1, std::nullopt, 0.0).wait, 100ms);
  EXPECT_EQ(http::retry_wait(o, 1, std::nullopt, 0.999).wait, 199ms);
  EXPECT_EQ(http::retry_wait(o, 3, std::nullopt, 0.5).wait, 600ms);
  EXPECT_EQ(http::retry_wait(o, 30, std::nullopt, 0.0).wait, 5000ms);
  EXPECT_EQ(http::retry_wait(o, 30, std::nullopt, 1.0).wait, 10000ms);
  // Retry-After: never less than asked, plus the random part as far as the cap allows.
  const http::RetryWait asked = http::retry_wait(o, 1, 2000ms, 0.5);
  EXPECT_EQ(asked.wait, 2050ms);
  EXPECT_EQ(asked.asked, 2000ms);
  EXPECT_EQ(http::retry_wait(o, 1, 2000ms, 0.0).wait, 2000ms);
  o.max_retry_after = 300ms;
  EXPECT_EQ(http::retry_wait(o, 1, 3600000ms, 0.9).wait, 300ms);
  // A Retry-After shorter than the backoff changes nothing.
  EXPECT_EQ(http::retry_wait(o, 1, 10ms, 0.0).wait, 100ms);
  EXPECT_EQ(http::retry_wait(o, 1, 10ms, 0.0).asked, std::nullopt);
}

TEST(Jitter, TheClientsWaitsAreRandomWithinTheirBounds) {
  HttpOptions o;
  o.initial_backoff = 1000ms;
  o.max_retries = 1000;
  http::Client client("http://jitter.test/a.tar", o, http::curl_transport());
  std::set<long long> seen;
  for (int i = 0; i < 200; ++i) {
    const std::chrono::milliseconds wait = client.retry("", "test");  // the first retry
    client.progressed();
    EXPECT_GE(wait, 500ms);
    EXPECT_LE(wait, 1000ms);
    seen.insert(wait.count());
  }
  EXPECT_GT(seen.size(), 50u) << "the waits are not spread";
}

TEST(Throttling, A429OrA503SlowDownIsCountedAsThrottled) {
  EXPECT_TRUE(http::is_throttling(429, std::nullopt, ""));
  EXPECT_TRUE(http::is_throttling(503, std::string("5"), ""));
  EXPECT_TRUE(http::is_throttling(503, std::nullopt, "<Error><Code>SlowDown</Code></Error>"));
  EXPECT_FALSE(http::is_throttling(503, std::nullopt, "upstream down"));
  EXPECT_FALSE(http::is_throttling(500, std::string("5"), ""));
  auto fake = std::make_shared<test::FakeTransport>([n = 0](const test::FakeRequest&) mutable {
    switch (n++) {
      case 0:
        return test::FakeResponse{.status = 503, .body = "<Error><Code>SlowDown</Code></Error>"};
      case 1:
        return test::FakeResponse{.status = 500, .body = "oops"};
      default:
        return test::FakeResponse{.status = 200, .body = "ok"};
    }
  });
  HttpOptions http;
  http.initial_backoff = 1ms;
  std::vector<bool> throttled;
  OpenOptions open;
  open.backend_options.set(std::move(http));
  open.backend_options.set(http::TransportOption{fake});
  open.on_retry = [&](const Error& e, int) { throttled.push_back(is_throttled(e)); };
  EXPECT_EQ(drain(*open_url("http://fake.test/a.tar", open)), "ok");
  EXPECT_EQ(throttled, (std::vector<bool>{true, false}));
}

}  // namespace
}  // namespace wds
