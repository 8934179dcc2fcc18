// Overhead of the pipeline stages themselves, on samples made in memory (no I/O, no tar): what
// split + shuffle + epoch cost per sample, next to the same loop without stages.
//
//   build/bench/pipeline_bench
//
// Each sample has two small fields (as the 100-byte case of tar_bench); compare samples/s here
// with tar_bench's wds/100B members/s / 2 to see the stages' share.
#include <benchmark/benchmark.h>

#include "wds/pipeline.hpp"
#include "wds/shardlists.hpp"

namespace {

// Makes `n` samples per pass in memory: key and two 100-byte fields, as a shard would give.
class MemorySamples final : public wds::Stream<wds::Sample> {
 public:
  explicit MemorySamples(std::size_t n) : n_(n) {
    shard_ = std::make_shared<const wds::ShardInfo>(wds::ShardInfo{"mem://bench.tar", ""});
  }
  void start(const wds::PassContext&) override { i_ = 0; }
  std::optional<wds::Sample> next() override {
    if (i_ >= n_) return std::nullopt;
    wds::Sample s("sample" + std::to_string(i_++), shard_);
    s.fields().reserve(4);
    s.add("bin", wds::Bytes(100));
    s.add("cls", wds::Bytes(100));
    return s;
  }

 private:
  std::size_t n_;
  std::size_t i_ = 0;
  std::shared_ptr<const wds::ShardInfo> shard_;
};

constexpr std::size_t kSamples = 200000;

wds::Pipeline<wds::Sample> source() {
  wds::PassContext ctx;
  ctx.seed = 1;
  return wds::Pipeline<wds::Sample>([] { return std::make_unique<MemorySamples>(kSamples); }, ctx);
}

void consume(benchmark::State& state, wds::Pipeline<wds::Sample> p) {
  std::int64_t n = 0;
  for (auto _ : state) {
    for (wds::Sample& s : p) {
      benchmark::DoNotOptimize(s.fields().data());
      ++n;
    }
  }
  state.SetItemsProcessed(n);
}

void BM_NoStages(benchmark::State& state) {
  consume(state, source());
}
void BM_Shuffle1000(benchmark::State& state) {
  consume(state, source().shuffle(1000));
}
void BM_SplitSamplesOf4(benchmark::State& state) {
  // One consumer of 4 keeps a quarter: the cost of reading and dropping the rest.
  consume(state, (source() | wds::split_samples()).with_worker(1, 4));
}
void BM_Shuffle1000WithEpoch(benchmark::State& state) {
  consume(state, source().shuffle(1000).with_epoch(kSamples / 2));
}
void BM_AllSampleStages(benchmark::State& state) {
  consume(state, source()
                     .shuffle(1000)
                     .select([](const wds::Sample& s) { return !s.key().empty(); })
                     .slice(0, std::nullopt, 1)
                     .with_epoch(kSamples / 2));
}
// The shard stages run once per pass over the URL list: 100,000 URLs, split for rank 3 of 8.
void BM_ShardStages100k(benchmark::State& state) {
  std::vector<std::string> urls;
  for (int i = 0; i < 100000; ++i) urls.push_back("/data/train-" + std::to_string(i) + ".tar");
  wds::ShardListOptions o;
  o.shuffle = true;
  o.distributed.rank = 3;
  o.distributed.world_size = 8;
  auto p =
      (wds::ShardList(urls, o) | wds::split_by_node() | wds::split_by_worker() | wds::shuffle(100))
          .with_worker(1, 4);
  std::int64_t n = 0;
  for (auto _ : state) {
    for (std::string& url : p) {
      benchmark::DoNotOptimize(url.data());
      ++n;
    }
  }
  state.SetItemsProcessed(n);
}

BENCHMARK(BM_NoStages)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Shuffle1000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SplitSamplesOf4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Shuffle1000WithEpoch)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllSampleStages)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ShardStages100k)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
