// The data service's trainer side: a DEALER socket per producer, batches handed out through the
// Loader's own hand-out policy (detail::HandOut), with the producers as its sources.
//
// Everything runs on the consumer's thread: ZeroMQ's I/O thread receives the batches the credits
// allow into the socket's queue in the background, and the loop takes them from there.
//
// A producer on this host lends the large tensors through shared memory
// (service/shared_memory.hpp): each block is mapped once and kept until the producer says it freed
// it; a tensor holds a lease on its block, and when the last one dies the block goes back (a
// release message, sent with the next credit or heartbeat).
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "service/protocol.hpp"
#include "service/shared_memory.hpp"
#include "service/wire.hpp"
#include "service/zmq_io.hpp"
#include "wds/distributed.hpp"
#include "wds/loader.hpp"
#include "wds/service.hpp"
#include "wds/state.hpp"

namespace wds {
namespace detail {
namespace {

using protocol::Type;
using zmq_io::bytes_of;
using Clock = std::chrono::steady_clock;
constexpr std::string_view kStateTag = "service-loader-1";

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

int parse_count(const std::string& v, const char* name) {
  try {
    std::size_t used = 0;
    const long n = std::stol(v, &used);
    if (used == v.size() && n >= 0 && n < (1L << 30)) return static_cast<int>(n);
  } catch (const std::exception&) {
  }
  throw Error::invalid_argument(std::string(name) + "='" + v + "' is not a whole number");
}

// Under mpirun MPMD (`mpirun -np 1 wds serve ... : -np 3 trainer`), Open MPI numbers all
// processes together; a trainer's rank is its place among the processes of its own program.
std::optional<DistributedInfo> mpmd_rank() {
  const auto app = env("OMPI_MCA_orte_app_num");
  const auto procs = env("OMPI_APP_CTX_NUM_PROCS");
  const auto rank = env("OMPI_COMM_WORLD_RANK");
  if (!app || !procs || !rank) return std::nullopt;
  std::vector<int> counts;
  std::istringstream in(*procs);
  for (std::string item; in >> item;) counts.push_back(parse_count(item, "OMPI_APP_CTX_NUM_PROCS"));
  const int a = parse_count(*app, "OMPI_MCA_orte_app_num");
  if (counts.size() < 2 || a >= static_cast<int>(counts.size())) return std::nullopt;
  int first = 0;
  for (int i = 0; i < a; ++i) first += counts[static_cast<std::size_t>(i)];
  DistributedInfo info;
  info.rank = parse_count(*rank, "OMPI_COMM_WORLD_RANK") - first;
  info.world_size = counts[static_cast<std::size_t>(a)];
  info.source = "openmpi_mpmd";
  if (info.rank < 0 || info.rank >= info.world_size) return std::nullopt;
  return info;
}

DistributedInfo trainer_rank(const ServiceLoaderOptions& o) {
  if (o.rank || o.world_size) return detect_distributed({o.rank, o.world_size});
  if (auto m = mpmd_rank()) return *m;
  return detect_distributed();
}

std::string default_token() {
  if (auto t = env("WDS_SERVICE_TOKEN")) return *t;
  if (auto path = env("WDS_SERVICE_TOKEN_FILE"))
    return read_service_token(*path, "WDS_SERVICE_TOKEN_FILE");
  return "";
}

}  // namespace

// What arrived from a producer, waiting to be handed out.
struct Incoming {
  Type type = Type::batch;
  std::uint64_t seq = 0;
  std::uint64_t tag = 0;              // batch: what acknowledges it (protocol.hpp)
  bool shared = false;                // batch: [header, tag, state, shared table, records...]
  std::vector<zmq::message_t> parts;  // batch: [header, tag, state, record frames...]
  std::optional<protocol::ErrorReply> error;
};

// Blocks whose last tensor died, to be given back to their producers; filled from any thread.
struct Releases {
  struct Block {
    std::size_t producer;
    std::uint64_t incarnation;  // which process of that producer lent it
    std::uint64_t serial;
  };
  std::mutex mutex;
  std::vector<Block> blocks;
};

// What a tensor in shared memory holds: the mapping, and the duty to give the block back.
class Lease {
 public:
  Lease(std::shared_ptr<shm::Mapping> mapping, std::shared_ptr<Releases> releases,
        Releases::Block block) noexcept
      : mapping_(std::move(mapping)), releases_(std::move(releases)), block_(block) {}
  ~Lease() {
    try {
      std::lock_guard lock(releases_->mutex);
      releases_->blocks.push_back(block_);
    } catch (...) {
      // Not given back: the producer counts it as lent (and copies once its limit is reached).
    }
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

 private:
  std::shared_ptr<shm::Mapping> mapping_;
  std::shared_ptr<Releases> releases_;
  Releases::Block block_;
};

// A producer on this host whose memory this trainer maps.
struct SharedPeer {
  int pid = 0;
  std::array<std::byte, 16> nonce{};
  std::uint64_t incarnation = 0;
  std::unordered_map<std::uint64_t, std::shared_ptr<shm::Mapping>> blocks;  // by serial
};

struct Producer {
  std::string endpoint;
  zmq::socket_t socket;
  std::uint64_t generation = 0;
  bool started = false;     // a start was sent for the current configuration
  bool welcomed = false;    // the producer answered it
  bool registered = false;  // a start was ever sent: the producer knows this trainer
  std::deque<Incoming> pending;
  std::optional<SharedPeer> shared;  // set while the producer lends us its memory
  Clock::time_point last_heard{};
  Clock::time_point last_ping{};
  std::uint64_t bytes = 0;
};

class ServiceClient {
 public:
  explicit ServiceClient(ServiceLoaderOptions options) : options_(std::move(options)) {
    if (options_.servers.empty()) {
      if (auto s = env("WDS_SERVICE")) options_.servers = split_commas(*s);
    }
    if (options_.servers.empty()) {
      throw Error::invalid_argument(
          "ServiceLoader: no producer address (ServiceLoaderOptions::servers or "
          "WDS_SERVICE=tcp://HOST:PORT[,...])");
    }
    if (options_.credits < 1 || options_.credits > 1024) {
      throw Error::invalid_argument("ServiceLoader: credits must be in [1, 1024]");
    }
    if (options_.timeout.count() <= 0 || options_.heartbeat.count() <= 0) {
      throw Error::invalid_argument("ServiceLoader: timeout and heartbeat must be positive");
    }
    me_ = trainer_rank(options_);
    token_ = options_.token ? *options_.token : default_token();
    hand_out_.emplace(options_.servers.size(), true);
    for (const std::string& address : options_.servers) {
      Producer& p = producers_.emplace_back();
      p.endpoint = address;
      p.socket = zmq::socket_t(ctx_, zmq::socket_type::dealer);
      p.socket.set(zmq::sockopt::linger, 0);
      p.socket.set(zmq::sockopt::rcvhwm, 0);  // the credits bound what arrives
      p.socket.set(zmq::sockopt::maxmsgsize,
                   static_cast<std::int64_t>(std::min<std::size_t>(
                       options_.max_message_bytes, std::numeric_limits<std::int64_t>::max())));
      p.socket.set(zmq::sockopt::reconnect_ivl, 100);
      // Retry a producer that is not up yet every 100-200 ms, not ZeroMQ's backoff to seconds: a
      // trainer started before its producer gets its first batch as soon as the producer is up.
      p.socket.set(zmq::sockopt::reconnect_ivl_max, 200);
      try {
        p.socket.connect(address);
      } catch (const zmq::error_t& e) {
        throw Error::invalid_argument(address, "",
                                      std::string("not a producer address: ") + e.what());
      }
    }
  }

