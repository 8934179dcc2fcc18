// Remote shards against real servers on loopback: nginx (HTTP) and Ceph RGW (S3, checking SigV4),
// started by scripts/test-servers.sh, which exports their addresses; with a fault-injecting
// proxy in between for the network's failures. Without the servers these tests skip.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "lib/storage/cache.hpp"
#include "lib/storage/http_source.hpp"
#include "tests/support/env.hpp"
#include "tests/support/fault_proxy.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/metrics.hpp"
#include "wds/remote.hpp"
#include "wds/source.hpp"
#include "wds/tar_samples.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

using test::env;

// Every sample of one shard, as "key:ext=<sha of bytes>..." lines (content, not just sizes).
Strings samples_of(const std::string& url, OpenOptions open = {},
                   ErrorHandler handler = reraise_exception) {
  TarSamplesOptions options;
  options.open = std::move(open);
  options.handler = std::move(handler);
  TarSamples samples(Strings{url}, options);
  Strings out;
  while (auto s = samples.next()) {
    std::string line = s->key() + ":";
    for (const Field& f : s->fields()) {
      line += f.ext + "=" + std::to_string(std::hash<std::string_view>{}(f.data.str())) + "/" +
              std::to_string(f.data.size()) + ",";
    }
    out.push_back(line);
  }
  return out;
}

class Remote : public ::testing::Test {
 protected:
  void SetUp() override {
    http_ = env("WDS_TEST_HTTP");
    data_ = env("WDS_TEST_DATA");
    if (http_.empty() || data_.empty()) GTEST_SKIP() << "no test servers (run scripts/test.sh)";
    for (const auto& e : std::filesystem::directory_iterator(data_)) {
      if (e.path().extension() == ".tar") shards_.push_back(e.path().filename().string());
    }
    std::sort(shards_.begin(), shards_.end());
    ASSERT_GE(shards_.size(), 2u);
    port_ = static_cast<std::uint16_t>(std::stoi(http_.substr(http_.rfind(':') + 1)));
  }
  std::string local(const std::string& name) const { return data_ + "/" + name; }
  std::string via(std::uint16_t port, const std::string& name) const {
    return "http://127.0.0.1:" + std::to_string(port) + "/" + name;
  }
  // The same, from a host recorded as one where one GET per shard does: read by curl moved on
  // by read(), on the reader's thread, instead of by a transfer thread.
  std::string via_one_get(std::uint16_t port, const std::string& name) const {
    record_one_get_host("http://127.0.0.1:" + std::to_string(port));
    return via(port, name);
  }
  static OpenOptions quick_retries(int retries = 8) {
    HttpOptions http;
    http.initial_backoff = std::chrono::milliseconds(10);
    http.max_backoff = std::chrono::milliseconds(50);
    http.max_retries = retries;
    // curl averages the speed over a few seconds; on loopback a healthy transfer is far faster.
    http.low_speed_bytes = 20000;
    http.low_speed_time = std::chrono::seconds(1);
    OpenOptions o;
    o.backend_options.set(http);
    return o;
  }

  std::string http_;
  std::string data_;
  Strings shards_;
  std::uint16_t port_ = 0;
};

TEST_F(Remote, HttpGivesTheSameSamplesAsTheLocalFile) {
  for (const std::string& name : shards_) {
    EXPECT_EQ(samples_of(http_ + "/" + name), samples_of(local(name))) << name;
  }
}

