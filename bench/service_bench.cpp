// The data service against what it replaces, each figure next to its reference from the same run
// (repetitions interleaved, medians; every case in a fresh child process, so that its peak RSS
// is its own):
//
//   build/bench/service_bench transport [--batches=N] [--reps=R] [--credits=2,4,8]
//   build/bench/service_bench e2e [--shards=PATTERN] [--reps=R] [--batch=B] [--only=TEXT]
//   build/bench/service_bench first-batch [--shards=PATTERN] [--reps=R]
//   build/bench/service_bench adversity [--batches=N] [--reps=R]
//
// transport: batches of a uint8 [64, 256, 256, 3] tensor (12.6 MB) and an int64 [64] label, over
//   ipc:// and tcp://127.0.0.1. The reference is bare ZeroMQ: a PUSH thread sending the same two
//   frames from one pre-filled buffer (zmq_msg_init_data, no copy) to a PULL thread that
//   receives and drops them, each with its own context (as two processes would have). wds is a
//   Server<Tuple> whose pipeline yields the same pre-made tensors again and again (new Tuples
//   sharing the storage) and a ServiceLoader<Tuple> on this process's main thread, for each
//   credits value.
// e2e: JPEG shards (default: those of bench/loader_bench.sh, 16 x 1,000 256x256) as
//   WebDataset(shuffled shards).shuffle(1000) | decode("rgb8") | to_tuple("jpg cls") |
//   batched(B), one pass of the whole dataset: a producer process (Server, 1 worker per rank)
//   serving 2 trainers (2 threads of another process, ranks 0 and 1 of 2, with_epoch(half)),
//   against the same pipelines in-process: 2 Loaders (ranks 0 and 1 of 2, 1 worker each, one
//   thread each) and 1 Loader (world size 1, 2 workers). Every case decodes on 2 threads. The
//   service runs over ipc and tcp, each with the trainers taking the producer's shared memory
//   (the default on one host) and declining it (copies through the socket).
// adversity: two honest trainers (ranks 1 and 2 of 3, ServiceLoader, 4 credits, N batches each)
//   take the transport mode's 12.6 MB batches (a Server whose pipeline is its
//   RepeatBatch) over ipc, with rank 0 (a raw DEALER speaking the protocol)
//   absent, forging credits (start with 4 credits, then an acknowledgement of seq k with a guessed
//   tag, k = 1, 2, ..., 1,000 a second or as fast as the server reads them, never reading its
//   socket), or stalled (its source
//   blocks for good; its trainer sends a new start every 500 ms, as set_epoch does, and leaves).
//   Reported: the honest trainers' batches/s together, the process's peak RSS, rank 0's batches
//   sent and acknowledgements ignored, and for the stalled case how long stop() took.
// first-batch: from the fork of the producer process (which then constructs its Server and
//   runs it) to the first batch at a trainer process, for a trainer that starts just before the
//   producer, one that has been waiting 3 s for it, and one that starts once it is bound.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <condition_variable>
#include <mutex>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "service/protocol.hpp"
#include "wds/backend.hpp"
#include "wds/decode.hpp"
#include "wds/loader.hpp"
#include "wds/service.hpp"
#include "wds/source.hpp"
#include "wds/transforms.hpp"
#include "wds/webdataset.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using wds::Tuple;

constexpr std::int64_t kRows = 64;
constexpr std::int64_t kSide = 256;
constexpr int kWarmup = 5;  // batches before the clock starts (connections, first allocations)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::int64_t now_ns() {
  // steady_clock is CLOCK_MONOTONIC: comparable between processes on one machine.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// --- child processes: each case runs in its own, so its peak RSS is its own ---

struct ChildResult {
  std::vector<double> values;  // what the child wrote, in order
  double rss_mb = 0;
  double cpu_s = 0;  // user + system
};

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

struct Child {
  pid_t pid = -1;
  int out = -1;   // the child's result
  int stop = -1;  // a producer's: closing it stops the producer
};

