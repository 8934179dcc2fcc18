// The producer's serving thread: one ROUTER socket, the trainers' messages, a TrainerFeed per
// rank of the job, and the state file of their acknowledged positions.
//
// The serving thread never waits for a feed's thread: each launch of a feed has its own Loader
// and thread, shared with that thread, and is halted by a flag. A launch stuck in its source is
// abandoned, and joined (by reap(), which takes no time) once it has finished.
#include "service/server_core.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <span>
#include <system_error>
#include <thread>
#include <utility>

#include "service/state_file.hpp"
#include "service/zmq_io.hpp"

namespace wds::detail {
namespace {

using protocol::Type;
using zmq_io::bytes_of;
using zmq_io::copy_of;

// Batches in flight per trainer: each is memory the producer holds until it is sent.
constexpr std::uint32_t kMaxCredits = 1024;
// Messages the ROUTER queues for one trainer: its batches (at most its credits) and a few
// replies; beyond, a trainer that does not read loses replies, not the producer's memory.
constexpr std::size_t kRouterQueue = kMaxCredits + 1024;
// How long ~Server waits for halted feeds to end before it leaves one stuck in its source.
constexpr std::chrono::seconds kHaltGrace{2};

std::string pipeline_error_where(const std::string& endpoint, int rank) {
  return endpoint + " (rank " + std::to_string(rank) + ")";
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

// Each block of shared memory is a descriptor while it lives (a few per trainer and worker):
// the usual soft limit of 1024 would run out with many trainers. The hard limit is the
// system's word; up to it is ours to use.
void raise_descriptor_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const rlim_t want = std::min<rlim_t>(lim.rlim_max, 65536);
  if (lim.rlim_cur >= want) return;
  lim.rlim_cur = want;
  ::setrlimit(RLIMIT_NOFILE, &lim);
}

[[noreturn]] void invalid(const std::string& why) {
  throw Error::invalid_argument("Server: " + why);
}

}  // namespace

ServerCore::ServerCore(RunnerFactory factory, ServerOptions options)
    : factory_(std::move(factory)), options_(std::move(options)), started_(Clock::now()) {
  if (options_.workers < 1) invalid("workers must be >= 1");
  if (options_.prefetch < 1) invalid("prefetch must be >= 1");
  if (options_.max_streams < 1) invalid("max_streams must be >= 1");
  if (options_.producers < 1 || options_.producer < 0 || options_.producer >= options_.producers) {
    invalid("producer must be in [0, producers)");
  }
  if (!is_loopback_bind(options_.bind) && options_.token.empty()) {
    invalid("binding to " + options_.bind +
            " (beyond loopback) needs a token that trainers must present (ServerOptions::token, "
            "wds serve --token-file)");
  }
  if (!options_.restore_file.empty()) {
    SavedPositions saved =
        read_state_file(options_.restore_file, options_.producer, options_.producers);
    world_size_ = saved.world_size;
    restored_ = std::move(saved.ranks);
  }
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

// A halted thread that is only between two items (waiting for credit, or sending) ends within
// microseconds: those are joined, so that no thread of ours still runs while the process exits
// (a thread detached a moment before exit() destroyed its Loader among the statics: a
// segfault at exit of `wds serve --exit-when-done`). Only one still in its source after
// kHaltGrace is detached.
ServerCore::~ServerCore() {
  stop_all();
  const auto until = Clock::now() + kHaltGrace;
  for (std::shared_ptr<Launch>& r : halted_) {
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

void ServerCore::stop() noexcept {
  stopping_.store(true, std::memory_order_relaxed);
  outbox_->wake();  // run() returns now, not at its next poll timeout
}

void ServerCore::run() {
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

ServerMetrics ServerCore::metrics() const {
  ServerMetrics m;
  std::lock_guard lock(feeds_mutex_);
  for (const auto& [rank, s] : feeds_) m.streams.push_back(s->metrics());
  m.refused = refused_.load(std::memory_order_relaxed);
  m.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  return m;
}

void ServerCore::forward() {
  for (std::vector<zmq::message_t>& parts : outbox_->take()) {
    try {
      zmq_io::send(router_, parts, /*wait=*/false);
    } catch (const zmq::error_t&) {
      // The trainer is gone (unroutable): what was meant for it is dropped.
    }
  }
}

void ServerCore::reap() {
  std::erase_if(halted_, [](std::shared_ptr<Launch>& r) {
    if (!r->done.load(std::memory_order_acquire)) return false;
    if (r->thread.joinable()) r->thread.join();
    return true;
  });
}

void ServerCore::halt(TrainerFeed& s) {
  if (std::shared_ptr<Launch> r = s.halt()) halted_.push_back(std::move(r));
}

std::size_t ServerCore::feed_threads() const {
  std::size_t n = 0;
  for (const auto& r : halted_) n += !r->done.load(std::memory_order_acquire);
  for (const auto& [rank, s] : feeds_) {
    const std::shared_ptr<Launch> r = s->current();
    if (r && !r->done.load(std::memory_order_acquire) && !r->halted()) ++n;
  }
  return n;
}

void ServerCore::reply(const std::string& identity, Type type, std::uint64_t generation,
                       std::optional<std::string> body) {
  std::vector<zmq::message_t> parts;
  parts.push_back(copy_of(identity));
  parts.push_back(copy_of(protocol::encode_header(type, generation)));
  if (body) parts.push_back(copy_of(*body));
  try {
    zmq_io::send(router_, parts, /*wait=*/false);
  } catch (const zmq::error_t&) {
  }
}

void ServerCore::refuse(const std::string& identity, std::uint64_t generation, ErrorCode code,
                        const std::string& cause) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  log("refused a message: " + cause);
  reply(identity, Type::error, generation,
        protocol::encode(protocol::ErrorReply{code, endpoint_, "", cause}));
}

void ServerCore::receive() {
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

void ServerCore::handle(const std::string& identity, std::vector<zmq::message_t>& parts) {
  std::size_t total = 0;
  for (std::size_t i = 1; i < parts.size(); ++i) total += parts[i].size();
  if (total > options_.max_message_bytes) {
    throw Error::invalid_argument(
        "a message of " + std::to_string(total) + " bytes is over this server's limit of " +
        std::to_string(options_.max_message_bytes) + " (ServerOptions::max_message_bytes)");
  }
  if (parts.size() < 2) {
    throw Error::corrupt_data("malformed service message: no header frame");
  }
  const protocol::Header h = protocol::decode_header(bytes_of(parts[1]), endpoint_);
  if (h.version != protocol::kProtocolVersion) {
    throw Error::invalid_argument("the trainer speaks protocol version " +
                                  std::to_string(h.version) + ", this server speaks " +
                                  std::to_string(protocol::kProtocolVersion) +
                                  ": use the same wds version on both sides");
  }
  auto body = [&](std::size_t frames) -> std::span<const std::byte> {
    if (parts.size() != 2 + frames) {
      throw Error::corrupt_data("malformed " + std::string(protocol::type_name(h.type)) +
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
      TrainerFeed* s = feed_of(identity);
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
      halt(*feeds_.at(rank));
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
      if (!feed_of(identity)) {
        unknown(identity, h.generation);
        return;
      }
      reply(identity, Type::pong, h.generation);
      return;
    case Type::shared: {
      body(0);
      TrainerFeed* s = feed_of(identity);
      if (!s) {
        unknown(identity, h.generation);
        return;
      }
      if (!offer_) {
        throw Error::invalid_argument(
            "a trainer asked for shared memory, which this server did not offer");
      }
      s->accept_shared();
      return;
    }
    case Type::release: {
      const std::vector<std::uint64_t> serials = protocol::decode_release(body(1), endpoint_);
      TrainerFeed* s = feed_of(identity);
      if (!s) {
        unknown(identity, h.generation);
        return;
      }
      s->release(serials);
      return;
    }
    default:
      throw Error(
          ErrorCode::corrupt_data, "", "",
          "a " + std::string(protocol::type_name(h.type)) + " message is not one a trainer sends");
  }
}

void ServerCore::unknown(const std::string& identity, std::uint64_t generation) {
  if (retired_.count(identity)) {
    refuse(identity, generation, ErrorCode::invalid_argument,
           "another trainer has registered with this trainer's rank since; this one stops");
    return;
  }
  reply(identity, Type::who, generation);
}

TrainerFeed* ServerCore::feed_of(const std::string& identity) {
  auto it = rank_of_.find(identity);
  if (it == rank_of_.end()) return nullptr;
  return feeds_.at(it->second).get();
}

void ServerCore::start(const std::string& identity, std::uint64_t generation, protocol::Start m) {
  if (!options_.token.empty() && !same_secret(m.token, options_.token)) {
    throw Error::permission_denied("the trainer's token does not match this server's");
  }
  if (m.world_size < 1 || m.rank < 0 || m.rank >= m.world_size) {
    throw Error(
        ErrorCode::invalid_argument, "", "",
        "rank " + std::to_string(m.rank) + " is not in [0, " + std::to_string(m.world_size) + ")");
  }
  if (m.credits == 0 || m.credits > kMaxCredits) {
    throw Error::invalid_argument("credits must be in [1, " + std::to_string(kMaxCredits) +
                                  "], not " + std::to_string(m.credits));
  }
  // The world size is the job's: the trainers connected (other than this one) and the
  // positions restored for ranks not back yet hold it; once they are gone, the next trainer's
  // is the job's.
  const bool others = std::any_of(rank_of_.begin(), rank_of_.end(),
                                  [&](const auto& e) { return e.first != identity; });
  if ((others || !restored_.empty()) && m.world_size != world_size_) {
    throw Error::invalid_argument(
        "a trainer of a job of world size " + std::to_string(m.world_size) +
        ", but this server serves a job of world size " + std::to_string(world_size_) +
        (others ? " (its trainers are connected)"
                : " (the positions restored from " + options_.restore_file +
                      " for ranks not back yet)"));
  }
  if (m.world_size != world_size_) {
    // A new job: the feeds and positions of the last one go.
    if (world_size_ != 0) {
      log("a job of world size " + std::to_string(m.world_size) + " (the last was " +
          std::to_string(world_size_) + ")");
    }
    stop_all();
    std::lock_guard lock(feeds_mutex_);
    feeds_.clear();
    left_.clear();
    world_size_ = m.world_size;
  }
  const int rank = m.rank;
  // A trainer that comes back as another rank leaves its old one.
  if (auto it = rank_of_.find(identity); it != rank_of_.end() && it->second != rank) {
    halt(*feeds_.at(it->second));
    rank_of_.erase(it);
  }
  std::shared_ptr<TrainerFeed> feed;
  {
    std::lock_guard lock(feeds_mutex_);
    if (auto it = feeds_.find(rank); it != feeds_.end()) feed = it->second;
  }
  const bool fresh = !feed;
  const std::string old = fresh ? std::string() : feed->identity();
  if (feed) halt(*feed);
  reap();
  if (const std::size_t n = feed_threads(); n >= options_.max_streams) {
    throw Error::unavailable(
        "cannot serve rank " + std::to_string(rank) + ": " + std::to_string(n) +
        " streams are running, this server's limit (ServerOptions::max_streams, "
        "wds serve --max-streams; a stream halted while its source stalls counts "
        "until the source answers)");
  }
  if (fresh) feed = std::make_shared<TrainerFeed>(rank, offer_ ? options_.shared_memory_bytes : 0);
  // A trainer without a position of its own continues from the state file. Only on the rank's
  // first start here: a later one without a position starts a new epoch.
  const auto restored = restored_.find(rank);
  if (restored != restored_.end() && !m.state) m.state = restored->second;
  if (m.state) feed->set_acked_state(*m.state);
  const StreamInfo info{rank, m.world_size, options_.producer, options_.producers};
  try {
    TrainerFeed::launch(feed, factory_(info), outbox_, identity, generation, std::move(m),
                        pipeline_error_where(endpoint_, rank));
  } catch (const std::system_error& e) {
    throw Error::unavailable(
        "cannot start a thread for rank " + std::to_string(rank) + ": " + e.what() +
        " (too many ranks or workers for this host: lower --max-streams, or add "
        "producers)");
  }
  if (restored != restored_.end()) restored_.erase(restored);
  if (fresh) {
    std::lock_guard lock(feeds_mutex_);
    feeds_[rank] = feed;
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
  if (offer_) welcome.shared = protocol::SharedOffer{offer_->pid(), offer_->fd(), offer_->nonce()};
  reply(identity, Type::welcome, generation, protocol::encode(welcome));
}

void ServerCore::note_ack() {
  if (options_.save_every == 0 || options_.state_file.empty()) return;
  if (++acks_since_save_ >= options_.save_every) write_state();
}

void ServerCore::stop_all() {
  std::lock_guard lock(feeds_mutex_);
  for (auto& [rank, s] : feeds_) halt(*s);
}

void ServerCore::write_state() {
  acks_since_save_ = 0;
  if (options_.state_file.empty()) return;
  std::vector<std::pair<int, std::string>> ranks;
  {
    std::lock_guard lock(feeds_mutex_);
    for (const auto& [rank, s] : feeds_) ranks.emplace_back(rank, s->acked_state());
  }
  for (auto& [rank, state] : restored_) ranks.emplace_back(rank, state);  // not back yet
  write_state_file(options_.state_file, options_.producer, options_.producers, world_size_, ranks,
                   [this](const std::string& line) { log(line); });
}

}  // namespace wds::detail
