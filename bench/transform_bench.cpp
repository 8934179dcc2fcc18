// The ceilings and the hand-written peer of the training and evaluation transforms
// (bench/transform_bench.sh runs them beside wds bench and Python webdataset + torchvision).
//
//   build/bench/transform_bench --mode=MODE [--threads=2] [--reps=1] [--seed=0] SHARD...
//
// The JPEGs of the shards' "jpg" fields are read into memory first; then T threads share them
// (image i on thread i % T), R times over; one JSON line: img_per_s, images, seconds.
//   imdecode      cv::imdecode(IMREAD_COLOR) of the whole image: the full-decode ceiling.
//   window        libjpeg-turbo alone, decoding the RandomResizedCrop(224) window wds draws for
//                 the sample (random_resized_crop_box with image_seed(seed, 0, shard, key), the
//                 same windows as `wds bench --random-resized-crop 224 --seed S`): the largest
//                 DCT scaling (1/2, 1/4, 1/8) that leaves the window >= 224 each way,
//                 jpeg_crop_scanline, jpeg_skip_scanlines, stop after the window's last row, no
//                 resize: the ceiling of decoding only the window.
//   handwritten   what users write today: cv::imdecode of the whole image, the same window,
//                 cv::resize (INTER_LINEAR) to 224x224, flip with p = 0.5, normalise to float32
//                 CHW with ImageNet's mean and std, by hand.
//   handwritten-eval  cv::imdecode, resize the shorter side to 256 (INTER_LINEAR), centre 224,
//                 normalise to float32 CHW.
//   decoder       wds::decode_image alone (no pipeline): random_resized_crop 224, flip 0.5,
//                 ImageNet normalisation, float32 CHW, into a tensor reused per thread.
//   decoder-eval  the same with resize 256, crop 224.
//   scaling-error what DCT scaling changes: decode_image (rgb8, random_resized_crop 224) with
//                 and without reduced decoding, mean absolute difference per image (uint8
//                 levels); prints the mean and largest over the JPEGs whose window was scaled
//                 (instead of a speed).
#include <cstddef>
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "wds/image.hpp"
#include "wds/tar_samples.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Jpeg {
  std::vector<unsigned char> bytes;
  std::uint64_t seed;
};

struct Fail {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

// The bare window decode; returns the decoded pixel count (kept so the work is not elided).
std::size_t decode_window(const Jpeg& j, int size, std::vector<unsigned char>& buf) {
  jpeg_decompress_struct c{};
  Fail err{};
  c.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = [](j_common_ptr ci) {
    std::longjmp(reinterpret_cast<Fail*>(ci->err)->jump, 1);
  };
  jpeg_create_decompress(&c);
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&c);
    return 0;
  }
  jpeg_mem_src(&c, j.bytes.data(), static_cast<unsigned long>(j.bytes.size()));
  jpeg_read_header(&c, TRUE);
  const wds::CropBox b = wds::random_resized_crop_box(
      {static_cast<int>(c.image_width), static_cast<int>(c.image_height)}, {.size = size}, j.seed);
  int k = 1;
  for (int d : {8, 4, 2}) {
    if (b.width >= d * size && b.height >= d * size) {
      k = d;
      break;
    }
  }
  c.scale_num = 1;
  c.scale_denom = static_cast<unsigned>(k);
  c.out_color_space = JCS_RGB;
  jpeg_start_decompress(&c);
  JDIMENSION x = static_cast<JDIMENSION>(b.x / k);
  JDIMENSION w =
      std::min<JDIMENSION>(static_cast<JDIMENSION>((b.width + k - 1) / k), c.output_width - x);
  jpeg_crop_scanline(&c, &x, &w);
  const JDIMENSION y0 = static_cast<JDIMENSION>(b.y / k);
  const JDIMENSION y1 =
      std::min<JDIMENSION>(static_cast<JDIMENSION>((b.y + b.height + k - 1) / k), c.output_height);
  if (y0 > 0) jpeg_skip_scanlines(&c, y0);
  buf.resize(static_cast<std::size_t>(w) * 3);
  while (c.output_scanline < y1) {
    JSAMPROW row = buf.data();
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_abort_decompress(&c);
  jpeg_destroy_decompress(&c);
  return static_cast<std::size_t>(w) * (y1 - y0);
}

const float kMean[3] = {0.485f, 0.456f, 0.406f};
const float kStd[3] = {0.229f, 0.224f, 0.225f};

// RGB uint8 HxWx3 (BGR from OpenCV: channel 2 - c), optionally mirrored, to float32 CHW.
void normalise_chw(const cv::Mat& bgr, bool flip, std::vector<float>& out) {
  const int h = bgr.rows, w = bgr.cols;
  out.resize(static_cast<std::size_t>(3) * h * w);
  for (int y = 0; y < h; ++y) {
    const auto* row = bgr.ptr<unsigned char>(y);
    for (int x = 0; x < w; ++x) {
      const int ox = flip ? w - 1 - x : x;
      for (int c = 0; c < 3; ++c) {
        out[(static_cast<std::size_t>(c) * h + y) * w + ox] =
            (row[x * 3 + 2 - c] / 255.0f - kMean[c]) / kStd[c];
      }
    }
  }
}

