// wds/service.hpp: the data service. A producer process (Server) runs the pipeline, decodes and
// batches; trainer processes (ServiceLoader) only pull finished batches, over ZeroMQ.
//
//   // producer: one pipeline of batches per trainer rank, each on Loader workers
//   wds::Server<wds::Tuple> server(
//       [&](const wds::StreamInfo& s) {
//         return wds::WebDataset(urls, {.distributed = {s.rank, s.world_size},
//                                       .shuffle_shards = true})
//              | wds::decode("rgb8") | wds::to_tuple("jpg cls") | wds::batched(64);
//       },
//       {.bind = "tcp://127.0.0.1:5555", .workers = 2});
//   server.run();                                        // until stop() (any thread)
//
//   // trainer (rank and world size from torchrun, MPI, SLURM, ... as elsewhere in wds)
//   wds::ServiceLoader<wds::Tuple> loader({.servers = {"tcp://127.0.0.1:5555"}});
//   loader.with_epoch(1000);                             // batches per rank per epoch
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (wds::Tuple& batch : loader) train(batch);
//
// What a trainer of rank r receives is what rank r would compute in-process: the server builds
// rank r's pipeline (its node split r of world_size) and runs it on a Loader with `workers`
// ordered workers, one stream per rank. So every batch goes to exactly one rank, every rank gets
// exactly with_epoch(n) batches per epoch, and the assignment is the same on every run with the
// same seed. With M producers (several servers), producer p runs each rank's workers as workers
// p*workers ... (p+1)*workers-1 of M*workers, and the trainer takes batches from the producers
// round-robin, in a fixed order, as a Loader takes them from its workers (the same hand-out code).
//
// Flow control: a trainer grants each producer `credits` batches in flight and one more for each
// batch it takes, which it proves by echoing the batch's random tag; a producer sends only against
// credits, so a trainer holds at most prefetch * workers + credits batches of the producer's
// memory whatever it sends, and a slow one never slows another rank. A stream waiting on a
// stalled source does not hold up the producer either: a restart or goodbye of its trainer, or
// stop(), abandons it (its thread finishes on its own, owning its Loader) instead of waiting.
//
// Resume: every batch carries its stream's position, so ServiceLoader::state() is exact and local
// (no round trip). A restarted trainer that restore()s it continues where the state was taken,
// nothing lost or repeated; so does a trainer whose producer died and came back within `timeout`
// (it presents its position again). A producer also writes the positions its trainers have
// acknowledged to ServerOptions::state_file (every save_every batches, on save_state() and when it
// stops); a producer started with restore_file gives them to trainers that come without a state.
//
// Same host: a trainer that can open the producer's memory files (same host, user and pid
// namespace; checked, not assumed) gets the large tensors of its batches through shared memory,
// so neither side copies them through the kernel; a trainer elsewhere gets them over the socket.
//
// Security: a server binds to loopback (tcp://127.0.0.1:*) unless told otherwise; bound to any
// other TCP address it requires a token, and a trainer without it is refused. Messages to the
// server are capped (max_message_bytes); malformed, oversized, wrong-version or unauthenticated
// ones get an error reply and the server goes on serving the others.
//
// Thread safety: Server::run() on one thread; stop(), save_state(), endpoint() and metrics() from
// any. A ServiceLoader is used from one thread, except metrics(), which any thread may call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wds/loader.hpp"
#include "wds/metrics.hpp"
#include "wds/pipeline.hpp"
#include "wds/value.hpp"

