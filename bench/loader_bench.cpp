// The Loader against the same pipeline on the calling thread, on the smallest samples, where
// the hand-off costs most; and what the metrics cost. Also the imdecode ceiling that
// bench/loader_bench.sh measures the decoding loader against.
//
//   build/bench/loader_bench [--dir=DIR] [--reps=R] [--passes=P]
//   build/bench/loader_bench --imdecode --threads=T [--reduce=K] [--resize=N] SHARD...
//   perf stat -e instructions:u build/bench/loader_bench --only=metrics-on|metrics-off
//
// 1. 8 shards x 10,000 samples of two 100-byte members, read as
//    WebDataset(shards, shuffled shards) | shuffle(1000), unbatched: on the calling thread (the
//    ceiling), then through Loader with 1 and 2 workers (prefetch 2, the default), repetitions
//    interleaved, medians; each Loader figure as a share of the ceiling.
// 2. Loader(1 worker) with the stages' metrics off, against metrics on and read every 100 ms
//    by another thread (as a training job's logger would). Wall time on a shared 2-core VM
//    moves by more than the metrics cost, so --only=metrics-on / --only=metrics-off run just the
//    pipeline on the calling thread with the counters on or off, for `perf stat` to count
//    instructions (deterministic, unlike time).
// --imdecode: T threads, each decoding every JPEG of the shards with cv::imdecode(IMREAD_COLOR)
// from memory (at 1/K scale with --reduce, then resized to a shorter side of N with --resize,
// as the pipeline's --resize/--crop do); prints one JSON line with img_per_s.
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "wds/loader.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"
#include "wds/webdataset.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int imdecode_ceiling(int threads, int reduce, int resize, const std::vector<std::string>& shards) {
  std::vector<std::vector<uchar>> jpegs;
  wds::TarSamples samples(shards);
  while (std::optional<wds::Sample> s = samples.next()) {
    if (const wds::Bytes* j = s->find("jpg")) {
      const auto* p = reinterpret_cast<const uchar*>(j->data());
      jpegs.emplace_back(p, p + j->size());
    }
  }
  if (jpegs.empty()) {
    std::fprintf(stderr, "loader_bench: no jpg fields in the shards\n");
    return 1;
  }
  cv::setNumThreads(1);
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      const int flags = reduce == 2   ? cv::IMREAD_REDUCED_COLOR_2
                        : reduce == 4 ? cv::IMREAD_REDUCED_COLOR_4
                        : reduce == 8 ? cv::IMREAD_REDUCED_COLOR_8
                                      : cv::IMREAD_COLOR;
      cv::Mat resized;
      for (const auto& j : jpegs) {
        cv::Mat img = cv::imdecode(j, flags);
        if (img.empty()) std::abort();
        if (resize > 0 && std::min(img.rows, img.cols) != resize) {
          const double f = static_cast<double>(resize) / std::min(img.rows, img.cols);
          cv::resize(img, resized, cv::Size(), f, f, f < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("{\"images\": %zu, \"threads\": %d, \"wall_s\": %.4f, \"img_per_s\": %.1f}\n",
              jpegs.size() * static_cast<std::size_t>(threads), threads, secs,
              static_cast<double>(jpegs.size()) * threads / secs);
  return 0;
}

std::vector<std::string> write_tiny_shards(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> shards;
  const std::string payload(100, 'x');
  for (int s = 0; s < 8; ++s) {
    std::string path = dir + "/tiny-" + std::to_string(s) + ".tar";
    shards.push_back(path);
    if (std::filesystem::exists(path)) continue;
    wds::TarWriter w(wds::open_sink(path), {.mtime = 0});
    for (int i = 0; i < 10000; ++i) {
      wds::Sample smp("s" + std::to_string(s) + "_" + std::to_string(i));
      smp.add("bin", wds::Bytes::copy_of(payload));
      smp.add("txt", wds::Bytes::copy_of(payload));
      w.write(smp);
    }
    w.close();
  }
  return shards;
}

wds::Pipeline<wds::Sample> tiny_pipeline(const std::vector<std::string>& shards) {
  wds::WebDatasetOptions o;
  o.seed = 1;
  o.shuffle_shards = true;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  return wds::WebDataset(shards, o).shuffle(1000);
}

// Samples per second over `passes` passes.
template <class Iterable>
double rate(Iterable& items, int passes) {
  std::size_t n = 0, bytes = 0;
  const auto start = Clock::now();
  for (int p = 0; p < passes; ++p) {
    for (wds::Sample& s : items) {
      ++n;
      bytes += s.fields().size();  // touch the sample, as a consumer would
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (bytes == 0) std::abort();
  return static_cast<double>(n) / secs;
}

double on_thread(const std::vector<std::string>& shards, int passes, bool metrics = true) {
  wds::Pipeline<wds::Sample> p = tiny_pipeline(shards).with_metrics(metrics);
  return rate(p, passes);
}

double loader(const std::vector<std::string>& shards, int workers, int passes, bool metrics,
              bool read_metrics) {
  wds::LoaderOptions<wds::Sample> o;
  o.workers = workers;
  o.metrics = metrics;
  wds::Loader<wds::Sample> l(tiny_pipeline(shards), o);
  std::atomic<bool> done{false};
  std::thread reader;
  if (read_metrics) {
    reader = std::thread([&] {
      std::uint64_t sink = 0;
      while (!done.load()) {
        sink += l.metrics().samples;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (sink == 1) std::puts("");
    });
  }
  const double r = rate(l, passes);
  done = true;
  if (reader.joinable()) reader.join();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = (std::filesystem::temp_directory_path() / "wds-loader-bench").string();
  int reps = 7, passes = 3, threads = 2, reduce = 1, resize = 0;
  bool imdecode = false;
  std::string only;
  std::vector<std::string> shards;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--dir=", 6) == 0) {
      dir = argv[i] + 6;
    } else if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::atoi(argv[i] + 7);
    } else if (std::strncmp(argv[i], "--passes=", 9) == 0) {
      passes = std::atoi(argv[i] + 9);
    } else if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--reduce=", 9) == 0) {
      reduce = std::atoi(argv[i] + 9);
    } else if (std::strncmp(argv[i], "--resize=", 9) == 0) {
      resize = std::atoi(argv[i] + 9);
    } else if (std::strncmp(argv[i], "--only=", 7) == 0) {
      only = argv[i] + 7;
    } else if (std::strcmp(argv[i], "--imdecode") == 0) {
      imdecode = true;
    } else if (argv[i][0] != '-') {
      shards.emplace_back(argv[i]);
    } else {
      std::fprintf(stderr,
                   "usage: loader_bench [--dir=DIR] [--reps=R] [--passes=P]\n"
                   "       loader_bench --imdecode --threads=T [--reduce=K] [--resize=N] "
                   "SHARD...\n");
      return 2;
    }
  }
  if (imdecode) return imdecode_ceiling(threads, reduce, resize, shards);

  shards = write_tiny_shards(dir);
  if (!only.empty()) {
    if (only != "metrics-on" && only != "metrics-off") {
      std::fprintf(stderr, "loader_bench: --only takes metrics-on or metrics-off\n");
      return 2;
    }
    std::printf("%.0f samples/s\n", on_thread(shards, passes, only == "metrics-on"));
    return 0;
  }
  std::printf(
      "8 shards x 10,000 samples of two 100-byte members, shuffle(1000), %d passes a "
      "run, %d runs interleaved (medians), %u cores\n\n",
      passes, reps, std::thread::hardware_concurrency());
  on_thread(shards, 1);  // page cache and allocator warm
  std::vector<double> base, w1, w2, off, read;
  for (int r = 0; r < reps; ++r) {
    // Rotate the order so that drift touches every case alike.
    for (int k = 0; k < 5; ++k) {
      switch ((k + r) % 5) {
        case 0:
          base.push_back(on_thread(shards, passes));
          break;
        case 1:
          w1.push_back(loader(shards, 1, passes, true, false));
          break;
        case 2:
          w2.push_back(loader(shards, 2, passes, true, false));
          break;
        case 3:
          off.push_back(loader(shards, 1, passes, false, false));
          break;
        case 4:
          read.push_back(loader(shards, 1, passes, true, true));
          break;
      }
    }
  }
  const double b = median(base);
  std::printf("%-44s %12s %8s\n", "case", "samples/s", "share");
  std::printf("%-44s %12.0f %8s\n", "pipeline on the calling thread (ceiling)", b, "");
  std::printf("%-44s %12.0f %7.1f%%\n", "Loader, 1 worker", median(w1), 100 * median(w1) / b);
  std::printf("%-44s %12.0f %7.1f%%\n", "Loader, 2 workers", median(w2), 100 * median(w2) / b);
  std::printf("\n%-44s %12.0f\n", "Loader, 1 worker, metrics off", median(off));
  std::printf("%-44s %12.0f %7.1f%%\n", "Loader, 1 worker, metrics read every 100 ms", median(read),
              100 * median(read) / median(off));
  std::printf("\nper-run samples/s (calling thread, 1 worker, 2 workers):\n");
  for (int r = 0; r < reps; ++r) {
    std::printf("  %.0f  %.0f  %.0f\n", base[r], w1[r], w2[r]);
  }
  return 0;
}
