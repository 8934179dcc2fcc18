// Forked children in tests: waiting for one without waiting for good.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <thread>

namespace wds::test {

// The exit code of child `pid` once it has ended (-1 if a signal ended it); nullopt if it had not
// ended within `longest`: then it is killed (it waits for something for good) and reaped.
inline std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds longest) {
  const auto until = std::chrono::steady_clock::now() + longest;
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return std::nullopt;
}

}  // namespace wds::test
