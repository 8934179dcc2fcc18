// Shard writing throughput next to its ceiling in the same run: `cat`'s work (read a file,
// write it to a new one) on a file of the same payload bytes, and the shard writer, on samples
// held in memory, both into the page cache of --dir (default /tmp/wds-bench-write). Rates are
// per wall-clock second.
//
//   build/bench/writer_bench [--dir=DIR]
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "wds/sample.hpp"
#include "wds/tar_writer.hpp"

namespace {

std::string g_dir = (std::filesystem::temp_directory_path() / "wds-bench-write").string();

// 256 MiB of payload either way.
constexpr std::size_t kTotal = std::size_t{256} << 20;

std::vector<wds::Sample> make_samples(std::size_t payload) {
  std::vector<wds::Sample> out;
  for (std::size_t i = 0; i < kTotal / payload; ++i) {
    wds::Sample s("sample" + std::to_string(i));
    wds::Bytes b(payload);
    std::memset(b.data(), static_cast<int>('a' + i % 26), payload);
    s.add("bin", std::move(b));
    out.push_back(std::move(s));
  }
  return out;
}

void cat_ceiling(benchmark::State& state) {
  std::filesystem::create_directories(g_dir);
  const std::string src = g_dir + "/cat-src.bin", dst = g_dir + "/cat-dst.bin";
  {
    std::vector<char> block(1 << 20, 'x');
    int fd = ::open(src.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (std::size_t n = 0; n < kTotal; n += block.size()) {
      if (::write(fd, block.data(), block.size()) < 0) break;
    }
    ::close(fd);
  }
  std::vector<char> buf(128 << 10);  // GNU cat's buffer size
  for (auto _ : state) {
    int in = ::open(src.c_str(), O_RDONLY);
    int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (ssize_t n; (n = ::read(in, buf.data(), buf.size())) > 0;) {
      if (::write(out, buf.data(), static_cast<std::size_t>(n)) != n) break;
    }
    ::close(in);
    ::close(out);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kTotal));
}

void shard_writer(benchmark::State& state) {
  std::filesystem::create_directories(g_dir);
  const std::vector<wds::Sample> samples = make_samples(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    wds::ShardWriter out(g_dir + "/out-%06d.tar",
                         {.max_size = std::uint64_t{64} << 20, .tar = {.mtime = 0}});
    for (const wds::Sample& s : samples) out.write(s);
    out.close();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kTotal));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * samples.size()));
}

}  // namespace

BENCHMARK(cat_ceiling)
    ->Name("ceiling/cat")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(shard_writer)
    ->Name("wds/ShardWriter/1MiB")
    ->Arg(1 << 20)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(shard_writer)
    ->Name("wds/ShardWriter/100KiB")
    ->Arg(100 << 10)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(shard_writer)
    ->Name("wds/ShardWriter/1KiB")
    ->Arg(1 << 10)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();

int main(int argc, char** argv) {
  init_benchmark(argc, argv, g_dir);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(g_dir);
  return 0;
}
