// stream_shards: the smallest useful wds program. Streams shards in order, as one rank of a
// distributed job would, and reports throughput.
//
//   stream_shards 'data/train-{000000..000007}.tar' [RANK WORLD_SIZE]
//
// Copy it as the start of a data-loading loop: replace the counting with your training step.
#include <wds/wds.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: stream_shards URL-PATTERN [RANK WORLD_SIZE]\n");
    return 1;
  }
  const int rank = argc > 3 ? std::atoi(argv[2]) : 0;
  const int world_size = argc > 3 ? std::atoi(argv[3]) : 1;
  try {
    std::vector<std::string> urls = wds::split_by_node(wds::expand_urls(argv[1]), rank, world_size);
    wds::TarSamplesOptions options;
    options.handler = wds::warn_and_continue;  // a broken shard is reported, not fatal
    wds::TarSamples samples(urls, options);

    auto start = std::chrono::steady_clock::now();
    std::size_t count = 0, bytes = 0;
    while (std::optional<wds::Sample> s = samples.next()) {
      ++count;
      bytes += s->payload_bytes();
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "rank %d/%d: %zu shards, %zu samples, %.1f MB in %.3f s: %.0f samples/s, %.1f MB/s\n", rank,
        world_size, urls.size(), count, static_cast<double>(bytes) / 1e6, secs,
        static_cast<double>(count) / secs, static_cast<double>(bytes) / 1e6 / secs);
    return samples.shards_failed() == 0 ? 0 : 1;
  } catch (const wds::Error& e) {
    std::fprintf(stderr, "stream_shards: %s\n", e.what());
    return 1;
  }
}
