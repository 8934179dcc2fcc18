// A TCP proxy on 127.0.0.1 that injects network faults between a client and a real server on
// loopback, for testing how HTTP and S3 byte sources retry and resume:
//
//   wds::test::FaultProxy proxy("127.0.0.1", server_port, {.cut_after_bytes = 4096});
//   std::string url = "http://127.0.0.1:" + std::to_string(proxy.port()) + "/shard-000.tar";
//   // The first connection ends after 4096 response bytes; the retry passes through.
//
// Faults, per connection, in the order connections are accepted:
// - the first `answer_503_first` connections get "503 Service Unavailable" (Connection: close)
//   and never reach the server;
// - of the connections after them, the first `faulty_connections` are cut (FIN to the client,
//   server side closed) after `cut_after_bytes` response bytes, or stalled after
//   `stall_after_bytes` response bytes: the connection stays open, nothing more is forwarded,
//   and after `stall_for` it is cut. Whichever limit comes first applies. Response bytes count
//   over the whole connection, across keep-alive requests; requests always pass.
// - every later connection passes through untouched.
//
// Thread-safety: port() and connections() may be called from any thread. The destructor wakes
// and joins every thread promptly, even with connections open or stalled.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace wds::test {

struct FaultPlan {
  // Close both sides after forwarding this many response bytes (per connection).
  std::optional<std::uint64_t> cut_after_bytes{};
  // Stop forwarding (keep the connection open) after this many response bytes...
  std::optional<std::uint64_t> stall_after_bytes{};
  // ...for this long, then close both sides.
  std::chrono::milliseconds stall_for{0};
  // Answer the first N connections with "HTTP/1.1 503 Service Unavailable" (Content-Length: 0,
  // Connection: close) without contacting the server.
  int answer_503_first = 0;
  // Cut or stall only the first N connections that reach the server (those after the 503s);
  // later ones pass through untouched.
  int faulty_connections = 1;
};

namespace detail {

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }

 private:
  int fd_ = -1;
};

[[noreturn]] inline void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), "FaultProxy: " + what);
}

inline sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

enum class Ready { fd, wake, timeout };

// Waits until `fd` is ready for `events` or `wake` is readable (the proxy is stopping), for at
// most `timeout_ms` (-1: no limit). Errors and hang-ups count as ready: the next call on `fd`
// reports them.
inline Ready wait_for(int fd, short events, int wake, int timeout_ms = -1) {
  pollfd fds[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
  for (;;) {
    int n = ::poll(fds, 2, timeout_ms);
    if (n < 0 && errno == EINTR) continue;  // A signal; the deadline restarts, which is harmless.
    if (n < 0) throw_errno("poll");
    if (fds[1].revents != 0) return Ready::wake;
    if (n == 0) return Ready::timeout;
    return Ready::fd;
  }
}

// Sends all of `data`, polling so that a client that stops reading cannot block shutdown.
// False if the peer is gone or the proxy is stopping.
inline bool send_all(int fd, std::string_view data, int wake) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_for(fd, POLLOUT, wake) == Ready::wake) return false;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

// Reads what is there without blocking: the byte count, 0 at end of stream, -1 on error
// (a reset), -2 when there is nothing yet.
inline ssize_t read_some(int fd, char* buf, std::size_t size) {
  for (;;) {
    ssize_t n = ::recv(fd, buf, size, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -2;
    return n;
  }
}

// Connects to 127.0.0.1:port, or gives an empty Fd if refused or the proxy is stopping.
// Non-blocking, so that a target that never accepts cannot hold up shutdown.
inline Fd connect_loopback(std::uint16_t port, int wake) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fd;
  sockaddr_in addr = loopback(port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (errno != EINPROGRESS) return Fd();
  if (wait_for(fd.get(), POLLOUT, wake) != Ready::fd) return Fd();
  int error = 0;
  socklen_t len = sizeof error;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) return Fd();
  return fd;
}