namespace wds {

// The protocol version this build speaks; a peer speaking another is refused with an error.
inline constexpr std::uint16_t kServiceProtocolVersion = 3;

// Which stream a server builds a pipeline for: a trainer rank of a job, served by producer
// `producer` of `producers`.
struct StreamInfo {
  int rank = 0;
  int world_size = 1;
  int producer = 0;
  int producers = 1;
};

struct ServerOptions {
  // A ZeroMQ endpoint: tcp://HOST:PORT (PORT * picks a free one; see endpoint()) or ipc://PATH.
  std::string bind = "tcp://127.0.0.1:*";
  int workers = 1;           // Loader workers per trainer rank
  std::size_t prefetch = 2;  // finished batches kept per worker
  // Streams (trainer ranks) served at once, each a thread and its Loader's workers; a start
  // beyond is refused with an error saying so. A stream halted while its source stalls counts
  // until the source answers.
  std::size_t max_streams = 4096;
  int producer = 0;  // this server is producer `producer` of `producers`
  int producers = 1;
  // Trainers must present it. Required (non-empty) when bind is TCP on an address other than
  // loopback; compared in constant time.
  std::string token;
  std::size_t max_message_bytes = std::size_t{1} << 20;  // from a trainer (they are small)
  std::string state_file;        // where to write the acknowledged positions ("" = nowhere)
  std::uint64_t save_every = 0;  // batches acknowledged between writes (0 = only on demand/stop)
  std::string restore_file;      // positions for trainers that come without a state
  // run() returns once every rank of the job has registered and every trainer has left (a
  // ServiceLoader says goodbye when it is destroyed): for launches where the producer should end
  // with the job (mpirun MPMD).
  bool exit_when_done = false;
  // Trainers on this host whose user may open this process's files get the batches through
  // shared memory instead of the socket (no copy through the kernel on either side): a batch's
  // tensors of 64 KiB or more are allocated in memory files the trainer maps, and lent to it
  // until its last use of them. At most this many bytes are lent to one trainer at a time
  // (beyond, batches are copied); 0: never share (trainers elsewhere are always sent copies).
  std::size_t shared_memory_bytes = std::size_t{1} << 30;
  // For Tuple batches: the name of each element (for example {"jpg", "cls", "__key__"}), sent
  // with every batch so that a ServiceLoader<DecodedSample> sees named fields.
  std::vector<std::string> names;
  // Called on the serving thread for each event worth a line (a trainer joined, a refused
  // message); default: nothing.
  std::function<void(const std::string&)> log;
};

// Per trainer rank, as seen by the producer.
struct ServedStream {
  int rank = 0;
  std::uint64_t batches = 0;       // sent
  std::uint64_t bytes = 0;         // of those, tensor and byte payloads
  std::uint64_t shared_bytes = 0;  // of those, lent through shared memory instead of copied
  std::uint64_t lent_bytes = 0;    // shared memory the trainer holds now (blocks not given back)
  std::uint64_t acknowledged = 0;  // batches the trainer took
  std::uint64_t in_flight = 0;     // sent and not yet taken (at most the trainer's credits)
  std::uint64_t ignored_acks = 0;  // acknowledgements naming no batch in flight (forged, stale)
  std::uint64_t restarts = 0;      // (re)starts of the stream: passes, set_epoch, restores
  double credit_wait_seconds = 0;  // a batch was ready but the trainer had no credit left
  Metrics loader;                  // the stream's Loader (decode time, worker waits, ...)
};

struct ServerMetrics {
  std::vector<ServedStream> streams;  // by rank
  std::uint64_t refused = 0;          // messages answered with an error
  double seconds = 0;                 // since the server started
};

namespace detail {
class ServerCore;
class ServiceClient;
}  // namespace detail

// T: Tuple or DecodedSample (a batch of samples as batched() makes it).
template <class T>
class Server {
 public:
  using MakePipeline = std::function<Pipeline<T>(const StreamInfo&)>;
  // Binds at once (endpoint() is then known); throws invalid_argument for bad options, a
  // non-loopback bind without a token, or an address that cannot be bound.
  Server(MakePipeline make_pipeline, ServerOptions options = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound endpoint, with the port the system chose for "*".
  std::string endpoint() const;
  // Serves until stop(); then writes the state file (if any) and returns. Rethrows nothing from
  // a pipeline: a stream's error goes to its trainer.
  void run();
  // Makes run() return soon; safe from any thread and from a signal handler. run() does not
  // wait for a stream stuck in its source, and ~Server waits for one at most 2 s: it is then
  // abandoned, and its thread, which owns its Loader and pipeline, ends on its own when the
  // source answers.
  void stop() noexcept;
  // Asks run() to write the state file now (safe from a signal handler).
  void save_state() noexcept;
  ServerMetrics metrics() const;

 private:
  std::unique_ptr<detail::ServerCore> core_;
};

struct ServiceLoaderOptions {
  // Producer endpoints, in the order batches are merged; default: WDS_SERVICE (comma-separated).
  std::vector<std::string> servers;
  // Default: the launcher's variables (wds/distributed.hpp); under mpirun MPMD
  // (mpirun -np 1 wds serve ... : -np 3 trainer) the rank within this program's processes.
  std::optional<int> rank;
  std::optional<int> world_size;
  // Batches in flight per producer: enough to hide a large batch's round trip over TCP (the
  // figures are in bench/README.md, "The data service"), at that many batches of memory each side.
  std::size_t credits = 4;
  // A producer that sends nothing (not even an answer to a heartbeat) for this long is gone: an
  // unavailable error naming it. A producer that comes back sooner is asked to continue.
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds heartbeat{500};
  // Default: WDS_SERVICE_TOKEN, else the contents of the file WDS_SERVICE_TOKEN_FILE names.
  std::optional<std::string> token;
  std::size_t max_message_bytes = std::size_t{4} << 30;  // one frame from a producer
  // Accept a producer's offer of shared memory (ServerOptions::shared_memory_bytes) when it runs
  // on this host: its batches then arrive without a copy, and their tensors point into memory
  // the producer lends until they are destroyed (writing into them is fine).
  bool shared_memory = true;
};

// A loader whose items come from producers: the Loader's interface (range-for, next(),
// with_epoch, set_epoch, state/restore, metrics). T: Tuple or DecodedSample.
template <class T>
class ServiceLoader {
 public:
  explicit ServiceLoader(ServiceLoaderOptions options = {});
  ~ServiceLoader();
  ServiceLoader(const ServiceLoader&) = delete;
  ServiceLoader& operator=(const ServiceLoader&) = delete;