  // Says goodbye to the producers (a producer may end with its job: exit_when_done), waiting a
  // little for the message to leave.
  ~ServiceClient() {
    try {
      send_releases();  // what the loop held last; later ones stay with the producer until it
                        // sees another trainer of this rank
    } catch (const zmq::error_t&) {
    }
    for (Producer& p : producers_) {
      try {
        if (p.registered) send(p, Type::bye, 0, std::nullopt);
        p.socket.set(zmq::sockopt::linger, 200);
      } catch (const zmq::error_t&) {
      }
    }
  }

  int rank() const noexcept { return me_.rank; }
  int world_size() const noexcept { return me_.world_size; }

  void with_epoch(std::uint64_t n) {
    hand_out_->set_epoch_length(n);
    invalidate();
  }
  void set_epoch(std::uint64_t epoch) {
    epoch_ = epoch;
    for (std::size_t i = 0; i < producers_.size(); ++i) hand_out_->position(i) = {};
    invalidate();
  }

  std::string state() const {
    StateWriter out;
    out.put(kStateTag);
    out.put(static_cast<std::uint64_t>(me_.rank));
    out.put(static_cast<std::uint64_t>(me_.world_size));
    out.put(epoch_);
    out.put(pass_epoch_);
    out.put(hand_out_->state(in_pass_).encode());
    return out.str();
  }

