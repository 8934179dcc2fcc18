// The data service's producer: one ROUTER socket on the serving thread, and per trainer rank a
// stream thread that runs the rank's Loader and sends its batches against the trainer's credits.
//
// Trainers on the producer's host get the large tensors through shared memory: each stream's
// Loader allocates its batches in the stream's Arena (service/shared_memory.hpp), and a batch
// names the blocks instead of carrying them; the stream keeps each lent block until the trainer
// releases it.
//
// A stream thread never touches the ROUTER (ZeroMQ sockets belong to one thread): it queues each
// message, prefixed with the trainer's routing id, in the Outbox, whose eventfd wakes the serving
// thread to forward it. Messages move through the queue without a copy, and tensor frames are
// sent from the tensors' own memory, so a batch is not copied on its way out of the producer.
//
// The serving thread never waits for a stream thread: each launch of a stream (a Run) has its own
// Loader and thread, shared with that thread, and is halted by a flag. A launch stuck in its
// source is abandoned, and joined (by reap(), which takes no time) once it has finished.
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "service/protocol.hpp"
#include "service/shared_memory.hpp"
#include "service/wire.hpp"
#include "service/zmq_io.hpp"
#include "wds/loader.hpp"
#include "wds/service.hpp"
#include "wds/state.hpp"

namespace wds {
namespace detail {
namespace {

using protocol::Type;
using zmq_io::bytes_of;
using zmq_io::copy_of;
using Clock = std::chrono::steady_clock;
constexpr std::string_view kStateTag = "wds-service-state-1";
// Batches in flight per trainer: each is memory the producer holds until it is sent.
constexpr std::uint32_t kMaxCredits = 1024;
// The largest world size a start message can carry (protocol.cpp).
constexpr std::uint64_t kMaxWorldSize = std::uint64_t{1} << 30;
// Messages the ROUTER queues for one trainer: its batches (at most its credits) and a few
// replies; beyond, a trainer that does not read loses replies, not the producer's memory.
constexpr std::size_t kRouterQueue = kMaxCredits + 1024;
// How long ~Server waits for halted streams to end before it leaves one stuck in its source.
constexpr std::chrono::seconds kHaltGrace{2};

std::string pipeline_error_where(const std::string& endpoint, int rank) {
  return endpoint + " (rank " + std::to_string(rank) + ")";
}

// A frame that keeps `frame.owner` alive until ZeroMQ has sent it.
zmq::message_t borrowed_message(const wire::Frame& frame) {
  if (frame.bytes.empty()) return zmq::message_t();
  auto keep = std::make_unique<std::shared_ptr<const void>>(frame.owner);
  zmq::message_t msg(
      const_cast<std::byte*>(frame.bytes.data()), frame.bytes.size(),
      [](void*, void* hint) {
        // ZeroMQ calls this once, on its I/O thread, when the frame is sent.
        std::unique_ptr<std::shared_ptr<const void>>(
            static_cast<std::shared_ptr<const void>*>(hint));
      },
      keep.get());
  keep.release();  // now owned by the message's free callback
  return msg;
}

bool is_loopback_bind(std::string_view bind) {
  if (bind.starts_with("ipc://") || bind.starts_with("inproc://")) return true;
  if (!bind.starts_with("tcp://")) return false;
  std::string_view host = bind.substr(6);
  if (host.starts_with("[")) {
    return host.starts_with("[::1]");
  }
  host = host.substr(0, host.rfind(':'));
  return host == "localhost" || host.starts_with("127.");
}

bool same_secret(std::string_view a, std::string_view b) {
  // Constant time in the contents: a wrong token's prefix does not answer faster.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

// What a stream's thread runs: a Loader<T> over the rank's pipeline, its items as records. Each
// launch of a stream has its own: a launch abandoned while its thread waits on the source keeps
// it (and destroys it on that thread when the source answers).
class StreamRunner {
 public:
  virtual ~StreamRunner() = default;
  // Builds the loader for this start (restoring or at the epoch) and begins its pass; its
  // batches are allocated from `memory` (null: the heap).
  virtual void start(const protocol::Start& start, std::shared_ptr<BlockAllocator> memory) = 0;
  // The next batch and the stream's position after it; nullopt at the end of the pass.
  virtual std::optional<std::pair<wire::Record, std::string>> next() = 0;
  virtual Metrics metrics() const = 0;
};

template <class T>
class TypedRunner final : public StreamRunner {
 public:
  TypedRunner(typename Server<T>::MakePipeline make, StreamInfo info,
              std::shared_ptr<const ServerOptions> o)
      : make_(std::move(make)), info_(info), options_(std::move(o)) {}

  void start(const protocol::Start& start, std::shared_ptr<BlockAllocator> memory) override {
    LoaderOptions<T> lo;
    lo.memory = std::move(memory);
    lo.workers = options_->workers;
    lo.prefetch = options_->prefetch;
    lo.ordered = true;  // the same batches in the same order on every run
    lo.resumable = true;
    lo.group = info_.producer;
    lo.groups = info_.producers;
    // Pass after pass: the trainer counts its epochs over all producers, as a Loader counts
    // over its workers.
    if (start.continuous) lo.epoch_length = std::numeric_limits<std::uint64_t>::max();
    auto loader = std::make_unique<Loader<T>>(make_(info_), lo);
    if (start.state) {
      loader->restore(*start.state);
    } else {
      loader->set_epoch(start.epoch);
    }
    loader->begin_pass();
    std::lock_guard lock(mutex_);
    loader_ = std::move(loader);
  }

  std::optional<std::pair<wire::Record, std::string>> next() override {
    std::optional<T> item = loader_->next();
    if (!item) return std::nullopt;
    std::string state = loader_->state();
    if constexpr (std::is_same_v<T, Tuple>) {
      return std::pair{wire::to_record(std::move(*item), options_->names), std::move(state)};
    } else {
      return std::pair{wire::to_record(std::move(*item)), std::move(state)};
    }
  }

  Metrics metrics() const override {
    std::lock_guard lock(mutex_);
    return loader_ ? loader_->metrics() : Metrics{};
  }

 private:
  typename Server<T>::MakePipeline make_;
  StreamInfo info_;
  std::shared_ptr<const ServerOptions> options_;
  mutable std::mutex mutex_;  // loader_ is set on the stream thread, read by metrics()
  std::unique_ptr<Loader<T>> loader_;
};

using RunnerFactory = std::function<std::unique_ptr<StreamRunner>(const StreamInfo&)>;

// What the stream threads send, for the serving thread to pass to the ROUTER. A queue and an
// eventfd the serving thread polls, not a ZeroMQ socket per stream: a context allows ~1,023
// sockets, and a producer may serve more ranks than that.
class Outbox {
 public:
  Outbox() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) {
      throw Error(ErrorCode::unavailable, "", "",
                  std::string("Server: cannot make an eventfd: ") + std::strerror(errno));
    }
  }
  ~Outbox() { ::close(fd_); }
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  int fd() const noexcept { return fd_; }
  void push(std::vector<zmq::message_t> parts) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(parts));
    }
    wake();
  }
  // Wakes the serving thread's poll (async-signal-safe: Server::stop() from a handler).
  void wake() const noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(fd_, &one, sizeof one);  // fails only if saturated
  }
  // Everything queued so far (the wake-up consumed first, so nothing pushed later is missed).
  std::deque<std::vector<zmq::message_t>> take() {
    std::uint64_t count = 0;
    [[maybe_unused]] const auto n = ::read(fd_, &count, sizeof count);
    std::lock_guard lock(mutex_);
    return std::exchange(queue_, {});
  }

 private:
  const int fd_;
  std::mutex mutex_;
  std::deque<std::vector<zmq::message_t>> queue_;
};

