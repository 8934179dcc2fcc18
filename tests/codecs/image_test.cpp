#include "wds/image.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"
#include "wds/opencv.hpp"

namespace wds {
namespace {

using test::error_code;
using test::mean_abs_diff;
using Encoded = std::vector<std::uint8_t>;

std::span<const std::byte> span_of(const Encoded& e) {
  return std::as_bytes(std::span(e));
}

// A BGR picture whose R, G and B differ at (almost) every pixel and vary smoothly, so that JPEG
// keeps it well and a channel swap shows.
cv::Mat gradient(int width, int height) {
  cv::Mat m(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      auto& p = m.at<cv::Vec3b>(y, x);
      p[0] = static_cast<std::uint8_t>(30 + x * 180 / width);                    // B
      p[1] = static_cast<std::uint8_t>(60 + y * 150 / height);                   // G
      p[2] = static_cast<std::uint8_t>(240 - (x + y) * 200 / (width + height));  // R
    }
  }
  return m;
}

// The same with an alpha channel that varies too.
cv::Mat gradient_bgra(int width, int height) {
  cv::Mat bgr = gradient(width, height), bgra;
  cv::cvtColor(bgr, bgra, cv::COLOR_BGR2BGRA);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x)
      bgra.at<cv::Vec4b>(y, x)[3] = static_cast<std::uint8_t>(x * 37 + y);
  }
  return bgra;
}

Encoded encode(const cv::Mat& m, const std::string& ext, const std::vector<int>& params = {}) {
  Encoded out;
  EXPECT_TRUE(cv::imencode(ext, m, out, params)) << ext;
  return out;
}

// Element (y, x, channel) of a decoded image, whatever its layout.
double element(const Tensor& t, const ImageSpec& spec, int y, int x, int ch) {
  const std::int64_t h = spec.chw ? t.dim(1) : t.dim(0);
  const std::int64_t w = spec.chw ? t.dim(2) : t.dim(1);
  const std::int64_t i = spec.chw ? (ch * h + y) * w + x : (y * w + x) * spec.channels + ch;
  if (t.dtype() == DType::uint8) return t.values<std::uint8_t>()[i];
  return t.values<float>()[i];
}

