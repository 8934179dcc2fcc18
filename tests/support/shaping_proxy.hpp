// A TCP proxy on 127.0.0.1 that makes a loopback server answer like an object store: each
// response's first byte comes after a delay (plus jitter), and each connection's response bytes
// are capped at a rate. For tests and for bench/remote_bench.sh (through bench/shaping_proxy.cpp):
//
//   wds::test::ShapingProxy proxy("127.0.0.1", nginx_port,
//                                 {.first_byte_delay = 50ms, .bytes_per_second = 50e6});
//   std::string url = "http://127.0.0.1:" + std::to_string(proxy.port()) + "/shard-000.tar";
//
// A "response" starts with the first server bytes after the client sent something (HTTP/1.1
// request and answer, keep-alive included): those wait first_byte_delay plus a uniform jitter
// in [0, jitter]. The rate is paced per connection from that first byte on, so the delay earns
// no credit. One thread per connection, reading and sending up to 256 KiB at a time: 4 x 50 MB/s
// cost little CPU.
//
// Thread-safety: port(), connections() and requests() may be called from any thread. The
// destructor wakes and joins every thread promptly.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fault_proxy.hpp"  // detail::Fd and the poll/send helpers

namespace wds::test {

struct Shaping {
  std::chrono::milliseconds first_byte_delay{0};
  std::chrono::milliseconds jitter{0};  // added to the delay: uniform in [0, jitter]
  double bytes_per_second = 0;          // per connection, response bytes; 0: no cap
};

class ShapingProxy {
 public:
  // Listens on 127.0.0.1 on a free port and forwards to 127.0.0.1:target_port.
  ShapingProxy(std::string target_host, std::uint16_t target_port, Shaping shaping)
      : target_port_(target_port), shaping_(shaping) {
    if (target_host != "127.0.0.1") {
      throw std::invalid_argument("ShapingProxy: the target must be 127.0.0.1, not '" +
                                  target_host + "'");
    }
    detail::make_wake_pipe(wake_read_, wake_write_);
    listen_ = detail::listen_on_loopback(port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ShapingProxy(const ShapingProxy&) = delete;
  ShapingProxy& operator=(const ShapingProxy&) = delete;

  ~ShapingProxy() {
    char byte = 1;  // never read: every poll() in every thread returns at once from now on
    while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
    }
    acceptor_.join();
    for (std::thread& t : workers_) t.join();
  }

  std::uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }
  // Responses delayed so far (one per request on each connection).
  int requests() const { return requests_.load(); }

 private:
  using Clock = std::chrono::steady_clock;

  void accept_loop() {
    for (;;) {
      if (detail::wait_for(listen_.get(), POLLIN, wake_read_.get()) == detail::Ready::wake) return;
      detail::Fd client(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!client) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) {
          continue;
        }
        return;
      }
      int index = connections_.fetch_add(1);
      try {
        workers_.emplace_back([this, index, fd = std::move(client)]() mutable {
          try {
            relay(std::move(fd), index);
          } catch (const std::exception&) {
            // A failed poll(): the connection is dropped, as a network fault would drop it.
          }
        });
      } catch (const std::system_error&) {
      }
    }
  }

  // Sleeps until `until` unless the proxy stops first (false).
  bool sleep_until(Clock::time_point until) {
    for (;;) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return true;
      // poll() takes whole milliseconds; a remainder below one is not worth a wait.
      if (detail::wait_for(wake_read_.get(), POLLIN, wake_read_.get(), static_cast<int>(left)) ==
          detail::Ready::wake) {
        return false;
      }
    }
  }

  void relay(detail::Fd client, int index) {
    detail::Fd server = detail::connect_loopback(target_port_, wake_read_.get());
    if (!server) return;
    std::mt19937 random(static_cast<unsigned>(index) * 2654435761u + 1);
    std::uniform_int_distribution<long> jitter(0, shaping_.jitter.count());
    const std::size_t kBuffer = std::size_t{256} << 10;
    auto buf = std::make_unique<char[]>(kBuffer);

    bool client_open = true, server_open = true;
    bool awaiting = false;    // the client sent something: the next response byte is delayed
    Clock::time_point paced;  // when the current response's pacing started
    std::uint64_t sent = 0;   // response bytes since then
    while (client_open || server_open) {
      pollfd fds[3] = {{client_open ? client.get() : -1, POLLIN, 0},
                       {server_open ? server.get() : -1, POLLIN, 0},
                       {wake_read_.get(), POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[2].revents != 0) return;
      if (client_open && fds[0].revents != 0) {
        ssize_t n = detail::read_some(client.get(), buf.get(), kBuffer);
        if (n == 0) {
          client_open = false;
          ::shutdown(server.get(), SHUT_WR);
        } else if (n == -1) {
          return;
        } else if (n > 0) {
          awaiting = true;
          if (!detail::send_all(server.get(), {buf.get(), static_cast<std::size_t>(n)},
                                wake_read_.get())) {
            return;
          }
        }
      }
      if (server_open && fds[1].revents != 0) {
        if (awaiting) {
          awaiting = false;
          requests_.fetch_add(1);
          auto delay = shaping_.first_byte_delay + std::chrono::milliseconds(jitter(random));
          if (!sleep_until(Clock::now() + delay)) return;
          paced = Clock::now();
          sent = 0;
        }
        ssize_t n = detail::read_some(server.get(), buf.get(), kBuffer);
        if (n == 0) {
          server_open = false;
          ::shutdown(client.get(), SHUT_WR);
        } else if (n == -1) {
          return;
        } else if (n > 0) {
          if (!detail::send_all(client.get(), {buf.get(), static_cast<std::size_t>(n)},
                                wake_read_.get())) {
            return;
          }
          sent += static_cast<std::uint64_t>(n);
          if (shaping_.bytes_per_second > 0) {
            auto due =
                paced + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                            static_cast<double>(sent) / shaping_.bytes_per_second));
            if (!sleep_until(due)) return;
          }
        }
      }
    }
  }

  std::uint16_t target_port_;
  Shaping shaping_;
  std::uint16_t port_ = 0;
  detail::Fd wake_read_, wake_write_, listen_;
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  std::vector<std::thread> workers_;  // touched only by the acceptor, then by the destructor
  std::thread acceptor_;
};

}  // namespace wds::test