// Forks a child running fn (whose values are its result). The parent never starts a thread, so
// forking it is safe.
Child spawn(const std::function<std::vector<double>()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  std::fflush(nullptr);  // or the child would print what the parent has buffered again
  const pid_t pid = ::fork();
  if (pid < 0) std::abort();
  if (pid == 0) {
    ::close(fds[0]);
    int code = 0;
    std::ostringstream s;
    try {
      for (double v : fn()) s << v << ' ';
    } catch (const std::exception& e) {
      std::fprintf(stderr, "service_bench: %s\n", e.what());
      code = 1;
    }
    write_all(fds[1], s.str());
    std::fflush(nullptr);
    ::_exit(code);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

ChildResult join(Child c) {
  ChildResult r;
  std::istringstream in(read_all(c.out));
  ::close(c.out);
  for (double v; in >> v;) r.values.push_back(v);
  int status = 0;
  rusage ru{};
  ::wait4(c.pid, &status, 0, &ru);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "service_bench: a case failed (status %d)\n", status);
    std::exit(1);
  }
  r.rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;
  r.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
            static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  return r;
}

ChildResult in_child(const std::function<std::vector<double>()>& fn) {
  return join(spawn(fn));
}

// Forks a producer serving make() on `bind`; returns once it is bound, with its endpoint. It
// serves until stop_producer(), then reports its streams' credit waits. (Told through a pipe, not
// a signal: a signal handler calling Server::stop() made run() throw EINTR from its poll.)
Child spawn_producer(const std::string& bind, wds::Server<Tuple>::MakePipeline make, int workers,
                     std::string& endpoint) {
  int ready[2], stop[2];
  if (::pipe(ready) != 0 || ::pipe(stop) != 0) std::abort();
  Child c = spawn([&]() -> std::vector<double> {
    ::close(ready[0]);
    ::close(stop[1]);
    wds::ServerOptions o;
    o.bind = bind;
    o.workers = workers;
    wds::Server<Tuple> server(make, o);
    std::thread watch([&] {
      read_all(stop[0]);  // until the parent closes its end
      server.stop();
    });
    write_all(ready[1], server.endpoint());
    ::close(ready[1]);
    server.run();
    watch.join();
    double credit_wait = 0, decoded = 0;
    for (const wds::ServedStream& s : server.metrics().streams) {
      credit_wait += s.credit_wait_seconds;
      decoded += static_cast<double>(s.loader.decoded);
    }
    return {credit_wait, decoded};
  });
  ::close(ready[1]);
  ::close(stop[0]);
  c.stop = stop[1];
  endpoint = read_all(ready[0]);
  ::close(ready[0]);
  return c;
}

ChildResult stop_producer(Child c) {
  ::close(c.stop);
  return join(c);
}

std::string ipc_endpoint(const std::string& name) {
  return "ipc://" + (std::filesystem::temp_directory_path() /
                     ("wds-service-bench-" + std::to_string(::getpid()) + "-" + name))
                        .string();
}

// --- transport ---

// The batch every case sends: pre-filled once.
struct Batch {
  wds::Tensor images{wds::DType::uint8, {kRows, kSide, kSide, 3}};
  wds::Tensor labels{wds::DType::int64, {kRows}};
  Batch() {
    std::memset(images.data(), 7, images.nbytes());
    std::memset(labels.data(), 1, labels.nbytes());
  }
  std::size_t bytes() const { return images.nbytes() + labels.nbytes(); }
};

