// Sending and receiving whole multipart messages on a ZeroMQ socket, for the producer and the
// trainer alike. A signal that interrupts a call (the program has its own handlers) is not an
// error: the call is made again.
#pragma once

#include <zmq.hpp>

#include <cerrno>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace wds::zmq_io {

inline std::span<const std::byte> bytes_of(const zmq::message_t& m) {
  return {static_cast<const std::byte*>(m.data()), m.size()};
}

inline zmq::message_t copy_of(std::string_view s) {
  return zmq::message_t(s.data(), s.size());
}

// One whole message into `parts` (cleared first), without waiting for its first part; false if
// none was waiting. The parts of a message arrive together, so the rest never waits either.
inline bool receive_now(zmq::socket_t& socket, std::vector<zmq::message_t>& parts) {
  parts.clear();
  for (;;) {
    zmq::message_t part;
    zmq::recv_result_t got;
    for (;;) {
      try {
        got = socket.recv(part, parts.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
    if (!got) return false;
    const bool more = part.more();
    parts.push_back(std::move(part));
    if (!more) return true;
  }
}

// Sends `parts` as one message (they are moved out). With `wait` false, false if the socket
// would have to wait for its first part (nobody to send to).
inline bool send(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, bool wait = true) {
  for (std::size_t i = 0; i < parts.size(); ++i) {
    zmq::send_flags flags = i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    if (!wait && i == 0) flags = flags | zmq::send_flags::dontwait;
    for (;;) {
      try {
        if (!socket.send(parts[i], flags)) return false;
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
  }
  return true;
}

}  // namespace wds::zmq_io
