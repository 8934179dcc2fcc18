// The decode pipeline next to its ceiling: OpenCV's imdecode alone on the same JPEGs held in
// memory, with the same number of threads.
//
//   build/bench/decode_bench [--dir=DIR] [--images=N] [--reps=R]
//
// 1. Ceiling: T threads, each decoding every JPEG with cv::imdecode(IMREAD_COLOR) from memory.
//    Pipeline: WebDataset(shards) | decode("rgb8") | to_tuple("jpg", "cls") | batched(64),
//    run by a Loader with T workers (each on its own shards), reading the same JPEGs from
//    tar shards on disk (in the page cache). Both for T = 1 and 2, repetitions interleaved,
//    medians reported, and the pipeline as a share of the ceiling.
// 2. The image decoder alone (decode_image for rgb8, bgr8, torchrgb8, torchrgb) against
//    imdecode alone, single thread.
// 3. Decode-and-resize: JPEGs to a shorter side (256x256 -> 112, 512x512 -> 224, 1024x768 ->
//    192 and -> 96), with reduced-size decoding (at 1/2, 1/4, 1/8 scale, then resize) against
//    full decoding then the same resize.
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "wds/decode.hpp"
#include "wds/loader.hpp"
#include "wds/tar_writer.hpp"
#include "wds/transforms.hpp"
#include "wds/webdataset.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// A textured picture (gradients, shapes, noise), so JPEG sizes and decode costs are realistic
// (about 25 kB at 256x256, quality 90).
std::vector<uchar> make_jpeg(int width, int height, std::mt19937& rng) {
  cv::Mat img(height, width, CV_8UC3);
  const int size = std::max(width, height);
  std::normal_distribution<double> noise(0, 12);
  std::uniform_int_distribution<int> pick(0, 255);
  const int hue = pick(rng);
  for (int y = 0; y < height; ++y) {
    auto* row = img.ptr<cv::Vec3b>(y);
    for (int x = 0; x < width; ++x) {
      const int base = (x + y) * 255 / (2 * size);
      row[x] = cv::Vec3b(cv::saturate_cast<uchar>(base + hue + noise(rng)),
                         cv::saturate_cast<uchar>(255 - base + noise(rng)),
                         cv::saturate_cast<uchar>((hue * 3 + x) % 256 + noise(rng)));
    }
  }
  for (int k = 0; k < 6; ++k) {
    cv::circle(img, {pick(rng) * size / 256, pick(rng) * size / 256}, pick(rng) * size / 1024 + 4,
               cv::Scalar(pick(rng), pick(rng), pick(rng)), -1);
  }
  std::vector<uchar> jpg;
  cv::imencode(".jpg", img, jpg, {cv::IMWRITE_JPEG_QUALITY, 90});
  return jpg;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Images per second decoding every image once per thread, `threads` threads at once.
double ceiling(const std::vector<std::vector<uchar>>& jpegs, int threads) {
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (const auto& j : jpegs) {
        cv::Mat m = cv::imdecode(j, cv::IMREAD_COLOR);
        if (m.empty()) std::abort();
      }
    });
  }
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(jpegs.size()) * threads / secs;
}

