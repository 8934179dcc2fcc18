// The training and evaluation transforms of the image codec: RandomResizedCrop's parameters and
// draws, the window decode of JPEGs against a full decode, the antialiased resize against a
// reference written here in double precision, flip, normalisation, layout and dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"
#include "wds/image.hpp"

namespace wds {
namespace {

using test::error_code;
using Encoded = std::vector<std::uint8_t>;

std::span<const std::byte> span_of(const Encoded& e) {
  return std::as_bytes(std::span(e));
}

// A photo-like BGR picture: smooth gradients, edges and noise, so JPEG blocks differ and a
// misplaced window, a swapped channel or a flip shows.
cv::Mat picture(int width, int height, unsigned seed = 1, bool stripes = true) {
  cv::Mat m(height, width, CV_8UC3);
  std::mt19937 rng(seed);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      auto& p = m.at<cv::Vec3b>(y, x);
      p[0] = static_cast<std::uint8_t>(20 + x * 200 / width);
      p[1] = static_cast<std::uint8_t>(40 + y * 180 / height);
      // A fine checkerboard (when `stripes`): the worst case for any shrinking filter.
      p[2] = static_cast<std::uint8_t>(stripes && (x / 7 + y / 5) % 2 ? 220 : 60 + x % 97);
    }
  }
  for (int i = 0; i < 12; ++i) {
    cv::circle(m, {static_cast<int>(rng() % width), static_cast<int>(rng() % height)},
               5 + static_cast<int>(rng() % 40), cv::Scalar(rng() % 256, rng() % 256, rng() % 256),
               -1);
  }
  cv::Mat noise(height, width, CV_8UC3);
  cv::randu(noise, 0, 24);
  m += noise;
  return m;
}

Encoded encode(const cv::Mat& m, const std::string& ext, const std::vector<int>& params = {}) {
  Encoded out;
  EXPECT_TRUE(cv::imencode(ext, m, out, params)) << ext;
  return out;
}

// The pixels a full decode of `jpg` gives, as a lossless PNG: decoding it takes OpenCV's full
// decode and the same resize, so it differs from the JPEG's only by the window decode.
Encoded decoded_as_png(const Encoded& jpg, int flags = cv::IMREAD_COLOR) {
  const cv::Mat img = cv::imdecode(jpg, flags);
  return encode(img, ".png");
}

double mean_abs(const Tensor& a, const Tensor& b) {
  return test::mean_abs_diff(a, b);
}

int max_abs(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return 1 << 20;
  auto x = a.values<std::uint8_t>();
  auto y = b.values<std::uint8_t>();
  int m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(int(x[i]) - int(y[i])));
  return m;
}

// ------------------------------------------------------------------------------------------------
// RandomResizedCrop's parameters

ImageDecodeOptions training(int size, std::uint64_t seed) {
  ImageDecodeOptions o;
  o.random_resized_crop.size = size;
  o.seed = seed;
  return o;
}

