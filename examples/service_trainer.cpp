// service_trainer: a training loop that takes its batches from a data service (wds serve)
// instead of reading shards itself, with the checkpointing a real trainer needs to be killed and
// restarted without losing or repeating a sample.
//
// clang-format off
//   wds serve --bind tcp://127.0.0.1:5555 --decode rgb8 --batch 32 'data/train-{000000..000007}.tar' &
//   WDS_SERVICE=tcp://127.0.0.1:5555 RANK=0 WORLD_SIZE=1 build/examples/service_trainer --epoch 10 --epochs 2
//
//   # one producer and three trainers in one MPMD job (the producer ends when they are done):
//   mpirun -np 1 wds serve --exit-when-done --bind tcp://127.0.0.1:5555 --batch 32 'data/train-{000000..000007}.tar' \
//        : -np 3 build/examples/service_trainer --service tcp://127.0.0.1:5555 --epoch 10 --epochs 2
//
//   # checkpoint every 5 batches; after a crash, the same command with --restore continues exactly
//   ... service_trainer ... --log run/log --save-state run/ckpt --save-every 5 [--restore run/ckpt]
// clang-format on
//
// What it shows:
// - The trainer finds its rank and world size where every wds program does (torchrun, MPI, SLURM
//   variables; under mpirun MPMD its place among the trainers, not the job) and presents them to
//   the producer, which runs that rank's share of the data. Nothing is read here but batches.
// - with_epoch(N) gives every rank exactly N batches per epoch; set_epoch(e) starts epoch e's
//   shuffle on the producer, so a rerun with the same seed gives every rank the same batches.
// - A checkpoint is the loader's state() together with the trainer's own progress (here, the
//   log of what it trained on), written atomically; --restore continues from it.
//
// Paths: {rank} in --log, --save-state and --restore is replaced by the rank; a path without it
// gets ".RANK" appended, so that the trainers of one job, given the same arguments, keep apart.
//
// Exit code: 0 when done, 1 on an error (a wds::Error: producer gone, refused, ...), 2 on a
// usage error.
#include <fcntl.h>
#include <unistd.h>

#include <wds/service.hpp>
#include <wds/wds.hpp>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: service_trainer --epoch N [options]\n"
    "  --service ADDR[,ADDR...]  producer endpoints, in order (default: WDS_SERVICE)\n"
    "  --epoch N           batches per rank per epoch (with_epoch)\n"
    "  --epochs E          epochs to run (default 1); set_epoch(e) before each\n"
    "  --timeout-ms MS     a producer silent this long is gone: an error (default 30000)\n"
    "  --log PATH          append 'epoch<TAB>rank<TAB>key' per sample trained on\n"
    "  --save-state PATH   write a checkpoint (loader state + log length) atomically...\n"
    "  --save-every K      ... every K batches (default 0: only at the end)\n"
    "  --restore PATH      continue from a checkpoint (the log is cut back to match it)\n"
    "  --sleep-ms MS       sleep this long per batch (a slow training step)\n";

constexpr std::string_view kCheckpointTag = "service_trainer-checkpoint-1";

struct Args {
  bool help = false;
  std::vector<std::string> servers;
  std::uint64_t epoch_batches = 0;
  std::uint64_t epochs = 1;
  std::optional<std::uint64_t> timeout_ms;
  std::string log;
  std::string save_state;
  std::uint64_t save_every = 0;
  std::string restore;
  std::uint64_t sleep_ms = 0;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::uint64_t parse_number(std::string_view flag, std::string_view value, std::uint64_t min) {
  std::uint64_t n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < min) {
    throw UsageError(std::string(flag) + " needs a whole number >= " + std::to_string(min) +
                     ", not '" + std::string(value) + "'");
  }
  return n;
}

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start <= s.size();) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw UsageError(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") {
      a.help = true;
    } else if (flag == "--service") {
      a.servers = split_commas(value());
      if (a.servers.empty()) throw UsageError("--service needs an address");
    } else if (flag == "--epoch") {
      a.epoch_batches = parse_number(flag, value(), 1);
    } else if (flag == "--epochs") {
      a.epochs = parse_number(flag, value(), 1);
    } else if (flag == "--timeout-ms") {
      a.timeout_ms = parse_number(flag, value(), 1);
    } else if (flag == "--log") {
      a.log = value();
    } else if (flag == "--save-state") {
      a.save_state = value();
    } else if (flag == "--save-every") {
      a.save_every = parse_number(flag, value(), 1);
    } else if (flag == "--restore") {
      a.restore = value();
    } else if (flag == "--sleep-ms") {
      a.sleep_ms = parse_number(flag, value(), 0);
    } else {
      throw UsageError("unknown option '" + std::string(flag) + "'");
    }
  }
  if (a.help) return a;
  if (a.epoch_batches == 0) throw UsageError("--epoch is required");
  if (a.save_every && a.save_state.empty()) throw UsageError("--save-every needs --save-state");
  return a;
}