// Bare ZeroMQ: {batches/s} over `batches` messages after the warm-up.
std::vector<double> bare_zmq(const std::string& endpoint, int batches) {
  const Batch batch;
  void* rctx = zmq_ctx_new();
  void* sctx = zmq_ctx_new();
  void* pull = zmq_socket(rctx, ZMQ_PULL);
  const int hwm = 4;  // bounded like a trainer's credits: a few batches in flight
  zmq_setsockopt(pull, ZMQ_RCVHWM, &hwm, sizeof hwm);
  if (zmq_bind(pull, endpoint.c_str()) != 0) throw std::runtime_error("bind " + endpoint);
  char bound[256];
  std::size_t len = sizeof bound;
  zmq_getsockopt(pull, ZMQ_LAST_ENDPOINT, bound, &len);
  const int total = batches + kWarmup;
  std::thread sender([&] {
    void* push = zmq_socket(sctx, ZMQ_PUSH);
    zmq_setsockopt(push, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_connect(push, bound);
    for (int i = 0; i < total; ++i) {
      zmq_msg_t img, lab;
      // No free function: the buffer outlives every send.
      zmq_msg_init_data(&img, batch.images.data(), batch.images.nbytes(), nullptr, nullptr);
      zmq_msg_init_data(&lab, batch.labels.data(), batch.labels.nbytes(), nullptr, nullptr);
      zmq_msg_send(&img, push, ZMQ_SNDMORE);
      zmq_msg_send(&lab, push, 0);
    }
    int linger = -1;  // deliver everything before closing
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(push);
  });
  Clock::time_point t0;
  for (int i = 0; i < total; ++i) {
    if (i == kWarmup) t0 = Clock::now();
    int more = 1;
    while (more) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, pull, 0) < 0) std::abort();
      more = zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
  }
  const double secs = seconds_since(t0);
  sender.join();
  zmq_close(pull);
  zmq_ctx_term(sctx);
  zmq_ctx_term(rctx);
  return {batches / secs};
}

// Yields the same batch forever: new Tuples sharing the tensors' storage.
class RepeatBatch final : public wds::Stream<Tuple> {
 public:
  explicit RepeatBatch(Tuple batch) : batch_(std::move(batch)) {}
  void start(const wds::PassContext&) override { made_ = 0; }
  std::optional<Tuple> next() override {
    ++made_;
    return batch_;
  }
  // The server's loader is resumable: its position is the count made.
  void save(wds::StateWriter& out) const override { out.put(made_); }
  void restore(wds::StateReader& in) override { made_ = in.get_u64(); }

 private:
  Tuple batch_;
  std::uint64_t made_ = 0;
};

// wds: {batches/s, producer credit-wait seconds, trainer wait seconds}.
std::vector<double> wds_service(const std::string& bind, int batches, std::size_t credits) {
  const Batch batch;
  const Tuple item{wds::Value(batch.images), wds::Value(batch.labels)};
  wds::ServerOptions so;
  so.bind = bind;
  wds::Server<Tuple> server(
      [&](const wds::StreamInfo&) {
        return wds::Pipeline<Tuple>([item] { return std::make_unique<RepeatBatch>(item); });
      },
      so);
  std::thread serving([&] { server.run(); });
  double rate = 0, trainer_wait = 0;
  {
    wds::ServiceLoaderOptions lo;
    lo.servers = {server.endpoint()};
    lo.rank = 0;
    lo.world_size = 1;
    lo.credits = credits;
    wds::ServiceLoader<Tuple> loader(lo);
    loader.with_epoch(static_cast<std::uint64_t>(batches + kWarmup));
    Clock::time_point t0;
    int n = 0;
    for (Tuple& b : loader) {
      if (++n == kWarmup) t0 = Clock::now();
      if (b.size() != 2) std::abort();
    }
    if (n != batches + kWarmup) std::abort();
    rate = batches / seconds_since(t0);
    trainer_wait = loader.metrics().consumer_wait_seconds;
  }
  server.stop();
  serving.join();
  double credit_wait = 0;
  for (const wds::ServedStream& s : server.metrics().streams) credit_wait += s.credit_wait_seconds;
  return {rate, credit_wait, trainer_wait};
}

std::vector<std::size_t> parse_list(const std::string& s) {
  std::vector<std::size_t> out;
  std::istringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoul(item));
  return out;
}