TEST(RandomResizedCropBox, FollowsTorchvisionsDistribution) {
  // torchvision's get_params, simulated here with another generator: the accepted windows'
  // area shares and log aspect ratios must have the same histograms.
  const ImageSize size{500, 375};
  const RandomResizedCrop crop{.size = 224};
  const int draws = 10000, bins = 10;
  std::vector<double> ours_area(bins), ours_ratio(bins), sim_area(bins), sim_ratio(bins);
  const double lr0 = std::log(crop.ratio_min), lr1 = std::log(crop.ratio_max);
  auto add = [&](std::vector<double>& area_h, std::vector<double>& ratio_h, int w, int h) {
    const double share = double(w) * h / (double(size.width) * size.height);
    const int a = std::clamp(
        static_cast<int>((share - crop.scale_min) / (crop.scale_max - crop.scale_min) * bins), 0,
        bins - 1);
    const int r = std::clamp(static_cast<int>((std::log(double(w) / h) - lr0) / (lr1 - lr0) * bins),
                             0, bins - 1);
    area_h[a] += 1.0 / draws;
    ratio_h[r] += 1.0 / draws;
  };
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < draws; ++i) {
    const CropBox b =
        random_resized_crop_box(size, crop, image_seed(3, 0, "shard.tar", std::to_string(i)));
    ASSERT_GT(b.width, 0);
    ASSERT_GT(b.height, 0);
    ASSERT_LE(b.x + b.width, size.width);
    ASSERT_LE(b.y + b.height, size.height);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    add(ours_area, ours_ratio, b.width, b.height);
    for (int attempt = 0;; ++attempt) {
      const double target =
          size.width * size.height * (crop.scale_min + u(rng) * (crop.scale_max - crop.scale_min));
      const double ratio = std::exp(lr0 + u(rng) * (lr1 - lr0));
      const int w = static_cast<int>(std::nearbyint(std::sqrt(target * ratio)));
      const int h = static_cast<int>(std::nearbyint(std::sqrt(target / ratio)));
      if (w > 0 && w <= size.width && h > 0 && h <= size.height) {
        add(sim_area, sim_ratio, w, h);
        break;
      }
      ASSERT_LT(attempt, 10) << "the simulation should not need the fallback at 500x375";
    }
  }
  for (int b = 0; b < bins; ++b) {
    // 10,000 draws: a bin of ~0.1 has a standard deviation of 0.003 per histogram.
    EXPECT_NEAR(ours_area[b], sim_area[b], 0.02) << "area bin " << b;
    EXPECT_NEAR(ours_ratio[b], sim_ratio[b], 0.02) << "log-ratio bin " << b;
  }
}

TEST(RandomResizedCropBox, FallsBackToTheCentreClampedToTheRatio) {
  const RandomResizedCrop crop{.size = 32};
  // Too wide for any try: h <= 10 needs target area <= 133, far below 8% of 10,000.
  const CropBox wide = random_resized_crop_box({1000, 10}, crop, 5);
  EXPECT_EQ(wide, (CropBox{(1000 - 13) / 2, 0, 13, 10}));  // w = round(10 * 4 / 3)
  const CropBox tall = random_resized_crop_box({10, 1000}, crop, 5);
  EXPECT_EQ(tall, (CropBox{0, (1000 - 13) / 2, 10, 13}));  // h = round(10 / (3 / 4))
  // In the ratio range the fallback is the whole image: a 1x1 image can only be itself.
  EXPECT_EQ(random_resized_crop_box({1, 1}, crop, 5), (CropBox{0, 0, 1, 1}));
}

TEST(RandomResizedCropBox, DrawsDependOnTheSeedAlone) {
  const RandomResizedCrop crop{.size = 224};
  const std::uint64_t a = image_seed(1, 0, "s3://bucket/train-000001.tar", "000017");
  // The shard's file name, not where it is read from.
  EXPECT_EQ(a, image_seed(1, 0, "/data/train-000001.tar", "000017"));
  EXPECT_NE(a, image_seed(1, 1, "/data/train-000001.tar", "000017"));  // epoch
  EXPECT_NE(a, image_seed(2, 0, "/data/train-000001.tar", "000017"));  // seed
  EXPECT_NE(a, image_seed(1, 0, "/data/train-000002.tar", "000017"));  // shard
  EXPECT_NE(a, image_seed(1, 0, "/data/train-000001.tar", "000018"));  // key
  EXPECT_EQ(random_resized_crop_box({640, 480}, crop, a),
            random_resized_crop_box({640, 480}, crop, a));
  for (std::uint32_t i = 0; i < 50; ++i) {
    const double d = image_draw(a, i);
    EXPECT_GE(d, 0.0);
    EXPECT_LT(d, 1.0);
  }
}

TEST(ImageTransform, FlipsAtTheGivenRate) {
  const Encoded png = encode(picture(40, 30), ".png");
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  int flipped = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    ImageDecodeOptions o;
    o.flip = 0.3;
    o.seed = image_seed(9, 0, "x.tar", std::to_string(i));
    flipped += image_draw(o.seed, kFlipDraw) < 0.3;
    if (i < 40) {
      // The output is the mirror image exactly when the flip draw says so.
      const Tensor t = decode_image(span_of(png), rgb8, o);
      const Tensor plain = decode_image(span_of(png), rgb8);
      auto a = t.values<std::uint8_t>();
      auto b = plain.values<std::uint8_t>();
      const bool mirrored = image_draw(o.seed, kFlipDraw) < 0.3;
      for (int y = 0; y < 30; ++y) {
        for (int x = 0; x < 40; ++x) {
          for (int c = 0; c < 3; ++c) {
            const int from = mirrored ? 39 - x : x;
            ASSERT_EQ(a[(y * 40 + x) * 3 + c], b[(y * 40 + from) * 3 + c]) << i;
          }
        }
      }
    }
  }
  EXPECT_NEAR(flipped / double(n), 0.3, 0.035);
}