// Checks dtype, shape and every element of `t` against `source` (grey, BGR or BGRA, uint8).
void expect_image(const Tensor& t, const ImageSpec& spec, const cv::Mat& source,
                  const std::string& what, int tolerance = 0) {
  SCOPED_TRACE(what);
  const std::int64_t h = source.rows, w = source.cols, c = spec.channels;
  Tensor::Shape shape = spec.chw ? Tensor::Shape{c, h, w}
                        : c == 1 ? Tensor::Shape{h, w}
                                 : Tensor::Shape{h, w, c};
  ASSERT_EQ(t.shape(), shape);
  ASSERT_EQ(t.dtype(), spec.dtype);
  int mismatches = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        int want;
        if (c == 1) {
          want = source.at<std::uint8_t>(y, x);
        } else if (ch == 3) {
          want = source.channels() == 4 ? source.at<cv::Vec4b>(y, x)[3] : 255;
        } else {
          const int src_ch = spec.order == ChannelOrder::rgb ? 2 - ch : ch;
          want = source.channels() == 4 ? source.at<cv::Vec4b>(y, x)[src_ch]
                                        : source.at<cv::Vec3b>(y, x)[src_ch];
        }
        const double got = element(t, spec, y, x, ch);
        const bool ok =
            spec.dtype == DType::uint8
                ? std::abs(got - want) <= tolerance
                : std::abs(got - want / 255.0) <= 1e-6 + tolerance / 255.0 && got >= 0 && got <= 1;
        if (!ok && ++mismatches <= 5) {
          ADD_FAILURE() << "(" << y << ", " << x << ", " << ch << "): " << got << " != " << want;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

constexpr std::string_view kAllSpecs[] = {
    "l8",      "rgb8",      "rgba8",      "bgr8",   "l",        "rgb",   "rgba",     "bgr",
    "torchl8", "torchrgb8", "torchrgba8", "torchl", "torchrgb", "torch", "torchrgba"};

TEST(ImageSpec, ParsesWebDatasetNames) {
  ImageSpec s = parse_image_spec("rgb8");
  EXPECT_EQ(s.channels, 3);
  EXPECT_EQ(s.order, ChannelOrder::rgb);
  EXPECT_EQ(s.dtype, DType::uint8);
  EXPECT_FALSE(s.chw);
  s = parse_image_spec("bgr");
  EXPECT_EQ(s.order, ChannelOrder::bgr);
  EXPECT_EQ(s.dtype, DType::float32);
  s = parse_image_spec("torchl8");
  EXPECT_EQ(s.channels, 1);
  EXPECT_TRUE(s.chw);
  EXPECT_EQ(parse_image_spec("torch"), parse_image_spec("torchrgb"));
  EXPECT_EQ(parse_image_spec("torchrgba").channels, 4);
  EXPECT_EQ(parse_image_spec("torchrgba").dtype, DType::float32);
  for (std::string_view name : kAllSpecs) {
    const ImageSpec spec = parse_image_spec(name);
    EXPECT_EQ(spec.dtype == DType::uint8, name.back() == '8') << name;
    EXPECT_EQ(spec.chw, name.starts_with("torch")) << name;
  }
}

TEST(ImageSpec, UnknownNameListsTheValidOnes) {
  std::string what;
  EXPECT_EQ(error_code([] { parse_image_spec("rgb16"); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("unknown image spec 'rgb16' (use one of: l8, rgb8"), std::string::npos)
      << what;
  EXPECT_NE(what.find("torchrgba)"), std::string::npos) << what;
  EXPECT_EQ(error_code([] { parse_image_spec(""); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([] { parse_image_spec("RGB8"); }), ErrorCode::invalid_argument);
}

TEST(ImageSpec, ImageExtensions) {
  for (auto ext : {"jpg", "jpeg", "png", "ppm", "pgm", "pbm", "bmp", "webp", "tif", "tiff"}) {
    EXPECT_TRUE(is_image_extension(ext)) << ext;
  }
  EXPECT_FALSE(is_image_extension("json"));
  EXPECT_FALSE(is_image_extension("cls"));
  EXPECT_FALSE(is_image_extension(""));
}

TEST(ImageDecode, EverySpecFromPng) {
  const cv::Mat bgr = gradient(13, 7);  // odd, not square: rows and columns cannot be confused
  const Encoded png = encode(bgr, ".png");
  cv::Mat grey = cv::imdecode(png, cv::IMREAD_GRAYSCALE);
  for (std::string_view name : kAllSpecs) {
    const ImageSpec spec = parse_image_spec(name);
    const Tensor t = decode_image(span_of(png), spec);
    expect_image(t, spec, spec.channels == 1 ? grey : bgr, std::string(name));
  }
  // Grey is the luma, as PIL's convert("L") gives (to rounding).
  cv::Mat luma;
  cv::cvtColor(bgr, luma, cv::COLOR_BGR2GRAY);
  EXPECT_LE(cv::norm(grey, luma, cv::NORM_INF), 1.0);
}

TEST(ImageDecode, EverySpecFromJpegMatchesOpenCV) {
  const cv::Mat bgr = gradient(64, 48);
  const Encoded jpg = encode(bgr, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 95});
  const cv::Mat colour = cv::imdecode(jpg, cv::IMREAD_COLOR);
  const cv::Mat grey = cv::imdecode(jpg, cv::IMREAD_GRAYSCALE);
  for (std::string_view name : kAllSpecs) {
    const ImageSpec spec = parse_image_spec(name);
    const Tensor t = decode_image(span_of(jpg), spec);
    expect_image(t, spec, spec.channels == 1 ? grey : colour, std::string(name));
  }
}

TEST(ImageDecode, AlphaIsKeptOrAddedOpaque) {
  const cv::Mat bgra = gradient_bgra(9, 6);
  const Encoded png = encode(bgra, ".png");
  for (auto name : {"rgba8", "rgba", "torchrgba8", "torchrgba"}) {
    expect_image(decode_image(span_of(png), parse_image_spec(name)), parse_image_spec(name), bgra,
                 name);
  }
  // The colour specs drop it.
  cv::Mat bgr;
  cv::cvtColor(bgra, bgr, cv::COLOR_BGRA2BGR);
  expect_image(decode_image(span_of(png), parse_image_spec("rgb8")), parse_image_spec("rgb8"), bgr,
               "rgb8 of rgba png");
  // No alpha in the file: opaque.
  const Encoded png3 = encode(bgr, ".png");
  expect_image(decode_image(span_of(png3), parse_image_spec("torchrgba8")),
               parse_image_spec("torchrgba8"), bgr, "torchrgba8 of rgb png");
  // A grey file: grey colour channels.
  cv::Mat grey(5, 4, CV_8U);
  cv::randu(grey, 0, 256);
  cv::Mat grey_bgr;
  cv::cvtColor(grey, grey_bgr, cv::COLOR_GRAY2BGR);
  const Encoded grey_png = encode(grey, ".png");
  expect_image(decode_image(span_of(grey_png), parse_image_spec("rgba8")),
               parse_image_spec("rgba8"), grey_bgr, "rgba8 of grey png");
  expect_image(decode_image(span_of(grey_png), parse_image_spec("rgb8")), parse_image_spec("rgb8"),
               grey_bgr, "rgb8 of grey png");
  // A JPEG (no alpha): its colours and an opaque alpha.
  const Encoded jpg = encode(bgr, ".jpg");
  const cv::Mat decoded = cv::imdecode(jpg, cv::IMREAD_COLOR);
  expect_image(decode_image(span_of(jpg), parse_image_spec("rgba")), parse_image_spec("rgba"),
               decoded, "rgba of jpg");
}

TEST(ImageDecode, LosslessFormats) {
  const cv::Mat bgr = gradient(21, 11);
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  for (auto [ext, params] : std::vector<std::pair<std::string, std::vector<int>>>{
           {".png", {}},
           {".bmp", {}},
           {".ppm", {}},
           {".tiff", {}},
           {".webp", {cv::IMWRITE_WEBP_QUALITY, 101}}}) {  // above 100: lossless
    const Encoded e = encode(bgr, ext, params);
    expect_image(decode_image(span_of(e), rgb8), rgb8, bgr, ext);
  }
  cv::Mat grey(6, 10, CV_8U);
  cv::randu(grey, 0, 256);
  for (auto ext : {".pgm", ".png", ".tiff", ".bmp"}) {
    const Encoded e = encode(grey, ext);
    expect_image(decode_image(span_of(e), parse_image_spec("l8")), parse_image_spec("l8"), grey,
                 ext);
  }
  // A lossy webp is close.
  const Encoded webp = encode(bgr, ".webp", {cv::IMWRITE_WEBP_QUALITY, 90});
  const cv::Mat expected = cv::imdecode(webp, cv::IMREAD_COLOR);
  expect_image(decode_image(span_of(webp), rgb8), rgb8, expected, "lossy webp");
}

TEST(ImageDecode, SixteenBitImagesBecomeEightBit) {
  cv::Mat deep(4, 6, CV_16UC3);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 6; ++x)
      deep.at<cv::Vec3w>(y, x) = {65535, static_cast<std::uint16_t>(x * 10000), 0};
  }
  const Encoded png = encode(deep, ".png");
  for (auto name : {"rgb8", "rgba8", "torchrgb", "l8"}) {
    const ImageSpec spec = parse_image_spec(name);
    const Tensor t = decode_image(span_of(png), spec);
    EXPECT_EQ(t.dtype(), spec.dtype) << name;
    if (spec.channels == 1) continue;
    for (int x = 0; x < 6; ++x) {
      EXPECT_NEAR(element(t, spec, 1, x, 2), spec.dtype == DType::uint8 ? 255 : 1.0, 1e-6);  // B
      const double g = element(t, spec, 1, x, 1) * (spec.dtype == DType::uint8 ? 1 : 255);
      EXPECT_NEAR(g, x * 10000 / 257.0, 1.01) << name;
    }
  }
}

TEST(ImageDecode, Resize) {
  const cv::Mat bgr = gradient(300, 200);
  const Encoded png = encode(bgr, ".png");
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  // Shorter side 100, aspect kept.
  Tensor t = decode_image(span_of(png), rgb8, {.resize = 100});
  EXPECT_EQ(t.shape(), (Tensor::Shape{100, 150, 3}));
  cv::Mat area;
  cv::resize(bgr, area, cv::Size(150, 100), 0, 0, cv::INTER_AREA);
  // The antialiased triangle filter (PIL's, exact values in image_transform_test.cpp) keeps a
  // gradient as area averaging does.
  expect_image(t, rgb8, area, "shrunk like INTER_AREA", 1);
  // torchvision: the longer side is truncated (200x333 -> 100x166.5 -> 100x166).
  const Encoded tall = encode(gradient(200, 333), ".png");
  EXPECT_EQ(decode_image(span_of(tall), rgb8, {.resize = 100}).shape(),
            (Tensor::Shape{166, 100, 3}));
  // Enlarging uses bilinear.
  const cv::Mat small = gradient(40, 30);
  t = decode_image(span_of(encode(small, ".png")), rgb8, {.resize = 60});
  cv::Mat linear;
  cv::resize(small, linear, cv::Size(80, 60), 0, 0, cv::INTER_LINEAR);
  expect_image(t, rgb8, linear, "enlarged like INTER_LINEAR", 1);
  // Already the right size: untouched.
  t = decode_image(span_of(png), rgb8, {.resize = 200});
  expect_image(t, rgb8, bgr, "resize to own size");
  // Every layout.
  EXPECT_EQ(decode_image(span_of(png), parse_image_spec("torchl"), {.resize = 50}).shape(),
            (Tensor::Shape{1, 50, 75}));
  EXPECT_EQ(decode_image(span_of(png), parse_image_spec("l8"), {.resize = 50}).shape(),
            (Tensor::Shape{50, 75}));
  EXPECT_EQ(decode_image(span_of(png), parse_image_spec("torchrgba"), {.resize = 50}).shape(),
            (Tensor::Shape{4, 50, 75}));
  EXPECT_EQ(decode_image(span_of(png), parse_image_spec("rgba"), {.resize = 50}).shape(),
            (Tensor::Shape{50, 75, 4}));
  EXPECT_EQ(error_code([&] { decode_image(span_of(png), rgb8, {.resize = -1}); }),
            ErrorCode::invalid_argument);
}

TEST(ImageDecode, CenterCropAfterResize) {
  const cv::Mat bgr = gradient(300, 200);
  const Encoded png = encode(bgr, ".png");
  const ImageSpec rgb8 = parse_image_spec("rgb8");
  // Resize the shorter side to 100 (150x100), then the central 80x80.
  Tensor t = decode_image(span_of(png), rgb8, {.resize = 100, .crop = 80});
  EXPECT_EQ(t.shape(), (Tensor::Shape{80, 80, 3}));
  cv::Mat area;
  cv::resize(bgr, area, cv::Size(150, 100), 0, 0, cv::INTER_AREA);
  expect_image(t, rgb8, area(cv::Rect(35, 10, 80, 80)).clone(), "resize then centre crop", 1);
  // A crop alone resizes to it first: any aspect ratio gives crop x crop, ready to batch.
  for (const cv::Mat& m : {gradient(300, 200), gradient(120, 333), gradient(64, 64)}) {
    for (const char* spec : {"rgb8", "torchrgb", "l8"}) {
      const ImageSpec sp = parse_image_spec(spec);
      Tensor c = decode_image(span_of(encode(m, ".jpg")), sp, {.crop = 48});
      const Tensor::Shape want = sp.chw             ? Tensor::Shape{3, 48, 48}
                                 : sp.channels == 1 ? Tensor::Shape{48, 48}
                                                    : Tensor::Shape{48, 48, 3};
      EXPECT_EQ(c.shape(), want) << spec << " " << m.cols << "x" << m.rows;
    }
  }
  EXPECT_EQ(error_code([&] { decode_image(span_of(png), rgb8, {.resize = 50, .crop = 60}); }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] { decode_image(span_of(png), rgb8, {.crop = -2}); }),
            ErrorCode::invalid_argument);
}

TEST(ImageDecode, ReducedJpegDecodingMatchesFullDecoding) {
  struct Case {
    int width, height, resize;
  };
  for (const Case& c : std::vector<Case>{{512, 384, 96},    // 1/4 exactly: no resize left
                                         {512, 512, 224},   // 1/2, then 256 -> 224
                                         {1000, 750, 112},  // 1/4, then 250x188 -> 149x112
                                         {999, 501, 60},    // 1/8 of odd sizes (ceil)
                                         {333, 500, 150},   // 1/2, portrait
                                         {300, 200, 150},   // too small to reduce
                                         {64, 48, 100}}) {  // enlarged
    SCOPED_TRACE(std::to_string(c.width) + "x" + std::to_string(c.height) + " -> " +
                 std::to_string(c.resize));
    const Encoded jpg = encode(gradient(c.width, c.height), ".jpg", {cv::IMWRITE_JPEG_QUALITY, 90});
    for (auto name : {"rgb8", "l8", "torchrgb8", "rgba8"}) {
      const ImageSpec spec = parse_image_spec(name);
      const Tensor reduced = decode_image(span_of(jpg), spec, {.resize = c.resize});
      const Tensor full =
          decode_image(span_of(jpg), spec, {.resize = c.resize, .reduced_decode = false});
      const int shorter = static_cast<int>(std::min(c.width, c.height));
      const int longer =
          static_cast<int>(std::int64_t{c.resize} * std::max(c.width, c.height) / shorter);
      const std::int64_t h = c.width <= c.height ? longer : c.resize;
      const std::int64_t w = c.width <= c.height ? c.resize : longer;
      const std::int64_t ch = spec.channels;
      Tensor::Shape want = spec.chw  ? Tensor::Shape{ch, h, w}
                           : ch == 1 ? Tensor::Shape{h, w}
                                     : Tensor::Shape{h, w, ch};
      EXPECT_EQ(full.shape(), want) << name;
      EXPECT_EQ(reduced.shape(), want) << name;
      EXPECT_LT(mean_abs_diff(reduced, full), 2.0) << name;
    }
  }
}

TEST(ImageDecode, ReducedDecodingOfProgressiveAndGreyJpegs) {
  const cv::Mat bgr = gradient(640, 480);
  cv::Mat grey;
  cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
  for (const Encoded& jpg :
       {encode(bgr, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1}), encode(grey, ".jpg")}) {
    for (auto name : {"rgb8", "l8"}) {
      const ImageSpec spec = parse_image_spec(name);
      const Tensor reduced = decode_image(span_of(jpg), spec, {.resize = 120});
      const Tensor full =
          decode_image(span_of(jpg), spec, {.resize = 120, .reduced_decode = false});
      EXPECT_EQ(reduced.dim(0), 120);
      EXPECT_EQ(reduced.dim(1), 160);
      EXPECT_LT(mean_abs_diff(reduced, full), 2.0) << name;
    }
  }
}

TEST(ImageJpegSize, ReadsTheFrameHeader) {
  for (auto [w, h] : std::vector<std::pair<int, int>>{{1, 1}, {640, 480}, {333, 500}, {17, 3}}) {
    const cv::Mat bgr = gradient(w, h);
    EXPECT_EQ(jpeg_size(span_of(encode(bgr, ".jpg"))), (ImageSize{w, h}));
    EXPECT_EQ(jpeg_size(span_of(encode(bgr, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1}))),
              (ImageSize{w, h}));
    cv::Mat grey;
    cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
    EXPECT_EQ(jpeg_size(span_of(encode(grey, ".jpg"))), (ImageSize{w, h}));
  }
  EXPECT_EQ(jpeg_size(span_of(encode(gradient(8, 8), ".png"))), std::nullopt);
}

