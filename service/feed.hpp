// service/feed.hpp: what a producer feeds one trainer rank, launch after launch of its Loader.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "service/feed_runner.hpp"
#include "service/outbox.hpp"
#include "service/protocol.hpp"
#include "service/shared_memory.hpp"
#include "service/wire.hpp"
#include "wds/metrics.hpp"
#include "wds/service.hpp"

namespace wds::detail {

// One launch of a feed: its thread, its loader, the batches it has in flight. Shared by the
// feed and the thread: a launch halted while its thread waits on a stalled source is abandoned
// (the serving thread never waits for it) and the thread, when the source answers, sees the halt,
// sends nothing more and destroys the loader itself.
struct Launch {
  Launch(std::string id, std::uint64_t gen, std::uint64_t credits, std::unique_ptr<FeedRunner> r)
      : identity(std::move(id)), generation(gen), granted(credits), runner(std::move(r)) {}
  ~Launch() {
    // Its own thread may hold the last reference, or the server may have gone: never joined here.
    if (thread.joinable()) thread.detach();
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  // Stops it after the item it is making (if any); true if it was running.
  bool halt() {
    {
      std::lock_guard lock(mutex);
      if (stop) return false;
      stop = true;
    }
    wake.notify_all();
    return true;
  }
  bool halted() const {
    std::lock_guard lock(mutex);
    return stop;
  }
  Metrics metrics() const {
    std::lock_guard lock(mutex);
    return runner ? runner->metrics() : final_metrics;
  }

  const std::string identity;  // the trainer's routing id
  const std::uint64_t generation;
  const std::uint64_t granted;  // the trainer's credits: the most batches ever in flight

  // A batch sent and not yet taken: its sequence number and tag, the feed's state after it,
  // and the blocks it lent (a serial per frame).
  struct Sent {
    std::uint64_t seq = 0;
    std::uint64_t tag = 0;
    std::string state;
    std::vector<std::uint64_t> serials;
  };
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::deque<Sent> sent;
  std::unique_ptr<FeedRunner> runner;  // null once the thread has finished with it
  Metrics final_metrics;               // its loader's, once it is gone
  std::thread thread;
  std::atomic<bool> done{false};  // the thread has finished (joining it does not wait)
};

// What one trainer rank is fed (the service's "stream" of a rank: ServerOptions::max_streams,
// ServedStream): its current launch, what is lent to its trainer, and its counters. Shared with
// the threads of its launches, which may outlive the server.
class TrainerFeed {
 public:
  // shared_bytes: what may be lent to the trainer through shared memory at once (0: nothing).
  TrainerFeed(int rank, std::size_t shared_bytes)
      : rank_(rank),
        shared_limit_(shared_bytes),
        arena_(shared_bytes ? std::make_shared<shm::Arena>() : nullptr) {}

  // Starts a launch for `start` on a thread of its own, sending to `identity` through `outbox`.
  // The previous launch, if any, must have been halted. Throws std::system_error if no thread
  // can be started.
  static void launch(const std::shared_ptr<TrainerFeed>& self, std::unique_ptr<FeedRunner> runner,
                     std::shared_ptr<Outbox> outbox, std::string identity, std::uint64_t generation,
                     protocol::Start start, std::string where);

  // Halts the current launch without waiting for it; returns it if it was running (for the
  // caller to join once it has finished).
  std::shared_ptr<Launch> halt();

  // From the trainer: it took batch `seq` of `generation`, whose tag is `tag`. False if no batch
  // in flight has them (forged, or for a launch halted since): ignored.
  bool credit(std::uint64_t generation, std::uint64_t seq, std::uint64_t tag);

  // The trainer showed it can map this process's memory files.
  void accept_shared() noexcept {
    if (arena_) shared_.store(true, std::memory_order_relaxed);
  }
  // The trainer no longer uses these lent blocks (a serial once per frame that named it).
  void release(const std::vector<std::uint64_t>& serials);

  std::string identity() const {
    std::lock_guard lock(mutex_);
    return identity_;
  }
  int rank() const noexcept { return rank_; }
  std::shared_ptr<Launch> current() const {
    std::lock_guard lock(mutex_);
    return current_;
  }
  // The state as of the last batch the trainer took (empty: none).
  std::string acked_state() const {
    std::lock_guard lock(mutex_);
    return acked_state_;
  }
  void set_acked_state(std::string s) {
    std::lock_guard lock(mutex_);
    acked_state_ = std::move(s);
  }

  ServedStream metrics() const;
  void count_ignored_ack() noexcept { ignored_acks_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // A launch's thread. Catches everything: nothing escapes a feed's thread.
  static void serve(std::shared_ptr<TrainerFeed> self, std::shared_ptr<Launch> run,
                    std::shared_ptr<Outbox> outbox, protocol::Start start,
                    std::string where) noexcept;

  // Waits until fewer batches than granted are in flight; false if the launch is halted.
  bool take_room(Launch& r);

  // The frames whose bytes are in this feed's shared memory, when the trainer maps it: each
  // becomes an entry of the table and an empty frame, and its block is kept until the trainer
  // releases it. Frames under Arena::kMinShared, and any beyond the lending limit, travel as
  // they are.
  protocol::SharedTable lend(std::vector<wire::Frame>& frames);

  // Counts one return of each serial; a block returned as often as it was lent is let go (into
  // `owners`, to be destroyed after the lock). Called with mutex_ held.
  void give_back(const std::vector<std::uint64_t>& serials,
                 std::vector<std::shared_ptr<const void>>& owners);

  // A block lent to the trainer: kept alive until it has been released as often as it was sent.
  struct Lent {
    std::shared_ptr<const void> owner;
    std::uint64_t count = 0;
    std::size_t bytes = 0;
  };

  const int rank_;
  const std::size_t shared_limit_;
  const std::shared_ptr<shm::Arena> arena_;  // null: shared memory is off
  std::atomic<bool> shared_{false};          // the trainer maps this process's memory

  mutable std::mutex mutex_;
  std::string identity_;
  std::shared_ptr<Launch> current_;  // the last launch (halted or finished ones too)
  std::string acked_state_;
  std::uint64_t acknowledged_ = 0;
  Metrics retired_;                     // the loaders of earlier launches
  std::map<std::uint64_t, Lent> lent_;  // by block serial
  std::size_t lent_bytes_ = 0;

  std::atomic<std::uint64_t> batches_{0}, bytes_{0}, shared_bytes_{0}, credit_wait_ns_{0},
      restarts_{0}, ignored_acks_{0};
  std::atomic<std::int64_t> waiting_since_ns_{0};  // steady clock; 0: not waiting for a credit
};

}  // namespace wds::detail
