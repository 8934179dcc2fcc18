// A tiny HTTP server on 127.0.0.1 for tests of what a real client (curl) does with answers no
// ordinary server gives: each request is answered by a function of its request line and
// headers, one request per connection (Connection: close), the answer sent at once or trickled.
//
//   wds::test::ScriptServer server([](const std::string& request) {
//     return wds::test::Reply{.head = "HTTP/1.1 302 Found\r\nLocation: /a\r\n"};
//   });
//   std::string url = server.url("/a");
//
// Thread-safety: port(), url() and requests() may be called from any thread. The destructor
// wakes and joins every thread promptly, even while an answer trickles.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fault_proxy.hpp"  // detail::Fd, the loopback listener and poll helpers

namespace wds::test {

struct Reply {
  // The status line and headers, each ending in "\r\n" (Content-Length and Connection: close
  // are added).
  std::string head;
  std::string body{};
  // Body bytes per second, sent a byte at a time; 0: all at once.
  double bytes_per_second = 0;
  // Sent at once with Transfer-Encoding: chunked (instead of Content-Length), in HTTP chunks
  // of these sizes in turn.
  std::vector<std::size_t> chunked = {};
};

class ScriptServer {
 public:
  // Told the request's line and headers ("GET /a HTTP/1.1\r\nHost: ...\r\n...").
  using Script = std::function<Reply(const std::string& request)>;

  // Told the request's line and headers, and its body (Content-Length bytes, read after
  // answering "Expect: 100-continue").
  using BodyScript = std::function<Reply(const std::string& request, const std::string& body)>;

  explicit ScriptServer(Script script) : script_(std::move(script)) { start(); }
  explicit ScriptServer(BodyScript script) : body_script_(std::move(script)) { start(); }
  ScriptServer(const ScriptServer&) = delete;
  ScriptServer& operator=(const ScriptServer&) = delete;
  ~ScriptServer() {
    char byte = 1;  // never read: every poll() returns at once from now on
    while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
    }
    acceptor_.join();
    for (std::thread& t : connections_) t.join();
  }

  std::uint16_t port() const { return port_; }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // Every request line so far, in order of arrival.
  std::vector<std::string> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void start() {
    detail::make_wake_pipe(wake_read_, wake_write_);
    listen_ = detail::listen_on_loopback(port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  // The value of header `name` (lowercase) in `head`, or "".
  static std::string header(const std::string& head, const std::string& name) {
    for (std::size_t at = head.find("\r\n"); at != std::string::npos;) {
      const std::size_t end = head.find("\r\n", at + 2);
      const std::string line = head.substr(at + 2, end == std::string::npos ? end : end - at - 2);
      const std::size_t colon = line.find(':');
      std::string key = line.substr(0, colon);
      for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (colon != std::string::npos && key == name) {
        const std::size_t v = line.find_first_not_of(' ', colon + 1);
        return v == std::string::npos ? "" : line.substr(v);
      }
      at = end;
    }
    return "";
  }

  // Reads the body after the head (`request` holds what arrived so far); false if the client
  // went away.
  bool read_body(int fd, std::string& request, std::string& body) {
    const std::size_t head_end = request.find("\r\n\r\n") + 4;
    const std::string length = header(request.substr(0, head_end), "content-length");
    const std::size_t want = length.empty() ? 0 : std::stoull(length);
    if (!header(request.substr(0, head_end), "expect").empty() &&
        !detail::send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", wake_read_.get())) {
      return false;
    }
    char buf[65536];
    while (request.size() < head_end + want) {
      if (detail::wait_for(fd, POLLIN, wake_read_.get()) == detail::Ready::wake) return false;
      ssize_t n = detail::read_some(fd, buf, sizeof buf);
      if (n == -2) continue;
      if (n <= 0) return false;
      request.append(buf, static_cast<std::size_t>(n));
    }
    body = request.substr(head_end, want);
    return true;
  }

  void accept_loop() {
    for (;;) {
      if (detail::wait_for(listen_.get(), POLLIN, wake_read_.get()) == detail::Ready::wake) return;
      detail::Fd client(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!client) continue;
      connections_.emplace_back([this, fd = std::move(client)]() mutable { serve(std::move(fd)); });
    }
  }

  void serve(detail::Fd fd) {
    std::string request;
    char buf[4096];
    while (request.find("\r\n\r\n") == std::string::npos) {
      if (detail::wait_for(fd.get(), POLLIN, wake_read_.get()) == detail::Ready::wake) return;
      ssize_t n = detail::read_some(fd.get(), buf, sizeof buf);
      if (n == -2) continue;
      if (n <= 0) return;
      request.append(buf, static_cast<std::size_t>(n));
    }
    const std::string line = request.substr(0, request.find("\r\n"));
    {
      std::lock_guard lock(mu_);
      requests_.push_back(line);
    }
    std::string body;
    if (body_script_ && !read_body(fd.get(), request, body)) return;
    const std::string head_of_request = request.substr(0, request.find("\r\n\r\n") + 2);
    const Reply reply =
        body_script_ ? body_script_(head_of_request, body) : script_(head_of_request);
    if (!reply.chunked.empty()) {
      std::string framed = reply.head + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
      char size[32];
      for (std::size_t at = 0, i = 0; at < reply.body.size(); ++i) {
        const std::size_t n =
            std::min(reply.chunked[i % reply.chunked.size()], reply.body.size() - at);
        framed += std::string(
            size, static_cast<std::size_t>(std::snprintf(size, sizeof size, "%zx\r\n", n)));
        framed.append(reply.body, at, n).append("\r\n");
        at += n;
      }
      detail::send_all(fd.get(), framed + "0\r\n\r\n", wake_read_.get());
      return;
    }
    const std::string head = reply.head + "Content-Length: " + std::to_string(reply.body.size()) +
                             "\r\nConnection: close\r\n\r\n";
    if (!detail::send_all(fd.get(), head, wake_read_.get())) return;
    if (reply.bytes_per_second <= 0) {
      detail::send_all(fd.get(), reply.body, wake_read_.get());
      return;
    }
    const auto gap = std::chrono::duration<double>(1.0 / reply.bytes_per_second);
    for (char c : reply.body) {
      if (!detail::send_all(fd.get(), std::string_view(&c, 1), wake_read_.get())) return;
      const int ms = static_cast<int>(std::chrono::duration<double, std::milli>(gap).count());
      // Sleeps on the wake pipe, so the destructor ends it; a closed client shows as readable.
      if (detail::wait_for(wake_read_.get(), POLLIN, wake_read_.get(), ms) !=
          detail::Ready::timeout)
        return;
      char probe;
      if (::recv(fd.get(), &probe, 1, MSG_DONTWAIT | MSG_PEEK) == 0) return;  // client gone
    }
  }

  Script script_;
  BodyScript body_script_;
  detail::Fd wake_read_, wake_write_, listen_;
  std::uint16_t port_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // the acceptor's until it is joined
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
};

}  // namespace wds::test