TEST(ImageJpegSize, TruncatedOrGarbageInputGivesNothing) {
  const Encoded jpg = encode(gradient(50, 40), ".jpg");
  // Every prefix: either nothing or the right answer, and no read past the end (ASan).
  for (std::size_t n = 0; n <= jpg.size(); ++n) {
    const auto bytes = std::make_unique<std::byte[]>(n ? n : 1);  // exactly n bytes for ASan
    if (n) std::memcpy(bytes.get(), jpg.data(), n);
    const auto size = jpeg_size({bytes.get(), n});
    if (size) EXPECT_EQ(*size, (ImageSize{50, 40})) << n;
    if (n < 4) EXPECT_EQ(size, std::nullopt);
  }
  EXPECT_EQ(jpeg_size({}), std::nullopt);
  const Encoded soi_only{0xFF, 0xD8, 0xFF};
  EXPECT_EQ(jpeg_size(span_of(soi_only)), std::nullopt);
  const Encoded all_ff(100, 0xFF);
  EXPECT_EQ(jpeg_size(span_of(all_ff)), std::nullopt);
  // SOF0 declaring width 0, a segment length below 2, a length running past the end.
  const Encoded zero_width{0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x00, 0x10, 0x00, 0x00};
  EXPECT_EQ(jpeg_size(span_of(zero_width)), std::nullopt);
  const Encoded short_len{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01, 0xFF, 0xC0};
  EXPECT_EQ(jpeg_size(span_of(short_len)), std::nullopt);
  const Encoded long_len{0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xF0, 0x00};
  EXPECT_EQ(jpeg_size(span_of(long_len)), std::nullopt);
  // A minimal header.
  const Encoded minimal{0xFF, 0xD8, 0xFF, 0xC2, 0x00, 0x0B, 0x08, 0x01, 0x02, 0x03, 0x04, 0x01};
  EXPECT_EQ(jpeg_size(span_of(minimal)), (ImageSize{0x0304, 0x0102}));
  // Random bytes after a JPEG signature, and random changes to a real header.
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    Encoded e = i % 2 ? Encoded(jpg.begin(), jpg.begin() + std::min<std::size_t>(jpg.size(), 700))
                      : Encoded{0xFF, 0xD8, 0xFF};
    if (i % 2) {
      for (int k = 0; k < 4; ++k) e[3 + rng() % (e.size() - 3)] = static_cast<std::uint8_t>(rng());
    } else {
      for (int k = 0; k < 60; ++k) e.push_back(k % 5 ? static_cast<std::uint8_t>(rng()) : 0xFF);
    }
    e.resize(3 + rng() % (e.size() - 2));
    const auto bytes = std::make_unique<std::byte[]>(e.size());
    std::memcpy(bytes.get(), e.data(), e.size());
    const auto size = jpeg_size({bytes.get(), e.size()});
    if (size) {
      EXPECT_GT(size->width, 0);
      EXPECT_GT(size->height, 0);
    }
  }
}