// Unpredictable to the trainer (a batch's tag, protocol.hpp): the kernel's random numbers.
std::uint64_t random_tag() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) == static_cast<ssize_t>(sizeof v)) return v;
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) ^ rd();
}

// One launch of a stream: its thread, its loader, the batches it has in flight. Shared by the
// stream and the thread: a launch halted while its thread waits on a stalled source is abandoned
// (the serving thread never waits for it) and the thread, when the source answers, sees the halt,
// sends nothing more and destroys the loader itself.
struct Run {
  Run(std::string id, std::uint64_t gen, std::uint64_t credits, std::unique_ptr<StreamRunner> r)
      : identity(std::move(id)), generation(gen), granted(credits), runner(std::move(r)) {}
  ~Run() {
    // Its own thread may hold the last reference, or the server may have gone: never joined here.
    if (thread.joinable()) thread.detach();
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

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

  // A batch sent and not yet taken: its sequence number and tag, the stream's state after it,
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
  std::unique_ptr<StreamRunner> runner;  // null once the thread has finished with it
  Metrics final_metrics;                 // its loader's, once it is gone
  std::thread thread;
  std::atomic<bool> done{false};  // the thread has finished (joining it does not wait)
};

// One trainer rank's stream: its current launch, what is lent to its trainer, and its counters.
// Shared with the threads of its launches, which may outlive the server.
class Stream {
 public:
  // shared_bytes: what may be lent to the trainer through shared memory at once (0: nothing).
  Stream(int rank, std::size_t shared_bytes)
      : rank_(rank),
        shared_limit_(shared_bytes),
        arena_(shared_bytes ? std::make_shared<shm::Arena>() : nullptr) {}

  // Starts a launch for `start` on a thread of its own, sending to `identity` through `outbox`.
  // The previous launch, if any, must have been halted. Throws std::system_error if no thread
  // can be started.
  static void launch(const std::shared_ptr<Stream>& self, std::unique_ptr<StreamRunner> runner,
                     std::shared_ptr<Outbox> outbox, std::string identity, std::uint64_t generation,
                     protocol::Start start, std::string where) {
    Stream& s = *self;
    std::shared_ptr<Run> previous;
    {
      std::lock_guard lock(s.mutex_);
      previous = s.current_;
    }
    std::vector<std::uint64_t> unread;  // blocks of batches the trainer will drop unread
    Metrics previous_metrics;
    if (previous) {
      previous_metrics = previous->metrics();
      std::lock_guard lock(previous->mutex);
      for (const Run::Sent& b : previous->sent) {
        unread.insert(unread.end(), b.serials.begin(), b.serials.end());
      }
    }
    std::map<std::uint64_t, Lent> dropped;            // freed after the lock is released
    std::vector<std::shared_ptr<const void>> owners;  // likewise
    {
      std::lock_guard lock(s.mutex_);
      s.retired_ += previous_metrics;
      s.current_ = nullptr;  // counted in retired_ now, not twice by metrics()
      if (identity != s.identity_) {
        // Another trainer: what was lent to the old one comes back (its loader, and so its
        // pool, is replaced: the blocks are never handed out again), and the new one has yet to
        // show it can map this process's memory.
        dropped.swap(s.lent_);
        s.lent_bytes_ = 0;
        s.shared_.store(false, std::memory_order_relaxed);
      } else {
        // The same trainer starts again: it drops the batches still in flight unread (they are
        // of the old generation), so it will never release their blocks; they come back here.
        s.give_back(unread, owners);
      }
      s.identity_ = identity;
    }
    auto run =
        std::make_shared<Run>(std::move(identity), generation, start.credits, std::move(runner));
    run->thread = std::thread(&Stream::serve, self, run, std::move(outbox), std::move(start),
                              std::move(where));
    {
      std::lock_guard lock(s.mutex_);
      s.current_ = run;
    }
    s.restarts_.fetch_add(1, std::memory_order_relaxed);
  }

