// wds/detail/loader.hpp: the Loader's machinery (wds/loader.hpp), shared with the data
// service's ServiceLoader: how a thread waits without a system call, the queues between workers
// and the consumer, the hand-out policy and the resume state. Not for users: may change.
//
// Hand-off: each worker has its own bounded single-producer queue; an item crosses with two
// atomic stores and no lock. A side that finds nothing to do spins briefly, then yields, and
// only then sleeps, and the other side makes the wake-up system call only when it sleeps, so a
// busy loader makes no system call per item. An item the loop is done with goes back to its
// worker (a second small queue) and is freed there, on the thread that allocated it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "wds/error.hpp"
#include "wds/state.hpp"

namespace wds {
namespace detail {

// Sleeps while `word` still holds `seen`, at most `*timeout` if given (it may return early);
// wakes every thread sleeping on `word`. The futex itself on Linux (std::atomic::wait has no
// timeout, and its notify skips the system call for a waiter it did not count),
// pipelines/loader.cpp.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                const std::chrono::nanoseconds* timeout) noexcept;
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept;

// Puts a thread that found nothing to do to sleep, and wakes it, without a system call on
// either side while it is busy. wait() spins for about a microsecond, then yields the core for
// up to kYieldFor (so a worker on the same core can run), and only then sleeps on a futex.
// kYieldFor outlasts the gap between items of a busy worker (a thread asleep costs a wake-up,
// longer on a VM) but not its pauses for I/O: a thread yielding for longer keeps a core busy
// that the worker, its transfer threads or a server on the same machine need (bench/README.md,
// "The loader", measures 1 ms against 20 us). wake() after making the condition true costs
// one fence and one load unless the waiter sleeps.
class Parker {
 public:
  static constexpr int kSpins = 64;
  static constexpr std::chrono::microseconds kYieldFor{20};

  // Returns when ready() holds: false if it did at once, true if this had to wait.
  template <class Ready>
  bool wait(Ready&& ready) {
    return wait_until(ready, std::nullopt) != Waited::no;
  }
  // The same, giving up at `deadline` (if set): timeout if ready() still does not hold then.
  enum class Waited { no, yes, timeout };
  template <class Ready>
  Waited wait_until(Ready&& ready, std::optional<std::chrono::steady_clock::time_point> deadline) {
    if (ready()) return Waited::no;
    for (int i = 0; i < kSpins; ++i) {
      relax();
      if (ready()) return Waited::yes;
    }
    const auto until = std::chrono::steady_clock::now() + kYieldFor;
    do {
      std::this_thread::yield();
      if (ready()) return Waited::yes;
    } while (std::chrono::steady_clock::now() < until);
    for (;;) {
      const std::uint32_t seen = word_.load(std::memory_order_acquire);
      state_.store(kAsleep, std::memory_order_relaxed);
      // Pairs with the fence in wake(): either the waker sees kAsleep, or ready() sees
      // what the waker published before it.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const bool now_ready = ready();
      if (!now_ready) {
        if (!deadline) {
          futex_wait(word_, seen, nullptr);
        } else {
          const auto left = *deadline - std::chrono::steady_clock::now();
          if (left <= std::chrono::steady_clock::duration::zero()) {
            state_.store(kRunning, std::memory_order_relaxed);
            return Waited::timeout;
          }
          const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left);
          futex_wait(word_, seen, &ns);
        }
      }
      state_.store(kRunning, std::memory_order_relaxed);
      if (now_ready || ready()) return Waited::yes;
    }
  }
  // Call after making the waiter's condition true (a release store). True if the waiter slept
  // and this made the system call that wakes it.
  bool wake() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // Once per sleep: a waiter woken but not yet running is not woken again (a consumer taking
    // a full queue's items would otherwise make the call for each while its worker gets a core).
    std::uint8_t asleep = kAsleep;
    if (state_.load(std::memory_order_relaxed) != kAsleep ||
        !state_.compare_exchange_strong(asleep, kWoken, std::memory_order_relaxed)) {
      return false;
    }
    wake_always();
    return true;
  }
  // The waiter is asleep, or woken and not yet running again (a snapshot).
  bool sleeping() const noexcept { return state_.load(std::memory_order_relaxed) != kRunning; }
  void wake_always() noexcept {
    word_.fetch_add(1, std::memory_order_release);
    futex_wake_all(word_);
  }