// The corrupt_data Error of decoding `bytes`, naming url and member.
void expect_corrupt(const Encoded& bytes, const std::string& why) {
  SCOPED_TRACE(why);
  try {
    decode_image(span_of(bytes), parse_image_spec("rgb8"), {}, "s3://b/shard-000001.tar",
                 "sample7.jpg");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data) << e.what();
    EXPECT_EQ(e.url(), "s3://b/shard-000001.tar");
    EXPECT_EQ(e.member(), "sample7.jpg");
    const std::string what = e.what();
    EXPECT_NE(what.find("s3://b/shard-000001.tar: member 'sample7.jpg': cannot decode image (" +
                        std::to_string(bytes.size()) + " bytes): "),
              std::string::npos)
        << what;
  }
}

TEST(ImageDecode, CorruptDataIsAnErrorNamingTheMember) {
  expect_corrupt({}, "empty");
  expect_corrupt(Encoded(1000, 0x5A), "garbage");
  expect_corrupt({0xFF, 0xD8, 0xFF}, "jpeg signature only");
  expect_corrupt({0xFF, 0xD8, 0xFF, 0xD9}, "soi eoi");
  const Encoded jpg = encode(gradient(64, 64), ".jpg");
  for (std::size_t n :
       {std::size_t{2}, std::size_t{20}, std::size_t{300}, jpg.size() / 2, jpg.size() - 2}) {
    expect_corrupt(Encoded(jpg.begin(), jpg.begin() + n), "jpeg cut at " + std::to_string(n));
  }
  const Encoded png = encode(gradient(64, 64), ".png");
  for (std::size_t n : {std::size_t{8}, std::size_t{40}, png.size() / 2, png.size() - 12}) {
    expect_corrupt(Encoded(png.begin(), png.begin() + n), "png cut at " + std::to_string(n));
  }
  // Bytes after the end of a JPEG are fine.
  Encoded trailing = jpg;
  trailing.insert(trailing.end(), {0x00, 0x11, 0x22});
  EXPECT_EQ(decode_image(span_of(trailing), parse_image_spec("rgb8")).shape(),
            (Tensor::Shape{64, 64, 3}));
  // Random damage: an error or an image, never a crash.
  std::mt19937 rng(3);
  for (int i = 0; i < 40; ++i) {
    Encoded e = i % 2 ? jpg : png;
    for (int k = 0; k < 8; ++k) e[rng() % e.size()] = static_cast<std::uint8_t>(rng());
    try {
      const Tensor t = decode_image(span_of(e), parse_image_spec("rgb8"), {.resize = 16});
      EXPECT_EQ(t.dim(2), 3);
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::corrupt_data) << err.what();
    }
  }
}