int transport(int batches, int reps, const std::vector<std::size_t>& credits) {
  const double mb = static_cast<double>(Batch().bytes()) / 1e6;
  std::printf(
      "transport: %d batches of uint8[64,256,256,3] + int64[64] (%.2f MB) per run after %d "
      "warm-up, %d runs interleaved (medians), %u cores\n\n",
      batches, mb, kWarmup, reps, std::thread::hardware_concurrency());
  struct Case {
    std::string transport, name;
    std::function<std::vector<double>()> run;
    std::vector<double> rate, rss, credit_wait, trainer_wait;
  };
  std::vector<Case> cases;
  for (const std::string t : {"ipc", "tcp"}) {
    const std::string bind = t == "ipc" ? ipc_endpoint("transport") : "tcp://127.0.0.1:*";
    cases.push_back({t, "bare ZeroMQ", [=] { return bare_zmq(bind, batches); }});
    for (std::size_t c : credits) {
      cases.push_back(
          {t, "wds, credits " + std::to_string(c), [=] { return wds_service(bind, batches, c); }});
    }
  }
  for (int r = 0; r < reps; ++r) {
    // Rotate the order so that the machine's drift touches every case alike.
    for (std::size_t k = 0; k < cases.size(); ++k) {
      Case& c = cases[(k + static_cast<std::size_t>(r)) % cases.size()];
      ChildResult res = in_child(c.run);
      c.rate.push_back(res.values.at(0));
      c.rss.push_back(res.rss_mb);
      if (res.values.size() > 2) {
        c.credit_wait.push_back(res.values[1]);
        c.trainer_wait.push_back(res.values[2]);
      }
    }
  }
  std::printf("%-5s %-18s %10s %8s %9s %10s %14s %14s\n", "", "case", "batches/s", "GB/s",
              "wds/bare", "peak RSS", "producer wait", "trainer wait");
  double bare = 0;
  for (const Case& c : cases) {
    const double rate = median(c.rate);
    if (c.name == "bare ZeroMQ") bare = rate;
    std::printf("%-5s %-18s %10.1f %8.2f ", c.transport.c_str(), c.name.c_str(), rate,
                rate * mb / 1e3);
    if (c.name == "bare ZeroMQ") {
      std::printf("%9s", "");
    } else {
      std::printf("%8.1f%%", 100 * rate / bare);
    }
    std::printf(" %8.0fMB", *std::max_element(c.rss.begin(), c.rss.end()));
    if (!c.credit_wait.empty()) {
      std::printf(" %13.3fs %13.3fs", median(c.credit_wait), median(c.trainer_wait));
    }
    std::printf("\n");
  }
  std::printf("\nper-run batches/s:\n");
  for (const Case& c : cases) {
    std::printf("  %-5s %-18s", c.transport.c_str(), c.name.c_str());
    for (double v : c.rate) std::printf(" %8.1f", v);
    std::printf("\n");
  }
  std::printf(
      "(producer wait: the stream had a batch but no credit; trainer wait: the loop "
      "waited for a batch; seconds per run)\n");
  return 0;
}

// --- end to end ---

wds::Pipeline<Tuple> jpeg_batches(const std::string& shards, int rank, int world, int batch) {
  wds::WebDatasetOptions o;
  o.seed = 1;
  o.shuffle_shards = true;
  o.distributed.rank = rank;
  o.distributed.world_size = world;
  return wds::WebDataset(shards, o).shuffle(1000) | wds::decode("rgb8") | wds::to_tuple("jpg cls") |
         wds::batched(static_cast<std::size_t>(batch));
}

std::uint64_t rows_of(const Tuple& b) {
  return static_cast<std::uint64_t>(b.at(0).get<wds::Tensor>().dim(0));
}

// {batches/s, batches, samples}: a pass of every loader, each on its own thread.
template <class MakeLoader>
std::vector<double> run_loaders(int count, MakeLoader make) {
  std::atomic<std::uint64_t> batches{0}, samples{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      auto loader = make(i);
      for (Tuple& b : *loader) {
        batches.fetch_add(1);
        samples.fetch_add(rows_of(b));
      }
    });
  }
  for (auto& t : threads) t.join();
  const double secs = seconds_since(t0);
  return {static_cast<double>(batches) / secs, static_cast<double>(batches),
          static_cast<double>(samples)};
}

