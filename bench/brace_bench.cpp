// Benchmarks of shard-pattern expansion: the million-name range that large datasets use, a
// two-set "::" URL string with ${VAR} substitution, and a small nested pattern.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "wds/brace.hpp"

namespace {

void BM_BraceExpandMillion(benchmark::State& state) {
  std::size_t names = 0;
  for (auto _ : state) {
    std::vector<std::string> out = wds::brace_expand("shard-{000000..999999}.tar");
    names = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * names));
}
BENCHMARK(BM_BraceExpandMillion)->Unit(benchmark::kMillisecond);

void BM_ExpandUrlsTwoSets(benchmark::State& state) {
  // The variable is ours alone; nothing else in this program reads the environment.
  ::setenv("WDS_BENCH_ROOT", "s3://bucket/dataset", 1);
  const char* urls =
      "${BENCH_ROOT}/train-{000000..009999}.tar::${BENCH_ROOT}/extra/part-{a..d}-{000..249}.tar";
  std::size_t names = 0;
  for (auto _ : state) {
    std::vector<std::string> out = wds::expand_urls(urls);
    names = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * names));
}
BENCHMARK(BM_ExpandUrlsTwoSets)->Unit(benchmark::kMicrosecond);

void BM_BraceExpandSmallNested(benchmark::State& state) {
  std::size_t names = 0;
  for (auto _ : state) {
    std::vector<std::string> out =
        wds::brace_expand("s3://b/{train,val}/{en,de{-at,-ch}}-{00..03}.{tar,idx}");
    names = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * names));
}
BENCHMARK(BM_BraceExpandSmallNested);

}  // namespace

BENCHMARK_MAIN();
