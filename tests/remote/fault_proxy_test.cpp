// Tests of the FaultProxy test helper against a tiny HTTP server in the test, both on
// 127.0.0.1. Timing is checked only by loose lower bounds (and generous upper bounds where a
// hang is the failure), so a loaded machine cannot make them flaky.
#include "tests/support/fault_proxy.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

namespace wds::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Answers every connection with one fixed HTTP response, after reading the request head,
// then closes it.
class OneResponseServer {
 public:
  explicit OneResponseServer(std::string response) : response_(std::move(response)) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) detail::throw_errno("pipe2");
    wake_read_ = detail::Fd(pipe_fds[0]);
    wake_write_ = detail::Fd(pipe_fds[1]);
    listen_ = detail::Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    int one = 1;
    ::setsockopt(listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr = detail::loopback(0);
    if (::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_.get(), 16) != 0) {
      detail::throw_errno("bind/listen");
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~OneResponseServer() {
    char byte = 1;
    (void)!::write(wake_write_.get(), &byte, 1);
    thread_.join();
  }

  std::uint16_t port() const { return port_; }
  int served() const { return served_.load(); }

 private:
  void run() {
    const int wake = wake_read_.get();
    while (detail::wait_for(listen_.get(), POLLIN, wake) == detail::Ready::fd) {
      detail::Fd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!conn) continue;
      std::string head;
      char buf[4096];
      bool ok = true;
      while (ok && head.find("\r\n\r\n") == std::string::npos) {
        ok = detail::wait_for(conn.get(), POLLIN, wake) == detail::Ready::fd;
        ssize_t n = ok ? detail::read_some(conn.get(), buf, sizeof buf) : -1;
        if (n == 0 || n == -1) ok = false;
        if (n > 0) head.append(buf, static_cast<std::size_t>(n));
      }
      if (!ok) continue;
      ++served_;
      // Errors are expected: a cut connection is closed by the proxy mid-response.
      if (detail::send_all(conn.get(), response_, wake)) ::shutdown(conn.get(), SHUT_WR);
      // Wait for the other side to close, so that closing here is never a reset.
      while (detail::wait_for(conn.get(), POLLIN, wake, 5000) == detail::Ready::fd &&
             detail::read_some(conn.get(), buf, sizeof buf) > 0) {
      }
    }
  }

  std::string response_;
  detail::Fd wake_read_, wake_write_, listen_;
  std::uint16_t port_ = 0;
  std::atomic<int> served_{0};
  std::thread thread_;
};

std::string http_response(std::size_t body_size) {
  std::string body(body_size, '\0');
  for (std::size_t i = 0; i < body_size; ++i) body[i] = static_cast<char>('a' + i % 26);
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body_size) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// A client connection to 127.0.0.1:port that has sent one GET.
detail::Fd connect_and_get(std::uint16_t port) {
  detail::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = detail::loopback(port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    detail::throw_errno("connect");
  }
  std::string request = "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    detail::throw_errno("send");
  }
  return fd;
}

struct Received {
  std::string bytes;
  bool eof = false;            // a clean end of stream (not a reset, not a timeout)
  Clock::time_point end_time;  // when the end (or the timeout) came
  Clock::time_point last_byte_time;
};

// Reads until end of stream, an error, or `timeout` without any byte.
Received read_all(int fd, std::chrono::milliseconds timeout = 10s) {
  Received r;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      r.eof = n == 0;
      break;
    }
    r.bytes.append(buf, static_cast<std::size_t>(n));
    r.last_byte_time = Clock::now();
  }
  r.end_time = Clock::now();
  return r;
}

Received fetch(std::uint16_t port) {
  detail::Fd fd = connect_and_get(port);
  return read_all(fd.get());
}

const std::string k503 =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

TEST(FaultProxy, PassThroughDeliversEveryByte) {
  const std::string response = http_response(1 << 20);  // many reads and writes
  OneResponseServer server(response);
  FaultProxy proxy("127.0.0.1", server.port(), {});
  EXPECT_NE(proxy.port(), 0);
  EXPECT_NE(proxy.port(), server.port());

  Received r = fetch(proxy.port());
  EXPECT_TRUE(r.eof);
  EXPECT_EQ(r.bytes.size(), response.size());
  EXPECT_TRUE(r.bytes == response);
  EXPECT_EQ(proxy.connections(), 1);
  EXPECT_EQ(server.served(), 1);
}

TEST(FaultProxy, CutDeliversExactlyThatManyBytesThenEndOfStream) {
  const std::string response = http_response(100000);
  OneResponseServer server(response);
  for (std::uint64_t cut : {0u, 1u, 1000u, 70000u}) {
    FaultProxy proxy("127.0.0.1", server.port(), {.cut_after_bytes = cut});
    Received r = fetch(proxy.port());
    EXPECT_TRUE(r.eof) << cut;
    EXPECT_EQ(r.bytes.size(), cut);
    EXPECT_TRUE(r.bytes == response.substr(0, cut)) << cut;
  }
  EXPECT_EQ(server.served(), 4);  // The request reached the server every time.
}

TEST(FaultProxy, CutBeyondTheResponsePassesItWhole) {
  const std::string response = http_response(100);
  OneResponseServer server(response);
  FaultProxy proxy("127.0.0.1", server.port(), {.cut_after_bytes = 1000000});
  Received r = fetch(proxy.port());
  EXPECT_TRUE(r.eof);
  EXPECT_TRUE(r.bytes == response);
}

