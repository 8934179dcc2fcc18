// decode(): WebDataset's decoder table, image specs, user decoders, and errors that name the
// shard, the member and the cause.
#include "wds/decode.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <opencv2/imgcodecs.hpp>

#include "tests/support/fixtures.hpp"
#include "tests/support/streams.hpp"
#include "wds/encode.hpp"
#include "wds/npy.hpp"
#include "wds/transforms.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using test::from_vector;

Sample raw(const std::string& key, const std::vector<std::pair<std::string, std::string>>& fields) {
  Sample s(key, std::make_shared<ShardInfo>(ShardInfo{"http://h/shard-2.tar", ""}));
  for (const auto& [ext, data] : fields) s.add(ext, Bytes::copy_of(data));
  return s;
}

std::vector<DecodedSample> run(std::vector<Sample> samples, DecodeStage stage) {
  std::vector<DecodedSample> out;
  for (DecodedSample& s : from_vector(std::move(samples)) | stage) out.push_back(std::move(s));
  return out;
}

std::string png_bytes(int h, int w) {
  cv::Mat m(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) m.at<cv::Vec3b>(y, x) = cv::Vec3b(10, 20 + x, 30 + y);  // B,G,R
  std::vector<uchar> buf;
  cv::imencode(".png", m, buf);
  return std::string(buf.begin(), buf.end());
}

std::string gzip(const std::string& text, const test::TempDir& dir) {
  std::string in = dir.write("plain", text);
  std::string cmd = "gzip -c '" + in + "'";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0);
  return out;
}

TEST(Decode, BasicTableAsWebDataset) {
  Tensor arr(DType::int16, {2, 2});
  for (std::int16_t i = 0; auto& v : arr.values<std::int16_t>()) v = i++;
  Bytes npy = write_npy(arr);
  auto out = run({raw("k", {{"txt", "héllo"},
                            {"cls", " 7\n"},
                            {"index", "-3"},
                            {"json", R"({"a": [1, 2]})"},
                            {"npy", std::string(npy.str())},
                            {"seg.txt", "inner"},
                            {"rgb", "not an image"},
                            {"weird", "\x01\x02"}})},
                 decode());
  ASSERT_EQ(out.size(), 1u);
  const DecodedSample& s = out[0];
  EXPECT_EQ(s.get<std::string>("txt"), "héllo");
  EXPECT_EQ(s.get<std::int64_t>("cls"), 7);
  EXPECT_EQ(s.get<std::int64_t>("index"), -3);
  EXPECT_EQ(s.get<Json>("json")["a"][1], 2);
  EXPECT_EQ(s.get<Tensor>("npy"), arr);
  EXPECT_EQ(s.get<std::string>("seg.txt"), "inner");     // by the last extension
  EXPECT_EQ(s.get<Bytes>("rgb").str(), "not an image");  // unlike WebDataset: not an image
  EXPECT_EQ(s.get<Bytes>("weird").str(), "\x01\x02");
  EXPECT_EQ(s.key(), "k");
  EXPECT_EQ(s.url(), "http://h/shard-2.tar");
}

TEST(Decode, CompressedFieldsDecodeByTheRestOfTheirName) {
  test::TempDir dir;
  auto out =
      run({raw("k", {{"txt.gz", gzip("zipped text", dir)}, {"json.gz", gzip(R"({"n": 5})", dir)}})},
          decode());
  EXPECT_EQ(out.at(0).get<std::string>("txt.gz"), "zipped text");
  EXPECT_EQ(out.at(0).get<Json>("json.gz")["n"], 5);
  // What the encoder compresses, the decoder reads.
  for (const char* ext : {"txt.gz", "txt.xz", "txt.bz2", "txt.zst"}) {
    Bytes b = encode_field(ext, Value("round trip"));
    auto back = run({raw("k", {{ext, std::string(b.str())}})}, decode());
    EXPECT_EQ(back.at(0).get<std::string>(ext), "round trip") << ext;
  }
}

TEST(Decode, ImageSpecsDecodeImageFields) {
  std::string png = png_bytes(4, 5);
  auto out = run({raw("k", {{"png", png}, {"seg.png", png}, {"cls", "1"}})}, decode("rgb8"));
  const Tensor& t = out.at(0).get<Tensor>("png");
  EXPECT_EQ(t.shape(), (Tensor::Shape{4, 5, 3}));
  EXPECT_EQ(t.values<std::uint8_t>()[0], 30);  // R first
  EXPECT_EQ(t.values<std::uint8_t>()[2], 10);  // B last
  EXPECT_TRUE(out.at(0).find("seg.png")->is<Tensor>());
  auto chw = run({raw("k", {{"png", png}})}, decode("torchrgb"));
  EXPECT_EQ(chw.at(0).get<Tensor>("png").shape(), (Tensor::Shape{3, 4, 5}));
  EXPECT_EQ(chw.at(0).get<Tensor>("png").dtype(), DType::float32);
  auto small =
      run({raw("k", {{"png", png_bytes(40, 80)}})}, decode("rgb8", {.image = {.resize = 20}}));
  EXPECT_EQ(small.at(0).get<Tensor>("png").shape(), (Tensor::Shape{20, 40, 3}));
  EXPECT_EQ(test::error_code([] { decode("rgb9"); }), ErrorCode::invalid_argument);
}