TEST(ImageDecode, InvalidSpecIsAnArgumentError) {
  const Encoded png = encode(gradient(4, 4), ".png");
  ImageSpec spec;
  spec.channels = 2;
  EXPECT_EQ(error_code([&] { decode_image(span_of(png), spec); }), ErrorCode::invalid_argument);
  spec = ImageSpec{};
  spec.dtype = DType::float64;
  EXPECT_EQ(error_code([&] { decode_image(span_of(png), spec); }), ErrorCode::invalid_argument);
}

TEST(ImageDecode, TheTensorOwnsItsPixels) {
  Encoded jpg = encode(gradient(32, 32), ".jpg");
  Tensor a = decode_image(span_of(jpg), parse_image_spec("bgr8"));
  Tensor copy = a.clone();
  std::fill(jpg.begin(), jpg.end(), 0);
  jpg.clear();
  jpg.shrink_to_fit();
  EXPECT_EQ(a, copy);
}

TEST(ImageDecode, ConcurrentDecodes) {
  const Encoded jpg = encode(gradient(200, 150), ".jpg");
  const Tensor expected = decode_image(span_of(jpg), parse_image_spec("torchrgb"), {.resize = 64});
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 20; ++k) {
        if (!(decode_image(span_of(jpg), parse_image_spec("torchrgb"), {.resize = 64}) == expected))
          ++bad[i];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

// ---- encode ----------------------------------------------------------------------------------

// An RGB (or RGBA) uint8 tensor of `bgr`'s pixels.
Tensor rgb_tensor(const cv::Mat& bgr) {
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, bgr.channels() == 4 ? cv::COLOR_BGRA2RGBA : cv::COLOR_BGR2RGB);
  return from_mat(rgb);
}

