// Raw tar-to-samples throughput (samples grouped, bytes in memory, no decode), one thread, from
// the page cache, next to its ceiling and a peer measured in the same run on the same files:
//   ceiling     the least any tar reader does: read() the file in 1 MiB blocks, take each
//               header's size and copy each member into one reused buffer (no checksum, no
//               name, no sample);
//   libarchive  a bare libarchive loop that walks the headers and reads each member into one
//               reused buffer.
//
//   build/bench/tar_bench [--dir=/tmp/wds-bench] [Google Benchmark flags]
//
// Two shards are written once (and reused if present): 1 MiB payloads (one member per sample)
// and 100-byte payloads (two members per sample). Each case runs 5 times; the summary at the
// end prints the medians, and wds as a percentage of the ceiling and of libarchive.
#include <archive.h>
#include <archive_entry.h>
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "wds/sink.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"

namespace {

std::string g_dir = (std::filesystem::temp_directory_path() / "wds-bench").string();

struct Dataset {
  const char* name;
  std::size_t payload;
  int members_per_sample;
  int samples;
};
const Dataset kLarge{"1MiB", 1 << 20, 1, 384};
const Dataset kSmall{"100B", 100, 2, 250000};

std::string shard_path(const Dataset& d) {
  return g_dir + "/" + d.name + ".tar";
}

void make_shard(const Dataset& d) {
  std::string path = shard_path(d);
  if (std::filesystem::exists(path)) return;
  std::filesystem::create_directories(g_dir);
  wds::TarWriterOptions options;
  options.mtime = 0;
  wds::TarWriter writer(wds::open_sink(path), options);
  std::string payload(d.payload, 'x');
  const char* exts[] = {"bin", "cls"};
  char key[32];
  for (int i = 0; i < d.samples; ++i) {
    std::snprintf(key, sizeof key, "sample%08d", i);
    for (int m = 0; m < d.members_per_sample; ++m) {
      payload[0] = static_cast<char>('a' + (i + m) % 26);
      writer.write_file(std::string(key) + "." + exts[m], payload);
    }
  }
  writer.close();
}

// A ustar header's size field: octal digits, space- or NUL-terminated (the writer's form).
std::uint64_t header_size(const char* header) {
  std::uint64_t n = 0;
  for (int i = 124; i < 136 && header[i] >= '0' && header[i] <= '7'; ++i)
    n = n * 8 + (header[i] - '0');
  return n;
}

void header_walk(benchmark::State& state, const Dataset& d) {
  std::string path = shard_path(d);
  std::vector<char> block(1 << 20), member(d.payload);
  std::int64_t members = 0, bytes = 0;
  for (auto _ : state) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      state.SkipWithError("cannot open shard");
      return;
    }
    std::size_t have = 0, at = 0;  // bytes in block, position in it
    // Makes `n` more bytes (n <= a block) readable from `at`; false at the end of the file.
    auto fill = [&](std::size_t n) {
      if (have - at >= n) return true;
      std::memmove(block.data(), block.data() + at, have - at);
      have -= at;
      at = 0;
      while (have < n) {
        const ssize_t r = ::read(fd, block.data() + have, block.size() - have);
        if (r <= 0) return false;
        have += static_cast<std::size_t>(r);
      }
      return true;
    };
    while (fill(512) && block[at] != 0) {  // an empty name: the end blocks
      const std::size_t size = static_cast<std::size_t>(header_size(block.data() + at));
      at += 512;
      if (size > member.size()) {  // not a shard this benchmark wrote
        state.SkipWithError("member larger than the dataset's payload");
        break;
      }
      for (std::size_t out = 0; out < size;) {
        if (at == have && !fill(1)) break;
        const std::size_t piece = std::min(size - out, have - at);
        std::memcpy(member.data() + out, block.data() + at, piece);
        out += piece;
        at += piece;
      }
      benchmark::DoNotOptimize(member.data());
      const std::size_t padding = (512 - size % 512) % 512;
      if (!fill(padding)) break;
      at += padding;
      bytes += static_cast<std::int64_t>(size);
      ++members;
    }
    ::close(fd);
  }
  state.SetItemsProcessed(members);
  state.SetBytesProcessed(bytes);
}