// ------------------------------------------------------------------------------------------------
// The antialiased resize against a reference: PIL's definition (triangle filter, support scaled
// by the shrink factor, clamped to the bounds and renormalised), in double precision, 2-D at once.

struct RefAxis {
  std::vector<int> first;
  std::vector<std::vector<double>> w;
};

RefAxis ref_axis(double start, double scale, int lo, int hi, int n) {
  RefAxis a;
  const double fs = std::max(scale, 1.0);
  for (int o = 0; o < n; ++o) {
    const double c = start + (o + 0.5) * scale;
    const int x0 = std::max(static_cast<int>(std::floor(c - fs + 0.5)), lo);
    const int x1 = std::min(static_cast<int>(std::floor(c + fs + 0.5)), hi);
    std::vector<double> w;
    double sum = 0;
    for (int x = x0; x < x1; ++x) {
      const double d = std::fabs((x - c + 0.5) / fs);
      w.push_back(d < 1 ? 1 - d : 0);
      sum += w.back();
    }
    for (double& v : w) v /= sum;
    a.first.push_back(x0);
    a.w.push_back(w);
  }
  return a;
}

// RGB uint8 HxWx3 of the box (x, y, w, h) of `bgr` resized to out_w x out_h; the filter reads
// only [lo, hi) each way.
cv::Mat ref_resize(const cv::Mat& bgr, const RefAxis& ax, const RefAxis& ay) {
  cv::Mat out(static_cast<int>(ay.first.size()), static_cast<int>(ax.first.size()), CV_8UC3);
  for (int oy = 0; oy < out.rows; ++oy) {
    for (int ox = 0; ox < out.cols; ++ox) {
      for (int c = 0; c < 3; ++c) {
        double v = 0;
        for (std::size_t j = 0; j < ay.w[oy].size(); ++j) {
          for (std::size_t i = 0; i < ax.w[ox].size(); ++i) {
            v += ay.w[oy][j] * ax.w[ox][i] *
                 bgr.at<cv::Vec3b>(ay.first[oy] + static_cast<int>(j),
                                   ax.first[ox] + static_cast<int>(i))[2 - c];
          }
        }
        out.at<cv::Vec3b>(oy, ox)[c] = cv::saturate_cast<std::uint8_t>(v);
      }
    }
  }
  return out;
}

Tensor as_tensor(const cv::Mat& rgb) {
  Tensor t(DType::uint8, {rgb.rows, rgb.cols, 3});
  std::memcpy(t.data(), rgb.data, t.nbytes());
  return t;
}

TEST(ImageTransform, RandomResizedCropMatchesTheReference) {
  const cv::Mat bgr = picture(300, 200);
  const Encoded png = encode(bgr, ".png");
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  for (int i = 0; i < 12; ++i) {
    ImageDecodeOptions o = training(i % 2 ? 64 : 150, image_seed(4, 0, "x.tar", std::to_string(i)));
    const CropBox b = random_resized_crop_box({300, 200}, o.random_resized_crop, o.seed);
    const int n = o.random_resized_crop.size;
    const cv::Mat want = ref_resize(bgr, ref_axis(b.x, double(b.width) / n, b.x, b.x + b.width, n),
                                    ref_axis(b.y, double(b.height) / n, b.y, b.y + b.height, n));
    const Tensor got = decode_image(span_of(png), rgb8, o);
    ASSERT_EQ(got.shape(), (Tensor::Shape{n, n, 3}));
    // Fixed point, and rounded between the passes as PIL does: within 1 of the exact value.
    EXPECT_LE(max_abs(got, as_tensor(want)), 1)
        << "window " << b.x << "," << b.y << " " << b.width << "x" << b.height;
    EXPECT_LT(mean_abs(got, as_tensor(want)), 0.25);
  }
}