  // Batches per pass, from all producers together (per rank: every rank gets the same count).
  ServiceLoader& with_epoch(std::uint64_t batches);
  // The epoch the producers' pipelines run next (restarting their streams there).
  void set_epoch(std::uint64_t epoch);

  // Where this trainer is: exact as of the batches handed out. restore() on a loader of the same
  // rank, world size and producers continues from there.
  std::string state() const;
  void restore(std::string_view state);

  // items, consumer_waits/_seconds (waiting for producers), bytes received (source "service";
  // "service-shm" for those lent through shared memory).
  Metrics metrics() const;
  int rank() const noexcept;
  int world_size() const noexcept;

  using iterator = detail::PassIterator<ServiceLoader, T>;
  friend iterator;
  iterator begin() {
    begin_pass();
    return advance() ? iterator(this) : iterator();
  }
  iterator end() { return iterator(); }
  // Pull interface: begin_pass(), then next() until nullopt.
  void begin_pass();
  std::optional<T> next();

 private:
  bool advance();
  std::unique_ptr<detail::ServiceClient> client_;
  std::optional<T> current_;
};

// A shared secret kept in a file (ServerOptions::token, ServiceLoaderOptions::token): the file's
// contents without trailing newlines. Throws not_found naming the file if it cannot be read,
// invalid_argument if it holds no token; `what` names the setting in the message.
std::string read_service_token(const std::string& path, std::string_view what = "token file");

extern template class Server<Tuple>;
extern template class Server<DecodedSample>;
extern template class ServiceLoader<Tuple>;
extern template class ServiceLoader<DecodedSample>;

}  // namespace wds
