// A scripted HTTP transport (lib/storage/http_transport.hpp) for tests of the HTTP client without a
// server: every request is recorded (with its body) and answered by a function of it, which can
// also cut a response short or fail before any answer, as a broken connection does. A request
// started to be stepped (Connection::start) is answered at once and hands its body over only in
// its steps.
//
//   auto fake = std::make_shared<test::FakeTransport>([](const test::FakeRequest& r) {
//     return test::FakeResponse{.status = 200, .body = "abc"};
//   });
//   OpenOptions open;
//   open.backend_options.set(http::TransportOption{fake});
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/storage/http_transport.hpp"

namespace wds::test {

struct FakeRequest {
  std::string method, url;
  std::vector<std::string> headers;
  std::string body;

  // The value of header `name` ("Range"), or nullopt.
  std::optional<std::string> header(std::string_view name) const {
    for (const std::string& h : headers) {
      if (h.size() > name.size() && h[name.size()] == ':' &&
          std::equal(name.begin(), name.end(), h.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) ==
                   std::tolower(static_cast<unsigned char>(b));
          })) {
        std::string v = h.substr(name.size() + 1);
        return v.substr(std::min(v.find_first_not_of(' '), v.size()));
      }
    }
    return std::nullopt;
  }
};

struct FakeResponse {
  long status = 200;
  std::vector<std::pair<std::string, std::string>> headers{};  // names lowercase
  std::string body{};
  // Only this many bytes of the body arrive, then the connection breaks.
  std::optional<std::size_t> cut_after{};
  // No answer at all: the connection fails (refused, reset) before the status.
  bool unreachable = false;
  // The body arrives at this many bytes per second on this connection (0: at once).
  double bytes_per_second = 0;
  // The status and headers arrive this long after the request (a server's first-byte latency).
  std::chrono::milliseconds first_byte_after{0};
  // The body is handed to the handler in pieces of this many bytes (curl's writes are up to
  // its buffer's size).
  std::size_t piece_bytes = 1000;
};

class FakeTransport final : public http::Transport {
 public:
  using Responder = std::function<FakeResponse(const FakeRequest&)>;
  // `shared_bytes_per_second`: the bodies of all connections together arrive at this rate, as
  // through a server or link they share (0: no such limit).
  explicit FakeTransport(Responder respond, double shared_bytes_per_second = 0)
      : respond_(std::move(respond)), shared_rate_(shared_bytes_per_second) {}

  std::unique_ptr<http::Connection> connect(const HttpOptions&) override {
    return std::make_unique<Conn>(*this);
  }

  // Every request so far, in order.
  std::vector<FakeRequest> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  // Body bytes the clients have taken so far, over all requests.
  std::size_t delivered() const { return delivered_.load(); }

 private:
  // One request: recorded and answered when it starts (as curl sends it), its response handed
  // to the handler step by step, at most kStepBytes of body per step (as much as a socket's
  // buffer would hold), in pieces of FakeResponse::piece_bytes as a network delivers them.
  class Run final : public http::Transfer {
   public:
    static constexpr std::size_t kStepBytes = 64 * 1024;

    Run(FakeTransport& t, const http::Request& request, http::ResponseHandler& handler)
        : t_(t), handler_(handler) {
      FakeRequest r{request.method, request.url, request.headers, {}};
      if (const http::Body* b = request.body) {
        if (b->fd < 0) {
          r.body = std::string(b->memory.substr(0, b->length));
        } else {
          r.body.resize(b->length);
          ssize_t n = ::pread(b->fd, r.body.data(), r.body.size(), static_cast<off_t>(b->offset));
          r.body.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
        }
      }
      std::lock_guard lock(t_.mu_);
      t_.requests_.push_back(r);
      response_ = t_.respond_(r);
      n_ = std::min(response_.body.size(), response_.cut_after.value_or(SIZE_MAX));
    }

    std::optional<http::Outcome> step(std::chrono::milliseconds) override {
      http::Outcome out;
      if (response_.unreachable) {
        out.error = "Couldn't connect to server (fake)";
        return out;
      }
      if (!headed_) {
        std::this_thread::sleep_for(response_.first_byte_after);
        handler_.on_status(response_.status);
        for (const auto& [name, value] : response_.headers) handler_.on_header(name, value);
        headed_ = true;
        due_ = std::chrono::steady_clock::now();  // of the next piece, on this connection
      }
      for (std::size_t budget = kStepBytes; at_ < n_ && budget > 0;) {
        std::string_view piece =
            std::string_view(response_.body)
                .substr(at_, std::min<std::size_t>(response_.piece_bytes, n_ - at_));
        if (response_.bytes_per_second > 0) {
          due_ += seconds(static_cast<double>(piece.size()) / response_.bytes_per_second);
          std::this_thread::sleep_until(due_);
        }
        t_.pace(piece.size());
        // Asked as curl's progress callback is, between writes: a source closed mid-transfer
        // ends it.
        if (handler_.cancelled() || !handler_.on_body(std::as_bytes(std::span(piece)))) {
          out.kind = http::Outcome::Kind::aborted;
          out.status = response_.status;
          out.error = "Failed writing received data (fake)";
          return out;
        }
        t_.delivered_ += piece.size();
        at_ += piece.size();
        budget -= std::min(budget, piece.size());
      }
      if (at_ < n_) return std::nullopt;
      out.status = response_.status;
      if (n_ < response_.body.size()) {
        out.error = "Recv failure: Connection reset by peer (fake)";
        return out;
      }
      out.kind = http::Outcome::Kind::responded;
      return out;
    }

   private:
    FakeTransport& t_;
    http::ResponseHandler& handler_;
    FakeResponse response_;
    std::size_t n_ = 0;   // body bytes that arrive
    std::size_t at_ = 0;  // of them, handed over
    bool headed_ = false;
    std::chrono::steady_clock::time_point due_{};
  };

  class Conn final : public http::Connection {
   public:
    explicit Conn(FakeTransport& t) : t_(t) {}
    http::Outcome perform(const http::Request& request, http::ResponseHandler& handler) override {
      Run run(t_, request, handler);
      for (;;) {
        if (std::optional<http::Outcome> out = run.step(std::chrono::milliseconds(0))) return *out;
      }
    }
    std::unique_ptr<http::Transfer> start(const http::Request& request,
                                          http::ResponseHandler& handler) override {
      return std::make_unique<Run>(t_, request, handler);
    }

   private:
    FakeTransport& t_;
  };

  static std::chrono::steady_clock::duration seconds(double s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(s));
  }

  // Waits for `bytes` to pass the shared limit: each piece takes its turn on one clock.
  void pace(std::size_t bytes) {
    if (shared_rate_ <= 0) return;
    std::chrono::steady_clock::time_point due;
    {
      std::lock_guard lock(pace_mu_);
      // A piece late by less than 10 ms (a sleep overshoots) catches up, as a link would.
      const auto now = std::chrono::steady_clock::now();
      if (shared_due_ == std::chrono::steady_clock::time_point{}) shared_due_ = now;
      shared_due_ = std::max(shared_due_, now - seconds(0.01)) +
                    seconds(static_cast<double>(bytes) / shared_rate_);
      due = shared_due_;
    }
    std::this_thread::sleep_until(due);
  }

  Responder respond_;
  double shared_rate_;
  mutable std::mutex mu_;
  std::vector<FakeRequest> requests_;
  std::atomic<std::size_t> delivered_{0};
  std::mutex pace_mu_;
  std::chrono::steady_clock::time_point shared_due_{};
};

}  // namespace wds::test