  // Halts the current launch without waiting for it; returns it if it was running (for the
  // caller to join once it has finished).
  std::shared_ptr<Run> halt() {
    std::shared_ptr<Run> run = current();
    return run && run->halt() ? run : nullptr;
  }

  // From the trainer: it took batch `seq` of `generation`, whose tag is `tag`. False if no batch
  // in flight has them (forged, or for a launch halted since): ignored.
  bool credit(std::uint64_t generation, std::uint64_t seq, std::uint64_t tag) {
    std::shared_ptr<Run> run = current();
    if (!run || run->generation != generation) return false;
    std::string state;
    std::uint64_t taken = 0;
    {
      std::lock_guard lock(run->mutex);
      auto it = std::find_if(run->sent.begin(), run->sent.end(),
                             [&](const Run::Sent& b) { return b.seq == seq; });
      if (it == run->sent.end() || it->tag != tag) return false;
      // Batches arrive in the order sent: a trainer that took this one has the earlier ones.
      taken = static_cast<std::uint64_t>(it - run->sent.begin()) + 1;
      state = std::move(it->state);
      run->sent.erase(run->sent.begin(), it + 1);
    }
    run->wake.notify_all();
    std::lock_guard lock(mutex_);
    acked_state_ = std::move(state);
    acknowledged_ += taken;
    return true;
  }

  // The trainer showed it can map this process's memory files.
  void accept_shared() noexcept {
    if (arena_) shared_.store(true, std::memory_order_relaxed);
  }
  // The trainer no longer uses these lent blocks (a serial once per frame that named it).
  void release(const std::vector<std::uint64_t>& serials) {
    std::vector<std::shared_ptr<const void>> owners;  // let go after the lock is released
    std::lock_guard lock(mutex_);
    give_back(serials, owners);
  }

