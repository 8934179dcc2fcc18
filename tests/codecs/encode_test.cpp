// Writing decoded samples: encode_field's table (bytes, strings, ints, floats, JSON, lists,
// tensors as npy or images, compressed suffixes), its errors, encode_sample, and shards written
// from DecodedSamples that wds, GNU tar and webdataset's reading rules read back.
#include "wds/encode.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "codecs/formats.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/decode.hpp"
#include "wds/error.hpp"
#include "wds/image.hpp"
#include "wds/npy.hpp"
#include "wds/opencv.hpp"
#include "wds/tar_writer.hpp"
#include "wds/transforms.hpp"
#include "wds/value.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using test::error_code;
using test::mean_abs_diff;

std::string str(const Bytes& b) {
  return std::string(b.str());
}

// An RGB picture (channel 0 is R) with smooth gradients and some fine texture, so that JPEG
// quality matters for its size but it still decodes close to the original.
cv::Mat rgb_picture(int height, int width, int seed = 0) {
  cv::Mat m(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const int texture = ((x * 7 + y * 13 + seed * 5) % 16) - 8;
      auto& p = m.at<cv::Vec3b>(y, x);
      p[0] = cv::saturate_cast<std::uint8_t>(40 + x * 160 / width + texture);    // R
      p[1] = cv::saturate_cast<std::uint8_t>(200 - y * 150 / height + texture);  // G
      p[2] = cv::saturate_cast<std::uint8_t>(90 + seed * 10 + texture);          // B
    }
  }
  return m;
}

Tensor rgb_tensor(int height, int width, int seed = 0) {
  return from_mat(rgb_picture(height, width, seed));
}

Tensor decode_as(const Bytes& b, const char* spec) {
  return decode_image(b.span(), parse_image_spec(spec));
}

// What a command prints on stdout; its exit status in *status.
std::string run_command(const std::string& cmd, int* status) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *status = -1;
    return {};
  }
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  *status = pclose(p);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// --- encode_field: the table of wds/encode.hpp ----------------------------------------------

TEST(EncodeField, StringsAreTheirUtf8BytesUnderAnyExtension) {
  const std::string text = "h\xc3\xa9llo \xe2\x9c\x93 7";  // "héllo ✓ 7"
  for (const char* ext : {"txt", "text", "json", "cls", "jpg", "npy", "png", "seg.txt", "weird"}) {
    EXPECT_EQ(str(encode_field(ext, Value(text))), text) << ext;
  }
  EXPECT_EQ(str(encode_field("txt", Value(std::string()))), "");
}

TEST(EncodeField, IntegersAreDecimalTextOrJson) {
  for (const char* ext :
       {"cls", "cls2", "class", "count", "index", "inx", "id", "txt", "text", "seg.cls"}) {
    EXPECT_EQ(str(encode_field(ext, Value(42))), "42") << ext;
    EXPECT_EQ(str(encode_field(ext, Value(-7))), "-7") << ext;
  }
  EXPECT_EQ(str(encode_field("cls", Value(std::int64_t{INT64_MAX}))), "9223372036854775807");
  EXPECT_EQ(str(encode_field("cls", Value(std::int64_t{INT64_MIN}))), "-9223372036854775808");
  for (const char* ext : {"json", "jsn"}) {
    Bytes b = encode_field(ext, Value(123));
    EXPECT_EQ(Json::parse(b.str()), Json(123)) << ext;
  }
  // What the writer makes of a label, the decoder reads back as the same label.
  Bytes cls = encode_field("cls", Value(31));
  Sample raw("k");
  raw.add("cls", std::move(cls));
  DecodedSample d(std::move(raw));
  decode_sample(d, {});
  EXPECT_EQ(d.get<std::int64_t>("cls"), 31);
}

TEST(EncodeField, FloatsAreShortestDecimalTextOrJson) {
  EXPECT_EQ(str(encode_field("cls", Value(0.25))), "0.25");
  EXPECT_EQ(str(encode_field("txt", Value(0.1))), "0.1");  // round-trip shortest, not 0.1000..01
  EXPECT_EQ(std::stod(str(encode_field("count", Value(-3.5e-7)))), -3.5e-7);
  for (const char* ext : {"json", "jsn"}) {
    EXPECT_EQ(Json::parse(encode_field(ext, Value(2.5)).str()), Json(2.5)) << ext;
  }
}