std::size_t handwritten(const Jpeg& j, bool eval) {
  const cv::Mat img = cv::imdecode(j.bytes, cv::IMREAD_COLOR);
  if (img.empty()) return 0;
  thread_local std::vector<float> out;
  cv::Mat resized;
  if (eval) {
    const int shorter = std::min(img.cols, img.rows);
    const cv::Size to = img.cols <= img.rows ? cv::Size(256, 256 * img.rows / shorter)
                                             : cv::Size(256 * img.cols / shorter, 256);
    cv::resize(img, resized, to, 0, 0, cv::INTER_LINEAR);
    const cv::Rect centre((resized.cols - 224) / 2, (resized.rows - 224) / 2, 224, 224);
    normalise_chw(resized(centre), false, out);
  } else {
    const wds::CropBox b =
        wds::random_resized_crop_box({img.cols, img.rows}, {.size = 224}, j.seed);
    cv::resize(img(cv::Rect(b.x, b.y, b.width, b.height)), resized, cv::Size(224, 224), 0, 0,
               cv::INTER_LINEAR);
    normalise_chw(resized, wds::image_draw(j.seed, wds::kFlipDraw) < 0.5, out);
  }
  return out.size();
}

std::size_t decoder(const Jpeg& j, bool eval) {
  static const wds::ImageSpec spec = wds::parse_image_spec("torchrgb");
  wds::ImageDecodeOptions o;
  if (eval) {
    o.resize = 256;
    o.crop = 224;
  } else {
    o.random_resized_crop.size = 224;
    o.flip = 0.5;
  }
  wds::set_imagenet_normalization(o);
  o.seed = j.seed;
  thread_local wds::Tensor out(wds::DType::float32, {3, 224, 224});
  const wds::ImageAllocator into = [](wds::DType, const wds::Tensor::Shape&) { return out; };
  return decode_image(std::as_bytes(std::span(j.bytes)), spec, o, into).numel();
}

int scaling_error(const std::vector<Jpeg>& jpegs) {
  const wds::ImageSpec rgb8 = wds::parse_image_spec("rgb8");
  double sum = 0, worst = 0;
  int scaled = 0;
  for (const Jpeg& j : jpegs) {
    const auto bytes = std::as_bytes(std::span(j.bytes));
    wds::ImageDecodeOptions o;
    o.random_resized_crop.size = 224;
    o.seed = j.seed;
    const std::optional<wds::ImageSize> size = wds::jpeg_size(bytes);
    if (!size) continue;
    const wds::CropBox b = wds::random_resized_crop_box(*size, o.random_resized_crop, j.seed);
    if (b.width < 2 * 224 || b.height < 2 * 224) continue;  // not scaled
    const wds::Tensor fast = wds::decode_image(bytes, rgb8, o);
    o.reduced_decode = false;
    const wds::Tensor full = wds::decode_image(bytes, rgb8, o);
    const auto a = fast.values<std::uint8_t>();
    const auto c = full.values<std::uint8_t>();
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d += std::abs(int(a[i]) - int(c[i]));
    d /= static_cast<double>(a.size());
    sum += d;
    worst = std::max(worst, d);
    ++scaled;
  }
  std::printf(
      "{\"mode\":\"scaling-error\",\"scaled_images\":%d,\"images\":%zu,"
      "\"mean_abs_diff\":%.3f,\"max_mean_abs_diff\":%.3f}\n",
      scaled, jpegs.size(), scaled ? sum / scaled : 0.0, worst);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  int threads = 2, reps = 1;
  std::uint64_t seed = 0;
  std::vector<std::string> shards;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--mode=", 0) == 0) {
      mode = a.substr(7);
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = std::max(1, std::stoi(a.substr(10)));
    } else if (a.rfind("--reps=", 0) == 0) {
      reps = std::max(1, std::stoi(a.substr(7)));
    } else if (a.rfind("--seed=", 0) == 0) {
      seed = std::stoull(a.substr(7));
    } else {
      shards.push_back(a);
    }
  }
  const std::vector<std::string> modes{"imdecode",         "window",  "handwritten",
                                       "handwritten-eval", "decoder", "decoder-eval",
                                       "scaling-error"};
  if (std::find(modes.begin(), modes.end(), mode) == modes.end()) {
    std::fprintf(
        stderr,
        "usage: transform_bench --mode=imdecode|window|handwritten|handwritten-eval|"
        "decoder|decoder-eval|scaling-error [--threads=T] [--reps=R] [--seed=S] SHARD...\n");
    return 2;
  }
  std::vector<Jpeg> jpegs;
  wds::TarSamples samples(shards);
  while (std::optional<wds::Sample> s = samples.next()) {
    if (const wds::Bytes* j = s->find("jpg")) {
      const auto* p = reinterpret_cast<const unsigned char*>(j->data());
      jpegs.push_back({{p, p + j->size()}, wds::image_seed(seed, 0, s->url(), s->key())});
    }
  }
  if (jpegs.empty()) {
    std::fprintf(stderr, "transform_bench: no jpg fields in the shards\n");
    return 1;
  }
  if (mode == "scaling-error") return scaling_error(jpegs);
  std::atomic<std::size_t> work{0};
  const auto began = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<unsigned char> buf;
      std::size_t sum = 0;
      for (int r = 0; r < reps; ++r) {
        for (std::size_t i = static_cast<std::size_t>(t); i < jpegs.size(); i += threads) {
          if (mode == "imdecode") {
            sum += cv::imdecode(jpegs[i].bytes, cv::IMREAD_COLOR).total();
          } else if (mode == "window") {
            sum += decode_window(jpegs[i], 224, buf);
          } else if (mode == "decoder" || mode == "decoder-eval") {
            sum += decoder(jpegs[i], mode == "decoder-eval");
          } else {
            sum += handwritten(jpegs[i], mode == "handwritten-eval");
          }
        }
      }
      work += sum;
    });
  }
  for (std::thread& t : pool) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
  const double images = static_cast<double>(jpegs.size()) * reps;
  std::printf(
      "{\"mode\":\"%s\",\"img_per_s\":%.1f,\"images\":%.0f,\"seconds\":%.3f,\"work\":%zu}\n",
      mode.c_str(), images / seconds, images, seconds, work.load());
  return work.load() ? 0 : 1;
}