TEST(ImageTransform, ResizeAndCentreCropMatchTheReference) {
  const cv::Mat bgr = picture(343, 229);
  const Encoded png = encode(bgr, ".png");
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  // Resize(100): 343x229 -> 149x100 (int(100 * 343 / 229)), then CenterCrop(80): left
  // round(69 / 2) = 34 (half to even), top 10.
  const double sx = 343.0 / 149, sy = 229.0 / 100;
  const Tensor got = decode_image(span_of(png), rgb8, {.resize = 100, .crop = 80});
  const cv::Mat want =
      ref_resize(bgr, ref_axis(34 * sx, sx, 0, 343, 80), ref_axis(10 * sy, sy, 0, 229, 80));
  EXPECT_LE(max_abs(got, as_tensor(want)), 1);
  const Tensor whole = decode_image(span_of(png), rgb8, {.resize = 100});
  ASSERT_EQ(whole.shape(), (Tensor::Shape{100, 149, 3}));
  EXPECT_LE(max_abs(whole, as_tensor(ref_resize(bgr, ref_axis(0, sx, 0, 343, 149),
                                                ref_axis(0, sy, 0, 229, 100)))),
            1);
  // The crop is exactly the middle of the whole resized image.
  auto w = whole.values<std::uint8_t>();
  auto g = got.values<std::uint8_t>();
  for (int y = 0; y < 80; ++y) {
    ASSERT_EQ(0, std::memcmp(&g[y * 80 * 3], &w[((y + 10) * 149 + 34) * 3], 80 * 3)) << y;
  }
}

// ------------------------------------------------------------------------------------------------
// The window decode of JPEGs against a full decode of the same JPEG

// A JPEG written with libjpeg itself, for what OpenCV 4.6 cannot ask for: chroma subsampling
// h x v of the luma (2x2 is 4:2:0, 2x1 4:2:2, 1x1 4:4:4), or CMYK (`bgr` unused then).
Encoded libjpeg_encode(const cv::Mat& bgr, int h_samp, int v_samp, bool cmyk = false) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* mem = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &mem, &size);
  const int width = bgr.cols, height = bgr.rows;
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = cmyk ? 4 : 3;
  c.in_color_space = cmyk ? JCS_CMYK : JCS_EXT_BGR;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 92, TRUE);
  if (!cmyk) {
    c.comp_info[0].h_samp_factor = h_samp;
    c.comp_info[0].v_samp_factor = v_samp;
  }
  jpeg_start_compress(&c, TRUE);
  std::vector<unsigned char> row(static_cast<std::size_t>(width) * 4);
  while (c.next_scanline < c.image_height) {
    const int y = static_cast<int>(c.next_scanline);
    JSAMPROW p = const_cast<unsigned char*>(bgr.ptr<unsigned char>(y));
    if (cmyk) {
      for (int x = 0; x < width; ++x) {
        row[x * 4 + 0] = static_cast<unsigned char>(x * 255 / width);
        row[x * 4 + 1] = static_cast<unsigned char>(y * 255 / height);
        row[x * 4 + 2] = bgr.at<cv::Vec3b>(y, x)[0];
        row[x * 4 + 3] = 10;
      }
      p = row.data();
    }
    jpeg_write_scanlines(&c, &p, 1);
  }
  jpeg_finish_compress(&c);
  Encoded out(mem, mem + size);
  jpeg_destroy_compress(&c);
  std::free(mem);
  return out;
}

struct JpegCase {
  const char* name;
  Encoded jpg;
  int width, height;
};