TEST(Decode, UserDecodersComeFirstAndMayDecline) {
  int declined = 0;
  DecodeFn count_only = [&](std::string_view, Bytes&) -> std::optional<Value> {
    ++declined;
    return std::nullopt;
  };
  DecodeFn seg =
      handle_extension("seg.png", [](Bytes& b) { return Value(std::int64_t(b.size())); });
  auto out = run({raw("k", {{"seg.png", "12345"}, {"cls", "4"}, {"x.seg.png", "1"}})},
                 decode({count_only, seg}));
  EXPECT_EQ(out.at(0).get<std::int64_t>("seg.png"), 5);
  EXPECT_EQ(out.at(0).get<std::int64_t>("x.seg.png"), 1);
  EXPECT_EQ(out.at(0).get<std::int64_t>("cls"), 4);
  EXPECT_EQ(declined, 3);
}

TEST(Decode, OnlyAndPartial) {
  auto out = run({raw("k", {{"cls", "4"}, {"json", "{}"}})}, decode({}, {.only = {"cls"}}));
  EXPECT_EQ(out.at(0).get<std::int64_t>("cls"), 4);
  EXPECT_TRUE(out.at(0).find("json")->is<Bytes>());
  // Decoding a decoded sample again: an error unless partial.
  auto twice = from_vector(std::vector<Sample>{raw("k", {{"cls", "4"}, {"json", "{}"}})}) |
               decode({}, {.only = {"cls"}});
  std::string what;
  EXPECT_EQ(test::error_code(
                [&] {
                  for (auto& s : twice | decode()) (void)s;
                },
                &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find("k.cls"), std::string::npos) << what;
  std::vector<DecodedSample> again;
  for (auto& s : twice | decode({}, {.partial = true})) again.push_back(std::move(s));
  EXPECT_EQ(again.at(0).get<Json>("json"), Json::object());
}

TEST(Decode, BadDataNamesShardMemberAndCause) {
  struct Case {
    std::string ext, data, cause;
  };
  std::vector<Case> cases{{"json", "{\"a\": ", "bad JSON"},
                          {"cls", "seven", "not an integer"},
                          {"txt", "\xff\xfe", "not UTF-8"},
                          {"npy", "\x93NUMPX", "npy"},
                          {"jpg", "\xff\xd8\xff\xe0 garbage", "image"},
                          {"txt.gz", "not gzip at all", "decompress"}};
  for (const Case& c : cases) {
    std::string what;
    EXPECT_EQ(test::error_code(
                  [&] {
                    run({raw("key4", {{c.ext, c.data}})}, decode("rgb8"));
                  },
                  &what),
              ErrorCode::corrupt_data)
        << c.ext;
    EXPECT_NE(what.find("http://h/shard-2.tar"), std::string::npos) << what;
    EXPECT_NE(what.find("key4." + c.ext), std::string::npos) << what;
    EXPECT_NE(what.find(c.cause), std::string::npos) << what;
  }
  // A continuing handler drops the sample; a stopping one ends the stream.
  std::vector<Sample> mixed{raw("a", {{"cls", "1"}}), raw("b", {{"cls", "x"}}),
                            raw("c", {{"cls", "3"}})};
  EXPECT_EQ(run(mixed, decode({}, {.handler = ignore_and_continue})).size(), 2u);
  EXPECT_EQ(run(mixed, decode({}, {.handler = ignore_and_stop})).size(), 1u);
}

TEST(Decode, ThroughTheWholePipelineFromAShard) {
  test::TempDir dir;
  std::string shard = dir.write(
      "shard-0.tar", test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < 5; ++i) {
          w.write(test::make_sample("s" + std::to_string(i),
                                    {{"png", png_bytes(6, 4)}, {"cls", std::to_string(i)}}));
        }
      }));
  auto batches = WebDataset(std::vector<std::string>{shard}) | decode("rgb8") |
                 to_tuple("png;jpg", "cls") | batched(2);
  std::vector<Tuple> got;
  for (Tuple& b : batches) got.push_back(std::move(b));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0][0].get<Tensor>().shape(), (Tensor::Shape{2, 6, 4, 3}));
  EXPECT_EQ(got[2][0].get<Tensor>().shape(), (Tensor::Shape{1, 6, 4, 3}));
  EXPECT_EQ(got[1][1].get<Tensor>().values<std::int64_t>()[1], 3);
  // Resume through decode, to_tuple and batched.
  auto p =
      WebDataset(std::vector<std::string>{shard}) | decode("rgb8") | to_tuple("cls") | batched(2);
  p.begin_pass();
  p.next();
  auto q =
      WebDataset(std::vector<std::string>{shard}) | decode("rgb8") | to_tuple("cls") | batched(2);
  q.restore(p.state());
  std::vector<std::int64_t> rest;
  for (Tuple& b : q)
    for (std::int64_t v : b[0].get<Tensor>().values<std::int64_t>()) rest.push_back(v);
  EXPECT_EQ(rest, (std::vector<std::int64_t>{2, 3, 4}));
}

}  // namespace
}  // namespace wds
