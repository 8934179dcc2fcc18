// Upload sinks: shards written with TarWriter and ShardWriter straight to S3 (the Ceph RGW server
// that scripts/test-servers.sh starts, checking SigV4; skipped without it), to HTTP servers (a
// small server in the test that records every request and answers as a test tells it, also
// standing in for S3 where a real one cannot be made to fail on cue), and to pipe: commands.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "lib/storage/http_source.hpp"
#include "lib/storage/s3.hpp"
#include "tests/support/fault_proxy.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/remote.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

using test::env;

// Sets environment variables for a test and puts the old values back afterwards.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }
  void set(const std::string& name, const std::optional<std::string>& value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

// `count` samples with a random payload of about `size` bytes each (sizes vary) and a label.
std::vector<Sample> make_samples(std::size_t count, std::size_t size, std::uint64_t seed) {
  std::vector<Sample> out;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t n = size / 2 + (size * ((i * 7919) % 100)) / 100;
    out.push_back(test::make_sample(
        "s" + std::to_string(1000 + i),
        {{"bin", random_bytes(n, seed * 1000 + i)}, {"cls", std::to_string(i % 10)}}));
  }
  return out;
}

// One sample as text, all its bytes included, for exact comparisons.
std::string dump(const Sample& s) {
  std::string out = s.key();
  for (const Field& f : s.fields()) {
    out += "|" + f.ext + "=" + std::to_string(f.data.size()) + ":" + std::string(f.data.str());
  }
  return out;
}

Strings dump(const std::vector<Sample>& samples) {
  Strings out;
  for (const Sample& s : samples) out.push_back(dump(s));
  return out;
}

const TarWriterOptions kTar{.mtime = 1700000000};

// The bytes TarWriter makes of `samples`, written to memory for comparison.
std::string shard_bytes(const std::vector<Sample>& samples) {
  std::string out;
  TarWriter tar(open_memory_sink("memory:", out), kTar);
  for (const Sample& s : samples) tar.write(s);
  tar.close();
  return out;
}

void write_shard(std::unique_ptr<ByteSink> sink, const std::vector<Sample>& samples) {
  TarWriter tar(std::move(sink), kTar);
  for (const Sample& s : samples) tar.write(s);
  tar.close();
}