std::vector<JpegCase> jpeg_cases() {
  auto cv_jpeg = [](const char* name, int w, int h, std::vector<int> params) {
    return JpegCase{name, encode(picture(w, h, 3), ".jpg", params), w, h};
  };
  auto lib_jpeg = [](const char* name, int w, int h, int hs, int vs) {
    return JpegCase{name, libjpeg_encode(picture(w, h, 3), hs, vs), w, h};
  };
  return {
      cv_jpeg("baseline 4:2:0", 500, 375, {cv::IMWRITE_JPEG_QUALITY, 90}),
      cv_jpeg("odd size", 333, 257, {cv::IMWRITE_JPEG_QUALITY, 85}),
      cv_jpeg("progressive", 320, 240,
              {cv::IMWRITE_JPEG_QUALITY, 90, cv::IMWRITE_JPEG_PROGRESSIVE, 1}),
      cv_jpeg("restart markers", 300, 220,
              {cv::IMWRITE_JPEG_QUALITY, 90, cv::IMWRITE_JPEG_RST_INTERVAL, 3}),
      lib_jpeg("4:4:4", 280, 300, 1, 1),
      lib_jpeg("4:2:2", 301, 211, 2, 1),
      lib_jpeg("4:4:0", 257, 240, 1, 2),
  };
}

TEST(JpegWindow, SamePixelsAsAFullDecodeWithoutScaling) {
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  for (const JpegCase& c : jpeg_cases()) {
    SCOPED_TRACE(c.name);
    const Encoded& jpg = c.jpg;
    const Encoded png = decoded_as_png(jpg);
    // Windows everywhere, MCU-aligned or not, kept near their size (no DCT scaling applies).
    for (int i = 0; i < 40; ++i) {
      ImageDecodeOptions o = training(96, image_seed(11, 0, c.name, std::to_string(i)));
      o.random_resized_crop.scale_min = 0.1;
      const Tensor window = decode_image(span_of(jpg), rgb8, o);
      const Tensor full = decode_image(span_of(png), rgb8, o);
      const CropBox b = random_resized_crop_box({c.width, c.height}, o.random_resized_crop, o.seed);
      if (b.width >= 2 * 96 && b.height >= 2 * 96) continue;  // scaled: the next test
      EXPECT_EQ(max_abs(window, full), 0)
          << "window " << b.x << "," << b.y << " " << b.width << "x" << b.height;
    }
    // Evaluation: the centre crop of a resize, decoded from only the rows and columns it needs.
    const int shorter = std::min(c.width, c.height);
    for (int size : {shorter * 2 / 3, shorter - 5, 3 * shorter / 2}) {  // no scaling; enlarging
      ImageDecodeOptions o{.resize = size, .crop = size * 7 / 8};
      EXPECT_EQ(max_abs(decode_image(span_of(jpg), rgb8, o), decode_image(span_of(png), rgb8, o)),
                0)
          << size;
    }
  }
}

TEST(JpegWindow, ScaledDecodingStaysClose) {
  // DCT scaling (1/2, 1/4, 1/8) is not a triangle filter: bounded, not equal. The figures are
  // what libjpeg-turbo 2.1 gives on these pictures; the bound leaves room for other versions.
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  const Encoded jpg =
      encode(picture(1600, 1200, 5, /*stripes=*/false), ".jpg", {cv::IMWRITE_JPEG_QUALITY, 90});
  const Encoded png = decoded_as_png(jpg);
  double worst = 0;
  for (int i = 0; i < 12; ++i) {
    ImageDecodeOptions o = training(112, image_seed(12, 0, "big", std::to_string(i)));
    const Tensor scaled = decode_image(span_of(jpg), rgb8, o);
    o.reduced_decode = false;
    const Tensor full_jpg = decode_image(span_of(jpg), rgb8, o);
    const Tensor full = decode_image(span_of(png), rgb8, o);
    EXPECT_EQ(max_abs(full_jpg, full), 0);
    worst = std::max(worst, mean_abs(scaled, full));
  }
  EXPECT_LT(worst, 3.0);
  for (int resize : {300, 150, 75}) {  // 1/4, 1/8 and (2x further) 1/8
    ImageDecodeOptions o{.resize = resize, .crop = resize};
    const Tensor scaled = decode_image(span_of(jpg), rgb8, o);
    o.reduced_decode = false;
    EXPECT_LT(mean_abs(scaled, decode_image(span_of(png), rgb8, o)), 3.0) << resize;
  }
}

