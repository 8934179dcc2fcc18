// The data service with real producers and trainers on loopback sockets, in one process: what a
// data-parallel job relies on (every batch once, equal counts, the same assignment on a rerun,
// the same batches as in-process loading), restarts of either side, a slow trainer, and hostile
// peers.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "service/protocol.hpp"
#include "tests/support/env.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/backend.hpp"
#include "wds/decode.hpp"
#include "wds/loader.hpp"
#include "wds/service.hpp"
#include "wds/source.hpp"
#include "wds/state.hpp"
#include "wds/transforms.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Keys = std::vector<std::string>;
constexpr int kShards = 6;
constexpr int kPerShard = 8;
constexpr std::size_t kBatch = 4;

// A server running on its own thread for the life of the object.
class Running {
 public:
  Running(Server<Tuple>::MakePipeline make, ServerOptions options)
      : server_(std::make_unique<Server<Tuple>>(std::move(make), std::move(options))),
        thread_([this] { server_->run(); }) {}
  ~Running() { halt(); }
  // Stops serving (as a producer that goes away) and joins.
  void halt() {
    if (!server_) return;
    server_->stop();
    thread_.join();
    server_.reset();
  }
  Server<Tuple>& operator*() { return *server_; }
  Server<Tuple>* operator->() { return server_.get(); }

 private:
  std::unique_ptr<Server<Tuple>> server_;
  std::thread thread_;
};