 private:
  static void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  std::atomic<std::uint32_t> word_{0};
  static constexpr std::uint8_t kRunning = 0, kAsleep = 1, kWoken = 2;  // woken: not running yet
  std::atomic<std::uint8_t> state_{kRunning};
};

// A bounded queue between one producer and one consumer thread: push and pop are a slot move
// and one release store; neither side takes a lock. Each side keeps the last index it read of
// the other's and reads the other's cache line again only when that copy says full (or empty).
// The producer may hold it to fewer entries than its slots (limit()), and raise that later.
template <class E>
class SpscQueue {
 public:
  explicit SpscQueue(std::size_t capacity) : SpscQueue(capacity, capacity) {}
  SpscQueue(std::size_t capacity, std::size_t limit)
      : slots_(capacity), limit_(std::min(limit, capacity)) {}
  std::size_t capacity() const noexcept { return slots_.size(); }
  // Any thread; a snapshot. full() says so at this many entries.
  std::size_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  // Producer side: n <= capacity().
  void set_limit(std::size_t n) noexcept {
    limit_.store(std::min(n, slots_.size()), std::memory_order_relaxed);
  }
  // Any thread; a snapshot.
  std::size_t size() const noexcept {
    return static_cast<std::size_t>(tail_.load(std::memory_order_acquire) -
                                    head_.load(std::memory_order_acquire));
  }
  // Producer side.
  bool full() noexcept {
    const std::uint64_t t = tail_.load(std::memory_order_relaxed);
    const std::size_t limit = limit_.load(std::memory_order_relaxed);
    if (t - head_seen_ < limit) return false;
    head_seen_ = head_.load(std::memory_order_acquire);
    return t - head_seen_ >= limit;
  }
  void push(E&& e) {
    const std::uint64_t t = tail_.load(std::memory_order_relaxed);
    slots_[t % slots_.size()].emplace(std::move(e));
    tail_.store(t + 1, std::memory_order_release);
  }
  // Consumer side.
  bool empty() noexcept {
    const std::uint64_t h = head_.load(std::memory_order_relaxed);
    if (h != tail_seen_) return false;
    tail_seen_ = tail_.load(std::memory_order_acquire);
    return h == tail_seen_;
  }
  E& front() noexcept { return *slots_[head_.load(std::memory_order_relaxed) % slots_.size()]; }
  void pop() {
    const std::uint64_t h = head_.load(std::memory_order_relaxed);
    slots_[h % slots_.size()].reset();
    head_.store(h + 1, std::memory_order_release);
  }
  // Only while neither side runs.
  void clear() {
    for (auto& s : slots_) s.reset();
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
    head_seen_ = tail_seen_ = 0;
  }

 private:
  std::vector<std::optional<E>> slots_;
  std::atomic<std::size_t> limit_;  // the producer's; read by progress displays
  // The consumer's line: what it writes, and its copy of the producer's index.
  alignas(64) std::atomic<std::uint64_t> head_{0};  // next slot the consumer takes
  std::uint64_t tail_seen_ = 0;
  // The producer's line.
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // next slot the producer fills
  std::uint64_t head_seen_ = 0;
};

// Where a worker is, as of the items handed out: a snapshot of its pipeline and how many items
// it produced after it.
struct WorkerPosition {
  std::shared_ptr<const std::string> snapshot;
  std::uint64_t skip = 0;
  bool finished = false;  // its pass ended (its end was handed out)
  // With canonical streams: the samples each of the worker's streams had handed out as of its
  // last item handed out (Pipeline::stream_counts()), so that merge_states can place every
  // stream exactly, whatever the snapshot's age.
  std::vector<std::uint64_t> stream_counts;
};