TEST(ImageDecode, IntoAnAllocatorGivesTheSameValues) {
  // Pairs of different pictures of one size: the second overwrites the per-thread scratch.
  cv::Mat bgr = gradient(61, 47), bgra = gradient_bgra(33, 29), big = gradient(90, 70);
  cv::Mat bgr2, bgra2, big2;
  cv::flip(bgr, bgr2, -1);
  cv::flip(bgra, bgra2, 1);
  cv::flip(big, big2, 0);
  const std::vector<std::pair<Encoded, Encoded>> images{
      {encode(bgr, ".png"), encode(bgr2, ".png")},
      {encode(big, ".jpg"), encode(big2, ".jpg")},
      {encode(bgra, ".png"), encode(bgra2, ".png")}};
  const ImageDecodeOptions cases[] = {
      {}, {.resize = 40}, {.resize = 40, .crop = 32}, {.crop = 24}, {.resize = 20, .crop = 20}};
  const auto decline = [](DType, const Tensor::Shape&) { return Tensor(); };
  for (std::string_view name : kAllSpecs) {
    const ImageSpec spec = parse_image_spec(name);
    for (const ImageDecodeOptions& options : cases) {
      for (const auto& [image, other] : images) {
        SCOPED_TRACE(std::string(name) + " resize " + std::to_string(options.resize) + " crop " +
                     std::to_string(options.crop));
        const Tensor want = decode_image(span_of(image), spec, options);
        Tensor::Shape slab_shape{3};
        slab_shape.insert(slab_shape.end(), want.shape().begin(), want.shape().end());
        const Tensor slab(want.dtype(), slab_shape);
        int calls = 0;
        const Tensor got = decode_image(span_of(image), spec, options,
                                        [&](DType dtype, const Tensor::Shape& shape) {
                                          ++calls;
                                          EXPECT_EQ(dtype, want.dtype());
                                          EXPECT_EQ(shape, want.shape());
                                          return slab[1];
                                        });
        EXPECT_EQ(calls, 1);
        EXPECT_EQ(got.data(), slab[1].data());  // written into the row it was given
        EXPECT_EQ(got, want);
        // Declined: a tensor of its own with the same values, which the next decode (into the
        // same scratch) leaves alone.
        const Tensor own = decode_image(span_of(image), spec, options, decline);
        const Tensor next = decode_image(span_of(other), spec, options, decline);
        EXPECT_EQ(own, want);
        EXPECT_EQ(next, decode_image(span_of(other), spec, options));
        EXPECT_EQ(decode_image(span_of(image), spec, options, ImageAllocator()), want);
      }
    }
  }
  const Encoded png = encode(bgr, ".png");
  EXPECT_EQ(error_code([&] {
              decode_image(span_of(png), parse_image_spec("rgb8"), {},
                           [](DType, const Tensor::Shape&) { return Tensor(DType::uint8, {2}); });
            }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] {
              decode_image(span_of(Encoded{1, 2, 3}), parse_image_spec("rgb8"), {}, decline);
            }),
            ErrorCode::corrupt_data);
}

