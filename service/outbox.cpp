// The outbox: an eventfd that wakes the serving thread, and the messages queued behind it.
#include "service/outbox.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "wds/error.hpp"

namespace wds::detail {

Outbox::Outbox() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) {
    throw Error::unavailable(std::string("Server: cannot make an eventfd: ") +
                             std::strerror(errno));
  }
}

Outbox::~Outbox() {
  ::close(fd_);
}

void Outbox::push(std::vector<zmq::message_t> parts) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(parts));
  }
  wake();
}

void Outbox::wake() const noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(fd_, &one, sizeof one);  // fails only if saturated
}

std::deque<std::vector<zmq::message_t>> Outbox::take() {
  std::uint64_t count = 0;
  [[maybe_unused]] const auto n = ::read(fd_, &count, sizeof count);
  std::lock_guard lock(mutex_);
  return std::exchange(queue_, {});
}

}  // namespace wds::detail
