// A trainer's feed: each launch's thread runs the rank's Loader and sends its batches against
// the trainer's credits.
//
// Trainers on the producer's host get the large tensors through shared memory: each feed's
// Loader allocates its batches in the feed's Arena (service/shared_memory.hpp), and a batch
// names the blocks instead of carrying them; the feed keeps each lent block until the trainer
// releases it.
//
// A feed's thread never touches the ROUTER (ZeroMQ sockets belong to one thread): it queues each
// message, prefixed with the trainer's routing id, in the Outbox, whose eventfd wakes the serving
// thread to forward it. Messages move through the queue without a copy, and tensor frames are
// sent from the tensors' own memory, so a batch is not copied on its way out of the producer.
#include "service/feed.hpp"

#include <sys/random.h>

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "service/zmq_io.hpp"

namespace wds::detail {
namespace {

using protocol::Type;
using zmq_io::copy_of;
using Clock = std::chrono::steady_clock;

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

// Unpredictable to the trainer (a batch's tag, protocol.hpp): the kernel's random numbers.
std::uint64_t random_tag() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) == static_cast<ssize_t>(sizeof v)) return v;
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) ^ rd();
}

}  // namespace

void TrainerFeed::launch(const std::shared_ptr<TrainerFeed>& self,
                         std::unique_ptr<FeedRunner> runner, std::shared_ptr<Outbox> outbox,
                         std::string identity, std::uint64_t generation, protocol::Start start,
                         std::string where) {
  TrainerFeed& s = *self;
  std::shared_ptr<Launch> previous;
  {
    std::lock_guard lock(s.mutex_);
    previous = s.current_;
  }
  std::vector<std::uint64_t> unread;  // blocks of batches the trainer will drop unread
  Metrics previous_metrics;
  if (previous) {
    previous_metrics = previous->metrics();
    std::lock_guard lock(previous->mutex);
    for (const Launch::Sent& b : previous->sent) {
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
      std::make_shared<Launch>(std::move(identity), generation, start.credits, std::move(runner));
  run->thread = std::thread(&TrainerFeed::serve, self, run, std::move(outbox), std::move(start),
                            std::move(where));
  {
    std::lock_guard lock(s.mutex_);
    s.current_ = run;
  }
  s.restarts_.fetch_add(1, std::memory_order_relaxed);
}

std::shared_ptr<Launch> TrainerFeed::halt() {
  std::shared_ptr<Launch> run = current();
  return run && run->halt() ? run : nullptr;
}

bool TrainerFeed::credit(std::uint64_t generation, std::uint64_t seq, std::uint64_t tag) {
  std::shared_ptr<Launch> run = current();
  if (!run || run->generation != generation) return false;
  std::string state;
  std::uint64_t taken = 0;
  {
    std::lock_guard lock(run->mutex);
    auto it = std::find_if(run->sent.begin(), run->sent.end(),
                           [&](const Launch::Sent& b) { return b.seq == seq; });
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

void TrainerFeed::release(const std::vector<std::uint64_t>& serials) {
  std::vector<std::shared_ptr<const void>> owners;  // let go after the lock is released
  std::lock_guard lock(mutex_);
  give_back(serials, owners);
}

ServedStream TrainerFeed::metrics() const {
  ServedStream s;
  s.rank = rank_;
  s.batches = batches_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.shared_bytes = shared_bytes_.load(std::memory_order_relaxed);
  s.restarts = restarts_.load(std::memory_order_relaxed);
  s.ignored_acks = ignored_acks_.load(std::memory_order_relaxed);
  std::shared_ptr<Launch> run;
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
  std::int64_t wait_ns = static_cast<std::int64_t>(credit_wait_ns_.load(std::memory_order_relaxed));
  // A wait still going on counts too: a trainer that stopped taking batches shows at once.
  if (const auto since = waiting_since_ns_.load(std::memory_order_relaxed); since != 0) {
    wait_ns += std::max<std::int64_t>(0, Clock::now().time_since_epoch().count() - since);
  }
  s.credit_wait_seconds = static_cast<double>(wait_ns) / 1e9;
  return s;
}

void TrainerFeed::serve(std::shared_ptr<TrainerFeed> self, std::shared_ptr<Launch> run,
                        std::shared_ptr<Outbox> outbox, protocol::Start start,
                        std::string where) noexcept {
  TrainerFeed& s = *self;
  Launch& r = *run;
  // Queues a message unless the launch was halted: after halt() returns, it sends nothing.
  auto push = [&](std::vector<zmq::message_t>& parts, std::optional<Launch::Sent> sent) {
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
        // Counted before the hand-off, so that a trainer holding the batch finds it counted.
        s.shared_bytes_.fetch_add(lent, std::memory_order_relaxed);
        s.batches_.fetch_add(1, std::memory_order_relaxed);
        s.bytes_.fetch_add(bytes, std::memory_order_relaxed);
        if (!push(parts, Launch::Sent{seq, tag, std::move(item->second), serials})) {
          s.release(serials);  // never sent
          s.shared_bytes_.fetch_sub(lent, std::memory_order_relaxed);
          s.batches_.fetch_sub(1, std::memory_order_relaxed);
          s.bytes_.fetch_sub(bytes, std::memory_order_relaxed);
          break;
        }
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
  std::unique_ptr<FeedRunner> last;
  try {
    std::lock_guard lock(r.mutex);
    r.final_metrics = r.runner->metrics();
    last = std::move(r.runner);
  } catch (...) {
  }
  last.reset();
  r.done.store(true, std::memory_order_release);
}

bool TrainerFeed::take_room(Launch& r) {
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

protocol::SharedTable TrainerFeed::lend(std::vector<wire::Frame>& frames) {
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

void TrainerFeed::give_back(const std::vector<std::uint64_t>& serials,
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

}  // namespace wds::detail