TEST(FaultProxy, Answers503ThenPassesThrough) {
  const std::string response = http_response(5000);
  OneResponseServer server(response);
  FaultProxy proxy("127.0.0.1", server.port(), {.answer_503_first = 2});
  for (int i = 0; i < 2; ++i) {
    Received r = fetch(proxy.port());
    EXPECT_TRUE(r.eof);
    EXPECT_EQ(r.bytes, k503);
  }
  EXPECT_EQ(server.served(), 0);  // The server was never contacted.
  Received r = fetch(proxy.port());
  EXPECT_TRUE(r.bytes == response);
  EXPECT_EQ(server.served(), 1);
  EXPECT_EQ(proxy.connections(), 3);
}

TEST(FaultProxy, StallHoldsTheConnectionThenCloses) {
  const std::string response = http_response(100000);
  OneResponseServer server(response);
  FaultProxy proxy("127.0.0.1", server.port(),
                   {.stall_after_bytes = 500, .stall_for = std::chrono::milliseconds(300)});
  Received r = fetch(proxy.port());
  EXPECT_TRUE(r.eof);
  EXPECT_EQ(r.bytes.size(), 500u);
  EXPECT_TRUE(r.bytes == response.substr(0, 500));
  EXPECT_GE(r.end_time - r.last_byte_time, 250ms);  // Loose: poll() never wakes early.
}

TEST(FaultProxy, StallEndsWhenTheClientGivesUp) {
  OneResponseServer server(http_response(100000));
  FaultProxy proxy("127.0.0.1", server.port(), {.stall_after_bytes = 10, .stall_for = 60s});
  detail::Fd fd = connect_and_get(proxy.port());
  Received r = read_all(fd.get(), 200ms);  // A client's low-speed timeout.
  EXPECT_FALSE(r.eof);
  EXPECT_EQ(r.bytes.size(), 10u);
  fd.reset();
  // The proxy notices the close and frees the connection; the next one passes (faulty: 1).
  Received next = fetch(proxy.port());
  EXPECT_EQ(next.bytes.size(), http_response(100000).size());
}

TEST(FaultProxy, CutBeforeStallWins) {
  const std::string response = http_response(10000);
  OneResponseServer server(response);
  FaultProxy proxy("127.0.0.1", server.port(),
                   {.cut_after_bytes = 100, .stall_after_bytes = 200, .stall_for = 60s});
  auto start = Clock::now();
  Received r = fetch(proxy.port());
  EXPECT_TRUE(r.eof);
  EXPECT_EQ(r.bytes.size(), 100u);
  EXPECT_LT(Clock::now() - start, 30s);  // Not stalled.
}

TEST(FaultProxy, FaultyConnectionsLimitsTheFaults) {
  const std::string response = http_response(3000);
  OneResponseServer server(response);
  FaultProxy proxy("127.0.0.1", server.port(), {.cut_after_bytes = 10, .faulty_connections = 2});
  EXPECT_EQ(fetch(proxy.port()).bytes.size(), 10u);
  EXPECT_EQ(fetch(proxy.port()).bytes.size(), 10u);
  EXPECT_TRUE(fetch(proxy.port()).bytes == response);
  EXPECT_TRUE(fetch(proxy.port()).bytes == response);
  EXPECT_EQ(proxy.connections(), 4);
}

TEST(FaultProxy, FaultyConnectionsCountAfterThe503s) {
  const std::string response = http_response(3000);
  OneResponseServer server(response);
  FaultProxy proxy("127.0.0.1", server.port(), {.cut_after_bytes = 10, .answer_503_first = 1});
  EXPECT_EQ(fetch(proxy.port()).bytes, k503);
  EXPECT_EQ(fetch(proxy.port()).bytes, response.substr(0, 10));
  EXPECT_TRUE(fetch(proxy.port()).bytes == response);
}

TEST(FaultProxy, ZeroFaultyConnectionsPassesEverything) {
  const std::string response = http_response(3000);
  OneResponseServer server(response);
  FaultProxy proxy("127.0.0.1", server.port(), {.cut_after_bytes = 10, .faulty_connections = 0});
  EXPECT_TRUE(fetch(proxy.port()).bytes == response);
}

TEST(FaultProxy, DestructorReturnsPromptlyWithConnectionsOpen) {
  OneResponseServer server(http_response(100000));
  auto proxy = std::make_unique<FaultProxy>("127.0.0.1", server.port(),
                                            FaultPlan{.stall_after_bytes = 0, .stall_for = 60s});
  detail::Fd stalled = connect_and_get(proxy->port());
  // An idle connection (no request) and one that has just arrived.
  detail::Fd idle(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = detail::loopback(proxy->port());
  ASSERT_EQ(::connect(idle.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  while (proxy->connections() < 2) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(100ms);  // Let the stall begin.

  auto start = Clock::now();
  proxy.reset();
  EXPECT_LT(Clock::now() - start, 5s);  // Loose: the stall alone would last 60 s.
  // The proxy's ends are closed: the clients see the end of the stream.
  EXPECT_TRUE(read_all(stalled.get(), 5s).eof);
  EXPECT_TRUE(read_all(idle.get(), 5s).eof);
}

TEST(FaultProxy, RefusedTargetClosesTheClient) {
  std::uint16_t closed_port;
  {
    OneResponseServer gone("");
    closed_port = gone.port();
  }
  FaultProxy proxy("127.0.0.1", closed_port, {});
  auto start = Clock::now();
  Received r = fetch(proxy.port());  // An end of stream or a reset, not a timeout.
  EXPECT_TRUE(r.bytes.empty());
  EXPECT_LT(r.end_time - start, 5s);
}

TEST(FaultProxy, RefusesTargetsOtherThanLoopback) {
  EXPECT_THROW(FaultProxy("192.0.2.1", 80, {}), std::invalid_argument);
  EXPECT_THROW(FaultProxy("localhost", 80, {}), std::invalid_argument);
}

}  // namespace
}  // namespace wds::test
