// wds serve URL-PATTERN...: the data service's producer. Runs one pipeline per trainer rank on
// Loader workers and serves its batches to trainers (ServiceLoader, wds ls/bench --service).
#include <pthread.h>

#include <csignal>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tools/cli_checks.hpp"
#include "tools/commands.hpp"
#include "tools/pipeline_options.hpp"
#include "tools/service_options.hpp"
#include "wds/error.hpp"
#include "wds/service.hpp"
#include "wds/transforms.hpp"

namespace wds::tool {
namespace {

struct ServeOptions {
  PipelineOptions pipeline;
  StageOptions stages;
  ServerOptions server;
  std::string token_file;
  std::size_t shared_memory_mb = ServerOptions{}.shared_memory_bytes >> 20;
  bool quiet = false;
};

// Signals are taken by a thread of their own (sigwait), not by a handler: the serving thread's
// waits are not interrupted, and stop() and save_state() are called as from any thread. They are
// blocked before the server and its workers start, so every thread inherits the mask.
class SignalThread {
 public:
  template <class Stop, class Save>
  SignalThread(Stop stop, Save save) {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaddset(&set_, s);
    ::pthread_sigmask(SIG_BLOCK, &set_, &old_);
    thread_ = std::thread([this, stop, save] {
      for (;;) {
        int signal = 0;
        if (::sigwait(&set_, &signal) != 0) continue;
        if (signal == SIGUSR2) return;  // from the destructor
        if (signal == SIGUSR1) {
          save();
        } else {
          stop();
        }
      }
    });
  }
  ~SignalThread() {
    ::pthread_kill(thread_.native_handle(), SIGUSR2);
    thread_.join();
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SignalThread(const SignalThread&) = delete;
  SignalThread& operator=(const SignalThread&) = delete;

 private:
  sigset_t set_{};
  sigset_t old_{};
  std::thread thread_;
};

template <class T>
void serve(typename Server<T>::MakePipeline make, ServerOptions options, bool quiet) {
  if (!quiet) {
    options.log = [](const std::string& line) {
      std::fprintf(stderr, "wds serve: %s\n", line.c_str());
    };
  }
  // Declared before the signal thread, so that they outlive it. A stop that comes before the
  // server exists is remembered (the flag is set before the pointer is read, and the pointer
  // before the flag: one side sees the other).
  std::unique_ptr<Server<T>> server;
  std::atomic<Server<T>*> running{nullptr};
  std::atomic<bool> stopping{false};
  SignalThread signals(
      [&] {
        stopping = true;
        if (Server<T>* s = running.load()) s->stop();
      },
      [&] {
        if (Server<T>* s = running.load()) s->save_state();
      });
  server = std::make_unique<Server<T>>(std::move(make), std::move(options));
  running = server.get();
  if (stopping) server->stop();
  // One line that scripts and tests wait for: the port "*" chose.
  std::fprintf(stderr, "serving on %s\n", server->endpoint().c_str());
  std::fflush(stderr);
  server->run();
  running = nullptr;

  const ServerMetrics m = server->metrics();
  for (const ServedStream& s : m.streams) {
    std::fprintf(stderr,
                 "rank %d: %llu batches sent, %llu acknowledged, %.1f MB (%.1f MB lent through "
                 "shared memory), %.3f s waiting for credit, %llu restarts\n",
                 s.rank, static_cast<unsigned long long>(s.batches),
                 static_cast<unsigned long long>(s.acknowledged),
                 static_cast<double>(s.bytes) / 1e6, static_cast<double>(s.shared_bytes) / 1e6,
                 s.credit_wait_seconds, static_cast<unsigned long long>(s.restarts));
  }
  std::fprintf(stderr, "served %zu ranks in %.3f s, %llu messages refused\n", m.streams.size(),
               m.seconds, static_cast<unsigned long long>(m.refused));
}

// The trainers bring the split (their ranks) and the epoch length (ServiceLoader::with_epoch);
// the server's Loader has its own workers. Options for those here would be silently wrong.
void refuse_trainer_options(const CLI::App& cmd) {
  static const char* const kRefused[][2] = {
      {"--rank", "each trainer registers with its rank: give --rank to the trainers"},
      {"--world-size", "each trainer registers with the job's world size: give it to the trainers"},
      {"--worker", "the server runs its own Loader workers: use --workers N"},
      {"--num-workers", "the server runs its own Loader workers: use --workers N"},
      {"--epoch",
       "the trainers count the epoch (wds ls/bench --service --epoch N, "
       "ServiceLoader::with_epoch)"},
      {"--passes", "the trainers decide how many passes they take"},
  };
  for (const auto& [name, why] : kRefused) {
    if (cmd.get_option(name)->count() > 0) {
      throw Error::invalid_argument(std::string("wds serve does not take ") + name + ": " + why);
    }
  }
}

void run_serve(const CLI::App& cmd, const ServeOptions& o) {
  refuse_trainer_options(cmd);
  ServerOptions options = o.server;
  if (!o.token_file.empty()) options.token = read_service_token(o.token_file, "--token-file");
  options.shared_memory_bytes = o.shared_memory_mb << 20;
  // Checked once here, not per trainer that registers (make_pipeline checks it too).
  PipelineOptions base = o.pipeline;
  auto for_rank = [base](const StreamInfo& s) {
    PipelineOptions p = base;
    p.rank = s.rank;
    p.world_size = s.world_size;
    return make_pipeline(p);
  };
  const StageOptions& so = o.stages;
  const std::string on_error = o.pipeline.on_error;
  if (!so.tuple.empty()) {
    options.names = tuple_fields(so.tuple);
    options.names.insert(options.names.end(), {"__key__", "__url__"});
    serve<Tuple>(
        [=](const StreamInfo& s) {
          return tuples(decoded(for_rank(s), so, on_error), so, {"__key__", "__url__"});
        },
        std::move(options), o.quiet);
    return;
  }
  // Each sample notes its shard's URL as a field, so that a batch carries its samples' URLs
  // beside the keys batched() collects.
  auto with_url = map([](DecodedSample&& s) {
    s.set("__url__", Value(s.url()));
    return std::move(s);
  });
  serve<DecodedSample>(
      [=](const StreamInfo& s) {
        return batches(decoded(for_rank(s), so, on_error) | with_url, so);
      },
      std::move(options), o.quiet);
}

}  // namespace

void add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "serve",
      "Serve batches to trainer processes (the data service): one pipeline per trainer rank, "
      "read, decoded and batched here on Loader workers, sent over ZeroMQ against each "
      "trainer's credits.");
  auto o = std::make_shared<ServeOptions>();
  add_pipeline_options(*cmd, o->pipeline);
  add_stage_options(*cmd, o->stages);
  // Kept so that their refusal can say where they belong, but not offered in the help.
  for (const char* name :
       {"--rank", "--world-size", "--worker", "--num-workers", "--epoch", "--passes"}) {
    cmd->get_option(name)->group("");
  }
  ServerOptions& s = o->server;
  cmd->add_option("--bind", s.bind,
                  "ZeroMQ endpoint: tcp://HOST:PORT (PORT * picks a free one) or ipc://PATH; "
                  "beyond loopback a --token-file is required")
      ->capture_default_str();
  cmd->add_option("--workers", s.workers, "Loader workers per trainer rank")
      ->check(in_range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--prefetch", s.prefetch, "finished batches kept per worker")
      ->check(at_least<std::size_t>(1))
      ->capture_default_str();
  cmd->add_option("--max-streams", s.max_streams,
                  "trainer ranks served at once (a thread and --workers workers each); a start "
                  "beyond is refused with an error")
      ->check(at_least<std::size_t>(1))
      ->capture_default_str();
  cmd->add_option("--producer", s.producer,
                  "this server is producer P of --producers (each reads its share of every "
                  "rank's data; trainers list all producers, in this order)")
      ->check(at_least<int>(0))
      ->capture_default_str();
  cmd->add_option("--producers", s.producers, "number of producers serving the job")
      ->check(at_least<int>(1))
      ->capture_default_str();
  cmd->add_option("--token-file", o->token_file,
                  "trainers must present the token in this file (its content without trailing "
                  "newlines; trainers: WDS_SERVICE_TOKEN_FILE or --token-file)");
  cmd->add_option("--state-file", s.state_file,
                  "write the positions trainers acknowledged here: every --save-every batches, on "
                  "SIGUSR1 and at exit");
  cmd->add_option("--save-every", s.save_every,
                  "batches acknowledged between writes of --state-file (0: only on SIGUSR1 and at "
                  "exit)")
      ->check(at_least<std::uint64_t>(0))
      ->capture_default_str();
  cmd->add_option("--restore", s.restore_file,
                  "a --state-file written earlier: trainers that come back without a state "
                  "continue from there");
  cmd->add_option("--shared-memory-mb", o->shared_memory_mb,
                  "trainers on this host get large tensors through shared memory, up to this "
                  "many MB lent to each at a time (beyond: copies); 0: always send copies")
      ->capture_default_str();
  cmd->add_flag("--exit-when-done", s.exit_when_done,
                "exit once every rank of the job has registered and all trainers have left "
                "(for mpirun MPMD jobs)");
  cmd->add_flag("--quiet", o->quiet, "no line per event (trainers joining, refused messages)");
  cmd->footer(
      "Prints 'serving on ENDPOINT' on stderr once bound. SIGINT/SIGTERM stop it (exit 0, "
      "state file written),\nSIGUSR1 writes the state file. At exit: per rank, batches sent and "
      "acknowledged, time waiting for credit.\n"
      "Examples:\n"
      "  wds serve --decode rgb8 --resize 256 --crop 224 --tuple 'jpg cls' --batch 64 --workers 4 "
      "\\\n      --bind tcp://127.0.0.1:5555 'data/train-{000..099}.tar'\n"
      "  wds ls --service tcp://127.0.0.1:5555 --rank 0 --world-size 2 --epoch 10\n"
      "  wds serve --bind tcp://0.0.0.0:5555 --token-file secret --shuffle-shards --batch 32 "
      "'data/train-{000..099}.tar'\n"
      "  mpirun -np 1 wds serve --bind tcp://127.0.0.1:5555 --exit-when-done --batch 32 "
      "'data/train-{000..099}.tar' \\\n"
      "      : -np 3 wds bench --service tcp://127.0.0.1:5555 --epoch 100");
  cmd->callback([cmd, o] { run_serve(*cmd, *o); });
}

}  // namespace wds::tool