std::string read_all(const std::string& url, const OpenOptions& options = {}) {
  auto src = open_url(url, options);
  std::string got;
  for (auto c = src->read(); !c.empty(); c = src->read()) {
    got.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  return got;
}

// Every sample of the shards, in order, through the whole reading pipeline.
Strings read_back(const Strings& urls) {
  WebDatasetOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  Strings out;
  for (Sample& s : WebDataset(urls, o)) out.push_back(dump(s));
  return out;
}

HttpOptions quick_retries(int retries = 8) {
  HttpOptions http;
  http.initial_backoff = std::chrono::milliseconds(10);
  http.max_backoff = std::chrono::milliseconds(50);
  http.max_retries = retries;
  return http;
}

// SinkOptions whose uploads retry as quick_retries(retries) says.
SinkOptions quick_sink(int retries = 8) {
  SinkOptions options;
  options.backend_options.set(quick_retries(retries));
  return options;
}

// The wds::Error that f() throws; a test failure if it throws none.
template <class F>
std::optional<Error> error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no wds::Error thrown";
  return std::nullopt;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- an HTTP server that records requests -----------------------------------------------------

struct HttpExchange {
  std::string method;
  std::string target;                          // "/path?query"
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;

  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

struct HttpReply {
  int status = 200;
  std::string body;
  std::vector<std::string> headers{};  // "Name: value"
};

// HTTP/1.1 on 127.0.0.1 with keep-alive, one connection at a time: reads each request (answering
// "Expect: 100-continue"), records it, and sends what the handler returns.
class RecordingServer {
 public:
  using Handler = std::function<HttpReply(const HttpExchange&)>;

  explicit RecordingServer(Handler handler) : handler_(std::move(handler)) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_, 8) != 0) {
      throw std::runtime_error("RecordingServer: cannot listen on 127.0.0.1");
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~RecordingServer() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      ::shutdown(listen_, SHUT_RDWR);  // wakes accept()
      if (conn_ >= 0) ::shutdown(conn_, SHUT_RDWR);
    }
    thread_.join();
    ::close(listen_);
  }
  RecordingServer(const RecordingServer&) = delete;
  RecordingServer& operator=(const RecordingServer&) = delete;

  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<HttpExchange> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  int connections() const { return connections_; }

 private:
  void serve() {
    for (;;) {
      int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      {
        std::lock_guard lock(mu_);
        if (stopping_) {
          ::close(c);
          return;
        }
        conn_ = c;
      }
      ++connections_;
      std::string in;
      while (exchange(c, in)) {
      }
      std::lock_guard lock(mu_);
      ::close(c);
      conn_ = -1;
    }
  }

  static bool recv_more(int c, std::string& in) {
    char buf[65536];
    ssize_t n = ::recv(c, buf, sizeof buf, 0);
    if (n <= 0) return false;
    in.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  static bool send_all(int c, const std::string& out) {
    std::size_t sent = 0;
    while (sent < out.size()) {
      ssize_t n = ::send(c, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  // One request and its answer; false when the connection is over.
  bool exchange(int c, std::string& in) {
    std::size_t end;
    while ((end = in.find("\r\n\r\n")) == std::string::npos) {
      if (!recv_more(c, in)) return false;
    }
    HttpExchange x;
    std::string head = in.substr(0, end);
    in.erase(0, end + 4);
    std::size_t line_end = head.find("\r\n");
    std::string request_line = head.substr(0, line_end);
    std::size_t sp1 = request_line.find(' '), sp2 = request_line.rfind(' ');
    x.method = request_line.substr(0, sp1);
    x.target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
    for (std::size_t at = line_end; at != std::string::npos && at < head.size();) {
      std::size_t next = head.find("\r\n", at + 2);
      std::string line =
          head.substr(at + 2, next == std::string::npos ? std::string::npos : next - at - 2);
      std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        std::size_t v = line.find_first_not_of(' ', colon + 1);
        x.headers[name] = v == std::string::npos ? "" : line.substr(v);
      }
      at = next;
    }
    const std::size_t length =
        x.headers.count("content-length") ? std::stoul(x.headers["content-length"]) : 0;
    if (x.header("expect") == "100-continue" && !send_all(c, "HTTP/1.1 100 Continue\r\n\r\n")) {
      return false;
    }
    while (in.size() < length) {
      if (!recv_more(c, in)) return false;
    }
    x.body = in.substr(0, length);
    in.erase(0, length);
    HttpReply reply = handler_(x);
    {
      std::lock_guard lock(mu_);
      requests_.push_back(std::move(x));
    }
    std::string out = "HTTP/1.1 " + std::to_string(reply.status) +
                      " Test\r\nContent-Length: " + std::to_string(reply.body.size()) + "\r\n";
    for (const std::string& h : reply.headers) out += h + "\r\n";
    out += "\r\n" + reply.body;
    return send_all(c, out);
  }

  Handler handler_;
  int listen_ = -1;
  std::uint16_t port_ = 0;
  mutable std::mutex mu_;
  bool stopping_ = false;
  int conn_ = -1;
  std::vector<HttpExchange> requests_;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// ---- http(s):// -------------------------------------------------------------------------------

TEST(HttpUpload, APutWithContentLengthCarriesTheShard) {
  RecordingServer server([](const HttpExchange&) { return HttpReply{201, ""}; });
  const std::vector<Sample> samples = make_samples(20, 40000, 1);
  SinkOptions options;
  options.backend_options.set(HttpOptions{.headers = {"Authorization: Bearer upload-token"}});
  const std::string url = server.url("/out/shard-000000.tar");
  auto sink = open_sink(url, options);
  EXPECT_EQ(sink->url(), url);
  write_shard(std::move(sink), samples);

  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  const HttpExchange& put = requests[0];
  EXPECT_EQ(put.method, "PUT");
  EXPECT_EQ(put.target, "/out/shard-000000.tar");
  EXPECT_EQ(put.header("authorization"), "Bearer upload-token");
  const std::string expected = shard_bytes(samples);
  EXPECT_EQ(put.header("content-length"), std::to_string(expected.size()));
  EXPECT_TRUE(put.body == expected) << "the body differs from the shard";
  EXPECT_EQ(dump(test::read_samples(put.body)), dump(samples));
}

TEST(HttpUpload, NothingIsSentBeforeCloseAndNothingWithoutIt) {
  RecordingServer server([](const HttpExchange&) { return HttpReply{201, ""}; });
  test::TempDir spool;
  ScopedEnv e;
  e.set("TMPDIR", spool.path().string());
  {
    TarWriter tar(open_sink(server.url("/never.tar")), kTar);
    for (const Sample& s : make_samples(10, 300000, 2)) tar.write(s);
    // Spooled to an unlinked file: no name in TMPDIR even while writing.
    EXPECT_TRUE(std::filesystem::is_empty(spool.path()));
  }  // destroyed without close()
  EXPECT_TRUE(server.requests().empty());
  EXPECT_EQ(server.connections(), 0);
  EXPECT_TRUE(std::filesystem::is_empty(spool.path()));

  {
    ScopedEnv missing;
    missing.set("TMPDIR", spool.file("no-such-dir"));
    std::string what;
    EXPECT_EQ(test::error_code([&] { open_sink(server.url("/x.tar")); }, &what),
              ErrorCode::not_found);
    EXPECT_TRUE(contains(what, "spool file")) << what;
  }

  auto sink = open_sink(server.url("/empty.tar"));
  sink->close();  // an empty object is still a PUT
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].header("content-length"), "0");
  EXPECT_THROW(sink->write(std::as_bytes(std::span(std::string_view("late")))), Error);
}

TEST(HttpUpload, ServerErrorsAreRetriedWithTheWholeBody) {
  std::atomic<int> calls{0};
  RecordingServer server([&](const HttpExchange&) {
    return ++calls <= 2 ? HttpReply{503, "busy"} : HttpReply{200, ""};
  });
  SinkOptions options = quick_sink();
  const std::vector<Sample> samples = make_samples(8, 200000, 3);
  write_shard(open_sink(server.url("/retried.tar"), options), samples);
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  const std::string expected = shard_bytes(samples);
  for (const HttpExchange& r : requests) EXPECT_TRUE(r.body == expected);
}

TEST(HttpUpload, WhenRetriesRunOutTheErrorIsUnavailable) {
  RecordingServer server([](const HttpExchange&) { return HttpReply{500, "broken\nbackend"}; });
  SinkOptions options = quick_sink(2);
  const std::string url = server.url("/down.tar");
  auto sink = open_sink(url, options);
  sink->write(std::as_bytes(std::span(std::string_view("bytes"))));
  auto e = error_of([&] { sink->close(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::unavailable) << e->what();
  EXPECT_EQ(e->url(), url);
  EXPECT_TRUE(contains(e->cause(), "PUT: HTTP 500: broken backend")) << e->what();
  EXPECT_TRUE(contains(e->cause(), "gave up after 3 attempts")) << e->what();
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST(HttpUpload, ClientErrorsFailAtOnceWithTheirCategory) {
  const std::vector<std::pair<int, ErrorCode>> cases = {{401, ErrorCode::permission_denied},
                                                        {403, ErrorCode::permission_denied},
                                                        {404, ErrorCode::not_found},
                                                        {405, ErrorCode::invalid_argument}};
  for (const auto& [status, code] : cases) {
    RecordingServer server([status = status](const HttpExchange&) {
      return HttpReply{status, "denied by test"};
    });
    const std::string url = server.url("/x.tar");
    auto sink = open_sink(url, quick_sink());
    sink->write(std::as_bytes(std::span(std::string_view("bytes"))));
    auto e = error_of([&] { sink->close(); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), code) << e->what();
    EXPECT_TRUE(contains(e->what(), url)) << e->what();
    EXPECT_TRUE(contains(e->cause(), "HTTP " + std::to_string(status) + ": denied by test"))
        << e->what();
    EXPECT_EQ(server.requests().size(), 1u) << status;
  }
}

TEST(HttpUpload, ANetworkFailureIsUnavailable) {
  std::uint16_t port;
  {
    RecordingServer gone([](const HttpExchange&) { return HttpReply{}; });
    port = static_cast<std::uint16_t>(std::stoi(gone.endpoint().substr(17)));
  }  // nothing listens on the port now
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/x.tar";
  auto sink = open_sink(url, quick_sink(1));
  auto e = error_of([&] { sink->close(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::unavailable) << e->what();
  EXPECT_TRUE(contains(e->cause(), "gave up after 2 attempts")) << e->what();
}

// The nginx of scripts/test-servers.sh serves files read-only (no WebDAV): a PUT is refused
// with 405, which must come back as such, over HTTPS too with its certificate verified.
TEST(HttpUpload, AServerRefusingPutIsAnErrorWithItsStatus) {
  const std::string http = env("WDS_TEST_HTTP"), https = env("WDS_TEST_HTTPS");
  if (http.empty()) GTEST_SKIP() << "no test servers (run scripts/test.sh)";
  for (const std::string& base : {http, https}) {
    if (base.empty()) continue;
    HttpOptions http = quick_retries();
    http.ca_file = env("WDS_TEST_CA");
    SinkOptions options;
    options.backend_options.set(http);
    const std::string url = base + "/upload-probe.tar";
    auto e = error_of([&] { write_shard(open_sink(url, options), make_samples(3, 1000, 7)); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), ErrorCode::invalid_argument) << e->what();
    EXPECT_TRUE(contains(e->cause(), "PUT: HTTP 405")) << e->what();
  }
  if (!env("WDS_TEST_DATA").empty()) {
    EXPECT_FALSE(std::filesystem::exists(env("WDS_TEST_DATA") + "/upload-probe.tar"));
  }
  if (https.empty()) return;
  // A certificate the system does not trust: refused at once, not retried.
  auto start = std::chrono::steady_clock::now();
  auto e = error_of([&] {
    write_shard(open_sink(https + "/upload-probe.tar", quick_sink()), make_samples(3, 1000, 7));
  });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::permission_denied) << e->what();
  EXPECT_TRUE(contains(e->cause(), "certificate")) << e->what();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(UploadUrls, MalformedOnesAreInvalidArguments) {
  ScopedEnv e;
  e.set("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
  e.set("AWS_SECRET_ACCESS_KEY", "not-a-real-secret");
  for (std::string url :
       {"s3://", "s3://bucket", "s3://bucket/", "s3://bucket/dir/", "s3://bad bucket/x.tar",
        "http://", "https:///x.tar", "gopher://b/x.tar"}) {
    EXPECT_EQ(test::error_code([&] { open_sink(url); }), ErrorCode::invalid_argument) << url;
  }
  SinkOptions bad_endpoint;
  bad_endpoint.backend_options.set(S3Options{.endpoint = "127.0.0.1:9000"});
  std::string what;
  EXPECT_EQ(test::error_code([&] { open_sink("s3://b/x.tar", bad_endpoint); }, &what),
            ErrorCode::invalid_argument);
  EXPECT_TRUE(contains(what, "s3://b/x.tar")) << what;
}

TEST(UploadUrls, S3OptionsInTheBackendSlotReachSinksAndSources) {
  ScopedEnv e;
  e.set("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
  e.set("AWS_SECRET_ACCESS_KEY", "not-a-real-secret");
  SinkOptions options;
  options.backend_options.set(S3Options{.endpoint = "127.0.0.1:9000"});
  EXPECT_EQ(test::error_code([&] { open_sink("s3://b/x.tar", options); }),
            ErrorCode::invalid_argument);
  OpenOptions open;
  open.backend_options.set(S3Options{.endpoint = "127.0.0.1:9000"});
  EXPECT_EQ(test::error_code([&] { open_url("s3://b/x.tar", open); }), ErrorCode::invalid_argument);
}

TEST(UploadUrls, S3WithoutCredentialsIsRefusedAtOpen) {
  test::TempDir home;
  ScopedEnv e;
  for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                           "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE"}) {
    e.set(name, std::nullopt);
  }
  e.set("HOME", home.path().string());
  std::string what;
  EXPECT_EQ(test::error_code([] { open_sink("s3://bucket/x.tar"); }, &what),
            ErrorCode::permission_denied);
  EXPECT_TRUE(contains(what, "s3://bucket/x.tar")) << what;
  EXPECT_TRUE(contains(what, "AWS_ACCESS_KEY_ID")) << what;
}

// ---- s3:// against the recording server ------------------------------------------------------

// The recording server as a (non-verifying) S3 endpoint: multipart uploads with upload id U1.
class FakeS3 {
 public:
  // complete_errors: how many CompleteMultipartUpload answers are 200 with an error body;
  // failing_part: a part number answered 400 InvalidArgument.
  explicit FakeS3(int complete_errors = 0, int failing_part = 0)
      : server_([this, complete_errors, failing_part](const HttpExchange& x) {
          return answer(x, complete_errors, failing_part);
        }) {
    env_.set("AWS_ACCESS_KEY_ID", "AKIDFAKE");
    env_.set("AWS_SECRET_ACCESS_KEY", "fake-secret");
    env_.set("AWS_SESSION_TOKEN", std::nullopt);
  }
  SinkOptions options() const {
    SinkOptions o = quick_sink();
    o.backend_options.set(S3Options{.endpoint = server_.endpoint(), .region = "us-east-1"});
    o.multipart_threshold = 5 << 20;
    o.part_size = 5 << 20;
    return o;
  }
  std::vector<HttpExchange> requests() const { return server_.requests(); }

 private:
  HttpReply answer(const HttpExchange& x, int complete_errors, int failing_part) {
    if (x.method == "POST" && contains(x.target, "?uploads")) {
      return {200,
              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult>"
              "<Bucket>b</Bucket><Key>k</Key><UploadId>U1</UploadId>"
              "</InitiateMultipartUploadResult>"};
    }
    if (x.method == "PUT" && contains(x.target, "partNumber=")) {
      std::string n = x.target.substr(x.target.find("partNumber=") + 11);
      n = n.substr(0, n.find('&'));
      if (std::stoi(n) == failing_part) {
        return {400,
                "<Error><Code>InvalidArgument</Code><Message>part refused by test</Message>"
                "</Error>"};
      }
      return {200, "", {"ETag: \"etag-" + n + "\""}};
    }
    if (x.method == "POST" && contains(x.target, "uploadId=U1")) {
      if (completes_++ < complete_errors) {
        return {200, "<Error><Code>InternalError</Code><Message>try again</Message></Error>"};
      }
      return {200,
              "<CompleteMultipartUploadResult><ETag>\"x-3\"</ETag>"
              "</CompleteMultipartUploadResult>"};
    }
    if (x.method == "DELETE") return {204, ""};
    return {200, ""};
  }

  ScopedEnv env_;
  int completes_ = 0;
  RecordingServer server_;  // last: its thread calls answer()
};

std::vector<std::string> methods_and_targets(const std::vector<HttpExchange>& requests) {
  std::vector<std::string> out;
  for (const HttpExchange& r : requests) out.push_back(r.method + " " + r.target);
  return out;
}

TEST(FakeS3Upload, APartsUploadIsSignedAndCompletedInOrder) {
  FakeS3 s3(/*complete_errors=*/1);
  const std::vector<Sample> samples = make_samples(11, 1 << 20, 4);  // ~11 MiB: 3 parts
  write_shard(open_sink("s3://b/dir/big.tar", s3.options()), samples);
  const auto requests = s3.requests();
  EXPECT_EQ(
      methods_and_targets(requests),
      (Strings{"POST /b/dir/big.tar?uploads=", "PUT /b/dir/big.tar?partNumber=1&uploadId=U1",
               "PUT /b/dir/big.tar?partNumber=2&uploadId=U1",
               "PUT /b/dir/big.tar?partNumber=3&uploadId=U1", "POST /b/dir/big.tar?uploadId=U1",
               "POST /b/dir/big.tar?uploadId=U1"}));  // the 200 with an error is retried
  ASSERT_EQ(requests.size(), 6u);
  std::string joined;
  for (int i = 1; i <= 3; ++i) {
    const HttpExchange& part = requests[static_cast<std::size_t>(i)];
    EXPECT_EQ(part.body.size(), i < 3 ? 5u << 20 : shard_bytes(samples).size() - (10u << 20));
    EXPECT_EQ(part.header("x-amz-content-sha256"), s3::sha256_hex(part.body)) << i;
    EXPECT_TRUE(part.header("authorization").starts_with("AWS4-HMAC-SHA256 Credential=AKIDFAKE/"));
    joined += part.body;
  }
  EXPECT_TRUE(joined == shard_bytes(samples));
  const HttpExchange& complete = requests.back();
  EXPECT_EQ(complete.header("x-amz-content-sha256"), s3::sha256_hex(complete.body));
  EXPECT_EQ(complete.body,
            "<CompleteMultipartUpload>"
            "<Part><PartNumber>1</PartNumber><ETag>&quot;etag-1&quot;</ETag></Part>"
            "<Part><PartNumber>2</PartNumber><ETag>&quot;etag-2&quot;</ETag></Part>"
            "<Part><PartNumber>3</PartNumber><ETag>&quot;etag-3&quot;</ETag></Part>"
            "</CompleteMultipartUpload>");
  for (const HttpExchange& r : requests) {
    EXPECT_FALSE(contains(r.method + r.target, "fake-secret"));
    for (const auto& [name, value] : r.headers) EXPECT_FALSE(contains(value, "fake-secret"));
  }
}

TEST(FakeS3Upload, AFailedPartAbortsTheUpload) {
  FakeS3 s3(/*complete_errors=*/0, /*failing_part=*/2);
  auto e = error_of([&] {
    write_shard(open_sink("s3://b/big.tar", s3.options()), make_samples(11, 1 << 20, 5));
  });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::invalid_argument) << e->what();
  EXPECT_EQ(e->url(), "s3://b/big.tar");
  EXPECT_TRUE(contains(e->cause(), "UploadPart 2 of 3: HTTP 400: InvalidArgument: part refused"))
      << e->what();
  EXPECT_EQ(methods_and_targets(s3.requests()),
            (Strings{"POST /b/big.tar?uploads=", "PUT /b/big.tar?partNumber=1&uploadId=U1",
                     "PUT /b/big.tar?partNumber=2&uploadId=U1", "DELETE /b/big.tar?uploadId=U1"}));
}

TEST(FakeS3Upload, ASmallObjectIsOneSignedPut) {
  FakeS3 s3;
  const std::vector<Sample> samples = make_samples(5, 10000, 6);
  write_shard(open_sink("s3://b/small.tar", s3.options()), samples);
  const auto requests = s3.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method + " " + requests[0].target, "PUT /b/small.tar");
  EXPECT_TRUE(requests[0].body == shard_bytes(samples));
  EXPECT_EQ(requests[0].header("x-amz-content-sha256"), s3::sha256_hex(requests[0].body));
  EXPECT_EQ(requests[0].header("content-length"), std::to_string(requests[0].body.size()));
}

// ---- s3:// against RGW ------------------------------------------------------------------------

class S3Upload : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoint_ = env("WDS_TEST_S3_ENDPOINT");
    bucket_ = env("WDS_TEST_S3_BUCKET");
    if (endpoint_.empty() || bucket_.empty()) {
      GTEST_SKIP() << "no S3 test server (run scripts/test.sh)";
    }
    env_.set("AWS_ACCESS_KEY_ID", env("WDS_TEST_AWS_ACCESS_KEY_ID"));
    env_.set("AWS_SECRET_ACCESS_KEY", env("WDS_TEST_AWS_SECRET_ACCESS_KEY"));
    env_.set("AWS_SESSION_TOKEN", std::nullopt);
    env_.set("AWS_REGION", "us-east-1");
    env_.set("AWS_ENDPOINT_URL", endpoint_);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    prefix_ = "uploads/" + std::string(info->name()) + "-" + std::to_string(::getpid()) + "/";
  }
  std::string s3(const std::string& name) const { return "s3://" + bucket_ + "/" + key(name); }
  std::string key(const std::string& name) const { return prefix_ + name; }

  // A signed GET of the bucket with this query (listings), through the library's own client.
  std::string get_bucket(std::vector<std::pair<std::string, std::string>> query) const {
    const std::string host = endpoint_.substr(endpoint_.find("://") + 3);
    const s3::Credentials credentials = s3::resolve_credentials();
    RequestFactory make = [&] {
      s3::Request r{.method = "GET", .host = host, .path = "/" + bucket_, .query = query};
      http::Request out{.url = s3::request_url(r, "http")};
      for (const auto& [name, value] :
           s3::sign(r, credentials, "us-east-1", "s3", s3::amz_date_now())) {
        if (name != "host") out.headers.push_back(name + ": " + value);
      }
      return out;
    };
    return http_get_body(s3("listing"), make, HttpOptions{});
  }
  // The ETag a listing shows for the object, quotes decoded.
  std::string etag_of(const std::string& name) const {
    std::string xml = get_bucket({{"list-type", "2"}, {"prefix", key(name)}});
    std::size_t at = xml.find("<Key>" + key(name) + "</Key>");
    if (at == std::string::npos) return "";
    std::size_t open = xml.find("<ETag>", at), close = xml.find("</ETag>", at);
    if (open == std::string::npos || close == std::string::npos) return "";
    return xml.substr(open + 6, close - open - 6);
  }
  // Multipart uploads still open for the object.
  bool has_open_upload(const std::string& name) const {
    return contains(get_bucket({{"uploads", ""}}), "<Key>" + key(name) + "</Key>");
  }

  ScopedEnv env_;
  std::string endpoint_;
  std::string bucket_;
  std::string prefix_;
};

TEST_F(S3Upload, AShardReadsBackByteForByte) {
  const std::vector<Sample> samples = make_samples(25, 30000, 10);
  write_shard(open_sink(s3("shard-000000.tar")), samples);
  EXPECT_TRUE(read_all(s3("shard-000000.tar")) == shard_bytes(samples));
  EXPECT_EQ(read_back({s3("shard-000000.tar")}), dump(samples));
  EXPECT_FALSE(contains(etag_of("shard-000000.tar"), "-"));  // one PUT, not parts
}

TEST_F(S3Upload, ALargeShardGoesUpInParts) {
  SinkOptions options;
  options.multipart_threshold = 5 << 20;
  options.part_size = 5 << 20;
  const std::vector<Sample> samples = make_samples(12, 1 << 20, 11);  // ~12 MiB: 3 parts
  const std::string bytes = shard_bytes(samples);
  ASSERT_GT(bytes.size(), 10u << 20);
  write_shard(open_sink(s3("big.tar"), options), samples);
  EXPECT_TRUE(read_all(s3("big.tar")) == bytes);
  EXPECT_EQ(read_back({s3("big.tar")}), dump(samples));
  EXPECT_TRUE(contains(etag_of("big.tar"), "-3")) << etag_of("big.tar");
  EXPECT_FALSE(has_open_upload("big.tar"));
}

TEST_F(S3Upload, AWrongSecretIsPermissionDeniedAndNeverShown) {
  const std::string secret = "wrongSecretValue1234567890abcdefghijklmn";
  env_.set("AWS_SECRET_ACCESS_KEY", secret);
  for (std::uint64_t threshold : {std::uint64_t{64} << 20, std::uint64_t{5} << 20}) {
    SinkOptions options = quick_sink();
    options.multipart_threshold = threshold;
    const std::string url = s3("denied.tar");
    auto e = error_of([&] { write_shard(open_sink(url, options), make_samples(6, 1 << 20, 12)); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), ErrorCode::permission_denied) << e->what();
    EXPECT_EQ(e->url(), url);
    EXPECT_TRUE(contains(e->what(), url)) << e->what();
    EXPECT_TRUE(contains(e->cause(), "HTTP 403")) << e->what();
    EXPECT_TRUE(contains(e->cause(), "SignatureDoesNotMatch")) << e->what();
    EXPECT_FALSE(contains(e->what(), secret));
    EXPECT_FALSE(contains(e->what(), env("WDS_TEST_AWS_SECRET_ACCESS_KEY")));
  }
  env_.set("AWS_SECRET_ACCESS_KEY", env("WDS_TEST_AWS_SECRET_ACCESS_KEY"));
  EXPECT_EQ(test::error_code([&] { read_all(s3("denied.tar")); }), ErrorCode::not_found);
}

TEST_F(S3Upload, AnUnclosedSinkLeavesNoObject) {
  {
    auto sink = open_sink(s3("unclosed.tar"));
    sink->write(std::as_bytes(std::span(std::string_view("half a shard"))));
  }
  {
    TarWriter tar(open_sink(s3("unclosed-writer.tar")), kTar);
    for (const Sample& s : make_samples(5, 1000, 13)) tar.write(s);
  }
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_all(s3("unclosed.tar")); }, &what), ErrorCode::not_found)
      << what;
  EXPECT_EQ(test::error_code([&] { read_all(s3("unclosed-writer.tar")); }), ErrorCode::not_found);
  EXPECT_EQ(test::error_code([&] { resolve_urls(s3("")); }), ErrorCode::not_found);
}