TEST(ImageEncode, LosslessRoundTrips) {
  const cv::Mat bgr = gradient(23, 17);
  const Tensor rgb = rgb_tensor(bgr);
  for (auto ext : {"png", "bmp", "ppm", "pnm", "tiff", "tif", ".PNG"}) {
    const Bytes e = encode_image(rgb, ext);
    EXPECT_EQ(decode_image(e.span(), parse_image_spec("rgb8")), rgb) << ext;
  }
  // What OpenCV reads back is BGR: the tensor's R is its channel 2.
  const Bytes png = encode_image(rgb, "png");
  const Encoded raw(reinterpret_cast<const std::uint8_t*>(png.data()),
                    reinterpret_cast<const std::uint8_t*>(png.data()) + png.size());
  EXPECT_EQ(cv::norm(cv::imdecode(raw, cv::IMREAD_UNCHANGED), bgr, cv::NORM_INF), 0);

  const cv::Mat bgra = gradient_bgra(11, 5);
  const Tensor rgba = rgb_tensor(bgra);
  for (auto ext : {"png", "tiff"}) {
    EXPECT_EQ(decode_image(encode_image(rgba, ext).span(), parse_image_spec("rgba8")), rgba) << ext;
  }
  cv::Mat grey(9, 14, CV_8U);
  cv::randu(grey, 0, 256);
  const Tensor g = from_mat(grey);
  ASSERT_EQ(g.shape(), (Tensor::Shape{9, 14}));
  for (auto ext : {"png", "pgm", "pbm", "ppm", "bmp", "tiff"}) {
    EXPECT_EQ(decode_image(encode_image(g, ext).span(), parse_image_spec("l8")), g) << ext;
    EXPECT_EQ(decode_image(encode_image(g.reshape({9, 14, 1}), ext).span(), parse_image_spec("l8")),
              g)
        << ext;
  }
  // Netpbm: a graymap for grey, a pixmap for colour, whatever the name.
  EXPECT_EQ(encode_image(g, "ppm").str().substr(0, 2), "P5");
  EXPECT_EQ(encode_image(rgb, "pgm").str().substr(0, 2), "P6");
}

TEST(ImageEncode, JpegAndWebpAreClose) {
  const Tensor rgb = rgb_tensor(gradient(64, 48));
  const Bytes jpg = encode_image(rgb, "jpg");
  ASSERT_TRUE(jpeg_size(jpg.span()));
  EXPECT_EQ(*jpeg_size(jpg.span()), (ImageSize{64, 48}));
  EXPECT_LT(mean_abs_diff(decode_image(jpg.span(), parse_image_spec("rgb8")), rgb), 1.0);
  const Bytes low = encode_image(rgb, "jpeg", {.quality = 20});
  EXPECT_LT(low.size(), jpg.size());  // the default is quality 100
  EXPECT_LT(mean_abs_diff(decode_image(low.span(), parse_image_spec("rgb8")), rgb), 4.0);
  const Bytes webp = encode_image(rgb, "webp");
  EXPECT_EQ(webp.str().substr(0, 4), "RIFF");
  EXPECT_LT(mean_abs_diff(decode_image(webp.span(), parse_image_spec("rgb8")), rgb), 3.0);
  const Tensor rgba = rgb_tensor(gradient_bgra(64, 48));
  const Tensor back =
      decode_image(encode_image(rgba, "webp", {.quality = 95}).span(), parse_image_spec("rgba8"));
  EXPECT_LT(mean_abs_diff(back, rgba), 3.0);
}

TEST(ImageEncode, FloatImagesAreScaledAndRounded) {
  const Tensor rgb = rgb_tensor(gradient(10, 6));
  const Tensor f = decode_image(encode_image(rgb, "png").span(), parse_image_spec("rgb"));
  EXPECT_EQ(decode_image(encode_image(f, "png").span(), parse_image_spec("rgb8")), rgb);
  Tensor d(DType::float64, {2, 3});
  const double values[] = {0.0, 1.0, 0.5, 0.2 / 255, 0.7 / 255, 1.0005};
  std::copy(std::begin(values), std::end(values), d.values<double>().begin());
  const Tensor back = decode_image(encode_image(d, "png").span(), parse_image_spec("l8"));
  const std::vector<std::uint8_t> got(back.values<std::uint8_t>().begin(),
                                      back.values<std::uint8_t>().end());
  EXPECT_EQ(got, (std::vector<std::uint8_t>{0, 255, 128, 0, 1, 255}));
  Tensor slightly_negative(DType::float32, {1, 1});
  slightly_negative.values<float>()[0] = -0.0009f;
  EXPECT_EQ(decode_image(encode_image(slightly_negative, "png").span(), parse_image_spec("l8"))
                .values<std::uint8_t>()[0],
            0);
}