// Images per second through the whole pipeline with `threads` loader workers; each worker
// reads `copies` of the shard set so that both sides decode the same number of images.
double pipeline(const std::vector<std::string>& shards, int threads) {
  auto batches = wds::WebDataset(shards) | wds::decode("rgb8") | wds::to_tuple("jpg", "cls") |
                 wds::batched(64);
  wds::Loader<wds::Tuple> loader(batches, {.workers = threads, .prefetch = 2});
  std::size_t images = 0;
  const auto start = Clock::now();
  for (wds::Tuple& b : loader) images += static_cast<std::size_t>(b[0].get<wds::Tensor>().dim(0));
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(images) / secs;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::filesystem::temp_directory_path() / "wds-decode-bench";
  int n = 2048;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--dir=", 6) == 0)
      dir = argv[i] + 6;
    else if (std::strncmp(argv[i], "--images=", 9) == 0)
      n = std::atoi(argv[i] + 9);
    else if (std::strncmp(argv[i], "--reps=", 7) == 0)
      reps = std::atoi(argv[i] + 7);
    else {
      std::fprintf(stderr, "usage: decode_bench [--dir=DIR] [--images=N] [--reps=R]\n");
      return 2;
    }
  }
  std::filesystem::create_directories(dir);
  cv::setNumThreads(1);  // one thread per decode on both sides

  std::mt19937 rng(7);
  std::vector<std::vector<uchar>> jpegs;
  std::size_t total = 0;
  for (int i = 0; i < n; ++i) {
    jpegs.push_back(make_jpeg(256, 256, rng));
    total += jpegs.back().size();
  }
  // Two copies of the images in shards: the 2-worker pipeline decodes each image twice in all,
  // as the 2-thread ceiling does; the 1-worker one reads the first copy.
  std::vector<std::string> shards;
  for (int copy = 0; copy < 2; ++copy) {
    for (int s = 0; s < 4; ++s) {
      std::string path = dir + "/copy" + std::to_string(copy) + "-" + std::to_string(s) + ".tar";
      wds::TarWriter w(wds::open_sink(path), {.mtime = 0});
      for (int i = s; i < n; i += 4) {
        wds::Sample smp("img" + std::to_string(i));
        smp.add("jpg", wds::Bytes::copy_of(std::span(
                           reinterpret_cast<const std::byte*>(jpegs[i].data()), jpegs[i].size())));
        smp.add("cls", wds::Bytes::copy_of(std::to_string(i % 1000)));
        w.write(smp);
      }
      w.close();
      shards.push_back(path);
    }
  }
  std::printf("%d JPEGs of 256x256, %.1f kB on average, %d repetitions (medians)\n\n", n,
              static_cast<double>(total) / n / 1e3, reps);
  std::printf("%-8s %16s %16s %8s\n", "threads", "imdecode img/s", "pipeline img/s", "share");
  for (int threads : {1, 2}) {
    std::vector<std::string> use(shards.begin(), shards.begin() + 4 * threads);
    std::vector<double> c, p;
    pipeline(use, threads);  // warm the page cache and the decoder
    for (int r = 0; r < reps; ++r) {
      if (r % 2 == 0) {
        c.push_back(ceiling(jpegs, threads));
        p.push_back(pipeline(use, threads));
      } else {
        p.push_back(pipeline(use, threads));
        c.push_back(ceiling(jpegs, threads));
      }
    }
    std::printf("%-8d %16.0f %16.0f %7.1f%%\n", threads, median(c), median(p),
                100.0 * median(p) / median(c));
  }

  // The image decoder alone against imdecode alone, one thread, the same JPEGs.
  auto as_bytes = [](const std::vector<uchar>& j) {
    return std::span(reinterpret_cast<const std::byte*>(j.data()), j.size());
  };
  std::printf("\ndecode_image alone, 1 thread, share of imdecode:");
  for (const char* name : {"rgb8", "bgr8", "torchrgb8", "torchrgb"}) {
    const wds::ImageSpec spec = wds::parse_image_spec(name);
    // Both on this thread, so that they share its allocator arena and caches.
    auto rate = [&] {
      const auto start = Clock::now();
      for (const auto& j : jpegs) wds::decode_image(as_bytes(j), spec);
      return static_cast<double>(jpegs.size()) /
             std::chrono::duration<double>(Clock::now() - start).count();
    };
    auto bare = [&] {
      const auto start = Clock::now();
      for (const auto& j : jpegs) {
        if (cv::imdecode(j, cv::IMREAD_COLOR).empty()) std::abort();
      }
      return static_cast<double>(jpegs.size()) /
             std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<double> c, d;
    rate();  // warm up
    for (int r = 0; r < reps; ++r) {
      if (r % 2 == 0) {
        c.push_back(bare());
        d.push_back(rate());
      } else {
        d.push_back(rate());
        c.push_back(bare());
      }
    }
    std::printf("  %s %.1f%%", name, 100.0 * median(d) / median(c));
  }
  std::printf("\n");

  // Decode-and-resize against decode-then-resize: the reduced decode scale is 1/2, 1/2, 1/4
  // and 1/8 in these cases.
  struct ResizeCase {
    int width, height, target;
  };
  std::printf("\nresize to a shorter side, 1 thread (img/s):\n");
  std::printf("%-20s %14s %14s %8s\n", "case", "then resize", "reduced", "gain");
  for (ResizeCase rc : {ResizeCase{256, 256, 112}, ResizeCase{512, 512, 224},
                        ResizeCase{1024, 768, 192}, ResizeCase{1024, 768, 96}}) {
    std::vector<std::vector<uchar>> big;
    for (int i = 0; i < 128; ++i) big.push_back(make_jpeg(rc.width, rc.height, rng));
    auto resize_rate = [&](bool reduced) {
      const wds::ImageSpec spec = wds::parse_image_spec("rgb8");
      const wds::ImageDecodeOptions o{.resize = rc.target, .reduced_decode = reduced};
      const auto start = Clock::now();
      for (const auto& j : big) {
        if (wds::decode_image(as_bytes(j), spec, o).dim(0) != rc.target) std::abort();
      }
      return static_cast<double>(big.size()) /
             std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<double> full, reduced;
    resize_rate(true);
    for (int r = 0; r < reps; ++r) {
      full.push_back(resize_rate(false));
      reduced.push_back(resize_rate(true));
    }
    char label[32];
    std::snprintf(label, sizeof label, "%dx%d -> %d", rc.width, rc.height, rc.target);
    std::printf("%-20s %14.0f %14.0f %7.2fx\n", label, median(full), median(reduced),
                median(reduced) / median(full));
  }
  std::filesystem::remove_all(dir);
  return 0;
}
