// ddp_train: a data-parallel training loop over WebDataset shards, one MPI process per rank, that
// also checks wds gave every rank its proper share of the data.
//
// clang-format off
//   mpirun -np 4 build/examples/ddp_train --shards 'data/train-{000000..000011}.tar' --epochs 3 --batch 8
//   mpirun -np 3 build/examples/ddp_train --shards 'data/train-{000000..000009}.tar' --epochs 3 --batch 8 --policy drop_last
//   mpirun -np 3 build/examples/ddp_train --shards 'data/train-{000000..000009}.tar' --epochs 3 --batch 8 --resampled --epoch-batches 5
// clang-format on
//
// (Open MPI run as root also wants --allow-run-as-root; with more ranks than cores,
// --oversubscribe. examples/make_synthetic_shards writes a dataset to try it on.)
//
// What it shows:
// - wds finds its rank and world size in the launcher's environment (OMPI_COMM_WORLD_RANK/SIZE
//   under mpirun; torchrun and SLURM work the same way); nothing is passed in. The program only
//   checks that wds agrees with MPI_Comm_rank/size: a wrong rank would make several processes
//   train on the same shards without any error.
// - Finite mode (the default): every epoch reads each shard once, split between the ranks by a
//   policy (--policy, see wds/split.hpp), in a new shard order each epoch. After each epoch rank 0
//   gathers the keys every rank saw and checks the split: each sample exactly once (even,
//   unbalanced, split_samples), once except the shards drop_last dropped, or once on every rank
//   (replicate).
// - Resampled mode (--resampled --epoch-batches N): shards drawn with replacement, endlessly, and
//   with_epoch cuts exactly N batches per rank per epoch out of that stream. This is the mode for
//   real DDP, where every batch ends in a gradient all-reduce that all ranks must join: in finite
//   mode ranks may get unequal numbers of batches (unbalanced shares, shards of unequal sizes).
// - Errors: a wds::Error on any rank (a broken shard, a policy that does not fit) is printed and
//   ends the whole job with MPI_Abort, so no rank waits forever in a collective.
//
// Exit code: 0 when every check passed, 1 on a failed check or an error, 2 on a usage error.
#include <mpi.h>
#include <wds/wds.hpp>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: ddp_train --shards PATTERN --epochs E --batch B [options]\n"
    "  --shards PATTERN     shard URLs, brace-expanded: 'data/train-{000000..000011}.tar'\n"
    "  --epochs E           epochs to run\n"
    "  --batch B            samples per batch\n"
    "  --policy P           even|unbalanced|drop_last|replicate|split_samples: how shards are\n"
    "                       split between ranks (default: WDS_SPLIT_POLICY, else WHALE_*, else "
    "even)\n"
    "  --resampled          draw shards with replacement, endlessly (needs --epoch-batches)\n"
    "  --epoch-batches N    resampled: batches per rank per epoch\n"
    "  --seed S             seed of every shuffle (default: WDS_SEED, else 0)\n"
    "  --shuffle N          shuffle samples in a buffer of N\n"
    "  --report FILE        rank 0 writes one key=value line per epoch to FILE\n";

struct Args {
  bool help = false;
  std::string shards;
  std::uint64_t epochs = 0;
  std::size_t batch = 0;
  std::optional<wds::SplitPolicy> policy;
  bool resampled = false;
  std::uint64_t epoch_batches = 0;
  std::optional<std::uint64_t> seed;
  std::size_t shuffle = 0;
  std::string report;
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

Args parse_args(int argc, char** argv) {
  Args a;
  bool has_epoch_batches = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw UsageError(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") {
      a.help = true;
    } else if (flag == "--resampled") {
      a.resampled = true;
    } else if (flag == "--shards") {
      a.shards = value();
    } else if (flag == "--epochs") {
      a.epochs = parse_number(flag, value(), 1);
    } else if (flag == "--batch") {
      a.batch = parse_number(flag, value(), 1);
    } else if (flag == "--policy") {
      try {
        a.policy = wds::parse_split_policy(value());
      } catch (const wds::Error& e) {
        throw UsageError(e.cause());
      }
    } else if (flag == "--epoch-batches") {
      a.epoch_batches = parse_number(flag, value(), 1);
      has_epoch_batches = true;
    } else if (flag == "--seed") {
      a.seed = parse_number(flag, value(), 0);
    } else if (flag == "--shuffle") {
      a.shuffle = parse_number(flag, value(), 0);
    } else if (flag == "--report") {
      a.report = value();
    } else {
      throw UsageError("unknown option '" + std::string(flag) + "'");
    }
  }
  if (a.help) return a;
  if (a.shards.empty()) throw UsageError("--shards is required");
  if (a.epochs == 0) throw UsageError("--epochs is required");
  if (a.batch == 0) throw UsageError("--batch is required");
  if (a.resampled != has_epoch_batches) {
    throw UsageError("--resampled and --epoch-batches go together");
  }
  // WebDataset ignores the split policy of a resampled pipeline (nothing is split); say so
  // rather than let the option look effective.
  if (a.resampled && a.policy) throw UsageError("--policy has no effect with --resampled");
  return a;
}