TEST_F(S3Upload, AShardWriterPatternWritesSeveralObjects) {
  const std::vector<Sample> samples = make_samples(10, 5000, 14);
  ShardWriter out(s3("train-%06d.tar"), {.max_count = 3, .tar = kTar});
  for (const Sample& s : samples) out.write(s);
  out.close();
  const Strings expected = {s3("train-000000.tar"), s3("train-000001.tar"), s3("train-000002.tar"),
                            s3("train-000003.tar")};
  EXPECT_EQ(out.shards(), expected);
  EXPECT_EQ(resolve_urls(s3("train-*.tar")), expected);
  EXPECT_EQ(read_back(expected), dump(samples));
  EXPECT_EQ(resolve_urls(s3("train-{000000..000003}.tar")), expected);
}

TEST_F(S3Upload, AMissingBucketIsNotFound) {
  const std::string url = "s3://no-such-bucket-wds/x.tar";
  auto e = error_of([&] { write_shard(open_sink(url), make_samples(2, 100, 15)); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::not_found) << e->what();
  EXPECT_TRUE(contains(e->cause(), "NoSuchBucket")) << e->what();
}

TEST_F(S3Upload, ServerErrorsAreRetried) {
  const std::uint16_t port =
      static_cast<std::uint16_t>(std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)));
  test::FaultProxy proxy("127.0.0.1", port, {.answer_503_first = 2, .faulty_connections = 0});
  SinkOptions options = quick_sink();
  options.backend_options.set(
      S3Options{.endpoint = "http://127.0.0.1:" + std::to_string(proxy.port())});
  const std::vector<Sample> samples = make_samples(10, 20000, 16);
  write_shard(open_sink(s3("retried.tar"), options), samples);
  EXPECT_EQ(proxy.connections(), 3);
  EXPECT_TRUE(read_all(s3("retried.tar")) == shard_bytes(samples));
}