  void restore(std::string_view text) {
    try {
      StateReader in(text);
      if (in.get_string() != kStateTag) throw std::invalid_argument("not a ServiceLoader state");
      const auto rank = in.get_u64();
      const auto world = in.get_u64();
      if (rank != static_cast<std::uint64_t>(me_.rank) ||
          world != static_cast<std::uint64_t>(me_.world_size)) {
        throw Error::invalid_argument("ServiceLoader: the state is rank " + std::to_string(rank) +
                                      " of " + std::to_string(world) + "'s, this trainer is rank " +
                                      std::to_string(me_.rank) + " of " +
                                      std::to_string(me_.world_size));
      }
      epoch_ = in.get_u64();
      pass_epoch_ = in.get_u64();
      const std::string loader = in.get_string();
      if (!in.at_end()) throw std::invalid_argument("trailing values");
      restored_in_pass_ = hand_out_->restore(LoaderState::decode(loader, producers_.size()));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error::invalid_argument(std::string("ServiceLoader: not a state of this loader: ") +
                                    e.what());
    }
    invalidate();
    restored_ = true;
  }

  Metrics metrics() const {
    Metrics m;
    m.items = items_.load(std::memory_order_relaxed);
    m.consumer_waits = waits_.load(std::memory_order_relaxed);
    m.consumer_wait_seconds = static_cast<double>(wait_ns_.load(std::memory_order_relaxed)) / 1e9;
    const auto t0 = start_ns_.load(std::memory_order_relaxed);
    if (t0) m.seconds = static_cast<double>(now_ns() - t0) / 1e9;
    SourceMetrics s;
    s.scheme = "service";
    s.bytes = bytes_.load(std::memory_order_relaxed);
    s.read_seconds = m.consumer_wait_seconds;
    m.sources.push_back(s);
    if (const auto shared = shared_bytes_.load(std::memory_order_relaxed); shared > 0) {
      SourceMetrics shm;
      shm.scheme = "service-shm";
      shm.bytes = shared;
      m.sources.push_back(shm);
    }
    return m;
  }

  void begin_pass() {
    const bool restoring = std::exchange(restored_, false);
    const bool resume = restoring && restored_in_pass_;
    if (!start_ns_.load(std::memory_order_relaxed)) {
      start_ns_.store(now_ns(), std::memory_order_relaxed);
    }
    if (!hand_out_->epoch_length()) {
      // One pass of every producer's stream: each pass starts them afresh at the next epoch,
      // unless it continues a restored one.
      if (!resume) {
        hand_out_->unfinish_all();
        for (std::size_t i = 0; i < producers_.size(); ++i) hand_out_->position(i) = {};
        pass_epoch_ = epoch_++;
        invalidate();
      }
    } else {
      if (!resume) hand_out_->new_epoch();
      if (!streams_live_) pass_epoch_ = epoch_;
    }
    if (!streams_live_) {
      for (std::size_t i = 0; i < producers_.size(); ++i) {
        if (!hand_out_->finished(i)) send_start(i);
      }
      streams_live_ = true;
    }
    in_pass_ = true;
  }

  // The next record, or nullopt at the end of the pass.
  std::optional<wire::Record> next() {
    if (!in_pass_) return std::nullopt;
    if (hand_out_->epoch_complete()) {
      in_pass_ = false;
      return std::nullopt;
    }
    for (;;) {
      const auto choice =
          hand_out_->choose([this](std::size_t i) { return !producers_[i].pending.empty(); });
      if (choice.kind == HandOut::Choice::done) {
        in_pass_ = false;
        streams_live_ = false;
        return std::nullopt;
      }
      if (choice.kind == HandOut::Choice::wait) {
        wait_for(choice.source);
        continue;
      }
      const std::size_t i = choice.source;
      Producer& p = producers_[i];
      Incoming in = std::move(p.pending.front());
      p.pending.pop_front();
      if (in.type == Type::error) {
        in_pass_ = false;
        invalidate();
        const auto& e = *in.error;
        throw Error(e.code, e.url.empty() ? p.endpoint : e.url, e.member, e.cause);
      }
      if (in.type == Type::end) {
        hand_out_->finish(i);
        continue;
      }
      hand_out_->position(i).snapshot =
          std::make_shared<const std::string>(in.parts[2].to_string());
      hand_out_->handed_out(i);
      send_releases();
      send(p, Type::credit, in.seq, protocol::encode_credit(in.tag));
      std::vector<wire::Frame> frames;
      auto keep = std::make_shared<std::vector<zmq::message_t>>(std::move(in.parts));
      for (std::size_t k = in.shared ? 4 : 3; k < keep->size(); ++k) {
        frames.push_back({bytes_of((*keep)[k]), keep});
      }
      if (in.shared) borrow(i, bytes_of((*keep)[3]), frames);
      wire::Record record = wire::decode(frames, p.endpoint);
      items_.fetch_add(1, std::memory_order_relaxed);
      return record;
    }
  }