std::string for_rank(const std::string& path, int rank) {
  if (path.empty()) return path;
  const std::size_t at = path.find("{rank}");
  if (at == std::string::npos) return path + "." + std::to_string(rank);
  return path.substr(0, at) + std::to_string(rank) + path.substr(at + 6);
}

[[noreturn]] void io_error(const std::string& path, const std::string& what) {
  const int e = errno;
  throw wds::Error(e == ENOENT ? wds::ErrorCode::not_found : wds::ErrorCode::unavailable, path, "",
                   what + ": " + std::strerror(e));
}

// The training log: lines go to the file as batches are trained on; sync() makes them durable
// and says how long the file is, for the checkpoint to record.
class Log {
 public:
  Log() = default;
  // Opens `path`, first cutting it to `keep` bytes (what the checkpoint vouches for; 0 on a fresh
  // start). A file shorter than that was not written by this job: an error.
  Log(std::string path, std::uint64_t keep) : path_(std::move(path)), length_(keep) {
    std::error_code ec;
    const auto size =
        std::filesystem::exists(path_, ec) ? std::filesystem::file_size(path_, ec) : 0;
    if (size < keep) {
      throw wds::Error::invalid_argument(path_, "",
                                         "the log has " + std::to_string(size) +
                                             " bytes, the checkpoint says " + std::to_string(keep) +
                                             ": not this checkpoint's log");
    }
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd_ < 0) io_error(path_, "cannot open the log");
    if (::ftruncate(fd_, static_cast<off_t>(keep)) != 0) io_error(path_, "cannot cut the log");
    if (::lseek(fd_, static_cast<off_t>(keep), SEEK_SET) < 0) io_error(path_, "cannot seek");
  }
  ~Log() {
    if (fd_ >= 0) ::close(fd_);
  }
  Log(Log&& o) noexcept
      : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), length_(o.length_) {}
  Log& operator=(Log&& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(fd_, o.fd_);
    std::swap(length_, o.length_);
    return *this;
  }

  bool open() const noexcept { return fd_ >= 0; }
  void write(const std::string& text) {
    std::string_view rest = text;
    while (!rest.empty()) {
      const ssize_t n = ::write(fd_, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) io_error(path_, "cannot write the log");
      rest.remove_prefix(static_cast<std::size_t>(n));
      length_ += static_cast<std::uint64_t>(n);
    }
  }
  std::uint64_t sync() {
    if (fd_ >= 0 && ::fsync(fd_) != 0) io_error(path_, "cannot sync the log");
    return length_;
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t length_ = 0;
};

// A checkpoint: where the trainer is (epoch, batches of it done), how long its log was then, and
// the loader's state, which says where every producer's stream is.
struct Checkpoint {
  std::uint64_t epoch = 0;
  std::uint64_t step = 0;  // batches of `epoch` trained on
  std::uint64_t log_bytes = 0;
  std::string loader;
};

// Written to PATH.tmp, synced, then renamed over PATH: a crash at any moment leaves either the
// old checkpoint or the new one, never half of one.
void save_checkpoint(const std::string& path, const Checkpoint& c) {
  std::ostringstream text;
  text << kCheckpointTag << ' ' << c.epoch << ' ' << c.step << ' ' << c.log_bytes << '\n'
       << c.loader;
  const std::string bytes = text.str();
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) io_error(tmp, "cannot write the checkpoint");
  std::string_view rest = bytes;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      io_error(tmp, "cannot write the checkpoint");
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    io_error(tmp, "cannot sync the checkpoint");
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) io_error(path, "cannot rename " + tmp + " to it");
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) io_error(path, "cannot read the checkpoint");
  std::string tag;
  Checkpoint c;
  in >> tag >> c.epoch >> c.step >> c.log_bytes;
  if (!in || tag != kCheckpointTag || in.get() != '\n') {
    throw wds::Error::invalid_argument(path, "", "not a service_trainer checkpoint");
  }
  std::ostringstream rest;
  rest << in.rdbuf();
  c.loader = rest.str();
  return c;
}

