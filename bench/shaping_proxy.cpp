// The shaping proxy (tests/support/shaping_proxy.hpp) as a program, for bench/remote_bench.sh:
//   shaping_proxy TARGET_PORT DELAY_MS MB_PER_S [JITTER_MS]
// listens on a free 127.0.0.1 port, prints it, and forwards to 127.0.0.1:TARGET_PORT until
// SIGTERM or SIGINT. MB_PER_S 0: no cap. Built by the script with the system compiler.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "tests/support/shaping_proxy.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TARGET_PORT DELAY_MS MB_PER_S [JITTER_MS]\n", argv[0]);
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before any thread starts: they inherit it
  wds::test::Shaping shaping;
  shaping.first_byte_delay = std::chrono::milliseconds(std::atol(argv[2]));
  shaping.bytes_per_second = std::atof(argv[3]) * 1e6;
  if (argc > 4) shaping.jitter = std::chrono::milliseconds(std::atol(argv[4]));
  wds::test::ShapingProxy proxy("127.0.0.1", static_cast<std::uint16_t>(std::atoi(argv[1])),
                                shaping);
  std::printf("%u\n", static_cast<unsigned>(proxy.port()));
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
  return 0;
}
