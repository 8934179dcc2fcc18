// make_synthetic_shards: writes a small WebDataset-style image dataset to try wds on.
//
//   make_synthetic_shards OUT_DIR [--shards 8] [--samples 200] [--size 256] [--seed 1] [--photo]
//
// --photo: images of many sizes, shaped like a photo dataset's (ImageNet's train set): nine in
// ten of about 500x375 in either orientation, one in ten of 1-2 megapixels; else SIZE x SIZE.
//
// Each sample is a JPEG (a coloured gradient with noise, its hue set by the class), a class
// label (cls) and JSON metadata, in shards OUT_DIR/train-000000.tar, ... The same arguments
// always give the same bytes.
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <wds/wds.hpp>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <utility>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace {

bool flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == name) return true;
  }
  return false;
}

int int_arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == name) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

// A photo's width and height: most about 500x375 (either way up), one in ten of 1-2 MP.
std::pair<int, int> photo_size(std::mt19937& rng) {
  static constexpr std::pair<int, int> kCommon[] = {{500, 375}, {500, 333}, {500, 400},
                                                    {640, 480}, {500, 500}, {375, 500}};
  static constexpr std::pair<int, int> kLarge[] = {{1200, 900}, {1600, 1200}, {1024, 1360}};
  if (rng() % 10 == 0) return kLarge[rng() % std::size(kLarge)];
  return kCommon[rng() % std::size(kCommon)];
}

std::string make_jpeg(int width, int height, int label, std::mt19937& rng) {
  const int size = std::max(width, height);
  cv::Mat img(height, width, CV_8UC3);
  std::uniform_int_distribution<int> noise(-20, 20);
  const int hue = label * 25;
  for (int y = 0; y < height; ++y) {
    auto* row = img.ptr<cv::Vec3b>(y);
    for (int x = 0; x < width; ++x) {
      int base = (x + y) * 255 / (2 * size);
      row[x] = cv::Vec3b(cv::saturate_cast<uchar>(base + hue + noise(rng)),
                         cv::saturate_cast<uchar>(255 - base + noise(rng)),
                         cv::saturate_cast<uchar>((hue * 3 + x) % 256 + noise(rng)));
    }
  }
  std::vector<uchar> jpg;
  cv::imencode(".jpg", img, jpg, {cv::IMWRITE_JPEG_QUALITY, 90});
  return std::string(jpg.begin(), jpg.end());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr,
                 "usage: make_synthetic_shards OUT_DIR [--shards N] [--samples N] [--size PX] "
                 "[--seed S] [--photo]\n");
    return 1;
  }
  const std::string out = argv[1];
  const int shards = int_arg(argc, argv, "--shards", 8);
  const int samples = int_arg(argc, argv, "--samples", 200);
  const int size = int_arg(argc, argv, "--size", 256);
  const bool photo = flag(argc, argv, "--photo");
  std::mt19937 rng(static_cast<unsigned>(int_arg(argc, argv, "--seed", 1)));
  try {
    std::filesystem::create_directories(out);
    wds::TarWriterOptions options;
    options.mtime = 0;  // reproducible
    std::uint64_t bytes = 0;
    for (int s = 0; s < shards; ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "/train-%06d.tar", s);
      wds::TarWriter writer(wds::open_sink(out + name), options);
      for (int i = 0; i < samples; ++i) {
        const int index = s * samples + i;
        const int label = static_cast<int>(rng() % 10);
        char key[32];
        std::snprintf(key, sizeof key, "%08d", index);
        wds::Sample sample(key, nullptr);
        const auto [w, h] = photo ? photo_size(rng) : std::pair{size, size};
        sample.add("jpg", wds::Bytes::copy_of(make_jpeg(w, h, label, rng)));
        sample.add("cls", wds::Bytes::copy_of(std::to_string(label)));
        sample.add("json", wds::Bytes::copy_of("{\"index\": " + std::to_string(index) +
                                               ", \"label\": " + std::to_string(label) + "}"));
        bytes += sample.payload_bytes();
        writer.write(sample);
      }
      writer.close();
    }
    std::printf("wrote %d shards x %d samples (%.1f MB of payload) to %s\n", shards, samples,
                static_cast<double>(bytes) / 1e6, out.c_str());
  } catch (const wds::Error& e) {
    std::fprintf(stderr, "make_synthetic_shards: %s\n", e.what());
    return 1;
  }
  return 0;
}