 private:
  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
  }

  // Points the frames the table names into the producer's shared memory, mapping blocks not yet
  // mapped, and forgets the blocks the producer freed.
  void borrow(std::size_t i, std::span<const std::byte> table_frame,
              std::vector<wire::Frame>& frames) {
    Producer& p = producers_[i];
    if (!p.shared) {
      throw Error(
          ErrorCode::corrupt_data, p.endpoint, "",
          "a batch in shared memory from a producer whose memory this trainer does not map");
    }
    SharedPeer& peer = *p.shared;
    const protocol::SharedTable table = protocol::decode_shared_table(table_frame, p.endpoint);
    for (std::uint64_t serial : table.retired) peer.blocks.erase(serial);
    std::uint64_t lent = 0;
    for (const protocol::SharedFrame& f : table.frames) {
      if (f.frame >= frames.size() || !frames[f.frame].bytes.empty()) {
        throw Error::corrupt_data(p.endpoint, "",
                                  "malformed batch: shared-memory entry for frame " +
                                      std::to_string(f.frame) +
                                      ", which is not an empty record frame");
      }
      std::shared_ptr<shm::Mapping>& mapping = peer.blocks[f.serial];
      if (mapping && mapping->bytes().size() != f.block_bytes) mapping.reset();  // not the same
      if (!mapping) mapping = shm::map_block(peer.pid, f.fd, f.block_bytes, p.endpoint);
      auto lease = std::make_shared<Lease>(mapping, releases_,
                                           Releases::Block{i, peer.incarnation, f.serial});
      frames[f.frame] = {mapping->bytes().subspan(f.offset, f.length), std::move(lease)};
      lent += f.length;
    }
    shared_bytes_.fetch_add(lent, std::memory_order_relaxed);
  }

  // Gives the blocks whose tensors died back to the producers that lent them (not to a producer
  // that has restarted since: its serials name other blocks).
  void send_releases() {
    std::vector<Releases::Block> blocks;
    {
      std::lock_guard lock(releases_->mutex);
      if (releases_->blocks.empty()) return;
      blocks.swap(releases_->blocks);
    }
    for (std::size_t i = 0; i < producers_.size(); ++i) {
      Producer& p = producers_[i];
      if (!p.shared) continue;
      std::vector<std::uint64_t> serials;
      for (const Releases::Block& b : blocks) {
        if (b.producer == i && b.incarnation == p.shared->incarnation) serials.push_back(b.serial);
      }
      if (!serials.empty()) send(p, Type::release, 0, protocol::encode_release(serials));
    }
  }

  // The producers' streams no longer match what the loader should hand out: the next pass
  // starts them again (from the positions, if any), and what is in flight is dropped.
  void invalidate() {
    streams_live_ = false;
    for (Producer& p : producers_) {
      p.pending.clear();
      p.started = false;
    }
  }

  void send(Producer& p, Type type, std::uint64_t seq, std::optional<std::string> body) {
    std::vector<zmq::message_t> parts;
    parts.emplace_back(protocol::encode_header(type, p.generation, seq));
    if (body) parts.emplace_back(*body);
    zmq_io::send(p.socket, parts, /*wait=*/false);
  }

  void send_start(std::size_t i) {
    Producer& p = producers_[i];
    ++p.generation;
    p.pending.clear();
    p.started = true;
    p.registered = true;
    p.welcomed = false;
    protocol::Start m;
    m.rank = me_.rank;
    m.world_size = me_.world_size;
    m.credits = static_cast<std::uint32_t>(options_.credits);
    m.continuous = hand_out_->epoch_length().has_value();
    m.epoch = pass_epoch_;
    m.token = token_;
    if (const auto& snap = hand_out_->position(i).snapshot; snap && !snap->empty()) m.state = *snap;
    send(p, Type::start, 0, protocol::encode(m));
    p.last_heard = p.last_ping = Clock::now();
  }