// The loader's resume state, independent of the item type.
struct LoaderState {
  std::uint64_t turn = 0;
  std::uint64_t epoch_yielded = 0;
  bool in_pass = false;
  std::vector<WorkerPosition> workers;

  std::string encode() const;
  // Throws invalid_argument if `text` is not a loader state (for `workers` workers, if set) or
  // is damaged (its checksum is verified unless `check` says a state holding it was).
  static LoaderState decode(std::string_view text, std::optional<std::size_t> workers,
                            StateCheck check = StateCheck::verify);
};

// True if `text` is a Loader's state rather than a Pipeline's (by its tag: the checksum is left
// to the decoding that follows).
bool is_loader_state(std::string_view text);
// The pass a pipeline state is in: its count of items in the pass and whether one is in
// progress (what a Loader restoring a merged canonical-streams state continues).
struct PassPosition {
  std::uint64_t yielded = 0;
  bool in_pass = false;
};
PassPosition pass_position(std::string_view pipeline_state, StateCheck check = StateCheck::verify);

// The hand-out policy, apart from what is handed out and how it travels: which source (a
// Loader's worker, a data service's producer) the next item comes from, how many items the epoch
// has had, and where each source is as of the items handed out. Loader and ServiceLoader
// (wds/service.hpp) both hand out through it, so they order, count and resume alike.
class HandOut {
 public:
  HandOut(std::size_t sources, bool ordered)
      : ordered_(ordered), positions_(sources), finished_(sources, false) {}

  std::size_t sources() const noexcept { return positions_.size(); }
  bool ordered() const noexcept { return ordered_; }

  // --- the epoch: with a length, a pass ends after that many items from all sources ---
  void set_epoch_length(std::optional<std::uint64_t> n) noexcept { epoch_length_ = n; }
  const std::optional<std::uint64_t>& epoch_length() const noexcept { return epoch_length_; }
  bool epoch_complete() const noexcept { return epoch_length_ && yielded_ >= *epoch_length_; }
  void new_epoch() noexcept { yielded_ = 0; }

  // --- choosing ---
  struct Choice {
    enum Kind { take, wait, done } kind;
    std::size_t source;  // take: from here; wait: for this one (the first live source)
  };
  // Round-robin from the source after the last one that handed out an item, skipping finished
  // sources; ordered waits for the source whose turn it is, otherwise the first that is ready
  // (ready(i): source i has an entry) is taken. done: every source has finished its pass.
  template <class Ready>
  Choice choose(Ready&& ready) const {
    const std::size_t n = sources();
    std::size_t first_live = n;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (turn_ + k) % n;
      if (finished_[i]) continue;
      if (first_live == n) first_live = i;
      if (ready(i)) return {Choice::take, i};
      if (ordered_) break;  // wait for this source's item, not a later one's
    }
    return first_live == n ? Choice{Choice::done, n} : Choice{Choice::wait, first_live};
  }
  // Source i's entry was an item, now handed out.
  void handed_out(std::size_t i) noexcept {
    turn_ = (i + 1) % sources();
    ++yielded_;
  }
  // Source i's entry was its end: it has no more items this pass.
  void finish(std::size_t i) noexcept { finished_[i] = true; }
  bool finished(std::size_t i) const noexcept { return finished_[i]; }
  // A fresh pass of every source.
  void unfinish_all() noexcept { std::fill(finished_.begin(), finished_.end(), false); }

  // --- where each source is, as of the items handed out ---
  WorkerPosition& position(std::size_t i) noexcept { return positions_[i]; }
  const WorkerPosition& position(std::size_t i) const noexcept { return positions_[i]; }
  LoaderState state(bool in_pass) const {
    LoaderState s;
    s.turn = turn_;
    s.epoch_yielded = yielded_;
    s.in_pass = in_pass;
    for (std::size_t i = 0; i < sources(); ++i) {
      s.workers.push_back(positions_[i]);
      s.workers.back().finished = finished_[i];
    }
    return s;
  }
  // Takes the turn, the epoch's count and the positions from `s` (decoded for sources()); a
  // source counts as finished only if the state was saved inside a pass. Returns s.in_pass.
  // Every number is checked: the turn names a source, the count is within the epoch.
  bool restore(LoaderState&& s) {
    if (s.workers.size() != sources()) {
      throw Error::invalid_argument("Loader: the state holds the positions of " +
                                    std::to_string(s.workers.size()) +
                                    " workers, this loader has " + std::to_string(sources()));
    }
    if (s.turn >= sources()) {
      throw Error::invalid_argument("Loader: the state's turn " + std::to_string(s.turn) +
                                    " is not one of its " + std::to_string(sources()) +
                                    " workers: malformed state");
    }
    if (epoch_length_ && s.epoch_yielded > *epoch_length_) {
      throw Error::invalid_argument("Loader: the state has " + std::to_string(s.epoch_yielded) +
                                    " items handed out in an epoch of " +
                                    std::to_string(*epoch_length_) + ": malformed state");
    }
    turn_ = static_cast<std::size_t>(s.turn);
    yielded_ = s.epoch_yielded;
    for (std::size_t i = 0; i < sources(); ++i) {
      finished_[i] = s.in_pass && s.workers[i].finished;
      positions_[i] = std::move(s.workers[i]);
    }
    return s.in_pass;
  }

 private:
  bool ordered_;
  std::optional<std::uint64_t> epoch_length_;
  std::size_t turn_ = 0;
  std::uint64_t yielded_ = 0;
  std::vector<WorkerPosition> positions_;
  std::vector<bool> finished_;
};