// Batches in one pass of the dataset (rank 0 of 1), counted once.
std::uint64_t count_batches(const std::string& shards, int batch) {
  // The same count as the pipelines give, without decoding: samples / batch per shard group.
  wds::WebDatasetOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  std::uint64_t n = 0;
  for (wds::Sample& s : wds::WebDataset(shards, o)) {
    (void)s;
    ++n;
  }
  return n / static_cast<std::uint64_t>(batch);
}

int e2e(const std::string& shards, int reps, int batch, const std::string& only) {
  const std::uint64_t total = count_batches(shards, batch);
  const std::uint64_t per_rank = total / 2;
  std::printf(
      "end to end: %s, shuffle(1000) | decode(rgb8) | to_tuple(jpg cls) | batched(%d): %llu "
      "batches a pass; 2 decode threads in every case; %d runs interleaved (medians), %u cores\n\n",
      shards.c_str(), batch, static_cast<unsigned long long>(total), reps,
      std::thread::hardware_concurrency());
  struct Case {
    std::string name;
    std::function<void(Case&)> run;
    std::vector<double> rate, rss, producer_rss, credit_wait, cpu, producer_cpu, decoded;
  };
  auto inproc = [&](int loaders, int world, int workers, bool resumable) {
    return [=](Case& c) {
      ChildResult r = in_child([=] {
        std::vector<double> v = run_loaders(loaders, [&](int i) {
          wds::LoaderOptions<Tuple> o;
          o.workers = workers;
          o.resumable = resumable;
          return std::make_unique<wds::Loader<Tuple>>(jpeg_batches(shards, i, world, batch), o);
        });
        if (v[1] != static_cast<double>(total)) {
          throw std::runtime_error("in-process: " + std::to_string(v[1]) + " batches, not " +
                                   std::to_string(total));
        }
        return v;
      });
      c.rate.push_back(r.values.at(0));
      c.rss.push_back(r.rss_mb);
      c.cpu.push_back(r.cpu_s);
    };
  };
  auto service = [&](const std::string& bind_kind, bool shared_memory) {
    return [=](Case& c) {
      std::string endpoint;
      Child producer = spawn_producer(
          bind_kind == "ipc" ? ipc_endpoint("e2e") : "tcp://127.0.0.1:*",
          [=](const wds::StreamInfo& s) {
            return jpeg_batches(shards, s.rank, s.world_size, batch);
          },
          1, endpoint);
      ChildResult r = in_child([=] {
        std::vector<double> v = run_loaders(2, [&](int rank) {
          wds::ServiceLoaderOptions o;
          o.servers = {endpoint};
          o.rank = rank;
          o.world_size = 2;
          o.shared_memory = shared_memory;
          auto l = std::make_unique<wds::ServiceLoader<Tuple>>(o);
          l->with_epoch(per_rank);
          return l;
        });
        if (v[1] != static_cast<double>(2 * per_rank)) {
          throw std::runtime_error("service: " + std::to_string(v[1]) + " batches");
        }
        return v;
      });
      ChildResult p = stop_producer(producer);
      c.rate.push_back(r.values.at(0));
      c.rss.push_back(r.rss_mb);
      c.producer_rss.push_back(p.rss_mb);
      c.credit_wait.push_back(p.values.at(0));
      c.decoded.push_back(p.values.at(1));
      c.cpu.push_back(r.cpu_s);
      c.producer_cpu.push_back(p.cpu_s);
    };
  };
  std::vector<Case> cases{
      {"in-process: 2 Loaders (world 2, 1 worker each)", inproc(2, 2, 1, false)},
      {"in-process: 1 Loader (world 1, 2 workers)", inproc(1, 1, 2, false)},
      {"in-process: 2 Loaders as the producer's (resumable)", inproc(2, 2, 1, true)},
      {"service over ipc: 1 producer, 2 trainers", service("ipc", true)},
      {"service over tcp: 1 producer, 2 trainers", service("tcp", true)},
      {"service over ipc, copies (no shared memory)", service("ipc", false)},
      {"service over tcp, copies (no shared memory)", service("tcp", false)},
  };
  // --only=TEXT: the cases whose name contains it (for perf), the first one kept as reference.
  if (!only.empty()) {
    std::vector<Case> kept;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      if (i == 0 || cases[i].name.find(only) != std::string::npos) kept.push_back(cases[i]);
    }
    cases = std::move(kept);
  }
  for (int r = 0; r < reps; ++r) {
    for (std::size_t k = 0; k < cases.size(); ++k) {
      Case& c = cases[(k + static_cast<std::size_t>(r)) % cases.size()];
      c.run(c);
    }
  }
  const double ref = median(cases[0].rate);
  std::printf("%-52s %10s %8s %9s %9s %13s %13s %9s %9s\n", "case", "batches/s", "ratio",
              "peak RSS", "CPU/batch", "producer RSS", "producer CPU", "decoded", "wait");
  for (const Case& c : cases) {
    const double rate = median(c.rate);
    std::printf("%-52s %10.1f %7.1f%% %7.0fMB %7.1fms", c.name.c_str(), rate, 100 * rate / ref,
                *std::max_element(c.rss.begin(), c.rss.end()),
                1e3 * median(c.cpu) / static_cast<double>(total));
    if (!c.producer_rss.empty()) {
      std::printf(" %11.0fMB %11.1fms %9.0f %8.2fs",
                  *std::max_element(c.producer_rss.begin(), c.producer_rss.end()),
                  1e3 * median(c.producer_cpu) / static_cast<double>(total), median(c.decoded),
                  median(c.credit_wait));
    }
    std::printf("\n");
  }
  std::printf("\nper-run batches/s:\n");
  for (const Case& c : cases) {
    std::printf("  %-48s", c.name.c_str());
    for (double v : c.rate) std::printf(" %7.1f", v);
    std::printf("\n");
  }
  std::printf(
      "(ratio: of the first case; peak RSS and CPU/batch (user + system): the trainers' "
      "process, or the in-process loaders'; producer: its process, its images decoded, and "
      "the time its streams had a batch but no credit)\n");
  return 0;
}

