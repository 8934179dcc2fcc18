// The data service's producer: one ROUTER socket on the serving thread, and per trainer rank a
// stream thread that runs the rank's Loader and sends its batches against the trainer's credits.
//
// Trainers on the producer's host get the large tensors through shared memory: each stream's
// Loader allocates its batches in the stream's Arena (service/shared_memory.hpp), and a batch
// names the blocks instead of carrying them; the stream keeps each lent block until the trainer
// releases it.
//
// A stream thread never touches the ROUTER (ZeroMQ sockets belong to one thread): it sends each
// message, prefixed with the trainer's routing id, through its own inproc PUSH socket to the
// serving thread's PULL socket, which forwards it. Messages move between inproc sockets without a
// copy, and tensor frames are sent from the tensors' own memory, so a batch is not copied on its
// way out of the producer.
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

#include <sys/resource.h>

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

// What a stream thread runs: a Loader<T> over the rank's pipeline, its items as records.
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
  TypedRunner(typename Server<T>::MakePipeline make, StreamInfo info, const ServerOptions& o)
      : make_(std::move(make)), info_(info), options_(o) {}

  void start(const protocol::Start& start, std::shared_ptr<BlockAllocator> memory) override {
    LoaderOptions<T> lo;
    lo.memory = std::move(memory);
    lo.workers = options_.workers;
    lo.prefetch = options_.prefetch;
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
    if (loader_) retired_ += loader_->metrics();
    loader_ = std::move(loader);
  }

  std::optional<std::pair<wire::Record, std::string>> next() override {
    std::optional<T> item = loader_->next();
    if (!item) return std::nullopt;
    std::string state = loader_->state();
    if constexpr (std::is_same_v<T, Tuple>) {
      return std::pair{wire::to_record(std::move(*item), options_.names), std::move(state)};
    } else {
      return std::pair{wire::to_record(std::move(*item)), std::move(state)};
    }
  }

  Metrics metrics() const override {
    std::lock_guard lock(mutex_);
    Metrics m = retired_;
    if (loader_) m += loader_->metrics();
    return m;
  }

 private:
  typename Server<T>::MakePipeline make_;
  StreamInfo info_;
  const ServerOptions& options_;
  mutable std::mutex mutex_;  // loader_ is replaced on the stream thread, read by metrics()
  std::unique_ptr<Loader<T>> loader_;
  Metrics retired_;
};

using RunnerFactory = std::function<std::unique_ptr<StreamRunner>(const StreamInfo&)>;

// One trainer rank's stream: its thread, its credits, and what it has sent.
class Stream {
 public:
  // shared_bytes: what may be lent to the trainer through shared memory at once (0: nothing).
  Stream(int rank, std::unique_ptr<StreamRunner> runner, std::size_t shared_bytes)
      : rank_(rank),
        runner_(std::move(runner)),
        shared_limit_(shared_bytes),
        arena_(shared_bytes ? std::make_shared<shm::Arena>() : nullptr) {}
  ~Stream() { halt(); }