TEST(EncodeField, JsonDocumentsAndListsAsJson) {
  const Json doc = {{"caption", "a \"quoted\" caf\xc3\xa9"}, {"size", {256, 128}}, {"p", 0.5}};
  for (const char* ext : {"json", "jsn", "meta.json"}) {
    EXPECT_EQ(str(encode_field(ext, Value(doc))), doc.dump()) << ext;
    EXPECT_EQ(Json::parse(encode_field(ext, Value(doc)).str()), doc) << ext;
  }
  Tuple list{Value(1), Value("two"), Value(Json{{"k", 3}}), Value(0.5)};
  EXPECT_EQ(str(encode_field("json", Value(list))), R"([1,"two",{"k":3},0.5])");
  EXPECT_EQ(str(encode_field("json", Value(Tuple{}))), "[]");
  // A list element JSON cannot hold.
  std::string what;
  EXPECT_EQ(error_code(
                [] {
                  encode_field("json", Value(Tuple{Value(1), Value(Tensor(DType::uint8, {2}))}), {},
                               "k.json");
                },
                &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find("k.json"), std::string::npos) << what;
  EXPECT_NE(what.find("tensor"), std::string::npos) << what;
  // JSON and lists only go to json fields.
  EXPECT_EQ(error_code([&] { encode_field("txt", Value(doc)); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] { encode_field("cls", Value(list)); }), ErrorCode::invalid_argument);
}

TEST(EncodeField, BytesPassThroughUnchangedUnderAnyExtension) {
  const std::string binary("\x00\xff\xd8 not really a jpeg \x01\n\x7f", 24);
  ASSERT_EQ(binary.size(), 24u);
  for (const char* ext : {"jpg", "png", "json", "cls", "txt", "npy", "bin", "seg.png"}) {
    EXPECT_EQ(str(encode_field(ext, Value(Bytes::copy_of(binary)))), binary) << ext;
  }
  EXPECT_EQ(encode_field("bin", Value(Bytes())).size(), 0u);
}

TEST(EncodeField, TensorsAsNpyAreWhatWriteNpyWrites) {
  Tensor f(DType::float32, {2, 3});
  for (float i = 0; auto& v : f.values<float>()) v = i++ * 0.5f - 1.0f;
  Tensor i16(DType::int16, {4});
  for (std::int16_t i = 0; auto& v : i16.values<std::int16_t>())
    v = static_cast<std::int16_t>(i++ * -300);
  for (const Tensor& t : {f, i16}) {
    Bytes b = encode_field("npy", Value(t));
    EXPECT_EQ(b, write_npy(t)) << t.describe();
    EXPECT_EQ(parse_npy(b.span()), t) << t.describe();
    EXPECT_EQ(encode_field("seg.npy", Value(t)), write_npy(t)) << t.describe();
  }
}

TEST(EncodeField, LosslessImagesDecodeToTheSamePixels) {
  const Tensor rgb = rgb_tensor(9, 13);
  for (const char* ext : {"png", "ppm", "bmp", "tif", "tiff", "seg.png"}) {
    Bytes b = encode_field(ext, Value(rgb));
    EXPECT_EQ(decode_as(b, "rgb8"), rgb) << ext;
  }
  const Bytes png = encode_field("png", Value(rgb));
  EXPECT_EQ(png.str().substr(0, 8), "\x89PNG\r\n\x1a\n");
  // Grey (HxW) and RGBA.
  Tensor grey(DType::uint8, {5, 7});
  for (std::uint8_t i = 0; auto& v : grey.values<std::uint8_t>())
    v = static_cast<std::uint8_t>(i++ * 7);
  EXPECT_EQ(decode_as(encode_field("png", Value(grey)), "l8"), grey);
  EXPECT_EQ(decode_as(encode_field("pgm", Value(grey)), "l8"), grey);
  Tensor rgba(DType::uint8, {3, 4, 4});
  for (std::uint8_t i = 0; auto& v : rgba.values<std::uint8_t>())
    v = static_cast<std::uint8_t>(i++ * 5 + 1);
  EXPECT_EQ(decode_as(encode_field("png", Value(rgba)), "rgba8"), rgba);
}

TEST(EncodeField, JpegQualityOptionTradesSizeForFidelity) {
  const Tensor img = rgb_tensor(64, 96);
  const Bytes q50 = encode_field("jpg", Value(img), {.image = {.quality = 50}});
  const Bytes q95 = encode_field("jpg", Value(img), {.image = {.quality = 95}});
  const Bytes best = encode_field("jpg", Value(img));  // default: 100, as WebDataset's writer
  EXPECT_EQ(q50.str().substr(0, 3), "\xff\xd8\xff");
  EXPECT_LT(q50.size(), q95.size());
  EXPECT_LE(q95.size(), best.size());
  const double d50 = mean_abs_diff(decode_as(q50, "rgb8"), img);
  const double d95 = mean_abs_diff(decode_as(q95, "rgb8"), img);
  EXPECT_LT(d50, 6.0);
  EXPECT_LT(d95, 3.0);
  EXPECT_LE(d95, d50);
  EXPECT_EQ(encode_field("jpeg", Value(img), {.image = {.quality = 50}}), q50);
  // The quality is checked.
  std::string what;
  EXPECT_EQ(
      error_code([&] { encode_field("jpg", Value(img), {.image = {.quality = 101}}, "k.jpg"); },
                 &what),
      ErrorCode::invalid_argument);
  EXPECT_NE(what.find("k.jpg"), std::string::npos) << what;
}

TEST(EncodeField, WebpIsLossyWithAQualityOption) {
  const Tensor img = rgb_tensor(48, 64, 3);
  const Bytes webp = encode_field("webp", Value(img));
  ASSERT_GT(webp.size(), 12u);
  EXPECT_EQ(webp.str().substr(0, 4), "RIFF");
  EXPECT_EQ(webp.str().substr(8, 4), "WEBP");
  EXPECT_LT(mean_abs_diff(decode_as(webp, "rgb8"), img), 8.0);
  const Bytes low = encode_field("webp", Value(img), {.image = {.quality = 10}});
  const Bytes high = encode_field("webp", Value(img), {.image = {.quality = 95}});
  EXPECT_LT(low.size(), high.size());
}

TEST(EncodeField, FloatImagesInUnitRangeAreScaledOthersAreErrors) {
  Tensor u8(DType::uint8, {4, 6, 3});
  Tensor f32(DType::float32, {4, 6, 3});
  Tensor f64(DType::float64, {4, 6, 3});
  auto pu = u8.values<std::uint8_t>();
  auto pf = f32.values<float>();
  auto pd = f64.values<double>();
  for (std::size_t i = 0; i < pu.size(); ++i) {
    pu[i] = static_cast<std::uint8_t>((i * 37) % 256);
    pf[i] = static_cast<float>(pu[i]) / 255.0f;
    pd[i] = pu[i] / 255.0;
  }
  EXPECT_EQ(decode_as(encode_field("png", Value(f32)), "rgb8"), u8);
  EXPECT_EQ(decode_as(encode_field("png", Value(f64)), "rgb8"), u8);
  for (float bad : {1.5f, -0.25f, NAN}) {
    Tensor t = f32.clone();
    t.values<float>()[5] = bad;
    std::string what;
    EXPECT_EQ(error_code([&] { encode_field("png", Value(t), {}, "img3.png"); }, &what),
              ErrorCode::invalid_argument)
        << bad;
    EXPECT_NE(what.find("img3.png"), std::string::npos) << what;
  }
  // Integer tensors other than uint8 are no image.
  EXPECT_EQ(error_code([] {
              encode_field("png", Value(Tensor(DType::int32, {2, 2})));
            }),
            ErrorCode::invalid_argument);
}

TEST(EncodeField, CompressedSuffixesCompressAndTheDecoderReadsThemBack) {
  struct Case {
    const char* ext;
    std::string magic;
  };
  const std::vector<Case> cases{{"txt.gz", "\x1f\x8b"},
                                {"txt.xz", std::string("\xfd"
                                                       "7zXZ\x00",
                                                       6)},
                                {"txt.bz2", "BZh"},
                                {"txt.zst", "\x28\xb5\x2f\xfd"}};
  const std::string text(2000, 'a');
  for (const Case& c : cases) {
    Bytes b = encode_field(c.ext, Value(text));
    EXPECT_EQ(b.str().substr(0, c.magic.size()), c.magic) << c.ext;
    EXPECT_LT(b.size(), text.size()) << c.ext;
    Sample raw("k");
    raw.add(c.ext, std::move(b));
    DecodedSample d(std::move(raw));
    decode_sample(d, {});
    EXPECT_EQ(d.get<std::string>(c.ext), text) << c.ext;
  }
  // Any encoder runs first: an npy tensor and a JSON document, compressed.
  Tensor t(DType::int32, {3, 2});
  for (std::int32_t i = 0; auto& v : t.values<std::int32_t>()) v = i++ * 1000;
  const Json doc = {{"n", 5}};
  Sample raw("k");
  raw.add("npy.gz", encode_field("npy.gz", Value(t)));
  raw.add("json.zst", encode_field("json.zst", Value(doc)));
  raw.add("cls.bz2", encode_field("cls.bz2", Value(9)));
  raw.add("bin.gz", encode_field("bin.gz", Value(Bytes::copy_of(std::string("\x00\x01", 2)))));
  DecodedSample d(std::move(raw));
  decode_sample(d, {});
  EXPECT_EQ(d.get<Tensor>("npy.gz"), t);
  EXPECT_EQ(d.get<Json>("json.zst"), doc);
  EXPECT_EQ(d.get<std::int64_t>("cls.bz2"), 9);
  EXPECT_EQ(d.get<Bytes>("bin.gz").str(), std::string("\x00\x01", 2));
  // gzip's own tool reads it.
  test::TempDir dir;
  const std::string gz = dir.write("x.gz", str(encode_field("txt.gz", Value("for gzip -d"))));
  int status = 0;
  EXPECT_EQ(run_command("gzip -dc '" + gz + "'", &status), "for gzip -d");
  EXPECT_EQ(status, 0);
  // Empty content compresses too (a valid, empty gzip stream).
  const std::string empty = dir.write("e.gz", str(encode_field("txt.gz", Value(std::string()))));
  EXPECT_EQ(run_command("gzip -dc '" + empty + "'", &status), "");
  EXPECT_EQ(status, 0);
}

// Known problem of the decoder (codecs/decode.cpp), not of the encoder: a compressed member
// whose content is empty (what `printf '' | gzip` or gzip.compress(b"") make) fails with
// "cannot decompress: Unrecognized archive format". Enable when the decoder reads it.
TEST(EncodeField, DecoderReadsCompressedEmptyContent) {
  for (const char* ext : {"txt.gz", "txt.xz", "txt.bz2", "txt.zst"}) {
    Sample empty("k");
    empty.add(ext, encode_field(ext, Value(std::string())));
    DecodedSample d(std::move(empty));
    decode_sample(d, {});
    EXPECT_EQ(d.get<std::string>(ext), "") << ext;
  }
}

// Reproducible output: a gzip member must not record the time it was written (its header's
// MTIME, bytes 4-7, is zero: "no time stamp"), or the same samples give other bytes a second
// later.
TEST(EncodeField, GzipMembersCarryNoTimestamp) {
  const Bytes first = encode_field("txt.gz", Value("same text"));
  ASSERT_GE(first.size(), 10u);
  EXPECT_EQ(first.str().substr(4, 4), std::string(4, '\0'));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(str(encode_field("txt.gz", Value("same text"))), str(first));
}

TEST(EncodeField, NoEncoderIsAnErrorNamingMemberAndValueType) {
  struct Case {
    const char* ext;
    Value value;
    const char* type;
  };
  std::vector<Case> cases;
  cases.push_back({"jpg", Value(7), "int"});
  cases.push_back({"png", Value(0.5), "float"});
  cases.push_back({"txt", Value(Tensor(DType::uint8, {2, 2, 3})), "tensor"});
  cases.push_back({"cls", Value(Tensor(DType::int64, {1})), "tensor"});
  cases.push_back({"weird", Value(Tensor(DType::uint8, {2, 2, 3})), "tensor"});
  cases.push_back({"txt", Value(Json{{"a", 1}}), "json"});
  cases.push_back({"txt.gz", Value(Json{{"a", 1}}), "json"});
  for (const char* ext : {"txt", "json", "jpg", "npy", "bin"})
    cases.push_back({ext, Value(), "none"});
  for (const Case& c : cases) {
    const std::string member = std::string("sample9.") + c.ext;
    std::string what;
    EXPECT_EQ(error_code([&] { encode_field(c.ext, c.value, {}, member); }, &what),
              ErrorCode::invalid_argument)
        << member << " " << c.type;
    EXPECT_NE(what.find("'" + member + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(c.type), std::string::npos) << what;
  }
  // encode_sample and the writers name the member "key.ext" themselves.
  DecodedSample s("img7");
  s.set("cls", Value(1));
  s.set("jpg", Value(7));
  std::string what;
  EXPECT_EQ(error_code([&] { encode_sample(s); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("'img7.jpg'"), std::string::npos) << what;
  EXPECT_NE(what.find("int"), std::string::npos) << what;
  std::string out;
  TarWriter tar(open_memory_sink("memory:", out), {.mtime = 1700000000});
  EXPECT_EQ(error_code([&] { tar.write(s); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("'img7.jpg'"), std::string::npos) << what;
}

// --- the format table (codecs/formats.hpp): what encode writes, decode reads back ------------

// One field written by encode_field and read back by decode_sample (with `spec` for images).
Value round_trip(const std::string& ext, const Value& value, const char* spec = nullptr) {
  Sample raw("k");
  raw.add(ext, encode_field(ext, value, {}, "k." + ext));
  DecodedSample d(std::move(raw));
  std::vector<Decoder> decoders;
  if (spec) decoders.emplace_back(spec);
  decode_sample(d, decoders);
  return d.at(ext);
}

// Every extension of the table, so that a name added to it is checked both ways at once.
TEST(EncodeFormats, EveryExtensionReadsBackWhatWasWritten) {
  const std::string text = "h\xc3\xa9llo \xe2\x9c\x93 7";
  const Json doc = {{"caption", "a cat"}, {"size", {256, 128}}};
  Tensor arr(DType::int32, {2, 3});
  for (std::int32_t i = 0; auto& v : arr.values<std::int32_t>()) v = i++ * -1000;
  const Tensor picture = rgb_tensor(9, 13);
  for (const detail::FieldFormat& f : detail::kFieldFormats) {
    const std::string ext(f.ext);
    SCOPED_TRACE(ext);
    switch (f.format) {
      case detail::Format::text:
        EXPECT_EQ(round_trip(ext, Value(text)).get<std::string>(), text);
        EXPECT_EQ(round_trip("seg." + ext, Value(text)).get<std::string>(), text);
        EXPECT_EQ(round_trip(ext, Value(42)).get<std::string>(), "42");
        break;
      case detail::Format::integer:
        if (!f.decoded) {  // written as decimal text, read back as those bytes (as webdataset)
          EXPECT_EQ(round_trip(ext, Value(-7)).get<Bytes>().str(), "-7");
          EXPECT_EQ(round_trip("seg." + ext, Value(31)).get<Bytes>().str(), "31");
          break;
        }
        for (std::int64_t label : {std::int64_t{0}, std::int64_t{-7}, std::int64_t{INT64_MAX}}) {
          EXPECT_EQ(round_trip(ext, Value(label)).get<std::int64_t>(), label);
        }
        EXPECT_EQ(round_trip("seg." + ext, Value(31)).get<std::int64_t>(), 31);
        break;
      case detail::Format::json:
        EXPECT_EQ(round_trip(ext, Value(doc)).get<Json>(), doc);
        EXPECT_EQ(round_trip(ext, Value(Tuple{Value(1), Value("two")})).get<Json>(),
                  Json::parse(R"([1, "two"])"));
        break;
      case detail::Format::npy:
        EXPECT_EQ(round_trip(ext, Value(arr)).get<Tensor>(), arr);
        break;
      case detail::Format::msgpack:
      case detail::Format::cbor:
        if (!f.decoded) {  // written, read back as those bytes (as webdataset)
          EXPECT_EQ(round_trip(ext, Value(doc)).get<Bytes>(), encode_field(ext, Value(doc)));
          break;
        }
        EXPECT_EQ(round_trip(ext, Value(doc)).get<Json>(), doc);
        EXPECT_EQ(round_trip(ext, Value(7)).get<Json>(), Json(7));
        break;
      case detail::Format::tenbin: {
        if (!f.decoded) {
          EXPECT_TRUE(round_trip(ext, Value(Tuple{Value(arr)})).is<Bytes>());
          break;
        }
        const Tuple back = round_trip(ext, Value(Tuple{Value(arr), Value(arr)})).get<Tuple>();
        ASSERT_EQ(back.size(), 2u);
        EXPECT_EQ(back[1].get<Tensor>(), arr);
        break;
      }
      case detail::Format::npz: {
        const Dict back = round_trip(ext, Value(Dict{{"arr", Value(arr)}})).get<Dict>();
        ASSERT_EQ(back.size(), 1u);
        EXPECT_EQ(back[0].name, "arr");
        EXPECT_EQ(back[0].value.get<Tensor>(), arr);
        break;
      }
      case detail::Format::image: {
        const Tensor back = round_trip(ext, Value(picture), "rgb8").get<Tensor>();
        if (f.codec == detail::Codec::jpeg || f.codec == detail::Codec::webp) {
          EXPECT_LT(mean_abs_diff(back, picture), 8.0);  // lossy
        } else {
          EXPECT_EQ(back, picture);
        }
        // Without a spec an image stays the bytes the encoder made.
        EXPECT_EQ(round_trip(ext, Value(picture)).get<Bytes>(), encode_field(ext, Value(picture)));
        break;
      }
      case detail::Format::audio:
        // Written from bytes, and read back as them unless decode() is given "audio" (its
        // decoding is tests/codecs/audio_test.cpp's).
        EXPECT_EQ(round_trip(ext, Value(Bytes::copy_of(text))).get<Bytes>().str(), text);
        break;
      case detail::Format::compressed:
        EXPECT_EQ(round_trip("txt." + ext, Value(text)).get<std::string>(), text);
        EXPECT_EQ(round_trip("cls." + ext, Value(5)).get<std::int64_t>(), 5);
        EXPECT_EQ(round_trip("json." + ext, Value(doc)).get<Json>(), doc);
        EXPECT_EQ(round_trip("npy." + ext, Value(arr)).get<Tensor>(), arr);
        // The name alone compresses nothing: plain bytes both ways.
        EXPECT_EQ(round_trip(ext, Value(text)).get<Bytes>().str(), text);
        break;
    }
  }
}

// Upper-case names are written as their lower-case extension, the name tar members are read
// back with.
TEST(EncodeFormats, UpperCaseNamesAreWrittenAsLowerCase) {
  EXPECT_EQ(str(encode_field("CLASS", Value(12))), "12");
  EXPECT_EQ(str(encode_field("seg.Count", Value(-3))), "-3");
  EXPECT_EQ(Json::parse(encode_field("JSN", Value(Json{{"a", 1}})).str()), Json({{"a", 1}}));
  const Tensor picture = rgb_tensor(5, 4);
  EXPECT_EQ(encode_field("JPG", Value(picture)), encode_field("jpg", Value(picture)));
}

// --- encode_sample ----------------------------------------------------------------------------

TEST(EncodeSample, KeepsKeyAndFieldOrderAndSkipsDunderFields) {
  DecodedSample s("dir/k3", std::make_shared<ShardInfo>(ShardInfo{"in.tar", ""}), 1536);
  s.set("txt", Value("caption"));
  s.set("__key__", Value(Tuple{Value("dir/k3")}));
  s.set("cls", Value(3));
  s.set("__url__", Value("in.tar"));
  s.set("json", Value(Json{{"w", 4}}));
  Sample e = encode_sample(s);
  EXPECT_EQ(e.key(), "dir/k3");
  EXPECT_EQ(e.url(), "in.tar");
  EXPECT_EQ(e.offset(), 1536u);
  EXPECT_EQ(test::describe(e), R"(dir/k3:txt=caption,cls=3,json={"w":4})");
}

TEST(EncodeSample, ACollatedBatchLosesItsKeyList) {
  std::vector<DecodedSample> rows;
  for (int i = 0; i < 3; ++i) {
    DecodedSample r("r" + std::to_string(i));
    r.set("json", Value(Json{{"i", i}}));
    Tensor t(DType::uint8, {2});
    t.values<std::uint8_t>()[0] = static_cast<std::uint8_t>(i);
    t.values<std::uint8_t>()[1] = static_cast<std::uint8_t>(10 * i);
    r.set("npy", Value(t));
    rows.push_back(std::move(r));
  }
  DecodedSample batch = collate(std::move(rows));
  ASSERT_NE(batch.find("__key__"), nullptr);
  Sample e = encode_sample(batch);
  ASSERT_EQ(e.fields().size(), 2u);
  EXPECT_EQ(e.find("__key__"), nullptr);
  EXPECT_EQ(Json::parse(e.at("json").str()), Json::parse(R"([{"i":0},{"i":1},{"i":2}])"));
  const Tensor stacked = parse_npy(e.at("npy").span());
  EXPECT_EQ(stacked.shape(), (Tensor::Shape{3, 2}));
  EXPECT_EQ(stacked.values<std::uint8_t>()[5], 20);
}

// --- shards written from decoded samples ------------------------------------------------------

constexpr std::int64_t kMtime = 1700000000;

std::string sample_key(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "s%06d", i);
  return buf;
}

// Sample i: a jpg made from a cv::Mat, a png tensor, a label, JSON, text (also gzipped) and an
// npy array.
DecodedSample make_decoded(int i) {
  DecodedSample s(sample_key(i));
  s.set("jpg", Value(from_mat(rgb_picture(24, 32, i))));
  Tensor png = rgb_tensor(10 + i, 12, i + 1);
  s.set("png", Value(png));
  s.set("cls", Value(i % 4));
  s.set("json", Value(Json{{"i", i}, {"caption", "sample " + std::to_string(i)}, {"p", i / 8.0}}));
  s.set("txt", Value("caf\xc3\xa9 #" + std::to_string(i)));
  s.set("txt.gz", Value(std::string(100, static_cast<char>('a' + i))));
  Tensor npy(DType::float32, {2, static_cast<std::int64_t>(i + 1)});
  for (float k = 0; auto& v : npy.values<float>()) v = k++ * 0.25f + static_cast<float>(i);
  s.set("npy", Value(npy));
  return s;
}

std::vector<std::string> write_shards(const std::string& pattern, int n) {
  ShardWriter out(pattern, {.max_count = 3, .tar = {.mtime = kMtime}});
  for (int i = 0; i < n; ++i) out.write(make_decoded(i), {.image = {.quality = 90}});
  out.close();
  return out.shards();
}

TEST(EncodeShards, DecodedSamplesRoundTripThroughShardWriterAndDecode) {
  test::TempDir dir;
  const std::vector<std::string> shards = write_shards(dir.file("enc-%06d.tar"), 7);
  ASSERT_EQ(shards.size(), 3u);  // 3 + 3 + 1
  EXPECT_EQ(shards[0], dir.file("enc-000000.tar"));
  EXPECT_EQ(shards[2], dir.file("enc-000002.tar"));
  for (const std::string& s : shards) EXPECT_TRUE(std::filesystem::exists(s)) << s;

  std::map<std::string, int> seen;
  for (DecodedSample& got : WebDataset(shards) | decode("rgb8")) {
    const std::string key = got.key();
    const int i = std::stoi(key.substr(1));
    ASSERT_GE(i, 0);
    ASSERT_LT(i, 7);
    ++seen[key];
    const DecodedSample want = make_decoded(i);
    EXPECT_EQ(got.url(), shards[static_cast<std::size_t>(i / 3)]) << key;
    ASSERT_EQ(got.fields().size(), want.fields().size()) << key;
    // Members come back sorted by extension, as TarWriter writes them.
    std::vector<std::string> exts;
    for (const auto& f : got.fields()) exts.push_back(f.ext);
    EXPECT_EQ(exts, (std::vector<std::string>{"cls", "jpg", "json", "npy", "png", "txt", "txt.gz"}))
        << key;
    EXPECT_LT(mean_abs_diff(got.get<Tensor>("jpg"), want.get<Tensor>("jpg")), 4.0) << key;
    EXPECT_EQ(got.get<Tensor>("png"), want.get<Tensor>("png")) << key;
    EXPECT_EQ(got.get<std::int64_t>("cls"), want.get<std::int64_t>("cls")) << key;
    EXPECT_EQ(got.get<Json>("json"), want.get<Json>("json")) << key;
    EXPECT_EQ(got.get<std::string>("txt"), want.get<std::string>("txt")) << key;
    EXPECT_EQ(got.get<std::string>("txt.gz"), want.get<std::string>("txt.gz")) << key;
    EXPECT_EQ(got.get<Tensor>("npy"), want.get<Tensor>("npy")) << key;
  }
  EXPECT_EQ(seen.size(), 7u);
  for (const auto& [key, count] : seen) EXPECT_EQ(count, 1) << key;
}

TEST(EncodeShards, TheSameSamplesGiveByteIdenticalShards) {
  test::TempDir a, b;
  const std::vector<std::string> first = write_shards(a.file("x-%03d.tar"), 7);
  // A second later: nothing of the time of writing may leak into the bytes.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const std::vector<std::string> second = write_shards(b.file("x-%03d.tar"), 7);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), first.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    const std::string x = read_file(first[i]), y = read_file(second[i]);
    EXPECT_GT(x.size(), 1024u);
    EXPECT_EQ(x.size() % 512, 0u) << first[i];
    EXPECT_TRUE(x == y) << first[i] << " and " << second[i] << " differ";
  }
  // Another quality gives other bytes (the option reaches the encoder).
  test::TempDir c;
  ShardWriter other(c.file("x-%03d.tar"), {.max_count = 3, .tar = {.mtime = kMtime}});
  for (int i = 0; i < 3; ++i) other.write(make_decoded(i), {.image = {.quality = 40}});
  other.close();
  EXPECT_NE(read_file(other.shards().at(0)), read_file(first[0]));
}

TEST(EncodeShards, GnuTarListsTheMembers) {
  test::TempDir dir;
  const std::vector<std::string> shards = write_shards(dir.file("t-%06d.tar"), 4);
  ASSERT_EQ(shards.size(), 2u);
  int status = 0;
  const std::string listing = run_command("tar -tf '" + shards[0] + "'", &status);
  ASSERT_EQ(status, 0) << listing;
  std::vector<std::string> want;
  for (int i = 0; i < 3; ++i) {
    for (const char* ext : {"cls", "jpg", "json", "npy", "png", "txt", "txt.gz"}) {
      want.push_back(sample_key(i) + "." + ext);
    }
  }
  EXPECT_EQ(lines(listing), want);
  const std::string verbose = run_command("TZ=UTC tar -tvf '" + shards[1] + "'", &status);
  ASSERT_EQ(status, 0);
  const std::vector<std::string> rows = lines(verbose);
  ASSERT_EQ(rows.size(), 7u) << verbose;
  for (const std::string& row : rows) {
    EXPECT_EQ(row.substr(0, 10), "-r--r--r--") << row;            // mode 0444 regular files
    EXPECT_NE(row.find("2023-11-14"), std::string::npos) << row;  // the fixed mtime
  }
  // GNU tar extracts the same bytes the encoder made.
  const std::string out = dir.file("extract");
  std::filesystem::create_directories(out);
  ASSERT_EQ(std::system(("tar -xf '" + shards[1] + "' -C '" + out + "'").c_str()), 0);
  const Sample enc = encode_sample(make_decoded(3), {.image = {.quality = 90}});
  for (const Field& f : enc.fields()) {
    EXPECT_TRUE(read_file(out + "/" + sample_key(3) + "." + f.ext) == str(f.data)) << f.ext;
  }
}

// --- cv::Mat channel order ------------------------------------------------------------------

// from_mat keeps the channel order of the Mat, and encoders take RGB(A). A Mat straight from
// OpenCV (cv::imread, cv::imdecode, cv::VideoCapture) is BGR: convert it with
// cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB) before from_mat, or red and blue trade places in the
// file. Reading back for OpenCV: decode with the "bgr8" spec and to_mat.
TEST(EncodeOpenCv, BgrMatsMustBeConvertedToRgbBeforeFromMat) {
  cv::Mat bgr(4, 6, CV_8UC3, cv::Scalar(200, 30, 10));  // B=200, G=30, R=10: a blue
  bgr.at<cv::Vec3b>(1, 2) = cv::Vec3b(0, 0, 255);       // one pure red pixel

  // The mistake: the file holds red where the Mat had blue.
  const Bytes swapped = encode_field("png", Value(from_mat(bgr)));
  const Tensor wrong = decode_as(swapped, "rgb8");
  auto w = wrong.values<std::uint8_t>();
  EXPECT_EQ(int(w[0]), 200);  // R of pixel (0, 0): the Mat's blue
  EXPECT_EQ(int(w[2]), 10);
  const cv::Mat seen_by_opencv =
      cv::imdecode(cv::Mat(1, int(swapped.size()), CV_8U, const_cast<std::byte*>(swapped.data())),
                   cv::IMREAD_COLOR);
  EXPECT_GT(cv::norm(seen_by_opencv, bgr, cv::NORM_INF), 0.0);

  // The right way.
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  const Bytes png = encode_field("png", Value(from_mat(rgb)));
  const Tensor right = decode_as(png, "rgb8");
  auto r = right.values<std::uint8_t>();
  EXPECT_EQ(int(r[0]), 10);   // R
  EXPECT_EQ(int(r[1]), 30);   // G
  EXPECT_EQ(int(r[2]), 200);  // B
  const std::size_t red = (1 * 6 + 2) * 3;
  EXPECT_EQ(int(r[red]), 255);
  EXPECT_EQ(int(r[red + 2]), 0);
  // OpenCV's own reader gives back the BGR Mat, and so do the bgr8 spec and to_mat.
  const cv::Mat read = cv::imdecode(
      cv::Mat(1, int(png.size()), CV_8U, const_cast<std::byte*>(png.data())), cv::IMREAD_COLOR);
  EXPECT_EQ(cv::norm(read, bgr, cv::NORM_INF), 0.0);
  const Tensor as_bgr = decode_as(png, "bgr8");
  EXPECT_EQ(cv::norm(to_mat(as_bgr), bgr, cv::NORM_INF), 0.0);
  // A grey Mat (one channel) has no order to get wrong: from_mat gives HxW.
  cv::Mat grey(3, 5, CV_8UC1, cv::Scalar(77));
  const Tensor g = from_mat(grey);
  EXPECT_EQ(g.shape(), (Tensor::Shape{3, 5}));
  EXPECT_EQ(decode_as(encode_field("png", Value(g)), "l8"), g);
}

// --- interop: webdataset's reading rules ----------------------------------------------------

std::string sha256_of(const std::string& bytes, const test::TempDir& dir) {
  const std::string path = dir.write("hash-input", bytes);
  int status = 0;
  const std::string out = run_command("sha256sum '" + path + "'", &status);
  EXPECT_EQ(status, 0);
  return out.substr(0, 64);
}

// A shard written from decoded samples, read by tests/tools/webdataset_reference.py (an
// independent model of Python webdataset's tar_file_iterator, base_plus_ext and group_by_keys,
// using Python's tarfile), gives the keys, field names and bytes we wrote.
TEST(EncodeInterop, WebDatasetReadingRulesSeeTheSamplesWeWrote) {
  if (std::system("python3 -c 'import tarfile' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is not installed";
  }
  const std::filesystem::path script = std::filesystem::path(__FILE__).parent_path().parent_path() /
                                       "tools" / "webdataset_reference.py";
  ASSERT_TRUE(std::filesystem::exists(script)) << script;

  test::TempDir dir;
  std::vector<DecodedSample> samples;
  for (int i = 0; i < 3; ++i) samples.push_back(make_decoded(i));
  // A key with dots in a directory name and a field with two extensions.
  DecodedSample nested("dir.v1/sub/k0");
  nested.set("seg.png", Value(rgb_tensor(3, 3)));
  nested.set("cls", Value(5));
  samples.push_back(std::move(nested));

  const std::string shard = dir.file("interop-000000.tar");
  ShardWriter out(dir.file("interop-%06d.tar"), {.tar = {.mtime = kMtime}});
  for (const DecodedSample& s : samples) out.write(s);
  out.close();
  ASSERT_EQ(out.shards(), std::vector<std::string>{shard});

  int status = 0;
  const std::string printed =
      run_command("python3 '" + script.string() + "' expect '" + shard + "'", &status);
  ASSERT_EQ(status, 0) << printed;
  const std::vector<std::string> rows = lines(printed);
  ASSERT_EQ(rows.size(), samples.size()) << printed;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Json got = Json::parse(rows[r]);
    const Sample want = encode_sample(samples[r]);
    EXPECT_EQ(got["__key__"], want.key()) << rows[r];
    EXPECT_EQ(got["__url__"], shard) << rows[r];
    std::vector<std::string> got_fields;
    for (const auto& [name, value] : got.items()) {
      if (!name.starts_with("__")) got_fields.push_back(name);
    }
    std::vector<std::string> want_fields;
    for (const Field& f : want.fields()) want_fields.push_back(f.ext);
    std::sort(want_fields.begin(), want_fields.end());
    std::sort(got_fields.begin(), got_fields.end());
    EXPECT_EQ(got_fields, want_fields) << rows[r];
    for (const Field& f : want.fields()) {
      EXPECT_EQ(got.value(f.ext, std::string()), sha256_of(str(f.data), dir))
          << want.key() << "." << f.ext;
    }
  }
}

}  // namespace
}  // namespace wds