TEST(JpegWindow, GreyAndCmykJpegs) {
  // Grey JPEG, decoded to grey and to RGB: the window matches the full decode.
  cv::Mat grey;
  cv::cvtColor(picture(260, 190, 8), grey, cv::COLOR_BGR2GRAY);
  const Encoded gjpg = encode(grey, ".jpg");
  for (const char* spec : {"l8", "rgb8"}) {
    const ImageSpec s = parse_image_spec(spec);
    const Encoded png =
        decoded_as_png(gjpg, s.channels == 1 ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
    for (int i = 0; i < 8; ++i) {
      const ImageDecodeOptions o = training(100, image_seed(13, 0, spec, std::to_string(i)));
      EXPECT_EQ(max_abs(decode_image(span_of(gjpg), s, o), decode_image(span_of(png), s, o)), 0)
          << spec;
    }
  }
  // CMYK: libjpeg cannot convert it; decoded in full by OpenCV, then the same crop.
  const Encoded cmyk = libjpeg_encode(picture(200, 150), 1, 1, /*cmyk=*/true);
  const Encoded png = decoded_as_png(cmyk);
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  for (int i = 0; i < 4; ++i) {
    const ImageDecodeOptions o = training(64, image_seed(14, 0, "cmyk", std::to_string(i)));
    const Tensor t = decode_image(span_of(cmyk), rgb8, o);
    EXPECT_EQ(t.shape(), (Tensor::Shape{64, 64, 3}));
    EXPECT_EQ(max_abs(t, decode_image(span_of(png), rgb8, o)), 0);
  }
}

TEST(JpegWindow, CorruptJpegsAreErrorsNamingTheMember) {
  const Encoded jpg = encode(picture(300, 200), ".jpg");
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  const ImageDecodeOptions o = training(64, 1);
  Encoded cut(jpg.begin(), jpg.begin() + static_cast<std::ptrdiff_t>(jpg.size() / 2));
  try {
    decode_image(span_of(cut), rgb8, o, "shard.tar", "k.jpg");
    FAIL() << "a truncated JPEG decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_EQ(e.member(), "k.jpg");
    EXPECT_EQ(e.url(), "shard.tar");
  }
  // Damage in every place: never a crash, an error or an image of the right shape.
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    Encoded bad = jpg;
    for (int k = 0; k < 1 + i % 8; ++k)
      bad[2 + rng() % (bad.size() - 2)] = static_cast<std::uint8_t>(rng());
    try {
      const Tensor t = decode_image(span_of(bad), rgb8, o);
      EXPECT_EQ(t.shape(), (Tensor::Shape{64, 64, 3}));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt_data) << e.what();
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Normalisation, layout and dtype

// binary16 bits to float, by hand (clang 14 has no _Float16 on x86).
float half_to_float(std::uint16_t h) {
  const int exponent = (h >> 10) & 31, mantissa = h & 1023;
  float v = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                          : std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  if (exponent == 31) v = mantissa ? NAN : INFINITY;
  return (h & 0x8000) ? -v : v;
}

TEST(ImageTransform, NormaliseLayoutAndDtypeAgainstValuesByHand) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  // Width 48 takes the 16-pixel SIMD path for float32 planes (where the CPU has AVX2), 24 the
  // scalar one: both must give torch's values.
  for (int width : {24, 48}) {
    SCOPED_TRACE("width " + std::to_string(width));
    const int W = width, H = 16;
    const cv::Mat bgr = picture(W, H);
    const Encoded png = encode(bgr, ".png");
    ImageDecodeOptions o;
    set_imagenet_normalization(o);
    auto expected = [&](int y, int x, int c) {  // RGB channel c, as torch computes it
      const float v = static_cast<float>(bgr.at<cv::Vec3b>(y, x)[2 - c]) / 255.0f;
      return (v - mean[c]) / stdv[c];
    };
    for (bool flip : {false, true}) {
      for (bool chw : {false, true}) {
        for (DType dtype : {DType::float32, DType::float16}) {
          o.chw = chw;
          o.dtype = dtype;
          o.flip = flip ? 1 : 0;
          const Tensor t = decode_image(span_of(png), parse_image_spec("rgb8"), o);
          ASSERT_EQ(t.dtype(), dtype);
          ASSERT_EQ(t.shape(), chw ? (Tensor::Shape{3, H, W}) : (Tensor::Shape{H, W, 3}));
          for (int y = 0; y < H; ++y) {
            for (int x = 0; x < W; ++x) {
              for (int c = 0; c < 3; ++c) {
                const std::size_t i = chw ? (c * H + y) * W + x : (y * W + x) * 3 + c;
                const float want = expected(y, flip ? W - 1 - x : x, c);
                if (dtype == DType::float32) {
                  ASSERT_EQ(t.values<float>()[i], want) << y << "," << x << "," << c;
                } else {
                  std::uint16_t bits;
                  std::memcpy(&bits, static_cast<const std::byte*>(t.data()) + 2 * i, 2);
                  // The nearest half: within half a unit in the last place (11 bits).
                  const float got = half_to_float(bits);
                  ASSERT_LE(std::fabs(got - want), std::ldexp(std::fabs(want), -11) + 1e-7f)
                      << got << " for " << want;
                }
              }
            }
          }
        }
      }
    }
  }
  const cv::Mat bgr = picture(24, 16);
  const Encoded png = encode(bgr, ".png");
  // Without normalisation, float is value / 255; BGR order and grey follow the spec.
  ImageDecodeOptions plain;
  plain.dtype = DType::float32;
  plain.flip = 1;
  const Tensor bgrf = decode_image(span_of(png), parse_image_spec("bgr8"), plain);
  EXPECT_EQ(bgrf.values<float>()[0], static_cast<float>(bgr.at<cv::Vec3b>(0, 23)[0]) / 255.0f);
  EXPECT_EQ(bgrf.values<float>()[2], static_cast<float>(bgr.at<cv::Vec3b>(0, 23)[2]) / 255.0f);
}

TEST(ImageTransform, BadParametersAreInvalidArgumentsNamingThem) {
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  auto message = [&](ImageDecodeOptions o, ImageSpec spec) -> std::string {
    try {
      check_image_options(spec, o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      return e.what();
    }
    return "no error";
  };
  auto rrc = [](RandomResizedCrop r) {
    ImageDecodeOptions o;
    o.random_resized_crop = r;
    return o;
  };
  EXPECT_NE(message(rrc({.size = -1}), rgb8).find("random_resized_crop size"), std::string::npos);
  EXPECT_NE(message(rrc({.size = 8, .scale_min = 0.5, .scale_max = 0.2}), rgb8).find("scale"),
            std::string::npos);
  EXPECT_NE(message(rrc({.size = 8, .scale_min = 0, .scale_max = 1}), rgb8).find("scale"),
            std::string::npos);
  EXPECT_NE(message(rrc({.size = 8, .scale_min = 0.1, .scale_max = 1.5}), rgb8).find("scale"),
            std::string::npos);
  EXPECT_NE(message(rrc({.size = 8, .ratio_min = 0, .ratio_max = 1}), rgb8).find("ratio"),
            std::string::npos);
  EXPECT_NE(message(rrc({.size = 8, .ratio_min = 2, .ratio_max = 1}), rgb8).find("ratio"),
            std::string::npos);
  ImageDecodeOptions both = rrc({.size = 8});
  both.resize = 10;
  EXPECT_NE(message(both, rgb8).find("resize or crop"), std::string::npos);
  ImageDecodeOptions flip;
  flip.flip = 1.5;
  EXPECT_NE(message(flip, rgb8).find("flip"), std::string::npos);
  ImageDecodeOptions norm;
  norm.mean = {0.5f, 0.5f};
  norm.std = {1, 1};
  norm.dtype = DType::float32;
  EXPECT_NE(message(norm, rgb8).find("mean has 2 values"), std::string::npos);
  norm.mean = {0.5f, 0.5f, 0.5f};
  norm.std = {1, 0, 1};
  EXPECT_NE(message(norm, rgb8).find("std"), std::string::npos);
  norm.std = {1, 1, 1};
  norm.dtype = DType::uint8;
  EXPECT_NE(message(norm, rgb8).find("uint8"), std::string::npos);
  norm.dtype.reset();
  EXPECT_EQ(message(norm, parse_image_spec("torchrgb")), "no error");
}

}  // namespace
}  // namespace wds