// Returns the exit code; `rank` is set as soon as it is known, for the error message.
int run(const Args& args, int& rank_out) {
  wds::ServiceLoaderOptions options;
  options.servers = args.servers;  // empty: WDS_SERVICE
  if (args.timeout_ms) {
    options.timeout = std::chrono::milliseconds(*args.timeout_ms);
    // A few heartbeats within the timeout, so that a live but busy producer is not taken for
    // a dead one.
    options.heartbeat =
        std::min(options.heartbeat,
                 std::chrono::milliseconds(std::max<std::uint64_t>(1, *args.timeout_ms / 4)));
  }
  wds::ServiceLoader<wds::DecodedSample> loader(options);
  loader.with_epoch(args.epoch_batches);
  const int rank = rank_out = loader.rank();
  const std::string log_path = for_rank(args.log, rank);
  const std::string state_path = for_rank(args.save_state, rank);

  // The log and the loader's state must describe the same moment, or a restart repeats or loses
  // samples in the log even though the loader itself is exact: the state says "the next batch
  // is the 41st", the log must then hold the first 40 and no more. So a checkpoint first syncs
  // the log and records its length next to the state; a restore cuts the log back to that
  // length, dropping the lines of batches trained on after the checkpoint, which the restored
  // loader hands out again. A real trainer does the same with its model and optimizer: they go
  // into the checkpoint with the loader's state, and whatever happened after is redone.
  Checkpoint at;
  bool resumed = false;
  if (!args.restore.empty()) {
    const std::string path = for_rank(args.restore, rank);
    at = load_checkpoint(path);
    loader.restore(at.loader);
    resumed = true;
    std::fprintf(stderr, "service_trainer: rank %d: restored %s: epoch %llu, step %llu\n", rank,
                 path.c_str(), static_cast<unsigned long long>(at.epoch),
                 static_cast<unsigned long long>(at.step));
  }
  Log log;
  if (!log_path.empty()) log = Log(log_path, resumed ? at.log_bytes : 0);

  std::uint64_t epoch = at.epoch;
  std::uint64_t step = at.step;
  // A checkpoint taken after an epoch's last batch: that epoch is done.
  if (resumed && step >= args.epoch_batches) {
    ++epoch;
    step = 0;
    resumed = false;
  }
  auto checkpoint = [&] {
    if (state_path.empty()) return;
    save_checkpoint(state_path, {epoch, step, log.sync(), loader.state()});
  };

  std::uint64_t batches = 0;
  for (; epoch < args.epochs; ++epoch) {
    // set_epoch restarts the producers' streams at this epoch; a restored loader is already
    // in the middle of one and continues it.
    if (!resumed) {
      loader.set_epoch(epoch);
      step = 0;
    }
    resumed = false;
    for (wds::DecodedSample& batch : loader) {
      // The training step would go here. A batch of samples holds each field collated and
      // "__key__", the list of the samples' keys.
      if (log.open()) {
        std::string lines;
        for (const wds::Value& key : batch.get<wds::Tuple>("__key__")) {
          lines += std::to_string(epoch) + '\t' + std::to_string(rank) + '\t' +
                   key.get<std::string>() + '\n';
        }
        log.write(lines);
      }
      if (args.sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(args.sleep_ms));
      ++step;
      if (args.save_every && ++batches % args.save_every == 0) checkpoint();
    }
    if (step != args.epoch_batches) {
      throw wds::Error::invalid_argument("epoch " + std::to_string(epoch) + " ended after " +
                                         std::to_string(step) + " batches, not --epoch " +
                                         std::to_string(args.epoch_batches));
    }
  }
  // The last checkpoint: the job is done (a restore from it trains on nothing more).
  epoch = args.epochs - 1;
  step = args.epoch_batches;
  checkpoint();
  log.sync();
  std::fprintf(stderr, "service_trainer: rank %d of %d: %s\n", rank, loader.world_size(),
               wds::format_metrics(loader.metrics()).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "service_trainer: %s\n%s", e.what(), kUsage);
    return 2;
  }
  if (args.help) {
    std::printf("%s", kUsage);
    return 0;
  }
  int rank = -1;
  try {
    return run(args, rank);
  } catch (const wds::Error& e) {
    if (rank >= 0) {
      std::fprintf(stderr, "service_trainer: rank %d: %s\n", rank, e.what());
    } else {
      std::fprintf(stderr, "service_trainer: %s\n", e.what());
    }
    return 1;
  }
}