// ---- pipe: ------------------------------------------------------------------------------------

TEST(PipeSink, FeedsTheCommandsInput) {
  test::TempDir dir;
  const std::string out = dir.file("out.tar");
  const std::vector<Sample> samples = make_samples(10, 50000, 20);
  SinkOptions allowed;
  allowed.allow_pipe = true;
  write_shard(open_sink("pipe:cat > '" + out + "'", allowed), samples);
  const std::string got = test::read_file(out);
  EXPECT_TRUE(got == shard_bytes(samples));
}

TEST(PipeSink, IsRefusedUnlessAllowed) {
  ScopedEnv e;
  e.set("WDS_ALLOW_PIPE", std::nullopt);
  EXPECT_EQ(test::error_code([] { open_sink("pipe:cat > /dev/null"); }),
            ErrorCode::permission_denied);
  e.set("WDS_ALLOW_PIPE", "1");
  auto sink = open_sink("pipe:cat > /dev/null");
  sink->close();
}

TEST(PipeSink, AFailingCommandIsAnErrorNamingIt) {
  SinkOptions allowed;
  allowed.allow_pipe = true;
  const std::string url = "pipe:cat > /dev/null; exit 3";
  auto sink = open_sink(url, allowed);
  sink->write(std::as_bytes(std::span(std::string_view("bytes"))));
  auto e = error_of([&] { sink->close(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), ErrorCode::unavailable);
  EXPECT_EQ(e->url(), url);
  EXPECT_TRUE(contains(e->cause(), "exited with status 3")) << e->what();

  // A command that stops reading: the write fails (without SIGPIPE ending the test).
  auto early = open_sink("pipe:exit 4", allowed);
  const std::string chunk(1 << 20, 'x');
  auto e2 = error_of([&] {
    for (int i = 0; i < 64; ++i) early->write(std::as_bytes(std::span(chunk)));
    early->close();
  });
  ASSERT_TRUE(e2);
  EXPECT_TRUE(contains(e2->cause(), "status 4")) << e2->what();
  EXPECT_THROW(early->close(), Error);  // the failure is not forgotten
}

TEST(PipeSink, AnUnclosedSinkStopsTheCommandBeforeItsInputEnds) {
  test::TempDir dir;
  const std::string done = dir.file("done");
  SinkOptions allowed;
  allowed.allow_pipe = true;
  {
    auto sink = open_sink("pipe:cat > /dev/null && touch '" + done + "'", allowed);
    sink->write(std::as_bytes(std::span(std::string_view("bytes"))));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(std::filesystem::exists(done));
}

}  // namespace
}  // namespace wds