class Service : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int s = 0; s < kShards; ++s) {
      std::string tar = test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < kPerShard; ++i) {
          w.write(test::make_sample("s" + std::to_string(s) + "_" + std::to_string(i),
                                    {{"cls", std::to_string(i)}}));
        }
      });
      urls_.push_back(dir_.write("p" + std::to_string(s) + ".tar", tar));
    }
  }

  // Rank r's pipeline of batches of (key, cls), with shuffles on.
  Pipeline<Tuple> batches(int rank, int world) const {
    WebDatasetOptions o;
    o.seed = 5;
    o.shuffle_shards = true;
    o.distributed.rank = rank;
    o.distributed.world_size = world;
    return WebDataset(urls_, o).shuffle(10, 3) | decode() | to_tuple("__key__ cls") |
           batched(kBatch);
  }
  Server<Tuple>::MakePipeline factory() const {
    return [this](const StreamInfo& s) { return batches(s.rank, s.world_size); };
  }
  std::string ipc(const std::string& name) const { return "ipc://" + dir_.file(name); }

  static ServiceLoaderOptions trainer(std::vector<std::string> servers, int rank, int world) {
    ServiceLoaderOptions o;
    o.servers = std::move(servers);
    o.rank = rank;
    o.world_size = world;
    o.timeout = std::chrono::milliseconds(20000);
    o.heartbeat = std::chrono::milliseconds(100);
    return o;
  }

  static Keys keys_of(const Tuple& batch) {
    Keys out;
    for (const Value& k : batch.at(0).get<Tuple>()) out.push_back(k.get<std::string>());
    return out;
  }
  // Every key of `passes` passes, one vector per pass.
  template <class L>
  static std::vector<Keys> take_passes(L& loader, int passes) {
    std::vector<Keys> out;
    for (int p = 0; p < passes; ++p) {
      Keys pass;
      for (Tuple& b : loader) {
        Keys k = keys_of(b);
        pass.insert(pass.end(), k.begin(), k.end());
      }
      out.push_back(std::move(pass));
    }
    return out;
  }

  static Keys all_keys() {
    Keys out;
    for (int s = 0; s < kShards; ++s) {
      for (int i = 0; i < kPerShard; ++i)
        out.push_back("s" + std::to_string(s) + "_" + std::to_string(i));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  test::TempDir dir_;
  std::vector<std::string> urls_;
};

// Three trainers of one job, three epochs of with_epoch batches each: per rank what in-process
// loading of that rank gives, so every batch once per epoch across the ranks, equal counts, and
// the same on a rerun.
TEST_F(Service, ThreeTrainersGetEveryBatchOncePerEpochInEqualCountsAndTheSameOnARerun) {
  constexpr int kWorld = 3;
  const std::uint64_t per_rank = kShards / kWorld * kPerShard / kBatch;  // 4 batches
  auto run_job = [&] {
    ServerOptions so;
    so.bind = "tcp://127.0.0.1:*";
    so.workers = 2;
    Running server(factory(), so);
    std::vector<std::vector<Keys>> got(kWorld);
    std::vector<std::thread> trainers;
    for (int r = 0; r < kWorld; ++r) {
      trainers.emplace_back([&, r] {
        ServiceLoader<Tuple> loader(trainer({server->endpoint()}, r, kWorld));
        loader.with_epoch(per_rank);
        got[static_cast<std::size_t>(r)] = take_passes(loader, 3);
      });
    }
    for (auto& t : trainers) t.join();
    return got;
  };
  const auto first = run_job();
  for (int epoch = 0; epoch < 3; ++epoch) {
    Keys all;
    for (int r = 0; r < kWorld; ++r) {
      const Keys& k = first[static_cast<std::size_t>(r)][static_cast<std::size_t>(epoch)];
      EXPECT_EQ(k.size(), per_rank * kBatch) << "rank " << r << " epoch " << epoch;
      all.insert(all.end(), k.begin(), k.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, all_keys()) << "epoch " << epoch;
  }
  EXPECT_EQ(run_job(), first);

  // The same as each rank loading in-process with the same workers, ordered.
  for (int r = 0; r < kWorld; ++r) {
    LoaderOptions<Tuple> lo;
    lo.workers = 2;
    lo.ordered = true;
    lo.epoch_length = per_rank;
    Loader<Tuple> local(batches(r, kWorld), lo);
    EXPECT_EQ(take_passes(local, 3), first[static_cast<std::size_t>(r)]) << "rank " << r;
  }
}

// Two producers split each rank's data as loader workers do; two trainers merge them.
TEST_F(Service, TwoProducersAndTwoTrainersCoverTheDatasetOncePerEpoch) {
  std::vector<std::unique_ptr<Running>> producers;
  std::vector<std::string> endpoints;
  for (int p = 0; p < 2; ++p) {
    ServerOptions so;
    so.bind = ipc("producer" + std::to_string(p));
    so.producer = p;
    so.producers = 2;
    producers.push_back(std::make_unique<Running>(factory(), so));
    endpoints.push_back((**producers.back()).endpoint());
  }
  std::vector<std::vector<Keys>> got(2);
  std::vector<std::thread> trainers;
  for (int r = 0; r < 2; ++r) {
    trainers.emplace_back([&, r] {
      ServiceLoader<Tuple> loader(trainer(endpoints, r, 2));
      got[static_cast<std::size_t>(r)] = take_passes(loader, 2);
    });
  }
  for (auto& t : trainers) t.join();
  for (int epoch = 0; epoch < 2; ++epoch) {
    Keys all = got[0][static_cast<std::size_t>(epoch)];
    all.insert(all.end(), got[1][static_cast<std::size_t>(epoch)].begin(),
               got[1][static_cast<std::size_t>(epoch)].end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, all_keys()) << "epoch " << epoch;
  }
  EXPECT_NE(got[0][0], got[0][1]) << "each epoch has its own order";
}

// A trainer process dies after saving its state at batch k (and taking a few more, lost with
// it); its successor restores the state: together they receive exactly what one uninterrupted
// trainer receives.
class ServiceRestart : public Service, public ::testing::WithParamInterface<bool> {};

TEST_P(ServiceRestart, TrainerRestartedFromItsStateLosesAndRepeatsNothing) {
  const bool with_epoch = GetParam();
  ServerOptions so;
  so.bind = ipc("s");
  Running server(factory(), so);
  const auto options = trainer({server->endpoint()}, 0, 1);
  std::vector<Keys> reference;
  {
    ServiceLoader<Tuple> loader(options);
    if (with_epoch) loader.with_epoch(5);
    // with_epoch(5): 15 of the 12 batches, the data wraps into its next epoch; else 3 epochs
    reference = take_passes(loader, 3);
  }
  Keys flat;
  for (const Keys& k : reference) flat.insert(flat.end(), k.begin(), k.end());
  for (std::size_t cut : {0u, 3u, 5u, 7u, 10u, 14u}) {
    std::string state;
    Keys got;
    {
      ServiceLoader<Tuple> first(options);
      if (with_epoch) first.with_epoch(5);
      std::size_t taken = 0;
      for (int pass = 0; pass < 3 && taken < cut; ++pass) {
        for (Tuple& b : first) {
          Keys k = keys_of(b);
          got.insert(got.end(), k.begin(), k.end());
          if (++taken == cut) break;
        }
      }
      state = first.state();
      // Taken after the checkpoint and lost with the process.
      first.begin_pass();
      first.next();
    }
    ServiceLoader<Tuple> second(options);
    if (with_epoch) second.with_epoch(5);
    second.restore(state);
    for (int pass = 0; pass < 4 && got.size() < flat.size(); ++pass) {
      for (Tuple& b : second) {
        Keys k = keys_of(b);
        got.insert(got.end(), k.begin(), k.end());
      }
    }
    EXPECT_EQ(got, flat) << "cut after " << cut << " batches";
  }
}
INSTANTIATE_TEST_SUITE_P(WithAndWithoutEpochs, ServiceRestart, ::testing::Bool());

// The producer goes away: a waiting trainer gets a clear error within its timeout.
TEST_F(Service, TrainerFailsClearlyWhenItsProducerIsGone) {
  ServerOptions so;
  so.bind = ipc("s");
  auto server = std::make_unique<Running>(factory(), so);
  auto options = trainer({(**server).endpoint()}, 0, 1);
  options.timeout = std::chrono::milliseconds(600);
  ServiceLoader<Tuple> loader(options);
  loader.begin_pass();
  ASSERT_TRUE(loader.next());
  server->halt();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    while (loader.next()) {
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable);
    EXPECT_NE(std::string(e.what()).find("no answer from the producer"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(options.servers[0]), std::string::npos) << e.what();
  }
  // Not a hang (the 600 ms are what the error waits for; this only guards against forever).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

// The producer is restarted while its trainer waits: the trainer presents its position and
// continues, nothing lost or repeated. A trainer that comes back without a state continues from
// the producer's state file instead.
TEST_F(Service, ProducerRestartedMidEpochLetsTrainersContinueExactly) {
  const auto options = trainer({ipc("s")}, 0, 1);
  Keys flat;
  {
    ServerOptions so;
    so.bind = ipc("s");
    Running server(factory(), so);
    ServiceLoader<Tuple> loader(options);
    for (const Keys& k : take_passes(loader, 1)) flat.insert(flat.end(), k.begin(), k.end());
  }
  ServerOptions so;
  so.bind = ipc("s");
  so.state_file = dir_.file("producer.state");
  so.save_every = 1;
  Keys got;
  {
    ServiceLoader<Tuple> loader(options);
    loader.begin_pass();
    {
      Running server(factory(), so);
      for (int i = 0; i < 4; ++i) {
        std::optional<Tuple> b = loader.next();
        ASSERT_TRUE(b);
        Keys k = keys_of(*b);
        got.insert(got.end(), k.begin(), k.end());
      }
    }  // the producer stops; batches in flight are lost with it
    Running again(factory(), so);
    while (std::optional<Tuple> b = loader.next()) {
      Keys k = keys_of(*b);
      got.insert(got.end(), k.begin(), k.end());
    }
  }
  EXPECT_EQ(got, flat);

  // A new trainer without a state, on a producer restored from the file of one that served 5
  // batches to the previous trainer: the pass continues after those 5.
  got.clear();
  {
    Running server(factory(), so);
    ServiceLoader<Tuple> loader(options);
    loader.begin_pass();
    for (int i = 0; i < 5; ++i) {
      std::optional<Tuple> b = loader.next();
      ASSERT_TRUE(b);
      Keys k = keys_of(*b);
      got.insert(got.end(), k.begin(), k.end());
    }
    // The file holds what the producer has heard acknowledged: wait for the fifth.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (server->metrics().streams.at(0).acknowledged < 5 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ServerOptions restored = so;
  restored.restore_file = so.state_file;
  Running server(factory(), restored);
  ServiceLoader<Tuple> fresh(options);
  for (Tuple& b : fresh) {
    Keys k = keys_of(b);
    got.insert(got.end(), k.begin(), k.end());
  }
  EXPECT_EQ(got, flat);
}

// One trainer stops taking batches: the producer holds at most its credits for it (plus the
// loader's prefetch), the other trainer finishes its epochs, and the wait shows in the metrics.
TEST_F(Service, SlowTrainerHoldsOnlyItsCreditsAndDoesNotSlowTheOthers) {
  ServerOptions so;
  so.bind = ipc("s");
  Running server(factory(), so);
  auto slow_options = trainer({server->endpoint()}, 1, 2);
  slow_options.credits = 2;
  ServiceLoader<Tuple> slow(slow_options);
  slow.with_epoch(6);
  slow.begin_pass();
  ASSERT_TRUE(slow.next());
  {
    ServiceLoader<Tuple> fast(trainer({server->endpoint()}, 0, 2));
    fast.with_epoch(6);
    const auto passes = take_passes(fast, 4);  // 24 batches: its data four times over
    for (const Keys& k : passes) EXPECT_EQ(k.size(), 6 * kBatch);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const ServerMetrics m = server->metrics();
  ASSERT_EQ(m.streams.size(), 2u);
  const ServedStream& s = m.streams[1];
  EXPECT_EQ(s.rank, 1);
  EXPECT_LE(s.batches, 1 + slow_options.credits) << "sent beyond the credits";
  EXPECT_GT(s.credit_wait_seconds, 0.0);
  EXPECT_GE(m.streams[0].batches, 24u);
  // and what its credits allowed ahead
  EXPECT_LE(m.streams[0].batches, 24u + ServiceLoaderOptions{}.credits);
  // The slow trainer then goes on as if nothing happened.
  std::size_t more = 0;
  while (slow.next()) ++more;
  EXPECT_EQ(more, 5u);
}

// A peer that is not a trainer of this job: garbage, a truncated header, an oversized message,
// another protocol version, a wrong token. Each gets an error naming what was wrong, and the
// server goes on serving a real trainer.
TEST_F(Service, HostilePeersAreRefusedAndTheServerServesOn) {
  ServerOptions so;
  so.bind = ipc("s");
  so.token = "s3cret";
  so.max_message_bytes = 4096;
  Running server(factory(), so);

  zmq::context_t ctx;
  zmq::socket_t peer(ctx, zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.set(zmq::sockopt::rcvtimeo, 10000);
  peer.connect(server->endpoint());
  auto ask = [&](std::vector<std::string> frames) {
    std::vector<zmq::message_t> parts;
    for (const auto& f : frames) parts.emplace_back(f.data(), f.size());
    zmq::send_multipart(peer, parts);
    std::vector<zmq::message_t> answer;
    EXPECT_TRUE(zmq::recv_multipart(peer, std::back_inserter(answer))) << "no answer";
    if (answer.size() != 2) return std::string("(no error reply)");
    const auto h = protocol::decode_header(
        {static_cast<const std::byte*>(answer[0].data()), answer[0].size()}, "test");
    EXPECT_EQ(h.type, protocol::Type::error);
    return protocol::decode_error(
               {static_cast<const std::byte*>(answer[1].data()), answer[1].size()}, "test")
        .cause;
  };
  auto start_body = [](const std::string& token) {
    protocol::Start m;
    m.token = token;
    return protocol::encode(m);
  };
  const std::string header = protocol::encode_header(protocol::Type::start, 1);
  EXPECT_NE(ask({"hello, world"}).find("header"), std::string::npos);
  EXPECT_NE(ask({header.substr(0, 10)}).find("header of 10 bytes"), std::string::npos);
  EXPECT_NE(ask({header, std::string(8000, 'x')}).find("over this server's limit of 4096"),
            std::string::npos);
  std::string other_version = header;
  other_version[4] = 9;
  EXPECT_NE(ask({other_version, start_body("s3cret")}).find("protocol version 9"),
            std::string::npos);
  EXPECT_NE(ask({header, start_body("guess")}).find("token does not match"), std::string::npos);
  EXPECT_NE(ask({header, start_body("s3cret").substr(0, 7)}).find("malformed start"),
            std::string::npos);
  EXPECT_NE(
      ask({protocol::encode_header(protocol::Type::batch, 1)}).find("not one a trainer sends"),
      std::string::npos);
  EXPECT_GE(server->metrics().refused, 7u);

  // Without the token: refused, as an error for the trainer.
  try {
    ServiceLoader<Tuple> intruder(trainer({server->endpoint()}, 0, 1));
    intruder.begin_pass();
    intruder.next();
    FAIL() << "served without the token";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::permission_denied) << e.what();
  }
  auto options = trainer({server->endpoint()}, 0, 1);
  options.token = "s3cret";
  ServiceLoader<Tuple> loader(options);
  Keys all = take_passes(loader, 1)[0];
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, all_keys());
}

// A shard that fails to read reaches the trainer as the error, naming the shard.
TEST_F(Service, BrokenShardReachesTheTrainerAsAnErrorNamingIt) {
  const std::string broken = dir_.write("broken.tar", std::string(1536, 'x'));
  ServerOptions so;
  so.bind = ipc("s");
  Running server(
      [&](const StreamInfo&) {
        return WebDataset(std::vector<std::string>{broken}) | decode() | to_tuple("__key__ cls") |
               batched(kBatch);
      },
      so);
  ServiceLoader<Tuple> loader(trainer({server->endpoint()}, 0, 1));
  try {
    for (Tuple& b : loader) (void)b;
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.tar"), std::string::npos) << e.what();
  }
}

// With exit_when_done the producer ends with its job: once every rank came and left.
TEST_F(Service, ProducerExitsWhenEveryTrainerOfTheJobHasLeft) {
  ServerOptions so;
  so.bind = ipc("s");
  so.exit_when_done = true;
  Server<Tuple> server(factory(), so);
  auto done = std::async(std::launch::async, [&] { server.run(); });
  for (int r = 0; r < 2; ++r) {
    ServiceLoader<Tuple> loader(trainer({server.endpoint()}, r, 2));
    EXPECT_EQ(take_passes(loader, 1)[0].size(), kShards / 2 * kPerShard);
    if (r == 0) {
      // One rank left, the other has not come yet: the producer goes on.
      EXPECT_EQ(done.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
    }
  }
  const auto status = done.wait_for(std::chrono::seconds(30));
  if (status != std::future_status::ready) server.stop();
  EXPECT_EQ(status, std::future_status::ready) << "the producer did not exit";
}

// Under mpirun MPMD (`mpirun -np 1 wds serve ... : -np 3 trainer`) Open MPI numbers the server
// and the trainers together; a trainer's rank is its place among its own program's processes.
TEST(ServiceRank, UnderMpirunMpmdATrainerCountsOnlyItsOwnProgramsProcesses) {
  constexpr const char* kVars[] = {"RANK",
                                   "WORLD_SIZE",
                                   "OMPI_COMM_WORLD_RANK",
                                   "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_MCA_orte_app_num",
                                   "OMPI_APP_CTX_NUM_PROCS",
                                   "PMI_RANK",
                                   "PMI_SIZE",
                                   "SLURM_PROCID",
                                   "SLURM_NTASKS",
                                   "WDS_SERVICE"};
  test::ClearedEnv clean(kVars);
  ::setenv("WDS_SERVICE", "tcp://127.0.0.1:1,tcp://127.0.0.1:2", 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  ::setenv("OMPI_MCA_orte_app_num", "1", 1);
  ::setenv("OMPI_APP_CTX_NUM_PROCS", "1 3", 1);
  ServiceLoader<Tuple> last;
  EXPECT_EQ(last.rank(), 2);
  EXPECT_EQ(last.world_size(), 3);
  // One program (plain mpirun -np 4): the world's numbers.
  ::setenv("OMPI_MCA_orte_app_num", "0", 1);
  ::setenv("OMPI_APP_CTX_NUM_PROCS", "4", 1);
  ServiceLoader<Tuple> plain;
  EXPECT_EQ(plain.rank(), 3);
  EXPECT_EQ(plain.world_size(), 4);
  // Explicit options win.
  ServiceLoaderOptions o;
  o.rank = 0;
  o.world_size = 2;
  EXPECT_EQ(ServiceLoader<Tuple>(o).world_size(), 2);
}

// A program with its own signal handlers: a signal that interrupts the producer's or the
// trainer's wait is not an error.
TEST_F(Service, SignalsWithHandlersInterruptNeitherSide) {
  struct sigaction action {};
  action.sa_handler = [](int) {};
  struct sigaction old {};
  ASSERT_EQ(::sigaction(SIGUSR2, &action, &old), 0);
  ServerOptions so;
  so.bind = ipc("s");
  Server<Tuple> server(factory(), so);
  std::exception_ptr failed;
  std::thread serving([&] {
    try {
      server.run();
    } catch (...) {
      failed = std::current_exception();
    }
  });
  const pthread_t serving_thread = serving.native_handle();
  const pthread_t trainer_thread = ::pthread_self();
  std::atomic<bool> done{false};
  std::thread signaller([&] {
    while (!done.load()) {
      ::pthread_kill(serving_thread, SIGUSR2);
      ::pthread_kill(trainer_thread, SIGUSR2);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::size_t keys = 0;
  std::string trainer_failed;  // an error here must fail the test, not end it with joinable threads
  try {
    auto options = trainer({server.endpoint()}, 0, 1);
    ServiceLoader<Tuple> loader(options);
    for (int pass = 0; pass < 3; ++pass) keys += take_passes(loader, 1)[0].size();
    // The signals interrupt the waits (the producer's poll, the trainer's); not ZeroMQ's own
    // teardown, which retries by itself.
    done = true;
    signaller.join();
  } catch (const std::exception& e) {
    trainer_failed = e.what();
  }
  done = true;
  if (signaller.joinable()) signaller.join();
  server.stop();
  serving.join();
  ::sigaction(SIGUSR2, &old, nullptr);
  EXPECT_EQ(trainer_failed, "") << "the trainer threw";
  EXPECT_FALSE(failed) << "run() threw";
  EXPECT_EQ(keys, 3u * kShards * kPerShard);
}

// Trainers of two different jobs (world sizes) on one server, and a state of another rank.
TEST_F(Service, MismatchedWorldSizeAndForeignStateAreRefused) {
  ServerOptions so;
  so.bind = ipc("s");
  Running server(factory(), so);
  ServiceLoader<Tuple> a(trainer({server->endpoint()}, 0, 2));
  a.begin_pass();
  ASSERT_TRUE(a.next());
  try {
    ServiceLoader<Tuple> b(trainer({server->endpoint()}, 0, 3));
    b.begin_pass();
    b.next();
    FAIL() << "a trainer of another world size was served";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("world size 3"), std::string::npos) << e.what();
  }
  ServiceLoader<Tuple> c(trainer({server->endpoint()}, 1, 2));
  EXPECT_THROW(c.restore(a.state()), Error);
}

// A trainer speaking the protocol by hand: a raw DEALER socket.
class RawTrainer {
 public:
  RawTrainer(zmq::context_t& ctx, const std::string& endpoint)
      : socket_(ctx, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  void start(int rank, int world, std::uint32_t credits, std::uint64_t generation = 1) {
    protocol::Start m;
    m.rank = rank;
    m.world_size = world;
    m.credits = credits;
    m.continuous = true;
    send({protocol::encode_header(protocol::Type::start, generation), protocol::encode(m)});
  }
  void send(const std::vector<std::string>& frames) {
    std::vector<zmq::message_t> parts;
    for (const auto& f : frames) parts.emplace_back(f.data(), f.size());
    zmq::send_multipart(socket_, parts);
  }
  // The next message's type (and, for an error, its cause); nullopt if none came in `wait`.
  std::optional<std::pair<protocol::Type, std::string>> receive(std::chrono::milliseconds wait) {
    socket_.set(zmq::sockopt::rcvtimeo, static_cast<int>(wait.count()));
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(socket_, std::back_inserter(parts))) return std::nullopt;
    const auto h = protocol::decode_header(
        {static_cast<const std::byte*>(parts.at(0).data()), parts[0].size()}, "test");
    std::string cause;
    if (h.type == protocol::Type::error) {
      cause = protocol::decode_error(
                  {static_cast<const std::byte*>(parts.at(1).data()), parts[1].size()}, "test")
                  .cause;
    }
    return std::pair{h.type, cause};
  }
  // Messages until a batch or an error (welcome and pongs skipped); nullopt if none in `wait`.
  std::optional<std::pair<protocol::Type, std::string>> first_batch(
      std::chrono::milliseconds wait) {
    for (;;) {
      auto m = receive(wait);
      if (!m || m->first == protocol::Type::batch || m->first == protocol::Type::error) return m;
    }
  }

 private:
  zmq::socket_t socket_;
};

// Waits (up to a generous bound, for a loaded machine) until `done()`; false if it never was.
template <class F>
bool eventually(F done, std::chrono::seconds bound = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// More ranks than a ZeroMQ context has sockets (1,023): every one is served (a stream is not a
// socket), each stream alive and waiting for credit at once; and a start beyond max_streams is
// refused with an error that says so, not fatal.
TEST_F(Service, MoreRanksThanAContextHasSocketsAreServedAndBeyondTheLimitRefused) {
  constexpr int kRanks = 1100;
  ServerOptions so;
  so.bind = ipc("many");
  so.shared_memory_bytes = 0;
  // Every rank gets the whole (small) dataset: each stream sends its first batch and then
  // waits for credit, its thread and loader alive.
  Running server([this](const StreamInfo&) { return batches(0, 1); }, so);
  zmq::context_t ctx;
  ctx.set(zmq::ctxopt::max_sockets, 4096);
  std::vector<std::unique_ptr<RawTrainer>> trainers;
  for (int r = 0; r < kRanks; ++r) {
    trainers.push_back(std::make_unique<RawTrainer>(ctx, server->endpoint()));
    trainers.back()->start(r, kRanks, 1);
  }
  int served = 0;
  for (int r = 0; r < kRanks; ++r) {
    const auto m = trainers[static_cast<std::size_t>(r)]->first_batch(std::chrono::seconds(60));
    ASSERT_TRUE(m) << "rank " << r << " got nothing";
    EXPECT_EQ(m->first, protocol::Type::batch) << "rank " << r << ": " << m->second;
    served += m->first == protocol::Type::batch;
  }
  EXPECT_EQ(served, kRanks);
  const ServerMetrics metrics = server->metrics();
  ASSERT_EQ(metrics.streams.size(), static_cast<std::size_t>(kRanks));
  for (const ServedStream& s : metrics.streams) EXPECT_EQ(s.in_flight, 1u) << "rank " << s.rank;
  trainers.clear();
  server.halt();

  ServerOptions limited = so;
  limited.bind = ipc("limited");
  limited.max_streams = 2;
  Running small([this](const StreamInfo&) { return batches(0, 1); }, limited);
  std::vector<std::unique_ptr<RawTrainer>> three;
  for (int r = 0; r < 3; ++r) {
    three.push_back(std::make_unique<RawTrainer>(ctx, small->endpoint()));
    three.back()->start(r, 3, 1);
    const auto m = three.back()->first_batch(std::chrono::seconds(30));
    ASSERT_TRUE(m) << "rank " << r << " got nothing";
    if (r < 2) {
      EXPECT_EQ(m->first, protocol::Type::batch) << m->second;
    } else {
      ASSERT_EQ(m->first, protocol::Type::error);
      EXPECT_NE(m->second.find("max_streams"), std::string::npos) << m->second;
    }
  }
  EXPECT_EQ(small->metrics().streams.size(), 2u);
}

// A trainer that forges acknowledgements (increasing seqs, guessed tags) and never reads its
// socket: the producer keeps no more than its credits in flight for it, and an honest trainer
// is served all the while.
TEST_F(Service, ForgedCreditsDoNotGrowTheProducerNorHoldUpAnHonestTrainer) {
  ServerOptions so;
  so.bind = ipc("s");
  Running server(factory(), so);
  zmq::context_t ctx;
  RawTrainer hostile(ctx, server->endpoint());
  constexpr std::uint32_t kCredits = 2;
  hostile.start(0, 2, kCredits);
  std::atomic<bool> honest_done{false};
  std::uint64_t forged = 0;
  std::thread forger([&] {
    while (!honest_done.load()) {
      ++forged;
      hostile.send({protocol::encode_header(protocol::Type::credit, 1, forged),
                    protocol::encode_credit(forged * 0x9e3779b97f4a7c15ULL)});
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // pacing, not waiting
    }
  });
  std::vector<Keys> passes;
  try {
    ServiceLoader<Tuple> honest(trainer({server->endpoint()}, 1, 2));
    honest.with_epoch(6);
    passes = take_passes(honest, 5);
  } catch (...) {
    honest_done = true;
    forger.join();
    throw;
  }
  honest_done = true;
  forger.join();
  for (const Keys& k : passes) EXPECT_EQ(k.size(), 6 * kBatch);
  ASSERT_GT(forged, 0u);
  // Once the server has read every forgery, the hostile stream has sent its credits and no more.
  ASSERT_TRUE(eventually([&] { return server->metrics().streams.at(0).ignored_acks == forged; }))
      << server->metrics().streams.at(0).ignored_acks << " of " << forged << " forgeries read";
  const ServedStream s = server->metrics().streams.at(0);
  EXPECT_EQ(s.rank, 0);
  EXPECT_LE(s.batches, kCredits) << "sent beyond the credits";
  EXPECT_LE(s.in_flight, kCredits);
  EXPECT_EQ(s.acknowledged, 0u);
  EXPECT_GE(server->metrics().streams.at(1).batches, 30u);
}

// A source that blocks until the gate opens (a shard server that stalls), counting its sources.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;
  int waiting = 0;  // reads blocked now
  int alive = 0;    // sources not yet destroyed
  void release() {
    std::lock_guard lock(mutex);
    open = true;
    changed.notify_all();
  }
};

class StalledSource final : public ByteSource {
 public:
  StalledSource(std::string url, std::shared_ptr<Gate> gate, std::string path)
      : ByteSource(std::move(url)), gate_(std::move(gate)), inner_(open_url(path)) {
    std::lock_guard lock(gate_->mutex);
    ++gate_->alive;
    gate_->changed.notify_all();
  }
  ~StalledSource() override {
    std::lock_guard lock(gate_->mutex);
    --gate_->alive;
    gate_->changed.notify_all();
  }
  std::span<const std::byte> read() override {
    {
      std::unique_lock lock(gate_->mutex);
      ++gate_->waiting;
      gate_->changed.notify_all();
      gate_->changed.wait(lock, [&] { return gate_->open; });
      --gate_->waiting;
    }
    return inner_->read();
  }

 private:
  std::shared_ptr<Gate> gate_;
  std::unique_ptr<ByteSource> inner_;
};

// Rank 0's source stalls; its trainer restarts its stream and says goodbye meanwhile. Rank 1 is
// served on, and the server stops at once, without waiting for the stalled source; once the
// source answers, the abandoned streams finish and free their sources.
TEST_F(Service, AStalledSourceHoldsUpNeitherOtherRanksNorStop) {
  auto gate = std::make_shared<Gate>();
  struct Opener {  // whatever happens, the stalled reads end with the test
    std::shared_ptr<Gate> gate;
    ~Opener() { gate->release(); }
  } opener{gate};
  const std::string dir = dir_.path().string();
  register_backend({
      .schemes = {"stalled-service-test"},
      .open =
          [gate, dir](const std::string& url, const OpenOptions&) {
            return std::unique_ptr<ByteSource>(std::make_unique<StalledSource>(
                url, gate, dir + "/" + url.substr(std::string("stalled-service-test://").size())));
          },
  });
  ServerOptions so;
  so.bind = ipc("s");
  auto server = std::make_unique<Running>(
      [this](const StreamInfo& s) {
        if (s.rank != 0) return batches(s.rank, s.world_size);
        return WebDataset(std::vector<std::string>{"stalled-service-test://p0.tar"}) | decode() |
               to_tuple("__key__ cls") | batched(kBatch);
      },
      so);
  zmq::context_t ctx;
  RawTrainer stalled(ctx, (*server)->endpoint());
  stalled.start(0, 2, 4, 1);
  auto blocked = [&](int n) {
    std::unique_lock lock(gate->mutex);
    return gate->changed.wait_for(lock, std::chrono::seconds(30),
                                  [&] { return gate->waiting >= n; });
  };
  ASSERT_TRUE(blocked(1)) << "rank 0's source was never read";
  // A new start (as set_epoch sends) and a goodbye, while the stream waits on its source.
  stalled.start(0, 2, 4, 2);
  ASSERT_TRUE(blocked(2)) << "rank 0's second stream never read";
  stalled.send({protocol::encode_header(protocol::Type::bye, 2)});

  auto options = trainer({(*server)->endpoint()}, 1, 2);
  options.timeout = std::chrono::milliseconds(10000);
  std::vector<Keys> passes;
  std::string failed;
  try {
    ServiceLoader<Tuple> honest(options);
    honest.with_epoch(6);
    passes = take_passes(honest, 3);
  } catch (const std::exception& e) {
    failed = e.what();
  }
  EXPECT_EQ(failed, "") << "rank 1 was held up by rank 0's stalled source";
  for (const Keys& k : passes) EXPECT_EQ(k.size(), 6 * kBatch);

  // Stopping does not wait for the source either.
  auto stopped = std::async(std::launch::async, [&] { server.reset(); });
  const bool prompt = stopped.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_TRUE(prompt) << "stopping the server waited for the stalled source";
  {
    std::lock_guard lock(gate->mutex);
    EXPECT_EQ(gate->waiting, 2) << "the stalled reads should still be waiting";
  }
  gate->release();
  stopped.wait();
  // The abandoned streams' threads finish on their own and destroy their loaders.
  std::unique_lock lock(gate->mutex);
  EXPECT_TRUE(
      gate->changed.wait_for(lock, std::chrono::seconds(30), [&] { return gate->alive == 0; }))
      << gate->alive << " sources still alive";
}

// The world size belongs to the job: a trainer claiming another one is refused while the job's
// trainers are connected, and once they have left, the next job is served.
TEST_F(Service, TheWorldSizeIsForgottenWhenTheTrainersThatClaimedItLeave) {
  ServerOptions so;
  so.bind = ipc("s");
  Running server(factory(), so);
  zmq::context_t ctx;
  {
    RawTrainer odd(ctx, server->endpoint());
    odd.start(0, 7, 1);
    const auto welcome = odd.receive(std::chrono::seconds(30));
    ASSERT_TRUE(welcome);
    ASSERT_EQ(welcome->first, protocol::Type::welcome) << welcome->second;
    // While it is connected, a job of world size 2 is refused.
    RawTrainer other(ctx, server->endpoint());
    other.start(1, 2, 1);
    const auto refused = other.first_batch(std::chrono::seconds(30));
    ASSERT_TRUE(refused);
    ASSERT_EQ(refused->first, protocol::Type::error);
    EXPECT_NE(refused->second.find("world size 7"), std::string::npos) << refused->second;
    odd.send({protocol::encode_header(protocol::Type::bye, 1)});
    // A ping after the goodbye is answered "who are you?" once the server has read both.
    odd.send({protocol::encode_header(protocol::Type::ping, 1)});
    for (;;) {
      const auto m = odd.receive(std::chrono::seconds(30));
      ASSERT_TRUE(m) << "no answer to the ping";
      if (m->first == protocol::Type::who) break;
    }
  }
  std::vector<std::vector<Keys>> got(2);
  std::vector<std::string> failed(2);
  std::vector<std::thread> job;
  for (int r = 0; r < 2; ++r) {
    job.emplace_back([&, r] {
      try {
        ServiceLoader<Tuple> loader(trainer({server->endpoint()}, r, 2));
        got[static_cast<std::size_t>(r)] = take_passes(loader, 1);
      } catch (const std::exception& e) {
        failed[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : job) t.join();
  EXPECT_EQ(failed, std::vector<std::string>(2)) << failed[0] << " / " << failed[1];
  Keys all;
  for (const auto& g : got) {
    if (!g.empty()) all.insert(all.end(), g[0].begin(), g[0].end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, all_keys());
}

// A restore file whose counts are out of range is refused, naming the file; it is not read
// into a world size that refuses every trainer.
TEST_F(Service, RestoreFileWithCountsOutOfRangeIsRefusedNamingIt) {
  auto file = [&](const std::string& name, std::uint64_t world, std::vector<std::uint64_t> ranks) {
    StateWriter out;
    out.put(std::string_view("wds-service-state-1"));
    out.put(std::uint64_t{0});
    out.put(std::uint64_t{1});
    out.put(world);
    out.put(static_cast<std::uint64_t>(ranks.size()));
    for (std::uint64_t r : ranks) {
      out.put(r);
      out.put(std::string_view("x"));
    }
    const std::string path = dir_.file(name);
    std::ofstream(path, std::ios::binary) << out.str();
    return path;
  };
  const std::pair<std::string, std::string> cases[] = {
      {file("huge.state", 4294967295u, {}), "world size 4294967295"},
      {file("zero.state", 0, {0}), "world size 0"},
      {file("rank.state", 2, {5}), "rank 5 of a world of 2"},
      {file("many.state", 2, {0, 1, 1}), "3 ranks of a world of 2"},
      {file("twice.state", 2, {1, 1}), "rank 1 twice"},
  };
  for (const auto& [path, why] : cases) {
    ServerOptions so;
    so.bind = ipc("s");
    so.restore_file = path;
    try {
      Server<Tuple> server(factory(), so);
      ADD_FAILURE() << path << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.url(), path);
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
  // A file with no trainers yet (world size 0) is fine.
  ServerOptions so;
  so.bind = ipc("s");
  so.restore_file = file("empty.state", 0, {});
  EXPECT_NO_THROW(Server<Tuple>(factory(), so));
}

}  // namespace
}  // namespace wds
