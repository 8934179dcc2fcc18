// elastic_train: a data-parallel loop over canonical streams that checkpoints its data position on
// one number of ranks and resumes it on another (one MPI process per rank).
//
// clang-format off
//   mpirun -np 4 build/examples/elastic_train --shards 'data/train-{000000..000023}.tar' \
//       --streams 24 --workers 2 --steps 100 --save ckpt.state
//   mpirun -np 3 build/examples/elastic_train --shards 'data/train-{000000..000023}.tar' \
//       --streams 24 --workers 2 --steps 100 --restore ckpt.state
// clang-format on
//
// What it shows, the whole cycle:
// - Every rank builds the same pipeline (WebDatasetOptions::streams = C) and compares its
//   fingerprint() with the others' in one MPI_Allreduce: a rank started with another seed, shard
//   list or stream count stops the job at once instead of training on other data.
// - Each rank reads through a Loader of --workers threads; every step, each rank takes one sample
//   (a real job would take a batch: .batched(n) after the streams).
// - --save: after the last step every rank's Loader::state() (its own streams) is gathered on
//   rank 0, which merges them with wds::merge_states and writes one file.
// - --restore: rank 0 reads that file and broadcasts it; every rank's Loader::restore() takes
//   its own streams' states from it, whatever the number of ranks and workers that saved it, as
//   long as ranks x workers divides C.
// - --keys FILE: rank 0 writes the key of every sample all ranks took, one per line, so that a
//   test can check that nothing was read twice or skipped across the restart.
//
// Exit code: 0 on success, 1 on an error (on any rank: the job is aborted), 2 on a usage error.
#include <mpi.h>
#include <wds/wds.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: elastic_train --shards PATTERN --streams C --steps S [options]\n"
    "  --shards PATTERN   shard URLs, brace-expanded\n"
    "  --streams C        canonical streams (ranks x workers must divide C)\n"
    "  --steps S          samples each rank takes\n"
    "  --workers W        loader threads per rank (default 1)\n"
    "  --epoch N          samples per rank per pass (default 1000)\n"
    "  --shuffle N        each stream's sample shuffle buffer (default 0)\n"
    "  --seed S           seed of every shuffle (default 0)\n"
    "  --save FILE        rank 0 writes the merged state of all ranks after the last step\n"
    "  --restore FILE     continue from a state written by --save (on any number of ranks)\n"
    "  --keys FILE        rank 0 writes the key of every sample taken, one per line\n";

struct Args {
  std::string shards, save, restore, keys;
  std::uint64_t streams = 0, steps = 0, epoch = 1000, seed = 0;
  std::size_t shuffle = 0;
  int workers = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
    const std::string value = argv[++i];
    auto number = [&] { return std::stoull(value); };
    if (flag == "--shards") {
      a.shards = value;
    } else if (flag == "--streams") {
      a.streams = number();
    } else if (flag == "--steps") {
      a.steps = number();
    } else if (flag == "--workers") {
      a.workers = static_cast<int>(number());
    } else if (flag == "--epoch") {
      a.epoch = number();
    } else if (flag == "--shuffle") {
      a.shuffle = static_cast<std::size_t>(number());
    } else if (flag == "--seed") {
      a.seed = number();
    } else if (flag == "--save") {
      a.save = value;
    } else if (flag == "--restore") {
      a.restore = value;
    } else if (flag == "--keys") {
      a.keys = value;
    } else {
      throw std::invalid_argument("unknown option " + std::string(flag));
    }
  }
  if (a.shards.empty() || a.streams == 0 || a.workers < 1) {
    throw std::invalid_argument("--shards, --streams and --steps are required");
  }
  return a;
}

// Every rank's string, concatenated on rank 0 (empty elsewhere), with each one's length.
std::vector<std::string> gather(const std::string& mine, int rank, int size) {
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(lengths.size());
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      offsets[r] = total;
      total += lengths[r];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
              0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank == 0) {
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      out.push_back(
          all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
    }
  }
  return out;
}

// Rank 0's string on every rank.
std::string broadcast(std::string text, int rank) {
  unsigned long long length = text.size();
  MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  if (rank != 0) text.resize(static_cast<std::size_t>(length));
  MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD);
  return text;
}

int run(const Args& a, int rank, int size) {
  wds::WebDatasetOptions options;
  options.seed = a.seed;
  options.shuffle_shards = true;
  options.streams = a.streams;
  options.stream_shuffle = a.shuffle;
  // Rank and world size come from mpirun's environment; check wds reads them as MPI does.
  wds::Pipeline<wds::Sample> samples = wds::WebDataset(a.shards, options);
  if (samples.context().rank != rank || samples.context().world_size != size) {
    throw std::runtime_error("wds sees rank " + std::to_string(samples.context().rank) + " of " +
                             std::to_string(samples.context().world_size) + ", but MPI says rank " +
                             std::to_string(rank) + " of " + std::to_string(size));
  }
  // The same configuration on every rank, or stop now.
  unsigned long long fp = samples.fingerprint(), low = 0, high = 0;
  MPI_Allreduce(&fp, &low, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&fp, &high, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  if (low != high) {
    throw std::runtime_error(
        "the ranks were started with different data configurations "
        "(seed, shards, streams or shuffle): fingerprints differ");
  }

  wds::Loader<wds::Sample> loader(
      samples, {.workers = a.workers, .ordered = true, .resumable = true, .epoch_length = a.epoch});
  if (!a.restore.empty()) {
    std::string state;
    if (rank == 0) {
      std::ifstream in(a.restore, std::ios::binary);
      if (!in) throw std::runtime_error("cannot read " + a.restore);
      state.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    loader.restore(broadcast(std::move(state), rank));
  }

  std::string keys;
  loader.begin_pass();
  for (std::uint64_t step = 0; step < a.steps; ++step) {
    std::optional<wds::Sample> s = loader.next();
    if (!s) {  // the pass (epoch) ended: the streams go on in the next
      loader.begin_pass();
      s = loader.next();
      if (!s) throw std::runtime_error("the data ran out");
    }
    // ... forward, backward, all-reduce of the gradients ...
    keys += s->key();
    keys += '\n';
  }

  std::vector<std::string> all_keys = gather(keys, rank, size);
  std::vector<std::string> states =
      gather(a.save.empty() ? std::string() : loader.state(), rank, size);
  if (rank == 0) {
    if (!a.keys.empty()) {
      std::ofstream out(a.keys, std::ios::binary);
      for (const std::string& k : all_keys) out << k;
      if (!out) throw std::runtime_error("cannot write " + a.keys);
    }
    if (!a.save.empty()) {
      std::ofstream out(a.save, std::ios::binary);
      out << wds::merge_states(states);
      if (!out) throw std::runtime_error("cannot write " + a.save);
      std::printf("elastic_train: %d ranks x %d workers took %llu samples each; state in %s\n",
                  size, a.workers, static_cast<unsigned long long>(a.steps), a.save.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Args args;
  try {
    args = parse(argc, argv);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "elastic_train: %s\n%s", e.what(), kUsage);
    MPI_Finalize();
    return 2;
  }
  try {
    run(args, rank, size);
  } catch (const std::exception& e) {  // wds::Error and the checks above
    std::fprintf(stderr, "elastic_train: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);  // no rank may wait forever in a collective
  }
  MPI_Finalize();
  return 0;
}