TEST_F(Remote, HttpsWithVerifiedCertificates) {
  const std::string https = env("WDS_TEST_HTTPS"), ca = env("WDS_TEST_CA");
  if (https.empty()) GTEST_SKIP() << "no HTTPS test server";
  OpenOptions trusted;
  trusted.backend_options.set(HttpOptions{.ca_file = ca});
  EXPECT_EQ(samples_of(https + "/" + shards_[0], trusted), samples_of(local(shards_[0])));
  // Not signed by a CA the system trusts: refused at once, not retried.
  auto start = std::chrono::steady_clock::now();
  try {
    samples_of(https + "/" + shards_[0]);
    FAIL() << "an untrusted certificate was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::permission_denied) << e.what();
    EXPECT_NE(e.cause().find("certificate"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// GCS and the Hub's CDN answer over HTTP/2, which curl offers over TLS. Shards read over it by a
// transfer thread, then on the reader's thread (the host recorded as one where one GET does),
// are the same as the files, and nginx's log shows every request served over HTTP/2.
TEST_F(Remote, Http2GivesTheSameSamplesByThreadAndOnTheReader) {
  const std::string h2 = env("WDS_TEST_HTTPS2"), log = env("WDS_TEST_HTTP_LOG");
  if (h2.empty() || log.empty()) GTEST_SKIP() << "no HTTP/2 test server";
  OpenOptions trusted;
  trusted.backend_options.set(HttpOptions{.ca_file = env("WDS_TEST_CA")});
  const std::string mark = "?h2=" + std::to_string(::getpid());
  for (const bool on_reader : {false, true}) {
    if (on_reader) record_one_get_host(h2);
    for (const std::string& name : shards_) {
      EXPECT_EQ(samples_of(h2 + "/" + name + mark, trusted), samples_of(local(name)))
          << name << (on_reader ? " on the reader" : " by thread");
    }
  }
  std::size_t over_h2 = 0, other = 0;
  std::istringstream lines(test::read_file(log));
  for (std::string line; std::getline(lines, line);) {
    if (line.find(mark + " ") == std::string::npos) continue;
    ++(line.find(" HTTP/2.0\"") != std::string::npos ? over_h2 : other);
  }
  EXPECT_EQ(over_h2, 2 * shards_.size());
  EXPECT_EQ(other, 0u);
}

// A body larger than curl's reads, read on the reader's thread while the reader is late, so
// that every step of curl stops inside a full read: over HTTP/1.1 the read is taken whole and the
// transfer paused, over HTTP/2 the next piece is refused. Every byte, in order, over each.
TEST_F(Remote, ALargeBodyReadOnTheReaderArrivesWholeOverHttp1AndHttp2) {
  const std::string big = env("WDS_TEST_BIG_FILE"), h2 = env("WDS_TEST_HTTPS2");
  if (big.empty() || h2.empty()) GTEST_SKIP() << "no large body on the test server";
  const std::string want = test::read_file(big);
  ASSERT_GT(want.size(), 4u << 20);
  OpenOptions trusted;
  trusted.backend_options.set(HttpOptions{.ca_file = env("WDS_TEST_CA")});
  for (const std::string& host : {http_, env("WDS_TEST_HTTPS"), h2}) {
    record_one_get_host(host);
    const std::string got = test::read_late(*open_url(host + "/big/body.bin", trusted));
    EXPECT_EQ(got.size(), want.size()) << host;
    EXPECT_TRUE(got == want) << host;
  }
}

// A DataLoader's workers are forked from a process that may have read over HTTP already: its
// kept-alive connections are not theirs. Each child reads on connections of its own, all at
// once, and gets its shard's samples without a retry (on a shared connection they read each
// other's responses).
TEST_F(Remote, ForkedChildrenOfAReaderReadOnConnectionsOfTheirOwn) {
  ASSERT_EQ(samples_of(http_ + "/" + shards_[0]), samples_of(local(shards_[0])));
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      int code = 2;  // an error was thrown
      try {
        int retries = 0;
        OpenOptions open = quick_retries();
        open.on_retry = [&retries](const Error&, int) { ++retries; };
        bool same = true;
        for (int pass = 0; pass < 3; ++pass) {  // each GET after the first reuses a connection
          for (std::size_t k = 0; k < shards_.size(); ++k) {
            const std::string& name = shards_[(k + i) % shards_.size()];
            same = same && samples_of(http_ + "/" + name, open) == samples_of(local(name));
          }
        }
        code = !same ? 1 : retries > 0 ? 3 : 0;
      } catch (...) {
      }
      _exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "a child ended by a signal";
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "1: other samples than the local file's, 2: an error, 3: retries";
  }
}

TEST_F(Remote, HttpStartsAtAnOffsetWithARangeRequest) {
  OpenOptions at;
  at.offset = 1000;
  auto src = open_url(http_ + "/" + shards_[0], at);
  std::string got;
  for (auto c = src->read(); !c.empty(); c = src->read()) {
    got.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  const std::string whole = test::read_file(local(shards_[0]));
  EXPECT_EQ(got, whole.substr(1000));
  ASSERT_TRUE(src->size().has_value());
  EXPECT_EQ(*src->size(), whole.size());
}

std::string read_all(ByteSource& src) {
  std::string got;
  for (auto c = src.read(); !c.empty(); c = src.read()) {
    got.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  return got;
}

TEST_F(Remote, HttpReadsABoundedRange) {
  const std::string whole = test::read_file(local(shards_[0]));
  OpenOptions range = quick_retries();
  range.offset = 700;
  range.length = 1234;
  auto src = open_url(http_ + "/" + shards_[0], range);
  std::string got = read_all(*src);
  ASSERT_EQ(got.size(), 1234u);
  EXPECT_TRUE(got == whole.substr(700, 1234));
}

TEST_F(Remote, HttpMissingShardIs404NotFound) {
  try {
    samples_of(http_ + "/no-such-shard.tar");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_NE(e.cause().find("HTTP 404"), std::string::npos) << e.what();
    // nginx's error page as its text, not its HTML.
    EXPECT_NE(e.cause().find("HTTP 404: 404 Not Found nginx"), std::string::npos) << e.what();
    EXPECT_EQ(e.cause().find('<'), std::string::npos) << e.what();
  }
}

TEST_F(Remote, ConnectionsAreReusedAcrossShards) {
  test::FaultProxy proxy("127.0.0.1", port_, {.faulty_connections = 0});
  // Without read-ahead: shards opened ahead are read at the same time, on connections of their own.
  TarSamples samples(
      [&, i = std::size_t{0}]() mutable -> std::optional<std::string> {
        if (i >= shards_.size()) return std::nullopt;
        return via(proxy.port(), shards_[i++]);
      },
      TarSamplesOptions{.read_ahead = 0});
  std::size_t n = 0;
  while (samples.next()) ++n;
  EXPECT_GT(n, 0u);
  EXPECT_EQ(proxy.connections(), 1);
}

// The network's failures: every sample must still arrive exactly once, in order; read by a
// transfer thread, and on the reader's thread from a host where one GET per shard does (the
// parameter).
class RemoteFaults : public Remote, public ::testing::WithParamInterface<bool> {
 protected:
  std::string url(std::uint16_t port, const std::string& name) const {
    return GetParam() ? via_one_get(port, name) : via(port, name);
  }
};
INSTANTIATE_TEST_SUITE_P(ByThreadAndOnTheReader, RemoteFaults, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "OnReader" : "Thread"; });

TEST_P(RemoteFaults, CutConnectionsResumeWhereTheyStopped) {
  const Strings expected = samples_of(local(shards_[0]));
  for (std::uint64_t cut : {1ull, 600ull, 5000ull, 70000ull}) {
    test::FaultProxy proxy("127.0.0.1", port_, {.cut_after_bytes = cut, .faulty_connections = 3});
    EXPECT_EQ(samples_of(url(proxy.port(), shards_[0]), quick_retries()), expected) << cut;
    EXPECT_GE(proxy.connections(), 2) << "the cut at " << cut << " was never hit";
  }
}

TEST_P(RemoteFaults, StalledTransfersAreAbandonedAndResumed) {
  const Strings expected = samples_of(local(shards_[0]));
  test::FaultProxy proxy("127.0.0.1", port_,
                         {.stall_after_bytes = 3000,
                          .stall_for = std::chrono::milliseconds(20000),
                          .faulty_connections = 1});
  EXPECT_EQ(samples_of(url(proxy.port(), shards_[0]), quick_retries()), expected);
  EXPECT_EQ(proxy.connections(), 2);
}

TEST_P(RemoteFaults, DestroyingASourceDuringAStallReturnsPromptly) {
  test::FaultProxy proxy("127.0.0.1", port_,
                         {.stall_after_bytes = 100,
                          .stall_for = std::chrono::milliseconds(60000),
                          .faulty_connections = 1});
  auto src = open_url(url(proxy.port(), shards_[0]));  // default options: 30 s stall limit
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto start = std::chrono::steady_clock::now();
  src.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_P(RemoteFaults, ServiceUnavailableIsRetried) {
  test::FaultProxy proxy("127.0.0.1", port_, {.answer_503_first = 3, .faulty_connections = 0});
  EXPECT_EQ(samples_of(url(proxy.port(), shards_[0]), quick_retries()),
            samples_of(local(shards_[0])));
  EXPECT_EQ(proxy.connections(), 4);
}

TEST_F(Remote, WhenRetriesRunOutTheHandlerDecides) {
  test::FaultProxy proxy("127.0.0.1", port_, {.answer_503_first = 1000, .faulty_connections = 0});
  try {
    samples_of(via(proxy.port(), shards_[0]), quick_retries(2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable);
    EXPECT_NE(e.cause().find("HTTP 503"), std::string::npos) << e.what();
    EXPECT_NE(e.cause().find("gave up after 3 attempts"), std::string::npos) << e.what();
  }
  // With a continuing handler the broken shard is skipped and the next one read.
  TarSamplesOptions options;
  options.open = quick_retries(1);
  int errors = 0;
  options.handler = [&](const Error&) {
    ++errors;
    return true;
  };
  TarSamples samples(Strings{via(proxy.port(), shards_[0]), http_ + "/" + shards_[1]}, options);
  std::size_t n = 0;
  while (samples.next()) ++n;
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(n, samples_of(local(shards_[1])).size());
}

// Retries reach the pipeline's metrics, per scheme, and OpenOptions::on_retry, with the URL.
struct HeardRetries {
  std::mutex mu;
  std::vector<std::pair<Error, int>> calls;  // the hook runs on transfer threads
  RetryHook hook() {
    return [this](const Error& cause, int attempt) {
      std::lock_guard lock(mu);
      calls.emplace_back(cause, attempt);
    };
  }
};

WebDatasetOptions one_rank(OpenOptions open) {
  WebDatasetOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  o.open = std::move(open);
  return o;
}

TEST_F(Remote, RetriesAreCountedInMetricsAndReportedToTheHook) {
  const std::string whole = test::read_file(local(shards_[0]));
  const std::size_t expected = samples_of(local(shards_[0])).size();
  // Refused twice, then served: exactly two retries, attempts 1 and 2.
  {
    test::FaultProxy proxy("127.0.0.1", port_, {.answer_503_first = 2, .faulty_connections = 0});
    const std::string url = via(proxy.port(), shards_[0]);
    HeardRetries heard;
    OpenOptions open = quick_retries();
    open.on_retry = heard.hook();
    Pipeline<Sample> ds = WebDataset(Strings{url}, one_rank(open));
    std::size_t n = 0;
    for (Sample& s : ds) n += s.key().empty() ? 0 : 1;
    EXPECT_EQ(n, expected);
    const Metrics m = ds.metrics();
    const std::optional<SourceMetrics> http = m.source("http");
    ASSERT_TRUE(http.has_value());
    EXPECT_EQ(http->retries, 2u);
    EXPECT_EQ(http->shards, 1u);
    EXPECT_EQ(http->bytes, whole.size());
    EXPECT_GT(http->read_seconds, 0.0);
    EXPECT_EQ(m.samples, expected);
    std::lock_guard lock(heard.mu);
    ASSERT_EQ(heard.calls.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      const Error& cause = heard.calls[static_cast<std::size_t>(i)].first;
      EXPECT_EQ(heard.calls[static_cast<std::size_t>(i)].second, i + 1);
      EXPECT_EQ(cause.url(), url);
      EXPECT_EQ(cause.code(), ErrorCode::unavailable);
      EXPECT_NE(cause.cause().find("HTTP 503"), std::string::npos) << cause.what();
      EXPECT_NE(std::string(cause.what()).find(url), std::string::npos) << cause.what();
    }
  }
  // Cut once mid-transfer: resumed with a Range request, one retry or more, no byte twice.
  {
    test::FaultProxy proxy("127.0.0.1", port_, {.cut_after_bytes = 5000, .faulty_connections = 1});
    const std::string url = via(proxy.port(), shards_[0]);
    HeardRetries heard;
    OpenOptions open = quick_retries();
    open.on_retry = heard.hook();
    Pipeline<Sample> ds = WebDataset(Strings{url}, one_rank(open));
    std::size_t n = 0;
    for (Sample& s : ds) n += s.key().empty() ? 0 : 1;
    EXPECT_EQ(n, expected);
    const std::optional<SourceMetrics> http = ds.metrics().source("http");
    ASSERT_TRUE(http.has_value());
    EXPECT_GE(http->retries, 1u);
    EXPECT_EQ(http->bytes, whole.size());
    std::lock_guard lock(heard.mu);
    ASSERT_GE(heard.calls.size(), 1u);
    EXPECT_EQ(heard.calls.size(), http->retries);
    EXPECT_EQ(heard.calls[0].first.url(), url);
  }
}

TEST_F(Remote, RetriesThroughTheCacheAreCountedToo) {
  test::TempDir cache;
  test::FaultProxy proxy("127.0.0.1", port_, {.answer_503_first = 1, .faulty_connections = 0});
  HeardRetries heard;
  OpenOptions open = quick_retries();
  open.on_retry = heard.hook();
  open.backend_options.set(CacheOptions{cache.path().string(), 0});
  Pipeline<Sample> ds = WebDataset(Strings{via(proxy.port(), shards_[0])}, one_rank(open));
  for (Sample& s : ds) (void)s;
  EXPECT_EQ(ds.metrics().retries(), 1u);
  // The second pass reads the cached file: no request, no retry, the same bytes.
  for (Sample& s : ds) (void)s;
  const std::optional<SourceMetrics> http = ds.metrics().source("http");
  ASSERT_TRUE(http.has_value());
  EXPECT_EQ(http->retries, 1u);
  EXPECT_EQ(http->shards, 2u);
  EXPECT_EQ(http->bytes, 2 * test::read_file(local(shards_[0])).size());
  EXPECT_EQ(proxy.connections(), 2);
  std::lock_guard lock(heard.mu);
  EXPECT_EQ(heard.calls.size(), 1u);
}

// A server that ignores Range: its first answer is cut after `cut` bytes, its second sends the
// whole body again with 200. The client must skip what it already delivered.
class NoRangeServer {
 public:
  NoRangeServer(std::string body, std::size_t cut) : body_(std::move(body)), cut_(cut) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 4);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~NoRangeServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::uint16_t port() const { return port_; }
  int answered() const { return answered_; }
  std::string first_request() const {
    std::lock_guard lock(mu_);
    return first_request_;
  }

 private:
  void serve() {
    for (int i = 0; i < 2; ++i) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      ssize_t got = ::recv(c, buf, sizeof buf, 0);  // the request; its Range header is ignored
      if (i == 0 && got > 0) {
        std::lock_guard lock(mu_);
        first_request_.assign(buf, static_cast<std::size_t>(got));
      }
      std::string head = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body_.size()) +
                         "\r\nConnection: close\r\n\r\n";
      std::string out = head + (i == 0 ? body_.substr(0, cut_) : body_);
      // Counted before sending: the client may have read everything before this thread runs on.
      ++answered_;
      ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }
  std::string body_;
  std::size_t cut_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<int> answered_{0};
  mutable std::mutex mu_;
  std::string first_request_;
  std::thread thread_;
};

TEST_F(Remote, ABoundedRangeFromAServerThatIgnoresRangeStopsAtItsEnd) {
  const std::string whole = test::read_file(local(shards_[0]));
  NoRangeServer server(whole, 600);  // first answer cut at 600 bytes, then the whole body
  OpenOptions range = quick_retries();
  range.offset = 500;
  range.length = 3000;
  auto src = open_url(via(server.port(), shards_[0]), range);
  std::string got = read_all(*src);
  ASSERT_EQ(got.size(), 3000u);
  EXPECT_TRUE(got == whole.substr(500, 3000));
}

TEST_F(Remote, ExtraHeadersAreSent) {
  const std::string whole = test::read_file(local(shards_[0]));
  NoRangeServer server(whole, whole.size());
  OpenOptions open = quick_retries();
  HttpOptions http = *open.backend_options.get<HttpOptions>();
  http.headers.push_back("Authorization: Bearer secret-token");
  open.backend_options.set(http);
  EXPECT_EQ(samples_of(via(server.port(), shards_[0]), open), samples_of(local(shards_[0])));
  EXPECT_NE(server.first_request().find("Authorization: Bearer secret-token"), std::string::npos)
      << server.first_request();
}

TEST_F(Remote, AServerThatIgnoresRangeHasTheDeliveredBytesSkipped) {
  const std::string whole = test::read_file(local(shards_[0]));
  NoRangeServer server(whole, 12345);
  EXPECT_EQ(samples_of(via(server.port(), shards_[0]), quick_retries()),
            samples_of(local(shards_[0])));
  EXPECT_EQ(server.answered(), 2);
}

class RemoteS3 : public Remote {
 protected:
  void SetUp() override {
    Remote::SetUp();
    if (IsSkipped()) return;
    endpoint_ = env("WDS_TEST_S3_ENDPOINT");
    bucket_ = env("WDS_TEST_S3_BUCKET");
    if (endpoint_.empty()) GTEST_SKIP() << "no S3 test server";
    ::setenv("AWS_ACCESS_KEY_ID", env("WDS_TEST_AWS_ACCESS_KEY_ID").c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", env("WDS_TEST_AWS_SECRET_ACCESS_KEY").c_str(), 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
    ::setenv("AWS_ENDPOINT_URL", endpoint_.c_str(), 1);
  }
  std::string s3(const std::string& key) const { return "s3://" + bucket_ + "/" + key; }
  std::string endpoint_;
  std::string bucket_;
};

TEST_F(RemoteS3, SignedReadsGiveTheSameSamplesAsTheLocalFile) {
  for (const std::string& name : shards_) {
    EXPECT_EQ(samples_of(s3("shards/" + name)), samples_of(local(name))) << name;
  }
}

TEST_F(RemoteS3, SignedReadsOnTheReadersThreadGiveTheSameSamples) {
  record_one_get_host("s3://" + bucket_);
  for (const std::string& name : shards_) {
    EXPECT_EQ(samples_of(s3("shards/" + name)), samples_of(local(name))) << name;
  }
}

TEST_F(RemoteS3, AWrongSecretIs403AndTheSecretIsNeverShown) {
  const std::string secret = "wrongSecretValue1234567890abcdefghijklmn";
  ::setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
  try {
    samples_of(s3("shards/" + shards_[0]));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::permission_denied) << e.what();
    EXPECT_NE(e.cause().find("403"), std::string::npos) << e.what();
    EXPECT_NE(e.cause().find("SignatureDoesNotMatch"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(secret), std::string::npos);
    EXPECT_EQ(std::string(e.what()).find(env("WDS_TEST_AWS_SECRET_ACCESS_KEY")), std::string::npos);
  }
}

TEST_F(RemoteS3, AMissingKeyIs404) {
  try {
    samples_of(s3("shards/no-such-shard.tar"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found) << e.what();
    EXPECT_NE(e.cause().find("NoSuchKey"), std::string::npos) << e.what();
  }
}

// "s3://b/shards" for the objects under "shards/" was a bare 404: say how to list them.
TEST_F(RemoteS3, AMissingKeyThatIsAFolderSaysHowToListIt) {
  try {
    samples_of(s3("shards"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found) << e.what();
    EXPECT_NE(e.cause().find("NoSuchKey"), std::string::npos) << e.what();
    EXPECT_NE(e.cause().find("give " + s3("shards") + "/ to list"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(resolve_urls(s3("shards/")).empty());  // what the hint proposes works
  try {
    samples_of(s3("no-such-folder"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found) << e.what();
    EXPECT_EQ(e.cause().find("to list"), std::string::npos) << e.what();
  }
}

TEST_F(RemoteS3, ListingFollowsPagesAndGlobs) {
  Strings many = resolve_urls(s3("many/"));
  ASSERT_EQ(many.size(), 1005u);  // more than one 1000-key page
  EXPECT_EQ(many.front(), s3("many/obj-0000.txt"));
  EXPECT_EQ(many.back(), s3("many/obj-1004.txt"));
  EXPECT_TRUE(std::is_sorted(many.begin(), many.end()));
  Strings tars = resolve_urls(s3("shards/*.tar"));
  Strings expected;
  for (const std::string& name : shards_) expected.push_back(s3("shards/" + name));
  EXPECT_EQ(tars, expected);
  EXPECT_THROW(resolve_urls(s3("shards/nothing-*.tar")), Error);
}

// A public bucket could not be read without credentials: AWS_NO_SIGN_REQUEST=YES (the AWS CLI's
// --no-sign-request) or S3Options::anonymous send requests unsigned.
TEST_F(RemoteS3, APublicObjectIsReadUnsignedWithoutCredentials) {
  constexpr std::array<const char*, 5> kNames = {"AWS_NO_SIGN_REQUEST", "AWS_ACCESS_KEY_ID",
                                                 "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                                 "AWS_SHARED_CREDENTIALS_FILE"};
  test::ClearedEnv no_credentials(kNames);
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
  const std::string url = s3("public/" + shards_[0]);
  ::setenv("AWS_NO_SIGN_REQUEST", "YES", 1);
  EXPECT_EQ(samples_of(url), samples_of(local(shards_[0])));
  // An object that is not public is refused to an unsigned request by the server.
  std::string what;
  EXPECT_EQ(test::error_code([&] { samples_of(s3("shards/" + shards_[0])); }, &what),
            ErrorCode::permission_denied);
  EXPECT_NE(what.find("HTTP 403"), std::string::npos) << what;
  ::unsetenv("AWS_NO_SIGN_REQUEST");
  OpenOptions open;
  open.backend_options.set(S3Options{.anonymous = true});
  EXPECT_EQ(samples_of(url, open), samples_of(local(shards_[0])));
  // Neither: no credentials is an error before any request.
  EXPECT_EQ(test::error_code([&] { samples_of(url); }, &what), ErrorCode::permission_denied);
  EXPECT_EQ(what.find("HTTP 403"), std::string::npos) << what;
}

TEST_F(RemoteS3, RetriesAreCountedUnderS3) {
  const std::uint16_t s3_port =
      static_cast<std::uint16_t>(std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)));
  test::FaultProxy proxy("127.0.0.1", s3_port, {.answer_503_first = 1, .faulty_connections = 0});
  HeardRetries heard;
  OpenOptions open = quick_retries();
  open.on_retry = heard.hook();
  open.backend_options.set(
      S3Options{.endpoint = "http://127.0.0.1:" + std::to_string(proxy.port())});
  const std::string url = s3("shards/" + shards_[0]);
  Pipeline<Sample> ds = WebDataset(Strings{url}, one_rank(open));
  std::size_t n = 0;
  for (Sample& s : ds) n += s.key().empty() ? 0 : 1;
  EXPECT_EQ(n, samples_of(local(shards_[0])).size());
  const std::optional<SourceMetrics> m = ds.metrics().source("s3");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->retries, 1u);
  EXPECT_EQ(m->shards, 1u);
  EXPECT_EQ(m->bytes, test::read_file(local(shards_[0])).size());
  std::lock_guard lock(heard.mu);
  ASSERT_EQ(heard.calls.size(), 1u);
  EXPECT_EQ(heard.calls[0].first.url(), url);  // the s3:// URL, not the signed request's
}

TEST_F(RemoteS3, APipelineOverAnS3Glob) {
  WebDatasetOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  Pipeline<Sample> ds = WebDataset(s3("shards/*.tar"), o);
  std::size_t n = 0, expected = 0;
  for (Sample& s : ds) {
    (void)s;
    ++n;
  }
  for (const std::string& name : shards_) expected += samples_of(local(name)).size();
  EXPECT_EQ(n, expected);
}

TEST_F(Remote, CacheWritesWhileStreamingAndServesLaterReads) {
  test::TempDir cache;
  const CacheOptions options{cache.path().string(), 0};
  test::FaultProxy proxy("127.0.0.1", port_, {.faulty_connections = 0});
  OpenOptions open;
  open.backend_options.set(options);
  const std::string url = via(proxy.port(), shards_[0]);
  const Strings expected = samples_of(local(shards_[0]));
  EXPECT_EQ(samples_of(url, open), expected);
  const int after_first = proxy.connections();
  ASSERT_TRUE(std::filesystem::exists(cache_path(options.dir, url)));
  EXPECT_EQ(std::filesystem::file_size(cache_path(options.dir, url)),
            std::filesystem::file_size(local(shards_[0])));
  EXPECT_EQ(samples_of(url, open), expected);  // from disk
  EXPECT_EQ(proxy.connections(), after_first);
  TarSamples again(Strings{url}, TarSamplesOptions{.open = open});
  EXPECT_EQ(again.next()->local_path(), cache_path(options.dir, url));
}

TEST_F(Remote, AnUnfinishedReadLeavesNothingInTheCache) {
  test::TempDir cache;
  OpenOptions open;
  open.backend_options.set(CacheOptions{cache.path().string(), 0});
  {
    TarSamples samples(Strings{http_ + "/" + shards_[0]}, TarSamplesOptions{.open = open});
    samples.next();  // and stop
  }
  EXPECT_TRUE(std::filesystem::is_empty(cache.path()));
}

TEST_F(Remote, TheCacheEvictsLeastRecentlyUsedShards) {
  test::TempDir cache;
  const std::uint64_t size = std::filesystem::file_size(local(shards_[0]));
  OpenOptions open;
  open.backend_options.set(CacheOptions{cache.path().string(), 2 * size + 10});
  for (const std::string& name : shards_) {
    samples_of(http_ + "/" + name, open);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct modification times
  }
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache.path())) {
    if (e.path().extension() != ".sum") ++files;  // each entry's checksum file goes with it
  }
  EXPECT_LE(files, 2u);
  // The most recently read shard is the one kept.
  EXPECT_TRUE(
      std::filesystem::exists(cache_path(cache.path().string(), http_ + "/" + shards_.back())));
}

TEST_F(Remote, TwoReadersFillingOneCacheEntryDoNotCorruptIt) {
  test::TempDir cache;
  OpenOptions open;
  open.backend_options.set(CacheOptions{cache.path().string(), 0});
  const std::string url = http_ + "/" + shards_[0];
  const Strings expected = samples_of(local(shards_[0]));
  Strings a, b;
  std::thread t1([&] { a = samples_of(url, open); });
  std::thread t2([&] { b = samples_of(url, open); });
  t1.join();
  t2.join();
  EXPECT_EQ(a, expected);
  EXPECT_EQ(b, expected);
  EXPECT_EQ(samples_of(url, open), expected);  // the one file left is whole
}

TEST(CacheNames, AreSafeAndDistinct) {
  const std::string dir = "/cache";
  std::map<std::string, std::string> seen;
  for (std::string url : {"http://a/x/shard.tar", "http://b/x/shard.tar", "http://a/y/shard.tar",
                          "s3://b/../../etc/passwd", "http://h/..", "pipe:cat /etc/shadow",
                          "http://h/a%2F..%2Fb.tar?sig=1"}) {
    std::string path = cache_path(dir, url);
    EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(dir)) << url;
    std::string name = std::filesystem::path(path).filename().string();
    EXPECT_NE(name.front(), '.') << url;
    EXPECT_EQ(name.find('/'), std::string::npos) << url;
    EXPECT_TRUE(seen.emplace(path, url).second) << url << " collides with " << seen[path];
  }
}

}  // namespace
}  // namespace wds