  // Starts the thread for `start` (a halted stream only), sending to `identity`.
  void launch(zmq::context_t& ctx, const std::string& pull_address, std::string identity,
              std::uint64_t generation, protocol::Start start, const std::string& where) {
    std::map<std::uint64_t, Lent> dropped;            // freed after the lock is released
    std::vector<std::shared_ptr<const void>> owners;  // likewise
    {
      std::lock_guard lock(mutex_);
      if (identity != identity_) {
        // Another trainer: what was lent to the old one comes back (its loader, and so its
        // pool, is replaced below: the blocks are never handed out again), and the new one has
        // yet to show it can map this process's memory.
        dropped.swap(lent_);
        lent_bytes_ = 0;
        shared_.store(false, std::memory_order_relaxed);
      } else {
        // The same trainer starts again: it drops the batches still in flight unread (they are
        // of the old generation), so it will never release their blocks; they come back here.
        for (const Sent& batch : sent_) give_back(batch.serials, owners);
      }
    }
    identity_ = std::move(identity);
    {
      std::lock_guard lock(mutex_);
      generation_ = generation;
      credits_ = granted_ = start.credits;
      stop_ = false;
      sent_.clear();
    }
    ++restarts_;
    thread_ = std::thread([this, &ctx, pull_address, generation, start = std::move(start), where] {
      run(ctx, pull_address, generation, start, where);
    });
  }
  // Stops the thread (after the item it is making, if any) and joins it.
  void halt() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // From the trainer: n more credits, and it has taken batch `taken` (0: none yet).
  void credit(std::uint64_t generation, std::uint32_t n, std::uint64_t taken) {
    {
      std::lock_guard lock(mutex_);
      if (generation != generation_) return;  // for a stream that was restarted since
      // A batch taken is the trainer's: it releases its blocks when their tensors die.
      while (!sent_.empty() && sent_.front().seq <= taken) {
        if (sent_.front().seq == taken) acked_state_ = std::move(sent_.front().state);
        sent_.pop_front();
        ++acknowledged_;
      }
      // Never more in flight than the trainer was granted at its start, whatever it sends.
      credits_ = std::min<std::uint64_t>(
          credits_ + n, granted_ - std::min<std::uint64_t>(granted_, sent_.size()));
    }
    wake_.notify_all();
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

  const std::string& identity() const noexcept { return identity_; }
  int rank() const noexcept { return rank_; }
  // The state as of the last batch the trainer took (empty: none).
  std::string acked_state() const {
    std::lock_guard lock(mutex_);
    return acked_state_;
  }
  void set_acked_state(std::string s) {
    std::lock_guard lock(mutex_);
    acked_state_ = std::move(s);
  }
  std::uint64_t acknowledged() const {
    std::lock_guard lock(mutex_);
    return acknowledged_;
  }

  ServedStream metrics() const {
    ServedStream s;
    s.rank = rank_;
    s.batches = batches_.load(std::memory_order_relaxed);
    s.bytes = bytes_.load(std::memory_order_relaxed);
    s.shared_bytes = shared_bytes_.load(std::memory_order_relaxed);
    {
      std::lock_guard lock(mutex_);
      s.lent_bytes = lent_bytes_;
    }
    s.acknowledged = acknowledged();
    s.restarts = restarts_;
    std::int64_t wait_ns =
        static_cast<std::int64_t>(credit_wait_ns_.load(std::memory_order_relaxed));
    // A wait still going on counts too: a trainer that stopped taking batches shows at once.
    if (const auto since = waiting_since_ns_.load(std::memory_order_relaxed); since != 0) {
      wait_ns += std::max<std::int64_t>(0, Clock::now().time_since_epoch().count() - since);
    }
    s.credit_wait_seconds = static_cast<double>(wait_ns) / 1e9;
    s.loader = runner_->metrics();
    return s;
  }

 private:
  void run(zmq::context_t& ctx, const std::string& pull_address, std::uint64_t generation,
           const protocol::Start& start, const std::string& where) {
    zmq::socket_t out(ctx, zmq::socket_type::push);
    out.set(zmq::sockopt::linger, 0);
    out.set(zmq::sockopt::sndhwm, 0);  // bounded by the credits; never blocks a halt
    out.connect(pull_address);
    auto send = [&](std::vector<zmq::message_t>& parts) { zmq_io::send(out, parts); };
    try {
      runner_->start(start, arena_);
      std::uint64_t seq = 0;
      for (;;) {
        if (!take_credit()) return;
        auto item = runner_->next();
        {
          std::lock_guard lock(mutex_);
          if (stop_) return;
        }
        std::vector<zmq::message_t> parts;
        parts.push_back(copy_of(identity_));
        if (!item) {
          parts.push_back(copy_of(protocol::encode_header(Type::end, generation, seq)));
          send(parts);
          return;
        }
        ++seq;
        std::vector<wire::Frame> frames = wire::encode(std::move(item->first));
        std::uint64_t bytes = 0;
        for (std::size_t k = 1; k < frames.size(); ++k) bytes += frames[k].bytes.size();
        protocol::SharedTable table = lend(frames);
        const bool shared = !table.frames.empty() || !table.retired.empty();
        parts.push_back(copy_of(
            protocol::encode_header(Type::batch, generation, seq, shared ? protocol::kShared : 0)));
        parts.push_back(copy_of(item->second));
        if (shared) parts.push_back(copy_of(protocol::encode(table)));
        std::uint64_t lent = 0;
        std::vector<std::uint64_t> serials;
        for (const protocol::SharedFrame& f : table.frames) {
          lent += f.length;
          serials.push_back(f.serial);
        }
        shared_bytes_.fetch_add(lent, std::memory_order_relaxed);
        for (const wire::Frame& f : frames) parts.push_back(borrowed_message(f));
        {
          std::lock_guard lock(mutex_);
          sent_.push_back({seq, std::move(item->second), std::move(serials)});
        }
        send(parts);
        batches_.fetch_add(1, std::memory_order_relaxed);
        bytes_.fetch_add(bytes, std::memory_order_relaxed);
      }
    } catch (const Error& e) {
      send_error(out, generation, {e.code(), e.url(), e.member(), e.cause()});
    } catch (const std::exception& e) {
      send_error(out, generation, {ErrorCode::unavailable, where, "", e.what()});
    }
  }

  void send_error(zmq::socket_t& out, std::uint64_t generation, const protocol::ErrorReply& r) {
    std::vector<zmq::message_t> parts;
    parts.push_back(copy_of(identity_));
    parts.push_back(copy_of(protocol::encode_header(Type::error, generation)));
    parts.push_back(copy_of(protocol::encode(r)));
    try {
      zmq_io::send(out, parts);
    } catch (const zmq::error_t&) {
      // The context is closing: the server is stopping, nobody is left to tell.
    }
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

  // Waits for a credit and takes it; false if the stream is stopping.
  bool take_credit() {
    std::unique_lock lock(mutex_);
    if (credits_ == 0 && !stop_) {
      const auto t0 = Clock::now();
      waiting_since_ns_.store(t0.time_since_epoch().count(), std::memory_order_relaxed);
      wake_.wait(lock, [&] { return stop_ || credits_ > 0; });
      waiting_since_ns_.store(0, std::memory_order_relaxed);
      credit_wait_ns_.fetch_add(static_cast<std::uint64_t>((Clock::now() - t0).count()),
                                std::memory_order_relaxed);
    }
    if (stop_) return false;
    --credits_;
    return true;
  }

  // A block lent to the trainer: kept alive until it has been released as often as it was sent.
  struct Lent {
    std::shared_ptr<const void> owner;
    std::uint64_t count = 0;
    std::size_t bytes = 0;
  };

  const int rank_;
  std::unique_ptr<StreamRunner> runner_;
  const std::size_t shared_limit_;
  const std::shared_ptr<shm::Arena> arena_;  // null: shared memory is off
  std::atomic<bool> shared_{false};          // the trainer maps this process's memory
  std::string identity_;
  std::thread thread_;
  std::atomic<std::uint64_t> restarts_{0};  // read by metrics() on any thread

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::uint64_t generation_ = 0;
  std::uint64_t credits_ = 0;
  std::uint64_t granted_ = 0;  // credits at the start: the most batches ever in flight
  // A batch sent and not yet taken: its sequence number, the stream's state after it, and the
  // blocks it lent (a serial per frame).
  struct Sent {
    std::uint64_t seq;
    std::string state;
    std::vector<std::uint64_t> serials;
  };
  std::deque<Sent> sent_;
  std::string acked_state_;
  std::uint64_t acknowledged_ = 0;
  std::map<std::uint64_t, Lent> lent_;  // by block serial
  std::size_t lent_bytes_ = 0;

  std::atomic<std::uint64_t> batches_{0}, bytes_{0}, shared_bytes_{0}, credit_wait_ns_{0};
  std::atomic<std::int64_t> waiting_since_ns_{0};  // steady clock; 0: not waiting for a credit
};

class ServerCore {
 public:
  ServerCore(RunnerFactory factory, ServerOptions options)
      : factory_(std::move(factory)), options_(std::move(options)), started_(Clock::now()) {
    if (options_.workers < 1) invalid("workers must be >= 1");
    if (options_.prefetch < 1) invalid("prefetch must be >= 1");
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
    router_.set(zmq::sockopt::sndhwm, 0);  // credits bound what is queued, not a drop limit
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
    pull_address_ = "inproc://wds-server-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
    pull_ = zmq::socket_t(ctx_, zmq::socket_type::pull);
    pull_.set(zmq::sockopt::linger, 0);
    pull_.set(zmq::sockopt::rcvhwm, 0);
    pull_.bind(pull_address_);
  }

  ~ServerCore() {
    stop_all();
    router_.close();
    pull_.close();
  }

  const std::string& endpoint() const noexcept { return endpoint_; }
  void stop() noexcept { stopping_.store(true, std::memory_order_relaxed); }
  void request_save() noexcept { save_requested_.store(true, std::memory_order_relaxed); }

  void run() {
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {pull_.handle(), 0, ZMQ_POLLIN, 0}};
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
    for (int i = 0; i < 64; ++i) {
      std::vector<zmq::message_t> parts;
      if (!zmq_io::receive_now(pull_, parts)) return;
      try {
        zmq_io::send(router_, parts, /*wait=*/false);
      } catch (const zmq::error_t&) {
        // The trainer is gone (unroutable): what was meant for it is dropped.
      }
    }
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
        const std::uint32_t n = protocol::decode_credit(body(1), endpoint_);
        Stream* s = stream_of(identity);
        if (!s) {
          unknown(identity, h.generation);
          return;
        }
        s->credit(h.generation, n, h.seq);
        if (h.seq > 0) note_ack();
        return;
      }
      case Type::bye: {
        body(0);
        auto it = rank_of_.find(identity);
        if (it == rank_of_.end()) return;
        const int rank = it->second;
        streams_.at(rank)->halt();
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
    if (world_size_ == 0) world_size_ = m.world_size;
    if (m.world_size != world_size_) {
      throw Error(ErrorCode::invalid_argument, "", "",
                  "a trainer of a job of world size " + std::to_string(m.world_size) +
                      ", but this server serves a job of world size " +
                      std::to_string(world_size_));
    }
    if (m.credits == 0 || m.credits > kMaxCredits) {
      throw Error(ErrorCode::invalid_argument, "", "",
                  "credits must be in [1, " + std::to_string(kMaxCredits) + "], not " +
                      std::to_string(m.credits));
    }
    std::unique_ptr<Stream>* slot;
    {
      std::lock_guard lock(streams_mutex_);
      slot = &streams_[m.rank];
    }
    if (*slot) {
      (*slot)->halt();
      const std::string& old = (*slot)->identity();
      if (old != identity) {
        retired_.insert(old);
        rank_of_.erase(old);
        log("rank " + std::to_string(m.rank) + ": a new trainer takes over");
      }
    } else {
      StreamInfo info{m.rank, m.world_size, options_.producer, options_.producers};
      auto s = std::make_unique<Stream>(m.rank, factory_(info),
                                        offer_ ? options_.shared_memory_bytes : 0);
      std::lock_guard lock(streams_mutex_);
      *slot = std::move(s);
      log("rank " + std::to_string(m.rank) + " of " + std::to_string(m.world_size) + " joined");
    }
    // A trainer without a position of its own continues from the state file. Only on the rank's
    // first start here: a later one without a position starts a new epoch.
    if (auto it = restored_.find(m.rank); it != restored_.end()) {
      if (!m.state) m.state = std::move(it->second);
      restored_.erase(it);
    }
    rank_of_[identity] = m.rank;
    left_.erase(m.rank);
    protocol::Welcome welcome{options_.producer, options_.producers, std::nullopt};
    if (offer_)
      welcome.shared = protocol::SharedOffer{offer_->pid(), offer_->fd(), offer_->nonce()};
    reply(identity, Type::welcome, generation, protocol::encode(welcome));
    if (m.state) (*slot)->set_acked_state(*m.state);
    const std::string where = pipeline_error_where(endpoint_, m.rank);
    (*slot)->launch(ctx_, pull_address_, identity, generation, std::move(m), where);
  }

  void note_ack() {
    if (options_.save_every == 0 || options_.state_file.empty()) return;
    if (++acks_since_save_ >= options_.save_every) write_state();
  }

  void stop_all() {
    std::lock_guard lock(streams_mutex_);
    for (auto& [rank, s] : streams_) s->halt();
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
      world_size_ = static_cast<int>(in.get_u64());
      const auto n = in.get_u64();
      for (std::uint64_t i = 0; i < n; ++i) {
        const int rank = static_cast<int>(in.get_u64());
        std::string state = in.get_string();
        if (!state.empty()) restored_[rank] = std::move(state);
      }
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
  zmq::socket_t pull_;
  std::string endpoint_;
  std::string pull_address_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> save_requested_{false};
  std::atomic<std::uint64_t> refused_{0};

  // The serving thread's; streams_ is also read by metrics() under streams_mutex_.
  mutable std::mutex streams_mutex_;
  std::map<int, std::unique_ptr<Stream>> streams_;
  std::map<std::string, int> rank_of_;   // routing id -> rank
  std::set<std::string> retired_;        // trainers replaced by another of the same rank
  std::map<int, std::string> restored_;  // from restore_file, for ranks not back yet
  std::set<int> left_;                   // ranks whose trainer said goodbye
  int world_size_ = 0;
  std::uint64_t acks_since_save_ = 0;
};

}  // namespace detail

template <class T>
Server<T>::Server(MakePipeline make_pipeline, ServerOptions options) {
  if (!make_pipeline) {
    throw Error(ErrorCode::invalid_argument, "", "", "Server: no pipeline factory");
  }
  auto keep = std::make_shared<ServerOptions>(options);
  detail::RunnerFactory factory = [make = std::move(make_pipeline), keep](const StreamInfo& info) {
    return std::make_unique<detail::TypedRunner<T>>(make, info, *keep);
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
