// The parts of the Loader that do not depend on its item type: its resume state, its limits
// and the futex its threads sleep on.
#include "wds/detail/loader.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#endif

namespace wds::detail {

#if defined(__linux__)
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                const std::chrono::nanoseconds* timeout) noexcept {
  timespec ts{};
  if (timeout) {
    ts.tv_sec = static_cast<time_t>(timeout->count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout->count() % 1'000'000'000);
  }
  // EAGAIN (the word changed), EINTR and ETIMEDOUT all mean: look again.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, seen,
          timeout ? &ts : nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}
#else
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                const std::chrono::nanoseconds* timeout) noexcept {
  if (!timeout) {
    word.wait(seen, std::memory_order_acquire);
    return;
  }
  // No timed wait in std::atomic: a short sleep, the caller looks again.
  std::this_thread::sleep_for(std::min(*timeout, std::chrono::nanoseconds(1'000'000)));
}
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  word.notify_all();
}
#endif

namespace {
constexpr std::string_view kLoaderTag = "loader-3";
constexpr std::string_view kSnapshotTag = "worker-1";

[[noreturn]] void mismatch(const std::string& what) {
  throw Error::invalid_argument("Loader: " + what);
}
}  // namespace

void check_loader_size(int workers, std::size_t prefetch) {
  auto refuse = [](const std::string& what) { throw Error::invalid_argument("Loader: " + what); };
  if (workers < 1) refuse("workers must be >= 1, got " + std::to_string(workers));
  if (workers > kMaxWorkers) {
    refuse("workers = " + std::to_string(workers) + " is more than the " +
           std::to_string(kMaxWorkers) + " worker threads a Loader starts");
  }
  if (prefetch < 1) refuse("prefetch must be >= 1, got " + std::to_string(prefetch));
  if (prefetch > kMaxPrefetch) {
    refuse("prefetch = " + std::to_string(prefetch) + " is more than " +
           std::to_string(kMaxPrefetch) +
           " items per worker (the queues are allocated up front; items are kept in memory)");
  }
  if (prefetch * static_cast<std::size_t>(workers) > kMaxQueued) {
    refuse("prefetch * workers = " + std::to_string(prefetch) + " * " + std::to_string(workers) +
           " is more than " + std::to_string(kMaxQueued) +
           " queued items (the queues are allocated up front): lower prefetch");
  }
}

Error thread_start_error(std::size_t started, std::size_t workers, const std::exception& e) {
  return Error::unavailable("Loader: could not start worker thread " + std::to_string(started + 1) +
                            " of " + std::to_string(workers) +
                            " (workers = " + std::to_string(workers) + "): " + e.what() +
                            "; lower workers (or raise the limit on threads)");
}

std::string LoaderState::encode() const {
  StateWriter out;
  out.put(kLoaderTag);
  out.put(static_cast<std::uint64_t>(workers.size()));
  out.put(turn);
  out.put(epoch_yielded);
  out.put(in_pass);
  for (const WorkerPosition& w : workers) {
    out.put(std::string_view(w.snapshot ? *w.snapshot : std::string()));
    out.put(w.skip);
    out.put(w.finished);
    out.put(static_cast<std::uint64_t>(w.stream_counts.size()));
    for (std::uint64_t c : w.stream_counts) out.put(c);
  }
  return out.str();
}

bool is_loader_state(std::string_view text) {
  try {
    StateReader in(text, StateCheck::verified);  // only the tag is read
    std::string tag = in.get_string();
    return tag.rfind("loader-", 0) == 0;
  } catch (const Error&) {
    return false;
  }
}

PassPosition pass_position(std::string_view pipeline_state, StateCheck check) {
  StateReader in(pipeline_state, check);
  in.get_string();  // the configuration
  in.get_u64();     // the epoch
  PassPosition p;
  p.yielded = in.get_u64();
  p.in_pass = in.get_bool();
  return p;
}

// The numbers: the worker count must be the loader's (HandOut::restore); the turn names a worker
// and the epoch's count is within the epoch (HandOut::restore); a finished worker has no skip,
// and each worker's skip and stream counts must fit its snapshot (Loader::restore and
// check_stream_counts, with canonical streams). Protected by the checksum alone: which worker's
// turn it is, the epoch's count below the epoch, the in-pass and finished flags (either is a
// state a loader can be in), and without canonical streams a skip (a replay past the worker's
// data ends it).
LoaderState LoaderState::decode(std::string_view text, std::optional<std::size_t> workers,
                                StateCheck check) {
  StateReader in(text, check);
  if (in.get_string() != kLoaderTag) {
    mismatch("the state was not saved by a Loader of this version (Loader::state())");
  }
  const std::uint64_t n = in.get_u64();
  if (workers && n != *workers) {
    mismatch("the state was saved by a loader with " + std::to_string(n) +
             " workers, this one has " + std::to_string(*workers) +
             " (a loader over canonical streams restores on any number of workers from "
             "wds::merge_states of the state)");
  }
  if (n > 1'000'000) mismatch("the state is malformed (worker count)");
  LoaderState s;
  s.turn = in.get_u64();
  s.epoch_yielded = in.get_u64();
  s.in_pass = in.get_bool();
  for (std::uint64_t i = 0; i < n; ++i) {
    WorkerPosition w;
    w.snapshot = std::make_shared<const std::string>(in.get_string());
    w.skip = in.get_u64();
    w.finished = in.get_bool();
    const std::uint64_t streams = in.get_u64();
    if (streams > 1'000'000) mismatch("the state is malformed (stream count)");
    for (std::uint64_t k = 0; k < streams; ++k) w.stream_counts.push_back(in.get_u64());
    s.workers.push_back(std::move(w));
  }
  if (!in.at_end()) mismatch("the state has trailing values");
  return s;
}

std::string encode_snapshot(std::string_view pipeline_state, bool yielded) {
  StateWriter out;
  out.put(kSnapshotTag);
  out.put(yielded);
  out.put(pipeline_state);
  return out.str();
}

std::pair<std::string, bool> decode_snapshot(std::string_view snapshot) {
  StateReader in(snapshot, StateCheck::verified);
  if (in.get_string() != kSnapshotTag) mismatch("a worker's position is malformed");
  const bool yielded = in.get_bool();
  std::string state = in.get_string();
  if (!in.at_end()) mismatch("a worker's position has trailing values");
  return {std::move(state), yielded};
}

}  // namespace wds::detail