TEST(ImageEncode, Errors) {
  const Tensor rgb = rgb_tensor(gradient(8, 8));
  std::string what;
  EXPECT_EQ(error_code([&] { encode_image(rgb, "gif"); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("'gif'"), std::string::npos) << what;
  EXPECT_EQ(error_code([&] { encode_image(rgb, ""); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code(
                [&] {
                  encode_image(Tensor(DType::int32, {4, 4}), "png");
                },
                &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find("int32[4, 4]"), std::string::npos) << what;
  EXPECT_EQ(error_code(
                [&] {
                  encode_image(Tensor(DType::uint8, {4, 4, 2}), "png");
                },
                &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find("uint8[4, 4, 2]"), std::string::npos) << what;
  EXPECT_EQ(error_code([&] {
              encode_image(Tensor(DType::uint8, {3, 4, 4}).reshape({1, 3, 4, 4}), "png");
            }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] {
              encode_image(Tensor(DType::uint8, {0, 4, 3}), "png");
            }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] { encode_image(Tensor(), "png"); }), ErrorCode::invalid_argument);
  const Tensor rgba(DType::uint8, {4, 4, 4});
  EXPECT_EQ(error_code([&] { encode_image(rgba, "jpg"); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("alpha"), std::string::npos) << what;
  EXPECT_EQ(error_code([&] { encode_image(rgba, "ppm"); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] { encode_image(rgb, "jpg", {.quality = 101}); }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] { encode_image(rgb, "webp", {.quality = 0}); }),
            ErrorCode::invalid_argument);
  EXPECT_NO_THROW(encode_image(rgb, "png", {.quality = 5}));  // ignored by lossless formats
  for (float bad : {1.5f, -0.01f, NAN}) {
    Tensor f(DType::float32, {2, 2});
    std::fill(f.values<float>().begin(), f.values<float>().end(), 0.5f);
    f.values<float>()[3] = bad;
    EXPECT_EQ(error_code([&] { encode_image(f, "png"); }, &what), ErrorCode::invalid_argument)
        << bad;
    EXPECT_NE(what.find("[0, 1]"), std::string::npos) << what;
  }
}

// ---- wds/opencv.hpp --------------------------------------------------------------------------

TEST(ImageOpenCV, ToMatIsAView) {
  Tensor t(DType::uint8, {4, 5, 3});
  std::fill(t.values<std::uint8_t>().begin(), t.values<std::uint8_t>().end(), 0);
  cv::Mat m = to_mat(t);
  EXPECT_EQ(m.rows, 4);
  EXPECT_EQ(m.cols, 5);
  EXPECT_EQ(m.type(), CV_8UC3);
  EXPECT_EQ(static_cast<void*>(m.data), static_cast<void*>(t.data()));
  m.at<cv::Vec3b>(1, 2) = {1, 2, 3};
  EXPECT_EQ(t.values<std::uint8_t>()[(1 * 5 + 2) * 3 + 2], 3);
  EXPECT_EQ(to_mat(Tensor(DType::float32, {2, 3})).type(), CV_32FC1);
  EXPECT_EQ(to_mat(Tensor(DType::float32, {2, 3, 1})).type(), CV_32FC1);
  EXPECT_EQ(error_code([] { to_mat(Tensor(DType::int64, {2, 3})); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([] {
              to_mat(Tensor(DType::uint8, {1, 2, 3, 4}));
            }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([] { to_mat(Tensor(DType::uint8, {5})); }), ErrorCode::invalid_argument);
}

TEST(ImageOpenCV, FromMatCopiesAndKeepsTheOrder) {
  const cv::Mat bgr = gradient(12, 9);
  const cv::Mat roi = bgr(cv::Rect(2, 3, 5, 4));  // rows not contiguous
  const Tensor t = from_mat(roi);
  EXPECT_EQ(t.shape(), (Tensor::Shape{4, 5, 3}));
  EXPECT_EQ(cv::norm(to_mat(t), roi, cv::NORM_INF), 0);
  EXPECT_NE(static_cast<void*>(to_mat(t).data), static_cast<void*>(roi.data));
  // The decoded bgr8 tensor is OpenCV's own decoding.
  const Encoded png = encode(bgr, ".png");
  EXPECT_EQ(
      cv::norm(to_mat(decode_image(span_of(png), parse_image_spec("bgr8"))), bgr, cv::NORM_INF), 0);
  EXPECT_EQ(from_mat(cv::Mat(2, 2, CV_32FC2)).shape(), (Tensor::Shape{2, 2, 2}));
  EXPECT_EQ(from_mat(cv::Mat(2, 2, CV_16U)).dtype(), DType::uint16);
  const int dims[] = {2, 2, 2};
  EXPECT_EQ(error_code([&] { from_mat(cv::Mat(3, dims, CV_8U)); }), ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace wds
