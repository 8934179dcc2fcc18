// The cache's checksum (lib/checksum.hpp) against zlib's crc32 over one buffer from cache:
//   build/bench/checksum_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <zlib.h>

#include <cstdlib>
#include <memory>

#include "lib/checksum.hpp"

namespace {

// 64-byte aligned bytes, as the cache reads them.
std::byte* buffer(std::size_t size) {
  static std::unique_ptr<std::byte, decltype(&std::free)> owner(
      static_cast<std::byte*>(std::aligned_alloc(64, std::size_t{1} << 20)), &std::free);
  for (std::size_t i = 0; i < size; ++i) owner.get()[i] = static_cast<std::byte>(i * 131 >> 3);
  return owner.get();
}

void BM_Checksum(benchmark::State& state) {
  const std::size_t size = static_cast<std::size_t>(state.range(0));
  const std::byte* data = buffer(size);
  for (auto _ : state) benchmark::DoNotOptimize(wds::Checksum::of({data, size}));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
  state.SetLabel(wds::Checksum::implementation());
}
BENCHMARK(BM_Checksum)->Arg(64 << 10)->Arg(1 << 20);

void BM_ChecksumPortable(benchmark::State& state) {
  const std::size_t size = static_cast<std::size_t>(state.range(0));
  const std::byte* data = buffer(size);
  for (auto _ : state) benchmark::DoNotOptimize(wds::Checksum::portable({data, size}));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_ChecksumPortable)->Arg(64 << 10);

void BM_ZlibCrc32(benchmark::State& state) {
  const std::size_t size = static_cast<std::size_t>(state.range(0));
  const std::byte* data = buffer(size);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        crc32(0, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(size)));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_ZlibCrc32)->Arg(64 << 10);

}  // namespace

BENCHMARK_MAIN();