// --- the training step ---

// Stands in for forward and backward: reads every byte of the batch into a checksum. Summed over
// samples, so the total does not depend on which rank trained on what.
std::uint64_t train_step(const std::vector<wds::Sample>& batch) {
  std::uint64_t sum = 0;
  for (const wds::Sample& s : batch) {
    std::uint64_t h = 14695981039346656037ull;  // FNV-1a
    for (const wds::Field& f : s.fields()) {
      for (std::byte b : f.data.span()) h = (h ^ static_cast<std::uint64_t>(b)) * 1099511628211ull;
    }
    sum += h;
  }
  return sum;
}

// --- MPI helpers ---

// wds took rank and world size from the environment, MPI knows them for sure. A mismatch (say a
// stale RANK/WORLD_SIZE from torchrun, which wds reads before Open MPI's variables) would let
// processes read the same shards without any error, so stop the job.
void check_rank(const wds::PassContext& ctx, int rank, int world) {
  if (ctx.rank == rank && ctx.world_size == world) return;
  const wds::DistributedInfo info = wds::detect_distributed();
  std::fprintf(stderr,
               "ddp_train: wds sees rank %d of %d (from the %s environment), but MPI says rank %d "
               "of %d: fix the launcher's environment\n",
               ctx.rank, ctx.world_size, info.source.c_str(), rank, world);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// Rank 0 gets every rank's string, in rank order; the others get nothing.
std::vector<std::string> gather_strings(const std::string& mine, int rank, int world) {
  if (mine.size() > INT_MAX) throw std::length_error("more than 2 GiB of keys on one rank");
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(rank == 0 ? world : 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> offsets(lengths.size());
  std::vector<char> all;
  if (rank == 0) {
    long long total = 0;
    for (int r = 0; r < world; ++r) {
      offsets[r] = static_cast<int>(total);
      total += lengths[r];
      if (total > INT_MAX) throw std::length_error("more than 2 GiB of keys in all");
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
              0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < static_cast<int>(lengths.size()); ++r) {
    out.emplace_back(all.data() + offsets[r], static_cast<std::size_t>(lengths[r]));
  }
  return out;
}

// Rank 0's verdict, for every rank to return.
bool share_verdict(bool ok) {
  int flag = ok ? 1 : 0;
  MPI_Bcast(&flag, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return flag != 0;
}

// --- what the checks compare ---

// A sample is identified by shard URL and key: keys need not be unique across shards.
using SampleId = std::string;                           // url '\0' key
using Counts = std::map<SampleId, std::size_t>;         // how often each sample was seen
using ShardSizes = std::map<std::string, std::size_t>;  // samples per shard URL

void append_id(std::string& out, const wds::Sample& s) {
  out += s.url();
  out += '\0';
  out += s.key();
  out += '\0';
}

std::vector<SampleId> parse_ids(std::string_view bytes) {
  std::vector<SampleId> ids;
  while (!bytes.empty()) {
    const std::size_t url_end = bytes.find('\0');
    const std::size_t key_end = bytes.find('\0', url_end + 1);
    ids.emplace_back(bytes.substr(0, key_end));
    bytes.remove_prefix(key_end + 1);
  }
  return ids;
}

std::string_view url_of(std::string_view id) {
  return id.substr(0, id.find('\0'));
}

std::string_view file_name(std::string_view url) {
  const std::size_t slash = url.rfind('/');
  return slash == std::string_view::npos ? url : url.substr(slash + 1);
}

// "train-000003.tar:s03_k007"
std::string show(std::string_view id) {
  const std::string_view url = url_of(id);
  return std::string(file_name(url)) + ":" + std::string(id.substr(url.size() + 1));
}

// The whole dataset, read once by rank 0 to know what the ranks should have seen.
struct Dataset {
  std::vector<std::string> urls;
  Counts samples;
  ShardSizes shard_sizes;
  std::size_t total = 0;
};

Dataset read_dataset(const std::string& pattern) {
  Dataset d;
  d.urls = wds::expand_urls(pattern);
  for (const std::string& url : d.urls) d.shard_sizes[url] = 0;
  // A broken shard is skipped here: the training pipeline itself will raise it, on whichever
  // rank reads it.
  wds::TarSamples all(d.urls, {.handler = wds::ignore_and_continue});
  std::string id;
  while (std::optional<wds::Sample> s = all.next()) {
    id.clear();
    append_id(id, *s);
    id.pop_back();
    ++d.samples[id];
    ++d.shard_sizes[s->url()];
    ++d.total;
  }
  return d;
}

// How `seen` differs from `expected`, with a few examples.
struct Diff {
  std::size_t missing = 0;  // expected but seen fewer times
  std::size_t extra = 0;    // seen more often than expected (or not expected at all)
  std::vector<std::string> examples;
  bool empty() const { return missing == 0 && extra == 0; }
  std::string describe() const {
    std::string s = std::to_string(missing) + " missing, " + std::to_string(extra) + " extra";
    for (const std::string& e : examples) s += "; " + e;
    if (examples.size() < missing + extra) s += "; ...";
    return s;
  }
};

Diff compare(const Counts& expected, const Counts& seen) {
  Diff d;
  auto note = [&d](std::string_view id, std::size_t got, std::size_t want) {
    if (d.examples.size() < 5) {
      d.examples.push_back(show(id) + " seen " + std::to_string(got) + "x, expected " +
                           std::to_string(want) + "x");
    }
  };
  for (const auto& [id, want] : expected) {
    auto it = seen.find(id);
    const std::size_t got = it == seen.end() ? 0 : it->second;
    if (got < want) d.missing += want - got;
    if (got > want) d.extra += got - want;
    if (got != want) note(id, got, want);
  }
  for (const auto& [id, got] : seen) {
    if (!expected.contains(id)) {
      d.extra += got;
      note(id, got, 0);
    }
  }
  return d;
}

// The shards drop_last left out in this epoch: the last (count % world) of the epoch's shard
// order. WebDataset builds that order with ShardList(shuffle = true) from (seed, epoch), the same
// on every rank, so rank 0 can rebuild it.
std::vector<std::string> dropped_shards(const std::vector<std::string>& urls, std::uint64_t seed,
                                        std::uint64_t epoch, int world) {
  const std::size_t n =
      wds::assign_shards(urls.size(), 0, world, wds::SplitPolicy::drop_last).dropped;
  wds::ShardListOptions options;
  options.seed = seed;
  options.distributed = {.rank = 0, .world_size = 1};
  options.shuffle = true;
  wds::Pipeline<std::string> order = wds::ShardList(urls, options);
  order.set_epoch(epoch);
  std::vector<std::string> all(order.begin(), order.end());
  return {all.end() - static_cast<std::ptrdiff_t>(n), all.end()};
}

// Rank 0 writes one key=value line per epoch, for scripts.
class Report {
 public:
  Report(const std::string& path, int rank) {
    if (path.empty() || rank != 0) return;
    out_.open(path, std::ios::trunc);
    if (!out_) throw std::runtime_error("cannot write the report " + path);
  }
  void line(const std::string& text) {
    if (out_.is_open()) out_ << text << '\n' << std::flush;
  }

 private:
  std::ofstream out_;
};

// --- finite mode ---

// Rank 0: checks one epoch's split against the dataset, prints the summary, returns the verdict.
bool verify_finite(const Dataset& data, wds::SplitPolicy policy, std::uint64_t seed,
                   std::uint64_t epoch, std::size_t batch,
                   const std::vector<std::string>& seen_by_rank, Report& report) {
  const int world = static_cast<int>(seen_by_rank.size());
  std::vector<Counts> per_rank(seen_by_rank.size());
  Counts everyone;
  std::size_t seen_total = 0, fewest = SIZE_MAX, most = 0;
  for (int r = 0; r < world; ++r) {
    const std::vector<SampleId> ids = parse_ids(seen_by_rank[r]);
    for (const SampleId& id : ids) {
      ++per_rank[r][id];
      ++everyone[id];
    }
    seen_total += ids.size();
    fewest = std::min(fewest, ids.size());
    most = std::max(most, ids.size());
  }

  std::vector<std::string> problems;
  std::string what;
  std::size_t dropped_samples = 0;
  std::size_t n_dropped = 0;
  if (policy == wds::SplitPolicy::replicate) {
    for (int r = 0; r < world; ++r) {
      Diff d = compare(data.samples, per_rank[r]);
      if (!d.empty()) problems.push_back("rank " + std::to_string(r) + ": " + d.describe());
    }
    what = std::to_string(data.total) + " samples, each seen once on every rank";
  } else if (policy == wds::SplitPolicy::drop_last) {
    const std::vector<std::string> dropped = dropped_shards(data.urls, seed, epoch, world);
    n_dropped = dropped.size();
    Counts expected = data.samples;
    std::string names;
    for (const std::string& url : dropped) {
      dropped_samples += data.shard_sizes.at(url);
      std::erase_if(expected, [&url](const auto& item) { return url_of(item.first) == url; });
      names += (names.empty() ? "" : ", ") + std::string(file_name(url));
    }
    Diff d = compare(expected, everyone);
    if (!d.empty()) problems.push_back(d.describe());
    // Implied by the comparison, but it is the promise drop_last makes, so check it as such.
    if (data.total - seen_total != dropped_samples) {
      problems.push_back(std::to_string(data.total - seen_total) + " samples not seen, but the " +
                         std::to_string(n_dropped) + " dropped shards hold " +
                         std::to_string(dropped_samples));
    }
    what = std::to_string(seen_total) + " of " + std::to_string(data.total) +
           " samples, each seen once; " + std::to_string(n_dropped) + " shard(s) dropped (" +
           names + ": " + std::to_string(dropped_samples) + " samples)";
  } else {
    Diff d = compare(data.samples, everyone);
    if (!d.empty()) problems.push_back(d.describe());
    what = std::to_string(data.total) + " samples, each seen once";
  }

  const bool ok = problems.empty();
  const auto batches = [batch](std::size_t n) { return (n + batch - 1) / batch; };
  const std::string policy_name(wds::to_string(policy));
  if (ok) {
    std::printf("epoch %llu: %d ranks, %s (policy %s; %zu..%zu batches per rank)\n",
                static_cast<unsigned long long>(epoch), world, what.c_str(), policy_name.c_str(),
                batches(fewest), batches(most));
  } else {
    std::printf("epoch %llu: %d ranks, FAILED (policy %s), see stderr\n",
                static_cast<unsigned long long>(epoch), world, policy_name.c_str());
    for (const std::string& p : problems) {
      std::fprintf(stderr, "ddp_train: epoch %llu, policy %s: %s\n",
                   static_cast<unsigned long long>(epoch), policy_name.c_str(), p.c_str());
    }
  }
  std::fflush(stdout);
  report.line("epoch=" + std::to_string(epoch) + " mode=finite policy=" + policy_name +
              " ranks=" + std::to_string(world) + " seen=" + std::to_string(seen_total) +
              " dataset=" + std::to_string(data.total) + " dropped_shards=" +
              std::to_string(n_dropped) + " dropped_samples=" + std::to_string(dropped_samples) +
              " min_batches=" + std::to_string(batches(fewest)) +
              " max_batches=" + std::to_string(batches(most)) + " ok=" + (ok ? "1" : "0"));
  return ok;
}

bool run_finite(const Args& args, int rank, int world) {
  wds::WebDatasetOptions options;
  options.seed = args.seed;
  options.split_policy = args.policy;
  options.shuffle_shards = true;  // a new shard order, hence a new split, every epoch
  wds::Pipeline<wds::Sample> ds = wds::WebDataset(args.shards, options);
  if (args.shuffle > 0) ds = ds.shuffle(args.shuffle);
  check_rank(ds.context(), rank, world);
  // The policy in effect: the option, else the builder's fallback for this many shards.
  const wds::SplitPolicy policy =
      args.policy
          ? *args.policy
          : wds::split_policy_from_env(args.shards.size(), world).value_or(wds::SplitPolicy::even);

  // What every epoch should deliver, for the checks only (a real job skips this).
  std::optional<Dataset> data;
  if (rank == 0) {
    data = read_dataset(args.shards);
    std::printf("ddp_train: %d ranks (wds: %s environment), %zu shards, %zu samples, policy %s\n",
                world, wds::detect_distributed().source.c_str(), data->urls.size(), data->total,
                std::string(wds::to_string(policy)).c_str());
  }
  Report report(args.report, rank);

  bool ok = true;
  for (std::uint64_t epoch = 0; epoch < args.epochs; ++epoch) {
    ds.set_epoch(epoch);  // every rank the same epoch: the shard order (and split) depends on it
    std::string seen;     // the samples this rank trained on, for the check
    std::vector<wds::Sample> batch;
    batch.reserve(args.batch);
    std::uint64_t checksum = 0;
    for (wds::Sample& s : ds) {
      append_id(seen, s);
      batch.push_back(std::move(s));
      if (batch.size() == args.batch) {
        checksum += train_step(batch);
        batch.clear();
      }
    }
    if (!batch.empty()) checksum += train_step(batch);  // the short last batch counts too

    // Stands in for DDP's gradient all-reduce, here once per epoch. A real loop all-reduces
    // after every batch, which in finite mode needs the same batch count on every rank.
    std::uint64_t total = 0;
    MPI_Allreduce(&checksum, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);

    const std::vector<std::string> seen_by_rank = gather_strings(seen, rank, world);
    bool epoch_ok = true;
    if (rank == 0) {
      epoch_ok =
          verify_finite(*data, policy, ds.context().seed, epoch, args.batch, seen_by_rank, report);
    }
    ok = share_verdict(epoch_ok) && ok;
  }
  return ok;
}

// --- resampled mode ---

bool run_resampled(const Args& args, int rank, int world) {
  wds::WebDatasetOptions options;
  options.seed = args.seed;
  options.resampled = true;  // every rank draws its own endless stream: nothing to split
  wds::Pipeline<wds::Sample> ds = wds::WebDataset(args.shards, options);
  if (args.shuffle > 0) ds = ds.shuffle(args.shuffle);
  // Last, since it counts what comes out of the pipeline: N batches of B samples.
  ds = ds.with_epoch(args.epoch_batches * args.batch);
  check_rank(ds.context(), rank, world);
  if (rank == 0) {
    std::printf(
        "ddp_train: %d ranks (wds: %s environment), resampled, %llu batches of %zu per "
        "rank per epoch\n",
        world, wds::detect_distributed().source.c_str(),
        static_cast<unsigned long long>(args.epoch_batches), args.batch);
  }
  Report report(args.report, rank);

  bool ok = true;
  for (std::uint64_t epoch = 0; epoch < args.epochs; ++epoch) {
    // Each epoch draws from its own seeded stream, so a job resumed at epoch e sees what an
    // uninterrupted one would have.
    ds.set_epoch(epoch);
    std::vector<wds::Sample> batch;
    batch.reserve(args.batch);
    std::uint64_t checksum = 0;
    long long batches = 0;
    for (wds::Sample& s : ds) {
      batch.push_back(std::move(s));
      if (batch.size() == args.batch) {
        checksum += train_step(batch);
        ++batches;
        batch.clear();
        // A real DDP step would all-reduce gradients here; it can, as every rank gets N batches.
      }
    }
    long long leftover = static_cast<long long>(batch.size());  // samples short of a batch

    std::uint64_t total = 0;
    MPI_Allreduce(&checksum, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    long long fewest = 0, most = 0, most_leftover = 0;
    MPI_Allreduce(&batches, &fewest, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&batches, &most, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&leftover, &most_leftover, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);

    const long long want = static_cast<long long>(args.epoch_batches);
    const bool epoch_ok = fewest == want && most == want && most_leftover == 0;
    if (rank == 0) {
      if (epoch_ok) {
        std::printf("epoch %llu: %d ranks x %lld batches each (resampled)\n",
                    static_cast<unsigned long long>(epoch), world, want);
      } else {
        std::printf("epoch %llu: %d ranks, FAILED (resampled), see stderr\n",
                    static_cast<unsigned long long>(epoch), world);
        std::fprintf(stderr,
                     "ddp_train: epoch %llu: ranks trained on %lld..%lld batches (and up to %lld "
                     "samples short of a batch), expected exactly %lld batches each\n",
                     static_cast<unsigned long long>(epoch), fewest, most, most_leftover, want);
      }
      std::fflush(stdout);
      report.line("epoch=" + std::to_string(epoch) + " mode=resampled ranks=" +
                  std::to_string(world) + " min_batches=" + std::to_string(fewest) +
                  " max_batches=" + std::to_string(most) + " ok=" + (epoch_ok ? "1" : "0"));
    }
    ok = ok && epoch_ok;  // every rank computed the same verdict from the reductions
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const UsageError& e) {
    // Every rank parsed the same arguments and failed alike: rank 0 speaks for all.
    if (rank == 0) std::fprintf(stderr, "ddp_train: %s\n%s", e.what(), kUsage);
    MPI_Finalize();
    return 2;
  }
  if (args.help) {
    if (rank == 0) std::printf("%s", kUsage);
    MPI_Finalize();
    return 0;
  }

  bool ok = false;
  try {
    ok = args.resampled ? run_resampled(args, rank, world) : run_finite(args, rank, world);
  } catch (const std::exception& e) {  // wds::Error, and anything else
    // This rank cannot go on, and the others may be waiting for it in a collective: end the
    // whole job instead of leaving them to hang.
    std::fprintf(stderr, "ddp_train: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // all ranks finished their epochs: none is left waiting
  MPI_Finalize();
  return ok ? 0 : 1;
}