  std::string identity() const {
    std::lock_guard lock(mutex_);
    return identity_;
  }
  int rank() const noexcept { return rank_; }
  std::shared_ptr<Run> current() const {
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

  ServedStream metrics() const {
    ServedStream s;
    s.rank = rank_;
    s.batches = batches_.load(std::memory_order_relaxed);
    s.bytes = bytes_.load(std::memory_order_relaxed);
    s.shared_bytes = shared_bytes_.load(std::memory_order_relaxed);
    s.restarts = restarts_.load(std::memory_order_relaxed);
    s.ignored_acks = ignored_acks_.load(std::memory_order_relaxed);
    std::shared_ptr<Run> run;
    {
      std::lock_guard lock(mutex_);
      s.lent_bytes = lent_bytes_;
      s.acknowledged = acknowledged_;
      s.loader = retired_;
      run = current_;
    }
    if (run) {
      s.loader += run->metrics();
      std::lock_guard lock(run->mutex);
      s.in_flight = run->sent.size();
    }
    std::int64_t wait_ns =
        static_cast<std::int64_t>(credit_wait_ns_.load(std::memory_order_relaxed));
    // A wait still going on counts too: a trainer that stopped taking batches shows at once.
    if (const auto since = waiting_since_ns_.load(std::memory_order_relaxed); since != 0) {
      wait_ns += std::max<std::int64_t>(0, Clock::now().time_since_epoch().count() - since);
    }
    s.credit_wait_seconds = static_cast<double>(wait_ns) / 1e9;
    return s;
  }
  void count_ignored_ack() noexcept { ignored_acks_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // A launch's thread. Catches everything: nothing escapes a stream thread.
  static void serve(std::shared_ptr<Stream> self, std::shared_ptr<Run> run,
                    std::shared_ptr<Outbox> outbox, protocol::Start start,
                    std::string where) noexcept {
    Stream& s = *self;
    Run& r = *run;
    // Queues a message unless the launch was halted: after halt() returns, it sends nothing.
    auto push = [&](std::vector<zmq::message_t>& parts, std::optional<Run::Sent> sent) {
      std::lock_guard lock(r.mutex);
      if (r.stop) return false;
      if (sent) r.sent.push_back(std::move(*sent));
      outbox->push(std::move(parts));
      return true;
    };
    auto error = [&](protocol::ErrorReply e) {
      std::vector<zmq::message_t> parts;
      parts.push_back(copy_of(r.identity));
      parts.push_back(copy_of(protocol::encode_header(Type::error, r.generation)));
      parts.push_back(copy_of(protocol::encode(e)));
      push(parts, std::nullopt);
    };
    try {
      try {
        r.runner->start(start, s.arena_);
        std::uint64_t seq = 0;
        for (;;) {
          if (!s.take_room(r)) break;
          auto item = r.runner->next();
          if (r.halted()) break;
          std::vector<zmq::message_t> parts;
          parts.push_back(copy_of(r.identity));
          if (!item) {
            parts.push_back(copy_of(protocol::encode_header(Type::end, r.generation, seq)));
            push(parts, std::nullopt);
            break;
          }
          ++seq;
          const std::uint64_t tag = random_tag();
          std::vector<wire::Frame> frames = wire::encode(std::move(item->first));
          std::uint64_t bytes = 0;
          for (std::size_t k = 1; k < frames.size(); ++k) bytes += frames[k].bytes.size();
          protocol::SharedTable table = s.lend(frames);
          const bool shared = !table.frames.empty() || !table.retired.empty();
          parts.push_back(copy_of(protocol::encode_header(Type::batch, r.generation, seq,
                                                          shared ? protocol::kShared : 0)));
          parts.push_back(copy_of(protocol::encode_tag(tag)));
          parts.push_back(copy_of(item->second));
          if (shared) parts.push_back(copy_of(protocol::encode(table)));
          std::uint64_t lent = 0;
          std::vector<std::uint64_t> serials;
          for (const protocol::SharedFrame& f : table.frames) {
            lent += f.length;
            serials.push_back(f.serial);
          }
          for (const wire::Frame& f : frames) parts.push_back(borrowed_message(f));
          if (!push(parts, Run::Sent{seq, tag, std::move(item->second), serials})) {
            s.release(serials);  // never sent
            break;
          }
          s.shared_bytes_.fetch_add(lent, std::memory_order_relaxed);
          s.batches_.fetch_add(1, std::memory_order_relaxed);
          s.bytes_.fetch_add(bytes, std::memory_order_relaxed);
        }
      } catch (const Error& e) {
        error({e.code(), e.url(), e.member(), e.cause()});
      } catch (const std::exception& e) {
        error({ErrorCode::unavailable, where, "", e.what()});
      }
    } catch (...) {
      // Not even the error could be queued (out of memory): the trainer's timeout tells it.
    }
    // The loader ends on this thread (its destructor joins its workers), not on whoever halted
    // the launch.
    std::unique_ptr<StreamRunner> last;
    try {
      std::lock_guard lock(r.mutex);
      r.final_metrics = r.runner->metrics();
      last = std::move(r.runner);
    } catch (...) {
    }
    last.reset();
    r.done.store(true, std::memory_order_release);
  }

  // Waits until fewer batches than granted are in flight; false if the launch is halted.
  bool take_room(Run& r) {
    std::unique_lock lock(r.mutex);
    if (r.sent.size() >= r.granted && !r.stop) {
      const auto t0 = Clock::now();
      waiting_since_ns_.store(t0.time_since_epoch().count(), std::memory_order_relaxed);
      r.wake.wait(lock, [&] { return r.stop || r.sent.size() < r.granted; });
      waiting_since_ns_.store(0, std::memory_order_relaxed);
      credit_wait_ns_.fetch_add(static_cast<std::uint64_t>((Clock::now() - t0).count()),
                                std::memory_order_relaxed);
    }
    return !r.stop;
  }

  // The frames whose bytes are in this stream's shared memory, when the trainer maps it: each
  // becomes an entry of the table and an empty frame, and its block is kept until the trainer
  // releases it. Frames under Arena::kMinShared, and any beyond the lending limit, travel as
  // they are.
  protocol::SharedTable lend(std::vector<wire::Frame>& frames) {
    protocol::SharedTable table;
    if (!arena_) return table;
    // Taken either way, so that the list does not grow for a trainer that never maps a block.
    std::vector<std::uint64_t> retired = arena_->take_retired();
    if (!shared_.load(std::memory_order_relaxed)) return table;
    table.retired = std::move(retired);
    for (std::size_t k = 1; k < frames.size(); ++k) {
      wire::Frame& f = frames[k];
      if (f.bytes.size() < shm::Arena::kMinShared || !f.owner) continue;
      const std::optional<shm::Arena::Block> b = arena_->find(f.owner.get());
      if (!b) continue;
      const auto at = reinterpret_cast<std::uintptr_t>(f.bytes.data());
      const auto base = reinterpret_cast<std::uintptr_t>(b->base);
      if (at < base || at - base > b->bytes || f.bytes.size() > b->bytes - (at - base)) continue;
      const std::size_t offset = at - base;
      {
        std::lock_guard lock(mutex_);
        auto it = lent_.find(b->serial);
        if (it != lent_.end()) {
          ++it->second.count;
        } else {
          if (lent_bytes_ + b->bytes > shared_limit_) continue;  // the trainer holds enough
          lent_.emplace(b->serial, Lent{f.owner, 1, b->bytes});
          lent_bytes_ += b->bytes;
        }
      }
      table.frames.push_back(
          {static_cast<std::uint32_t>(k), b->serial, b->fd, b->bytes, offset, f.bytes.size()});
      f = wire::Frame{};  // sent empty: the trainer reads it from the block
    }
    return table;
  }

  // Counts one return of each serial; a block returned as often as it was lent is let go (into
  // `owners`, to be destroyed after the lock). Called with mutex_ held.
  void give_back(const std::vector<std::uint64_t>& serials,
                 std::vector<std::shared_ptr<const void>>& owners) {
    for (std::uint64_t serial : serials) {
      auto it = lent_.find(serial);
      if (it == lent_.end()) continue;  // lent to a trainer replaced since, or a duplicate
      if (--it->second.count == 0) {
        lent_bytes_ -= it->second.bytes;
        owners.push_back(std::move(it->second.owner));
        lent_.erase(it);
      }
    }
  }

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
  std::shared_ptr<Run> current_;  // the last launch (halted or finished ones too)
  std::string acked_state_;
  std::uint64_t acknowledged_ = 0;
  Metrics retired_;                     // the loaders of earlier launches
  std::map<std::uint64_t, Lent> lent_;  // by block serial
  std::size_t lent_bytes_ = 0;

  std::atomic<std::uint64_t> batches_{0}, bytes_{0}, shared_bytes_{0}, credit_wait_ns_{0},
      restarts_{0}, ignored_acks_{0};
  std::atomic<std::int64_t> waiting_since_ns_{0};  // steady clock; 0: not waiting for a credit
};

class ServerCore {
 public:
  ServerCore(RunnerFactory factory, ServerOptions options)
      : factory_(std::move(factory)), options_(std::move(options)), started_(Clock::now()) {
    if (options_.workers < 1) invalid("workers must be >= 1");
    if (options_.prefetch < 1) invalid("prefetch must be >= 1");
    if (options_.max_streams < 1) invalid("max_streams must be >= 1");
    if (options_.producers < 1 || options_.producer < 0 ||
        options_.producer >= options_.producers) {
      invalid("producer must be in [0, producers)");
    }
    if (!is_loopback_bind(options_.bind) && options_.token.empty()) {
      invalid("binding to " + options_.bind +
              " (beyond loopback) needs a token that trainers must present (ServerOptions::token, "
              "wds serve --token-file)");
    }
    if (!options_.restore_file.empty()) load_state(options_.restore_file);
    if (options_.shared_memory_bytes > 0) {
      offer_ = std::make_unique<shm::Offer>();
      if (offer_->valid()) {
        raise_descriptor_limit();
      } else {
        offer_.reset();
      }
    }

    router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
    router_.set(zmq::sockopt::linger, 0);
    // The credits bound the batches queued for a trainer (at most kMaxCredits); this bounds the
    // rest (pongs, errors) for one that does not read. Beyond it ZeroMQ drops what the ROUTER
    // sends to that trainer: never a batch, and never anything for a trainer that reads.
    router_.set(zmq::sockopt::sndhwm, static_cast<int>(kRouterQueue));
    // The transport's own limit, above ours, so that an oversized message is still read and
    // answered, but a huge one is not allocated.
    const std::size_t hard =
        std::min<std::size_t>(options_.max_message_bytes * 4 + 65536, std::size_t{1} << 31);
    router_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(hard));
    try {
      router_.bind(options_.bind);
    } catch (const zmq::error_t& e) {
      invalid("cannot bind " + options_.bind + ": " + e.what());
    }
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  }

  // Halts every stream without waiting for a stalled one: its thread owns what it uses (its
  // loader, the stream, the outbox) and finishes on its own when its source answers.
  //
  // A halted thread that is only between two items (waiting for credit, or sending) ends within
  // microseconds: those are joined, so that no thread of ours still runs while the process exits
  // (a thread detached a moment before exit() destroyed its Loader among the statics: a
  // segfault at exit of `wds serve --exit-when-done`). Only one still in its source after
  // kHaltGrace is detached.
  ~ServerCore() {
    stop_all();
    const auto until = Clock::now() + kHaltGrace;
    for (std::shared_ptr<Run>& r : halted_) {
      while (!r->done.load(std::memory_order_acquire) && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (r->done.load(std::memory_order_acquire)) {
        r->thread.join();
      } else {
        r->thread.detach();
      }
    }
    router_.close();
  }

  const std::string& endpoint() const noexcept { return endpoint_; }
  void stop() noexcept {
    stopping_.store(true, std::memory_order_relaxed);
    outbox_->wake();  // run() returns now, not at its next poll timeout
  }
  void request_save() noexcept { save_requested_.store(true, std::memory_order_relaxed); }

  void run() {
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, outbox_->fd(), ZMQ_POLLIN, 0}};
    while (!stopping_.load(std::memory_order_relaxed)) {
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(100));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
        continue;  // a signal (the program's own handler runs; stop() may have been called)
      }
      if (items[1].revents & ZMQ_POLLIN) forward();
      if (items[0].revents & ZMQ_POLLIN) receive();
      if (save_requested_.exchange(false, std::memory_order_relaxed)) write_state();
      reap();
    }
    // What trainers sent before the stop (their last acknowledgements) still counts.
    receive();
    stop_all();
    write_state();
  }

  ServerMetrics metrics() const {
    ServerMetrics m;
    std::lock_guard lock(streams_mutex_);
    for (const auto& [rank, s] : streams_) m.streams.push_back(s->metrics());
    m.refused = refused_.load(std::memory_order_relaxed);
    m.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    return m;
  }

 private:
  // Each block of shared memory is a descriptor while it lives (a few per trainer and worker):
  // the usual soft limit of 1024 would run out with many trainers. The hard limit is the
  // system's word; up to it is ours to use.
  static void raise_descriptor_limit() {
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
    const rlim_t want = std::min<rlim_t>(lim.rlim_max, 65536);
    if (lim.rlim_cur >= want) return;
    lim.rlim_cur = want;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }

  [[noreturn]] static void invalid(const std::string& why) {
    throw Error(ErrorCode::invalid_argument, "", "", "Server: " + why);
  }

  void log(const std::string& line) {
    if (options_.log) options_.log(line);
  }

  // Moves what the stream threads queued to the trainers, without copying.
  void forward() {
    for (std::vector<zmq::message_t>& parts : outbox_->take()) {
      try {
        zmq_io::send(router_, parts, /*wait=*/false);
      } catch (const zmq::error_t&) {
        // The trainer is gone (unroutable): what was meant for it is dropped.
      }
    }
  }

  // Joins the halted launches whose threads have finished (which takes no time).
  void reap() {
    std::erase_if(halted_, [](std::shared_ptr<Run>& r) {
      if (!r->done.load(std::memory_order_acquire)) return false;
      if (r->thread.joinable()) r->thread.join();
      return true;
    });
  }

  // Halts a stream's launch; its thread is joined once it has finished, by reap().
  void halt(Stream& s) {
    if (std::shared_ptr<Run> r = s.halt()) halted_.push_back(std::move(r));
  }

  // Threads of launches running or halted and not yet finished.
  std::size_t stream_threads() const {
    std::size_t n = 0;
    for (const auto& r : halted_) n += !r->done.load(std::memory_order_acquire);
    for (const auto& [rank, s] : streams_) {
      const std::shared_ptr<Run> r = s->current();
      if (r && !r->done.load(std::memory_order_acquire) && !r->halted()) ++n;
    }
    return n;
  }

  void reply(const std::string& identity, Type type, std::uint64_t generation,
             std::optional<std::string> body = std::nullopt) {
    std::vector<zmq::message_t> parts;
    parts.push_back(copy_of(identity));
    parts.push_back(copy_of(protocol::encode_header(type, generation)));
    if (body) parts.push_back(copy_of(*body));
    try {
      zmq_io::send(router_, parts, /*wait=*/false);
    } catch (const zmq::error_t&) {
    }
  }

  void refuse(const std::string& identity, std::uint64_t generation, ErrorCode code,
              const std::string& cause) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    log("refused a message: " + cause);
    reply(identity, Type::error, generation,
          protocol::encode(protocol::ErrorReply{code, endpoint_, "", cause}));
  }

  void receive() {
    for (int i = 0; i < 64; ++i) {
      std::vector<zmq::message_t> parts;
      if (!zmq_io::receive_now(router_, parts)) return;
      if (parts.empty()) continue;
      const std::string identity = parts[0].to_string();
      try {
        handle(identity, parts);
      } catch (const Error& e) {
        refuse(identity, 0, e.code(), e.cause());
      } catch (const std::exception& e) {
        // Out of memory, a resource the system refused: this message fails, the server serves on.
        refuse(identity, 0, ErrorCode::unavailable, std::string("cannot serve it: ") + e.what());
      }
    }
  }

  void handle(const std::string& identity, std::vector<zmq::message_t>& parts) {
    std::size_t total = 0;
    for (std::size_t i = 1; i < parts.size(); ++i) total += parts[i].size();
    if (total > options_.max_message_bytes) {
      throw Error(
          ErrorCode::invalid_argument, "", "",
          "a message of " + std::to_string(total) + " bytes is over this server's limit of " +
              std::to_string(options_.max_message_bytes) + " (ServerOptions::max_message_bytes)");
    }
    if (parts.size() < 2) {
      throw Error(ErrorCode::corrupt_data, "", "", "malformed service message: no header frame");
    }
    const protocol::Header h = protocol::decode_header(bytes_of(parts[1]), endpoint_);
    if (h.version != protocol::kProtocolVersion) {
      throw Error(ErrorCode::invalid_argument, "", "",
                  "the trainer speaks protocol version " + std::to_string(h.version) +
                      ", this server speaks " + std::to_string(protocol::kProtocolVersion) +
                      ": use the same wds version on both sides");
    }
    auto body = [&](std::size_t frames) -> std::span<const std::byte> {
      if (parts.size() != 2 + frames) {
        throw Error(ErrorCode::corrupt_data, "", "",
                    "malformed " + std::string(protocol::type_name(h.type)) +
                        " message: " + std::to_string(parts.size() - 1) + " frames, not " +
                        std::to_string(1 + frames));
      }
      return frames ? bytes_of(parts[2]) : std::span<const std::byte>();
    };
    switch (h.type) {
      case Type::start:
        start(identity, h.generation, protocol::decode_start(body(1), endpoint_));
        return;
      case Type::credit: {
        const std::uint64_t tag = protocol::decode_credit(body(1), endpoint_);
        Stream* s = stream_of(identity);
        if (!s) {
          unknown(identity, h.generation);
          return;
        }
        if (s->credit(h.generation, h.seq, tag)) {
          note_ack();
        } else {
          // Not a batch in flight (a guess, or a stale one): no room for another. Not answered,
          // so that a trainer that does not read is not sent anything more.
          s->count_ignored_ack();
        }
        return;
      }
      case Type::bye: {
        body(0);
        auto it = rank_of_.find(identity);
        if (it == rank_of_.end()) return;
        const int rank = it->second;
        halt(*streams_.at(rank));
        rank_of_.erase(it);
        left_.insert(rank);
        log("rank " + std::to_string(rank) + " left");
        if (options_.exit_when_done && world_size_ > 0 &&
            left_.size() == static_cast<std::size_t>(world_size_)) {
          stop();
        }
        return;
      }
      case Type::ping:
        body(0);
        if (!stream_of(identity)) {
          unknown(identity, h.generation);
          return;
        }
        reply(identity, Type::pong, h.generation);
        return;
      case Type::shared: {
        body(0);
        Stream* s = stream_of(identity);
        if (!s) {
          unknown(identity, h.generation);
          return;
        }
        if (!offer_) {
          throw Error(ErrorCode::invalid_argument, "", "",
                      "a trainer asked for shared memory, which this server did not offer");
        }
        s->accept_shared();
        return;
      }
      case Type::release: {
        const std::vector<std::uint64_t> serials = protocol::decode_release(body(1), endpoint_);
        Stream* s = stream_of(identity);
        if (!s) {
          unknown(identity, h.generation);
          return;
        }
        s->release(serials);
        return;
      }
      default:
        throw Error(ErrorCode::corrupt_data, "", "",
                    "a " + std::string(protocol::type_name(h.type)) +
                        " message is not one a trainer sends");
    }
  }

  // A trainer this server does not know (it restarted, or the trainer was replaced).
  void unknown(const std::string& identity, std::uint64_t generation) {
    if (retired_.count(identity)) {
      refuse(identity, generation, ErrorCode::invalid_argument,
             "another trainer has registered with this trainer's rank since; this one stops");
      return;
    }
    reply(identity, Type::who, generation);
  }

  Stream* stream_of(const std::string& identity) {
    auto it = rank_of_.find(identity);
    if (it == rank_of_.end()) return nullptr;
    return streams_.at(it->second).get();
  }

  void start(const std::string& identity, std::uint64_t generation, protocol::Start m) {
    if (!options_.token.empty() && !same_secret(m.token, options_.token)) {
      throw Error(ErrorCode::permission_denied, "", "",
                  "the trainer's token does not match this server's");
    }
    if (m.world_size < 1 || m.rank < 0 || m.rank >= m.world_size) {
      throw Error(ErrorCode::invalid_argument, "", "",
                  "rank " + std::to_string(m.rank) + " is not in [0, " +
                      std::to_string(m.world_size) + ")");
    }
    if (m.credits == 0 || m.credits > kMaxCredits) {
      throw Error(ErrorCode::invalid_argument, "", "",
                  "credits must be in [1, " + std::to_string(kMaxCredits) + "], not " +
                      std::to_string(m.credits));
    }
    // The world size is the job's: the trainers connected (other than this one) and the
    // positions restored for ranks not back yet hold it; once they are gone, the next trainer's
    // is the job's.
    const bool others = std::any_of(rank_of_.begin(), rank_of_.end(),
                                    [&](const auto& e) { return e.first != identity; });
    if ((others || !restored_.empty()) && m.world_size != world_size_) {
      throw Error(ErrorCode::invalid_argument, "", "",
                  "a trainer of a job of world size " + std::to_string(m.world_size) +
                      ", but this server serves a job of world size " +
                      std::to_string(world_size_) +
                      (others ? " (its trainers are connected)"
                              : " (the positions restored from " + options_.restore_file +
                                    " for ranks not back yet)"));
    }
    if (m.world_size != world_size_) {
      // A new job: the streams and positions of the last one go.
      if (world_size_ != 0) {
        log("a job of world size " + std::to_string(m.world_size) + " (the last was " +
            std::to_string(world_size_) + ")");
      }
      stop_all();
      std::lock_guard lock(streams_mutex_);
      streams_.clear();
      left_.clear();
      world_size_ = m.world_size;
    }
    const int rank = m.rank;
    // A trainer that comes back as another rank leaves its old one.
    if (auto it = rank_of_.find(identity); it != rank_of_.end() && it->second != rank) {
      halt(*streams_.at(it->second));
      rank_of_.erase(it);
    }
    std::shared_ptr<Stream> stream;
    {
      std::lock_guard lock(streams_mutex_);
      if (auto it = streams_.find(rank); it != streams_.end()) stream = it->second;
    }
    const bool fresh = !stream;
    const std::string old = fresh ? std::string() : stream->identity();
    if (stream) halt(*stream);
    reap();
    if (const std::size_t n = stream_threads(); n >= options_.max_streams) {
      throw Error(ErrorCode::unavailable, "", "",
                  "cannot serve rank " + std::to_string(rank) + ": " + std::to_string(n) +
                      " streams are running, this server's limit (ServerOptions::max_streams, "
                      "wds serve --max-streams; a stream halted while its source stalls counts "
                      "until the source answers)");
    }
    if (fresh) stream = std::make_shared<Stream>(rank, offer_ ? options_.shared_memory_bytes : 0);
    // A trainer without a position of its own continues from the state file. Only on the rank's
    // first start here: a later one without a position starts a new epoch.
    const auto restored = restored_.find(rank);
    if (restored != restored_.end() && !m.state) m.state = restored->second;
    if (m.state) stream->set_acked_state(*m.state);
    const StreamInfo info{rank, m.world_size, options_.producer, options_.producers};
    try {
      Stream::launch(stream, factory_(info), outbox_, identity, generation, std::move(m),
                     pipeline_error_where(endpoint_, rank));
    } catch (const std::system_error& e) {
      throw Error(ErrorCode::unavailable, "", "",
                  "cannot start a thread for rank " + std::to_string(rank) + ": " + e.what() +
                      " (too many ranks or workers for this host: lower --max-streams, or add "
                      "producers)");
    }
    if (restored != restored_.end()) restored_.erase(restored);
    if (fresh) {
      std::lock_guard lock(streams_mutex_);
      streams_[rank] = stream;
      log("rank " + std::to_string(rank) + " of " + std::to_string(world_size_) + " joined");
    } else if (old != identity) {
      retired_.insert(old);
      rank_of_.erase(old);
      log("rank " + std::to_string(rank) + ": a new trainer takes over");
    }
    rank_of_[identity] = rank;
    left_.erase(rank);
    // Before any batch of the launch: the serving thread forwards those after this returns.
    protocol::Welcome welcome{options_.producer, options_.producers, std::nullopt};
    if (offer_)
      welcome.shared = protocol::SharedOffer{offer_->pid(), offer_->fd(), offer_->nonce()};
    reply(identity, Type::welcome, generation, protocol::encode(welcome));
  }

  void note_ack() {
    if (options_.save_every == 0 || options_.state_file.empty()) return;
    if (++acks_since_save_ >= options_.save_every) write_state();
  }

  void stop_all() {
    std::lock_guard lock(streams_mutex_);
    for (auto& [rank, s] : streams_) halt(*s);
  }

  // The acknowledged positions, written to a temporary file and renamed over the old one, so a
  // producer killed while writing leaves the previous file whole.
  void write_state() {
    acks_since_save_ = 0;
    if (options_.state_file.empty()) return;
    StateWriter out;
    out.put(kStateTag);
    out.put(static_cast<std::uint64_t>(options_.producer));
    out.put(static_cast<std::uint64_t>(options_.producers));
    out.put(static_cast<std::uint64_t>(world_size_));
    std::vector<std::pair<int, std::string>> ranks;
    {
      std::lock_guard lock(streams_mutex_);
      for (const auto& [rank, s] : streams_) ranks.emplace_back(rank, s->acked_state());
    }
    for (auto& [rank, state] : restored_) ranks.emplace_back(rank, state);  // not back yet
    out.put(static_cast<std::uint64_t>(ranks.size()));
    for (const auto& [rank, state] : ranks) {
      out.put(static_cast<std::uint64_t>(rank));
      out.put(std::string_view(state));
    }
    const std::string tmp = options_.state_file + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << out.str();
      if (!f.flush()) {
        log("cannot write " + tmp);
        return;
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, options_.state_file, ec);
    if (ec) log("cannot rename " + tmp + " to " + options_.state_file + ": " + ec.message());
  }

  void load_state(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      throw Error(ErrorCode::not_found, path, "", "cannot read the server state file");
    }
    std::stringstream buffer;
    buffer << f.rdbuf();
    const std::string text = buffer.str();  // the reader keeps a view of it
    try {
      StateReader in(text);
      if (in.get_string() != kStateTag) throw std::invalid_argument("not a server state");
      const auto producer = in.get_u64();
      const auto producers = in.get_u64();
      if (producer != static_cast<std::uint64_t>(options_.producer) ||
          producers != static_cast<std::uint64_t>(options_.producers)) {
        throw Error(ErrorCode::invalid_argument, path, "",
                    "the state was saved by producer " + std::to_string(producer) + " of " +
                        std::to_string(producers) + ", this server is producer " +
                        std::to_string(options_.producer) + " of " +
                        std::to_string(options_.producers));
      }
      // Every count is checked before it is used: the file may be damaged or not ours.
      const auto world = in.get_u64();
      const auto n = in.get_u64();
      if (world > kMaxWorldSize || (world == 0 && n != 0)) {
        throw Error(ErrorCode::corrupt_data, path, "",
                    "not a server state file: world size " + std::to_string(world) +
                        " is not in [1, " + std::to_string(kMaxWorldSize) + "]");
      }
      if (n > world) {
        throw Error(ErrorCode::corrupt_data, path, "",
                    "not a server state file: positions for " + std::to_string(n) +
                        " ranks of a world of " + std::to_string(world));
      }
      for (std::uint64_t i = 0; i < n; ++i) {
        const auto rank = in.get_u64();
        if (rank >= world) {
          throw Error(ErrorCode::corrupt_data, path, "",
                      "not a server state file: rank " + std::to_string(rank) + " of a world of " +
                          std::to_string(world));
        }
        std::string state = in.get_string();
        if (!state.empty() && !restored_.emplace(static_cast<int>(rank), std::move(state)).second) {
          throw Error(ErrorCode::corrupt_data, path, "",
                      "not a server state file: rank " + std::to_string(rank) + " twice");
        }
      }
      world_size_ = static_cast<int>(world);
      if (!in.at_end()) throw std::invalid_argument("trailing values");
    } catch (const Error& e) {
      if (e.url() == path) throw;
      throw Error(ErrorCode::corrupt_data, path, "", "not a server state file: " + e.cause());
    } catch (const std::exception& e) {
      throw Error(ErrorCode::corrupt_data, path, "",
                  std::string("not a server state file: ") + e.what());
    }
  }

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

  // The serving thread's; streams_ is also read by metrics() under streams_mutex_.
  mutable std::mutex streams_mutex_;
  std::map<int, std::shared_ptr<Stream>> streams_;
  std::vector<std::shared_ptr<Run>> halted_;  // launches halted whose threads may still run
  std::map<std::string, int> rank_of_;        // routing id -> rank
  std::set<std::string> retired_;             // trainers replaced by another of the same rank
  std::map<int, std::string> restored_;       // from restore_file, for ranks not back yet
  std::set<int> left_;                        // ranks whose trainer said goodbye
  int world_size_ = 0;
  std::uint64_t acks_since_save_ = 0;
};

}  // namespace detail

template <class T>
Server<T>::Server(MakePipeline make_pipeline, ServerOptions options) {
  if (!make_pipeline) {
    throw Error(ErrorCode::invalid_argument, "", "", "Server: no pipeline factory");
  }
  // Shared with the stream threads, which may outlive the server (a stalled source).
  auto keep = std::make_shared<const ServerOptions>(options);
  detail::RunnerFactory factory = [make = std::move(make_pipeline), keep](const StreamInfo& info) {
    return std::make_unique<detail::TypedRunner<T>>(make, info, keep);
  };
  core_ = std::make_unique<detail::ServerCore>(std::move(factory), std::move(options));
}

template <class T>
Server<T>::~Server() = default;

template <class T>
std::string Server<T>::endpoint() const {
  return core_->endpoint();
}

template <class T>
void Server<T>::run() {
  core_->run();
}

template <class T>
void Server<T>::stop() noexcept {
  core_->stop();
}

template <class T>
void Server<T>::save_state() noexcept {
  core_->request_save();
}

template <class T>
ServerMetrics Server<T>::metrics() const {
  return core_->metrics();
}

template class Server<Tuple>;
template class Server<DecodedSample>;

}  // namespace wds
