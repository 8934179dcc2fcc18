// wds bench URL-PATTERN...: run the reading pipeline and report its throughput.
#include <chrono>
#include <cstdio>

#include "tools/commands.hpp"
#include "tools/pipeline_options.hpp"

namespace wds::tool {
namespace {

void run_bench(const PipelineOptions& o) {
  Pipeline<Sample> samples = make_pipeline(o);
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t count = 0, bytes = 0;
  for (std::uint64_t pass = 0; pass < o.passes; ++pass) {
    std::uint64_t pass_count = 0, pass_bytes = 0;
    const auto pass_start = std::chrono::steady_clock::now();
    for (Sample& s : samples) {
      ++pass_count;
      pass_bytes += s.payload_bytes();
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count();
    std::fprintf(stderr, "pass %llu: %llu samples, %.1f MB in %.3f s\n",
                 static_cast<unsigned long long>(pass), static_cast<unsigned long long>(pass_count),
                 static_cast<double>(pass_bytes) / 1e6, secs);
    count += pass_count;
    bytes += pass_bytes;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%llu samples, %.1f MB in %.3f s: %.0f samples/s, %.1f MB/s\n",
              static_cast<unsigned long long>(count), static_cast<double>(bytes) / 1e6, secs,
              secs > 0 ? static_cast<double>(count) / secs : 0.0,
              secs > 0 ? static_cast<double>(bytes) / 1e6 / secs : 0.0);
}

}  // namespace

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench", "Run the reading pipeline (split, shuffles, epochs) and report samples/s and MB/s.");
  auto o = std::make_shared<PipelineOptions>();
  add_pipeline_options(*cmd, *o);
  cmd->footer(
      "Examples:\n  wds bench 'data/train-{000000..000099}.tar'\n"
      "  wds bench --resampled --epoch 10000 --passes 3 --shuffle 1000 "
      "'data/train-{000..099}.tar'");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace wds::tool