  // A producer's welcome: map its memory if it offers it and this trainer can open it (the same
  // host, user and pid namespace), and tell it so.
  void accept_offer(Producer& p, const std::optional<protocol::SharedOffer>& offer) {
    if (!offer || !options_.shared_memory) {
      p.shared.reset();
      return;
    }
    const bool same = p.shared && p.shared->pid == offer->pid && p.shared->nonce == offer->nonce;
    if (!same) {
      p.shared.reset();
      if (!shm::verify(offer->pid, offer->fd, offer->nonce)) return;
      p.shared = SharedPeer{offer->pid, offer->nonce, ++incarnations_, {}};
    }
    send(p, Type::shared, 0, std::nullopt);
  }

  // Receives until producer `i` has something to hand out.
  void wait_for(std::size_t i) {
    const auto t0 = Clock::now();
    std::vector<zmq::pollitem_t> items;
    for (Producer& p : producers_) items.push_back({p.socket.handle(), 0, ZMQ_POLLIN, 0});
    while (producers_[i].pending.empty()) {
      try {
        zmq::poll(items.data(), items.size(), options_.heartbeat);
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
        continue;  // a signal: the program's handler ran; go on waiting
      }
      for (std::size_t k = 0; k < producers_.size(); ++k) {
        if (items[k].revents & ZMQ_POLLIN) receive(k);
      }
      if (!producers_[i].pending.empty()) break;
      send_releases();
      const auto now = Clock::now();
      Producer& p = producers_[i];
      // Silence is measured from when this wait began, not from before a long training step.
      const auto heard = std::max(p.last_heard, t0);
      if (now - heard >= options_.timeout) {
        throw Error(
            ErrorCode::unavailable, p.endpoint, "",
            "no answer from the producer for " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::milliseconds>(now - heard).count()) +
                " ms: it stopped or cannot be reached (the timeout: ServiceLoaderOptions::timeout, "
                "--timeout of the tool)");
      }
      if (now - p.last_ping >= options_.heartbeat) {
        send(p, Type::ping, 0, std::nullopt);
        p.last_ping = now;
      }
    }
    waits_.fetch_add(1, std::memory_order_relaxed);
    wait_ns_.fetch_add(static_cast<std::uint64_t>((Clock::now() - t0).count()),
                       std::memory_order_relaxed);
  }

  void receive(std::size_t i) {
    Producer& p = producers_[i];
    for (;;) {
      std::vector<zmq::message_t> parts;
      if (!zmq_io::receive_now(p.socket, parts)) return;
      p.last_heard = Clock::now();
      if (parts.empty()) continue;
      const protocol::Header h = protocol::decode_header(bytes_of(parts[0]), p.endpoint);
      if (h.version != protocol::kProtocolVersion) {
        throw Error::invalid_argument(p.endpoint, "",
                                      "the producer speaks protocol version " +
                                          std::to_string(h.version) + ", this trainer speaks " +
                                          std::to_string(protocol::kProtocolVersion) +
                                          ": use the same wds version on both sides");
      }
      auto frames = [&](std::size_t n) {
        if (parts.size() < n) {
          throw Error::corrupt_data(p.endpoint, "",
                                    "malformed " + std::string(protocol::type_name(h.type)) +
                                        " message: " + std::to_string(parts.size()) + " frames");
        }
      };
      switch (h.type) {
        case Type::pong:
          break;
        case Type::who:
          // The producer does not know this trainer: it restarted. Continue from the position
          // of the last batch handed out; what was in flight is sent again.
          if (p.started && streams_live_ && !hand_out_->finished(i)) send_start(i);
          break;
        case Type::welcome: {
          frames(2);
          const auto w = protocol::decode_welcome(bytes_of(parts[1]), p.endpoint);
          if (w.producers != static_cast<int>(producers_.size()) ||
              w.producer != static_cast<int>(i)) {
            throw Error::invalid_argument(p.endpoint, "",
                                          "this server is producer " + std::to_string(w.producer) +
                                              " of " + std::to_string(w.producers) +
                                              ", but it is given as producer " + std::to_string(i) +
                                              " of " + std::to_string(producers_.size()) +
                                              " (list the producers in their order, all of them)");
          }
          if (h.generation != p.generation) break;
          p.welcomed = true;
          accept_offer(p, w.shared);
          break;
        }
        case Type::error: {
          frames(2);
          auto e = protocol::decode_error(bytes_of(parts[1]), p.endpoint);
          if (h.generation == 0) {
            // About the connection, not a stream: nothing can go on.
            throw Error(e.code, p.endpoint, e.member, e.cause);
          }
          if (h.generation != p.generation) break;
          p.pending.push_back({Type::error, h.seq, 0, false, {}, std::move(e)});
          break;
        }
        case Type::batch:
        case Type::end: {
          if (h.generation != p.generation) break;  // from before the stream's last start
          const bool shared = h.flags & protocol::kShared;
          std::uint64_t tag = 0;
          if (h.type == Type::batch) {
            frames(shared ? 5 : 4);
            tag = protocol::decode_tag(bytes_of(parts[1]), p.endpoint);
            std::uint64_t n = 0;
            for (std::size_t k = shared ? 5 : 4; k < parts.size(); ++k) n += parts[k].size();
            p.bytes += n;
            bytes_.fetch_add(n, std::memory_order_relaxed);
          }
          p.pending.push_back({h.type, h.seq, tag, shared, std::move(parts), std::nullopt});
          break;
        }
        default:
          throw Error::corrupt_data(p.endpoint, "",
                                    "a " + std::string(protocol::type_name(h.type)) +
                                        " message is not one a producer sends");
      }
    }
  }