// A worker's snapshot: its pipeline's state, and whether the pass that state is in has already
// yielded an item (a restored pass with nothing left must not end the worker's stream).
std::string encode_snapshot(std::string_view pipeline_state, bool yielded);
// A snapshot is always part of a verified Loader state: its checksum is not computed again.
std::pair<std::string, bool> decode_snapshot(std::string_view snapshot);

// The input iterator of a range-for over one pass of a loader (Loader, ServiceLoader): Owner has
// advance(), false at the end of the pass, and current_, the item; it befriends this class.
template <class Owner, class T>
class PassIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = T;
  using difference_type = std::ptrdiff_t;
  PassIterator() = default;
  explicit PassIterator(Owner* owner) : owner_(owner) {}
  T& operator*() const { return *owner_->current_; }
  T* operator->() const { return &*owner_->current_; }
  PassIterator& operator++() {
    if (!owner_->advance()) owner_ = nullptr;
    return *this;
  }
  void operator++(int) { ++*this; }
  friend bool operator==(const PassIterator& a, const PassIterator& b) {
    return a.owner_ == b.owner_;
  }

 private:
  Owner* owner_ = nullptr;
};

// The most worker threads and queued items a Loader takes: every worker's queues are allocated
// up front (prefetch slots and as many for returns), so an absurd value would allocate without
// bound before a thread starts. check_loader_size throws invalid_argument naming `workers` or
// `prefetch`.
inline constexpr int kMaxWorkers = 4096;
// A worker's queue holds `prefetch` items, and grows (doubling, up to kHandOffDepth) only when
// it filled within kHandOffCover of the worker waking the consumer, which has not run since:
// then the worker makes items faster than the consumer wakes up for them, and a queue that
// short would have the two take turns, a wake-up per item and the worker waiting for room
// (raw samples on a VM: 1 context switch per sample, 8-11% slower than a deeper queue). A
// queue so grown holds at most about kHandOffCover of the worker's output; a slow consumer
// (a training step) is awake when the queue fills, so it never grows the queue.
inline constexpr std::size_t kHandOffDepth = 64;
inline constexpr std::chrono::microseconds kHandOffCover{1000};
inline constexpr std::size_t kMaxPrefetch = 65536;               // per worker
inline constexpr std::size_t kMaxQueued = std::size_t{1} << 20;  // workers * prefetch
void check_loader_size(int workers, std::size_t prefetch);
// The error for a worker thread that could not be started (`started` of `workers` run).
Error thread_start_error(std::size_t started, std::size_t workers, const std::exception& e);

}  // namespace detail

}  // namespace wds
