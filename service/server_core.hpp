// service/server_core.hpp: the producer's serving thread, its ROUTER socket and the job's ranks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "service/feed.hpp"
#include "service/feed_runner.hpp"
#include "service/outbox.hpp"
#include "service/protocol.hpp"
#include "service/shared_memory.hpp"
#include "wds/error.hpp"
#include "wds/service.hpp"

namespace wds::detail {

// What Server<T> runs, apart from its item type: it binds, receives the trainers' messages,
// starts and halts a TrainerFeed per rank, forwards what the feeds send and keeps the state file.
class ServerCore {
 public:
  ServerCore(RunnerFactory factory, ServerOptions options);
  // Halts every feed without waiting for a stalled one: its thread owns what it uses (its
  // loader, the feed, the outbox) and finishes on its own when its source answers.
  ~ServerCore();

  const std::string& endpoint() const noexcept { return endpoint_; }
  void stop() noexcept;
  void request_save() noexcept { save_requested_.store(true, std::memory_order_relaxed); }
  void run();
  ServerMetrics metrics() const;

 private:
  using Clock = std::chrono::steady_clock;

  void log(const std::string& line) {
    if (options_.log) options_.log(line);
  }

  // Moves what the feeds' threads queued to the trainers, without copying.
  void forward();
  // Joins the halted launches whose threads have finished (which takes no time).
  void reap();
  // Halts a feed's launch; its thread is joined once it has finished, by reap().
  void halt(TrainerFeed& s);
  // Threads of launches running or halted and not yet finished.
  std::size_t feed_threads() const;

  void reply(const std::string& identity, protocol::Type type, std::uint64_t generation,
             std::optional<std::string> body = std::nullopt);
  void refuse(const std::string& identity, std::uint64_t generation, ErrorCode code,
              const std::string& cause);
  void receive();
  void handle(const std::string& identity, std::vector<zmq::message_t>& parts);
  // A trainer this server does not know (it restarted, or the trainer was replaced).
  void unknown(const std::string& identity, std::uint64_t generation);
  TrainerFeed* feed_of(const std::string& identity);
  void start(const std::string& identity, std::uint64_t generation, protocol::Start m);
  void note_ack();
  void stop_all();
  // The acknowledged positions, to options_.state_file (if any).
  void write_state();

  RunnerFactory factory_;
  ServerOptions options_;
  std::unique_ptr<shm::Offer> offer_;  // null: shared memory is not offered
  const Clock::time_point started_;
  zmq::context_t ctx_;
  zmq::socket_t router_;
  std::shared_ptr<Outbox> outbox_ = std::make_shared<Outbox>();
  std::string endpoint_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> save_requested_{false};
  std::atomic<std::uint64_t> refused_{0};

  // The serving thread's; feeds_ is also read by metrics() under feeds_mutex_.
  mutable std::mutex feeds_mutex_;
  std::map<int, std::shared_ptr<TrainerFeed>> feeds_;
  std::vector<std::shared_ptr<Launch>> halted_;  // launches halted whose threads may still run
  std::map<std::string, int> rank_of_;           // routing id -> rank
  std::set<std::string> retired_;                // trainers replaced by another of the same rank
  std::map<int, std::string> restored_;          // from restore_file, for ranks not back yet
  std::set<int> left_;                           // ranks whose trainer said goodbye
  int world_size_ = 0;
  std::uint64_t acks_since_save_ = 0;
};

}  // namespace wds::detail