  ServiceLoaderOptions options_;
  DistributedInfo me_;
  std::string token_;
  zmq::context_t ctx_;
  std::vector<Producer> producers_;
  std::optional<HandOut> hand_out_;
  std::uint64_t epoch_ = 0;       // the epoch the next fresh start runs
  std::uint64_t pass_epoch_ = 0;  // the epoch the current streams started at
  bool in_pass_ = false;
  bool streams_live_ = false;  // the producers run streams for the current configuration
  bool restored_ = false;
  bool restored_in_pass_ = false;
  std::shared_ptr<Releases> releases_ = std::make_shared<Releases>();
  std::uint64_t incarnations_ = 0;  // SharedPeer::incarnation of the last producer mapped
  std::atomic<std::uint64_t> items_{0}, waits_{0}, wait_ns_{0}, bytes_{0}, shared_bytes_{0};
  std::atomic<std::int64_t> start_ns_{0};
};

}  // namespace detail

std::string read_service_token(const std::string& path, std::string_view what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    throw Error::not_found(path, "",
                           "cannot read the service token file (" + std::string(what) + ")");
  }
  std::stringstream s;
  s << f.rdbuf();
  std::string token = s.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) {
    throw Error::invalid_argument(
        path, "",
        "the service token file (" + std::string(what) + ") is empty: a token must not be");
  }
  return token;
}

template <class T>
ServiceLoader<T>::ServiceLoader(ServiceLoaderOptions options)
    : client_(std::make_unique<detail::ServiceClient>(std::move(options))) {}

template <class T>
ServiceLoader<T>::~ServiceLoader() = default;

template <class T>
ServiceLoader<T>& ServiceLoader<T>::with_epoch(std::uint64_t batches) {
  client_->with_epoch(batches);
  return *this;
}

template <class T>
void ServiceLoader<T>::set_epoch(std::uint64_t epoch) {
  client_->set_epoch(epoch);
}

template <class T>
std::string ServiceLoader<T>::state() const {
  return client_->state();
}

template <class T>
void ServiceLoader<T>::restore(std::string_view state) {
  client_->restore(state);
}

template <class T>
Metrics ServiceLoader<T>::metrics() const {
  return client_->metrics();
}

template <class T>
int ServiceLoader<T>::rank() const noexcept {
  return client_->rank();
}

template <class T>
int ServiceLoader<T>::world_size() const noexcept {
  return client_->world_size();
}

template <class T>
void ServiceLoader<T>::begin_pass() {
  current_.reset();
  client_->begin_pass();
}

template <class T>
bool ServiceLoader<T>::advance() {
  current_.reset();
  std::optional<wire::Record> record = client_->next();
  if (!record) return false;
  T item;
  wire::from_record(std::move(*record), item);
  current_ = std::move(item);
  return true;
}

template <class T>
std::optional<T> ServiceLoader<T>::next() {
  if (!advance()) return std::nullopt;
  return std::exchange(current_, std::nullopt);
}

template class ServiceLoader<Tuple>;
template class ServiceLoader<DecodedSample>;

}  // namespace wds