void bare_libarchive(benchmark::State& state, const Dataset& d) {
  std::string path = shard_path(d);
  std::vector<char> buffer(d.payload);
  std::int64_t members = 0, bytes = 0;
  for (auto _ : state) {
    archive* ar = archive_read_new();
    archive_read_support_format_tar(ar);
    if (archive_read_open_filename(ar, path.c_str(), 1 << 20) != ARCHIVE_OK) {
      state.SkipWithError("cannot open shard");
      archive_read_free(ar);
      return;
    }
    archive_entry* e;
    while (archive_read_next_header(ar, &e) == ARCHIVE_OK) {
      la_ssize_t n = archive_read_data(ar, buffer.data(), buffer.size());
      benchmark::DoNotOptimize(buffer.data());
      bytes += n;
      ++members;
    }
    archive_read_free(ar);
  }
  state.SetItemsProcessed(members);
  state.SetBytesProcessed(bytes);
}

void wds_tar_samples(benchmark::State& state, const Dataset& d) {
  std::string path = shard_path(d);
  std::int64_t members = 0, bytes = 0;
  for (auto _ : state) {
    wds::TarSamples samples({path});
    while (std::optional<wds::Sample> s = samples.next()) {
      for (const wds::Field& f : s->fields()) {
        benchmark::DoNotOptimize(f.data.data());
        bytes += static_cast<std::int64_t>(f.data.size());
        ++members;
      }
    }
  }
  state.SetItemsProcessed(members);
  state.SetBytesProcessed(bytes);
}

// Console output as usual, plus a summary of wds against the ceiling and the peer per dataset.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      // With repetitions, the median is the figure; without, the single run.
      bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      bool single = run.run_type == Run::RT_Iteration && run.repetitions <= 1;
      if (run.error_occurred || !(median || single)) continue;
      auto items = run.counters.find("items_per_second");
      auto bytes = run.counters.find("bytes_per_second");
      if (items == run.counters.end() || bytes == run.counters.end()) continue;
      rates_[run.run_name.function_name] = {items->second.value, bytes->second.value};
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nsummary (single thread, page cache, median of the repetitions)\n");
    std::printf("%-6s %-10s %14s %12s\n", "data", "reader", "members/s", "MB/s");
    for (const Dataset* d : {&kLarge, &kSmall}) {
      auto ceiling = rates_.find(std::string("ceiling/") + d->name);
      auto peer = rates_.find(std::string("libarchive/") + d->name);
      auto ours = rates_.find(std::string("wds/") + d->name);
      if (ceiling == rates_.end() || peer == rates_.end() || ours == rates_.end()) continue;
      for (auto* r : {&*ceiling, &*peer, &*ours}) {
        std::printf("%-6s %-10s %14.0f %12.1f\n", d->name,
                    r->first.substr(0, r->first.find('/')).c_str(), r->second.first,
                    r->second.second / 1e6);
      }
      for (auto [r, label] : {std::pair{&*ceiling, "wds/ceil"}, std::pair{&*peer, "wds/libarch"}}) {
        std::printf("%-6s %-10s %13.1f%% %11.1f%%\n", d->name, label,
                    100 * ours->second.first / r->second.first,
                    100 * ours->second.second / r->second.second);
      }
    }
  }

 private:
  std::map<std::string, std::pair<double, double>> rates_;
};

}  // namespace

int main(int argc, char** argv) {
  // Repetitions of the ceiling and of wds are interleaved at random, so that drift in the
  // machine's speed (frequent on shared machines) touches both alike. Flags given later win.
  static char repetitions[] = "--benchmark_repetitions=5";
  static char interleave[] = "--benchmark_enable_random_interleaving=true";
  static char aggregates[] = "--benchmark_report_aggregates_only=true";
  init_benchmark(argc, argv, g_dir, {repetitions, interleave, aggregates});
  for (const Dataset* d : {&kLarge, &kSmall}) {
    make_shard(*d);
    benchmark::RegisterBenchmark((std::string("ceiling/") + d->name).c_str(),
                                 [d](benchmark::State& s) { header_walk(s, *d); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("libarchive/") + d->name).c_str(),
                                 [d](benchmark::State& s) { bare_libarchive(s, *d); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("wds/") + d->name).c_str(), [d](benchmark::State& s) {
      wds_tar_samples(s, *d);
    })->Unit(benchmark::kMillisecond);
  }
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
