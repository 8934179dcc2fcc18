// service/outbox.hpp: the queue from the feeds' threads to the serving thread's ROUTER.
#pragma once

#include <deque>
#include <mutex>
#include <vector>

#include <zmq.hpp>

namespace wds::detail {

// What the feeds' threads send, for the serving thread to pass to the ROUTER. A queue and an
// eventfd the serving thread polls, not a ZeroMQ socket per feed: a context allows ~1,023
// sockets, and a producer may serve more ranks than that.
class Outbox {
 public:
  Outbox();
  ~Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  int fd() const noexcept { return fd_; }
  void push(std::vector<zmq::message_t> parts);
  // Wakes the serving thread's poll (async-signal-safe: Server::stop() from a handler).
  void wake() const noexcept;
  // Everything queued so far (the wake-up consumed first, so nothing pushed later is missed).
  std::deque<std::vector<zmq::message_t>> take();

 private:
  const int fd_;
  std::mutex mutex_;
  std::deque<std::vector<zmq::message_t>> queue_;
};

}  // namespace wds::detail
