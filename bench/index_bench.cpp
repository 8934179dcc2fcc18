// Random access through shard indexes: samples read per second by IndexedDataset::get(i) at
// random i, from the page cache, one thread and two. For context, the same shards streamed.
//
//   build/bench/index_bench [--dir=DIR]
//
// 16 shards x 1,000 samples of a 10 KiB and a 10-byte field each (~165 MB), indexed once.
#include <benchmark/benchmark.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "wds/index.hpp"
#include "wds/indexed_dataset.hpp"
#include "wds/random.hpp"
#include "wds/sink.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"

namespace {

std::string g_dir = (std::filesystem::temp_directory_path() / "wds-bench-index").string();
std::vector<std::string> g_shards;
std::unique_ptr<wds::IndexedDataset> g_dataset;  // built before the benchmarks run

void make_shards() {
  std::filesystem::create_directories(g_dir);
  wds::ShardWriter out(g_dir + "/shard-%06d.tar", {.max_count = 1000, .tar = {.mtime = 0}});
  for (int i = 0; i < 16000; ++i) {
    wds::Sample s("sample" + std::to_string(i));
    wds::Bytes image(10 << 10);
    std::memset(image.data(), 'a' + i % 26, image.size());
    s.add("jpg", std::move(image));
    s.add("cls", wds::Bytes::copy_of(std::to_string(i % 1000)));
    out.write(s);
  }
  out.close();
  g_shards = out.shards();
  for (const std::string& shard : g_shards) {
    std::string text = wds::format_index(wds::build_index(shard));
    auto sink = wds::open_sink(wds::default_index_path(shard));
    sink->write(std::as_bytes(std::span(text)));
    sink->close();
  }
}

void random_reads(benchmark::State& state) {
  const wds::IndexedDataset* ds = g_dataset.get();
  wds::Rng rng(static_cast<std::uint64_t>(state.thread_index()) + 1);
  std::int64_t bytes = 0;
  for (auto _ : state) {
    wds::Sample s = ds->get(rng.below(ds->size()));
    bytes += static_cast<std::int64_t>(s.payload_bytes());
    benchmark::DoNotOptimize(s.fields().data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(bytes);
}

void streamed(benchmark::State& state) {
  std::int64_t n = 0;
  for (auto _ : state) {
    wds::TarSamples samples(g_shards);
    while (auto s = samples.next()) {
      benchmark::DoNotOptimize(s->fields().data());
      ++n;
    }
  }
  state.SetItemsProcessed(n);
}

}  // namespace

BENCHMARK(random_reads)->Name("indexed/random_get")->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(streamed)->Name("streamed/tar_samples")->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  init_benchmark(argc, argv, g_dir);
  make_shards();
  g_dataset = std::make_unique<wds::IndexedDataset>(g_shards);
  benchmark::RunSpecifiedBenchmarks();
  g_dataset.reset();
  benchmark::Shutdown();
  std::filesystem::remove_all(g_dir);
  return 0;
}