// The wake pipe a proxy's threads poll beside their sockets: closing time is one byte written.
inline void make_wake_pipe(Fd& read_end, Fd& write_end) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) throw_errno("pipe2");
  read_end = Fd(pipe_fds[0]);
  write_end = Fd(pipe_fds[1]);
}

// A non-blocking socket listening on 127.0.0.1 on a free port, which `port` is set to.
inline Fd listen_on_loopback(std::uint16_t& port) {
  Fd listen(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen) throw_errno("socket");
  int one = 1;
  if (::setsockopt(listen.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    throw_errno("setsockopt(SO_REUSEADDR)");
  }
  sockaddr_in addr = loopback(0);
  if (::bind(listen.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    throw_errno("bind(127.0.0.1:0)");
  }
  if (::listen(listen.get(), 64) != 0) throw_errno("listen");
  socklen_t len = sizeof addr;
  if (::getsockname(listen.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw_errno("getsockname");
  }
  port = ntohs(addr.sin_port);
  return listen;
}

}  // namespace detail

class FaultProxy {
 public:
  // Listens on 127.0.0.1 on a free port and forwards to target_host:target_port, which must be
  // 127.0.0.1: the proxy never contacts another address.
  FaultProxy(std::string target_host, std::uint16_t target_port, FaultPlan plan)
      : target_port_(target_port), plan_(plan) {
    if (target_host != "127.0.0.1") {
      throw std::invalid_argument("FaultProxy: the target must be 127.0.0.1, not '" + target_host +
                                  "'");
    }
    detail::make_wake_pipe(wake_read_, wake_write_);
    listen_ = detail::listen_on_loopback(port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  ~FaultProxy() {
    // One byte that nobody reads keeps the pipe readable, so every poll() in every thread
    // returns at once, now and later.
    char byte = 1;
    while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
    }
    acceptor_.join();
    // The acceptor has stopped, so no thread is added any more.
    for (std::thread& t : workers_) t.join();
  }

  std::uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }

 private:
  void accept_loop() {
    for (;;) {
      if (detail::wait_for(listen_.get(), POLLIN, wake_read_.get()) == detail::Ready::wake) {
        return;
      }
      detail::Fd client(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!client) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) {
          continue;
        }
        return;  // E.g. out of descriptors: later clients see a refused connection.
      }
      int index = connections_.fetch_add(1);
      try {
        workers_.emplace_back(
            [this, index, fd = std::move(client)]() mutable { serve(std::move(fd), index); });
      } catch (const std::system_error&) {
        // No thread to be had: the connection is closed, like a server at its limit.
      }
    }
  }

  void serve(detail::Fd client, int index) {
    try {
      if (index < plan_.answer_503_first) {
        answer_503(client);
        return;
      }
      bool faulty = index - plan_.answer_503_first < plan_.faulty_connections;
      relay(std::move(client), faulty);
    } catch (const std::exception&) {
      // A failed poll(): the connection is dropped, as a network fault would drop it.
    }
  }

  void answer_503(detail::Fd& client) {
    // Read the request head first: closing a socket with unread data sends a reset, which
    // could make the client lose the response. Wait at most 2 s for it.
    std::string head;
    char buf[4096];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) break;
      auto ready = detail::wait_for(client.get(), POLLIN, wake_read_.get(), static_cast<int>(left));
      if (ready == detail::Ready::wake) return;
      if (ready == detail::Ready::timeout) break;
      ssize_t n = detail::read_some(client.get(), buf, sizeof buf);
      if (n == 0 || n == -1) return;
      if (n > 0) head.append(buf, static_cast<std::size_t>(n));
    }
    static constexpr std::string_view kResponse =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if (detail::send_all(client.get(), kResponse, wake_read_.get())) finish(client);
  }

  // Sends the client an end of stream, then reads and drops what it still sends until it
  // closes, so that the close is a clean FIN rather than a reset that could discard bytes
  // already delivered to it.
  void finish(detail::Fd& client) {
    ::shutdown(client.get(), SHUT_WR);
    char buf[4096];
    while (detail::wait_for(client.get(), POLLIN, wake_read_.get()) == detail::Ready::fd) {
      ssize_t n = detail::read_some(client.get(), buf, sizeof buf);
      if (n == 0 || n == -1) return;
    }
  }

  // Forwards both ways; in a faulty connection, response bytes only up to the cut or stall.
  void relay(detail::Fd client, bool faulty) {
    detail::Fd server = detail::connect_loopback(target_port_, wake_read_.get());
    if (!server) return;  // The client sees the connection closed.

    // How many response bytes may still pass before the fault, and which fault it is.
    std::optional<std::uint64_t> limit;
    bool stall = false;
    if (faulty) {
      limit = plan_.cut_after_bytes;
      if (plan_.stall_after_bytes && (!limit || *plan_.stall_after_bytes < *limit)) {
        limit = plan_.stall_after_bytes;
        stall = true;
      }
    }

    bool client_open = true, server_open = true;  // Directions still being read.
    char buf[16384];
    while (client_open || server_open) {
      // A direction that has ended is left out (fd -1): poll() would still report its
      // hang-up or error, again and again.
      pollfd fds[3] = {{client_open ? client.get() : -1, POLLIN, 0},
                       {server_open ? server.get() : -1, POLLIN, 0},
                       {wake_read_.get(), POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[2].revents != 0) return;
      if (client_open && fds[0].revents != 0) {
        ssize_t n = detail::read_some(client.get(), buf, sizeof buf);
        if (n == 0) {
          client_open = false;
          ::shutdown(server.get(), SHUT_WR);  // Pass the client's half-close on.
        } else if (n == -1) {
          return;
        } else if (n > 0) {
          std::string_view data(buf, static_cast<std::size_t>(n));
          if (!detail::send_all(server.get(), data, wake_read_.get())) return;
        }
      }
      if (server_open && fds[1].revents != 0) {
        if (limit && *limit == 0) {
          // The fault is due as soon as the server answers: the request has reached it.
          fault(client, server, stall);
          return;
        }
        std::size_t want = sizeof buf;
        if (limit) want = static_cast<std::size_t>(std::min<std::uint64_t>(want, *limit));
        ssize_t n = detail::read_some(server.get(), buf, want);
        if (n == 0) {
          server_open = false;
          ::shutdown(client.get(), SHUT_WR);
        } else if (n == -1) {
          return;
        } else if (n > 0) {
          std::string_view data(buf, static_cast<std::size_t>(n));
          if (!detail::send_all(client.get(), data, wake_read_.get())) return;
          if (limit) {
            *limit -= static_cast<std::uint64_t>(n);
            if (*limit == 0) {
              fault(client, server, stall);
              return;
            }
          }
        }
      }
    }
  }

  // The limit is reached: cut now, or stall (forward nothing, drop what the client sends,
  // notice when it gives up and closes) and then cut.
  void fault(detail::Fd& client, detail::Fd& server, bool stall) {
    if (stall) {
      auto deadline = std::chrono::steady_clock::now() + plan_.stall_for;
      char buf[4096];
      for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
        if (left <= 0) break;
        auto ready = detail::wait_for(client.get(), POLLIN, wake_read_.get(),
                                      static_cast<int>(std::min<long long>(left, 1 << 30)));
        if (ready == detail::Ready::wake) return;
        if (ready == detail::Ready::timeout) break;
        ssize_t n = detail::read_some(client.get(), buf, sizeof buf);
        if (n == 0 || n == -1) return;  // The client gave up.
      }
    }
    server.reset();
    finish(client);
  }

  std::uint16_t target_port_;
  FaultPlan plan_;
  std::uint16_t port_ = 0;
  detail::Fd wake_read_, wake_write_, listen_;
  std::atomic<int> connections_{0};
  std::vector<std::thread> workers_;  // Touched only by the acceptor, then by the destructor.
  std::thread acceptor_;
};

}  // namespace wds::test