// --- first batch ---

int first_batch(const std::string& shards, int reps) {
  std::printf(
      "first batch: %s, batched(32), producer 1 worker, over ipc; %d runs of each case "
      "interleaved, %u cores\n\n",
      shards.c_str(), reps, std::thread::hardware_concurrency());
  auto make = [shards](const wds::StreamInfo& s) {
    return jpeg_batches(shards, s.rank, s.world_size, 32);
  };
  auto trainer = [](const std::string& endpoint) {
    return spawn([endpoint] {
      wds::ServiceLoaderOptions o;
      o.servers = {endpoint};
      o.rank = 0;
      o.world_size = 1;
      wds::ServiceLoader<Tuple> loader(o);
      loader.with_epoch(1);
      loader.begin_pass();
      if (!loader.next()) throw std::runtime_error("no batch");
      return std::vector<double>{static_cast<double>(now_ns())};
    });
  };
  // 0: the trainer starts just before the producer (as a launcher starts both); 1: the trainer
  // has been waiting for 3 s; 2: the trainer starts once the producer is bound.
  const char* names[] = {"trainer started with the producer",
                         "trainer waiting 3 s before the producer started",
                         "trainer started once the producer was bound"};
  std::vector<double> ms[3], bound_ms;
  for (int r = 0; r < 3 * reps; ++r) {
    const int mode = r % 3;
    const std::string bind = ipc_endpoint("first");
    std::filesystem::remove(bind.substr(6));
    Child t, producer;
    std::int64_t t0 = 0;
    if (mode < 2) {
      t = trainer(bind);
      if (mode == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
      t0 = now_ns();
      std::string endpoint;
      producer = spawn_producer(bind, make, 1, endpoint);
    } else {
      t0 = now_ns();
      std::string endpoint;
      producer = spawn_producer(bind, make, 1, endpoint);
      bound_ms.push_back(static_cast<double>(now_ns() - t0) / 1e6);
      t = trainer(endpoint);
    }
    ChildResult got = join(t);
    stop_producer(producer);
    ms[mode].push_back((got.values.at(0) - static_cast<double>(t0)) / 1e6);
  }
  auto show = [](const char* name, const std::vector<double>& v) {
    std::printf("%-50s median %7.1f ms (", name, median(v));
    for (double x : v) std::printf(" %.1f", x);
    std::printf(" )\n");
  };
  for (int m = 0; m < 3; ++m) show(names[m], ms[m]);
  show("  of which: the producer's fork, Server() and bind", bound_ms);
  return 0;
}

// --- adversity: a hostile or stalled rank next to honest ones ---

// A source whose reads never return (until the process ends): a shard server that hangs.
class HangingSource final : public wds::ByteSource {
 public:
  explicit HangingSource(std::string url) : ByteSource(std::move(url)) {}
  std::span<const std::byte> read() override {
    static std::mutex mutex;
    static std::condition_variable never;
    std::unique_lock lock(mutex);
    never.wait(lock, [] { return false; });
    return {};
  }
};

// {honest batches/s, rank 0's batches sent, its ignored acknowledgements, stop() ms}.
std::vector<double> adversity_case(const std::string& rank0, int batches) {
  const Batch batch;
  const Tuple item{wds::Value(batch.images), wds::Value(batch.labels)};
  const bool stalled = rank0 == "stalled";
  wds::register_backend({
      .schemes = {"hang"},
      .open =
          [](const std::string& url, const wds::OpenOptions&) {
            return std::unique_ptr<wds::ByteSource>(std::make_unique<HangingSource>(url));
          },
  });
  wds::ServerOptions so;
  so.bind = ipc_endpoint("adversity");
  wds::Server<Tuple> server(
      [item, stalled](const wds::StreamInfo& s) {
        if (s.rank == 0 && stalled) {
          return wds::WebDataset(std::vector<std::string>{"hang://x.tar"}) | wds::decode() |
                 wds::to_tuple("__key__") | wds::batched(2);
        }
        return wds::Pipeline<Tuple>([item] { return std::make_unique<RepeatBatch>(item); });
      },
      so);
  std::thread serving([&] { server.run(); });
  std::atomic<bool> honest_done{false};
  std::thread hostile;
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  auto send = [&](wds::protocol::Type type, std::uint64_t gen, std::uint64_t seq,
                  std::optional<std::string> body) {
    std::vector<zmq::message_t> parts;
    parts.emplace_back(wds::protocol::encode_header(type, gen, seq));
    if (body) parts.emplace_back(*body);
    zmq::send_multipart(dealer, parts);
  };
  auto start = [&](std::uint64_t gen) {
    wds::protocol::Start m;
    m.rank = 0;
    m.world_size = 3;
    m.credits = 4;
    m.continuous = true;
    send(wds::protocol::Type::start, gen, 0, wds::protocol::encode(m));
  };
  if (rank0 != "absent") {
    dealer.connect(server.endpoint());
    hostile = std::thread([&] {
      std::uint64_t k = 0;
      start(1);
      while (!honest_done.load()) {
        if (!stalled) {
          ++k;
          send(wds::protocol::Type::credit, 1, k, wds::protocol::encode_credit(k * 2654435761u));
          // Flat out, the DEALER blocks when its queue is full: as fast as the server reads.
          if (rank0 == "forging-1k") std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          start(++k + 1);
        }
      }
      if (stalled) send(wds::protocol::Type::bye, k + 1, 0, std::nullopt);
    });
  }
  std::atomic<std::uint64_t> taken{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> trainers;
  for (int r = 1; r <= 2; ++r) {
    trainers.emplace_back([&, r] {
      wds::ServiceLoaderOptions lo;
      lo.servers = {server.endpoint()};
      lo.rank = r;
      lo.world_size = 3;
      lo.timeout = std::chrono::milliseconds(10000);
      wds::ServiceLoader<Tuple> loader(lo);
      loader.with_epoch(static_cast<std::uint64_t>(batches));
      for (Tuple& b : loader) {
        if (b.size() != 2) std::abort();
        taken.fetch_add(1);
      }
    });
  }
  for (auto& t : trainers) t.join();
  const double rate = static_cast<double>(taken.load()) / seconds_since(t0);
  honest_done = true;
  if (hostile.joinable()) hostile.join();
  double sent0 = 0, ignored0 = 0;
  for (const wds::ServedStream& s : server.metrics().streams) {
    if (s.rank == 0) {
      sent0 = static_cast<double>(s.batches);
      ignored0 = static_cast<double>(s.ignored_acks);
    }
  }
  const auto t_stop = Clock::now();
  server.stop();
  serving.join();
  const double stop_ms = seconds_since(t_stop) * 1e3;
  // The stalled case's server can leave its socket file behind: not one per run in /tmp.
  std::filesystem::remove(so.bind.substr(sizeof("ipc://") - 1));
  return {rate, sent0, ignored0, stop_ms};
}

int adversity(int batches, int reps) {
  std::printf(
      "adversity: 2 honest trainers (ranks 1, 2 of 3), %d batches of %.1f MB each over ipc, rank "
      "0 absent / forging credits (1,000 a second; as fast as the server reads them) / with a "
      "stalled source; %d runs interleaved (medians), %u cores\n\n",
      batches, static_cast<double>(Batch().bytes()) / 1e6, reps,
      std::thread::hardware_concurrency());
  const std::vector<std::string> cases = {"absent", "forging-1k", "forging-max", "stalled"};
  const std::size_t n = cases.size();
  std::vector<std::vector<double>> rate(n), rss(n), sent(n), ignored(n), stop(n), cpu(n);
  for (int rep = 0; rep < reps; ++rep) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t c = (i + static_cast<std::size_t>(rep)) % n;  // a new order each time
      const ChildResult r = in_child([&] { return adversity_case(cases[c], batches); });
      rate[c].push_back(r.values.at(0));
      sent[c].push_back(r.values.at(1));
      ignored[c].push_back(r.values.at(2));
      stop[c].push_back(r.values.at(3));
      rss[c].push_back(r.rss_mb);
      cpu[c].push_back(r.cpu_s);
    }
  }
  const double base = median(rate[0]);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    std::printf(
        "rank 0 %-11s %6.1f batches/s (%5.1f%% of absent; runs %s), peak RSS %6.1f MB, CPU "
        "%.2f s, rank 0 sent %.0f batches, %.0f acks ignored, stop() %.1f ms\n",
        cases[c].c_str(), median(rate[c]), 100 * median(rate[c]) / base,
        [&] {
          std::string all;
          for (double v : rate[c]) all += (all.empty() ? "" : "/") + std::to_string(int(v));
          return all;
        }()
            .c_str(),
        median(rss[c]), median(cpu[c]), median(sent[c]), median(ignored[c]), median(stop[c]));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  std::string shards =
      (std::filesystem::temp_directory_path() / "wds-loader-bench/img/train-{000000..000015}.tar")
          .string();
  int batches = 200, reps = 5, batch = 32;
  std::string credits = "2,4,8", only;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = value("--batches=")) {
      batches = std::atoi(v);
    } else if (const char* v = value("--reps=")) {
      reps = std::atoi(v);
    } else if (const char* v = value("--credits=")) {
      credits = v;
    } else if (const char* v = value("--shards=")) {
      shards = v;
    } else if (const char* v = value("--only=")) {
      only = v;
    } else if (const char* v = value("--batch=")) {
      batch = std::atoi(v);
    } else {
      mode.clear();
      break;
    }
  }
  try {
    if (mode == "transport") return transport(batches, reps, parse_list(credits));
    if (mode == "e2e") return e2e(shards, reps, batch, only);
    if (mode == "first-batch") return first_batch(shards, reps);
    if (mode == "adversity") return adversity(batches, reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "service_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: service_bench transport [--batches=N] [--reps=R] [--credits=2,4,8]\n"
               "       service_bench e2e [--shards=PATTERN] [--reps=R] [--batch=B] [--only=TEXT]\n"
               "       service_bench first-batch [--shards=PATTERN] [--reps=R]\n"
               "       service_bench adversity [--batches=N] [--reps=R]\n"
               "(e2e and first-batch default to the shards of bench/loader_bench.sh)\n");
  return 2;
}
