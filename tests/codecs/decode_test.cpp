// decode(): WebDataset's decoder table, image specs, user decoders, and errors that name the
// shard, the member and the cause.
#include "wds/decode.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
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

template <class T>
void run_all(Pipeline<T>& p) {
  for ([[maybe_unused]] T& x : p) {
  }
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

// WebDataset's writer writes labels under class and count as it does under cls; its decoder
// left them as bytes. Here they read back as the integers written.
// Python webdataset writes numbers under "class" and "count" but its decoder leaves those fields
// as bytes: so does decode(), and a decoder of the user's reads them as numbers.
TEST(Decode, ClassAndCountStayBytesAsInWebDataset) {
  auto out = run({raw("k", {{"class", " 3\n"}, {"count", "12"}, {"cls", "5"}})}, decode());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].get<Bytes>("class").str(), " 3\n");
  EXPECT_EQ(out[0].get<Bytes>("count").str(), "12");
  EXPECT_EQ(out[0].get<std::int64_t>("cls"), 5);
  for (const char* ext : {"class", "count"}) {
    Sample written("k");
    written.add(ext, encode_field(ext, Value(1234)));
    DecodedSample d(std::move(written));
    decode_sample(d, {});
    EXPECT_EQ(d.get<Bytes>(ext).str(), "1234") << ext;
  }
  auto as_int = handle_extension("class count", [](Bytes& b) {
    return Value(static_cast<std::int64_t>(std::stoll(std::string(b.str()))));
  });
  auto ints = run({raw("k", {{"class", "3"}, {"count", "12"}})}, decode(as_int));
  EXPECT_EQ(ints.at(0).get<std::int64_t>("class"), 3);
  EXPECT_EQ(ints.at(0).get<std::int64_t>("count"), 12);
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

// libarchive removes nested compressions in one pass: "txt.gz.xz" came out as plain text that
// was then taken for gzip ("not compressed data").
TEST(Decode, NestedCompressionsDecodeByTheRestOfTheirName) {
  test::TempDir dir;
  const std::string gz = gzip("twice packed", dir);
  for (const char* outer : {"xz", "bz2", "zst", "gz"}) {
    const std::string ext = std::string("txt.gz.") + outer;
    Bytes packed = encode_field(std::string("bin.") + outer, Value(Bytes::copy_of(gz)));
    auto out = run({raw("k", {{ext, std::string(packed.str())}})}, decode());
    EXPECT_EQ(out.at(0).get<std::string>(ext), "twice packed") << ext;
  }
}

// Compressed text decompresses into the string that becomes its value (it was decompressed
// into bytes and then copied into a string): the same checks, and a decoder of the caller's for
// the inner name still comes first.
TEST(Decode, CompressedTextIsCheckedAndOwnDecodersComeFirst) {
  test::TempDir dir;
  std::string what;
  EXPECT_EQ(test::error_code(
                [&] {
                  run({raw("k", {{"txt.gz", gzip("ok \xff", dir)}})}, decode());
                },
                &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("text is not UTF-8"), std::string::npos) << what;
  auto own = run({raw("k", {{"txt.gz", gzip("plain", dir)}})},
                 decode({Decoder(handle_extension(
                     "txt", [](Bytes& b) { return Value("own: " + std::string(b.str())); }))}));
  EXPECT_EQ(own.at(0).get<std::string>("txt.gz"), "own: plain");
  // Named twice compressed, compressed once: the rest of the name is decompressed again.
  EXPECT_EQ(test::error_code(
                [&] {
                  run({raw("k", {{"txt.gz.gz", gzip("once", dir)}})}, decode());
                },
                &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("not compressed data"), std::string::npos) << what;
  const std::string empty = gzip("", dir);
  EXPECT_EQ(run({raw("k", {{"txt.gz", empty}})}, decode()).at(0).get<std::string>("txt.gz"), "");
}

// An 872 KB a.txt.gz of zeros took 431 MB to decode: no limit, a string grown by doubling, then
// copied. Now the size is capped (the field and the limit named) in every format.
TEST(Decode, DecompressedSizeIsCappedWithTheFieldNamed) {
  const std::string text(100'000, 'a');
  for (const char* ext : {"txt.gz", "txt.xz", "txt.bz2", "txt.zst"}) {
    SCOPED_TRACE(ext);
    const std::string packed(encode_field(ext, Value(text)).str());
    // Exactly the limit is allowed.
    auto out = run({raw("k", {{ext, packed}})}, decode({}, {.max_decompressed_size = 100'000}));
    EXPECT_EQ(out.at(0).get<std::string>(ext), text);
    std::string what;
    EXPECT_EQ(test::error_code(
                  [&] {
                    run({raw("k", {{ext, packed}})}, decode({}, {.max_decompressed_size = 99'999}));
                  },
                  &what),
              ErrorCode::corrupt_data);
    EXPECT_NE(what.find("member 'k." + std::string(ext) + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("more than 99999 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("DecodeOptions::max_decompressed_size"), std::string::npos) << what;
    // decode_sample takes the same options.
    DecodedSample one(raw("k", {{ext, packed}}));
    EXPECT_EQ(test::error_code([&] { decode_sample(one, {}, {.max_decompressed_size = 1000}); }),
              ErrorCode::corrupt_data);
  }
}

// gzip's stated size (ISIZE) is that of the last member only: a first guess for the buffer,
// never trusted for the result, too small or too large.
TEST(Decode, GzipStatedSizeIsOnlyAHint) {
  test::TempDir dir;
  const std::string big(300'000, 'b'), small = "tail";
  for (const auto& [first, second] : {std::pair(big, small), std::pair(small, big)}) {
    const std::string members = gzip(first, dir) + gzip(second, dir);
    auto out = run({raw("k", {{"txt.gz", members}})}, decode());
    EXPECT_EQ(out.at(0).get<std::string>("txt.gz"), first + second);
    EXPECT_EQ(test::error_code([&] {
                run({raw("k", {{"txt.gz", members}})},
                    decode({}, {.max_decompressed_size = first.size() + second.size() - 1}));
              }),
              ErrorCode::corrupt_data);
  }
  // A field decoded as bytes keeps exactly the decompressed bytes.
  auto out = run({raw("k", {{"bin.gz", gzip(big, dir)}})}, decode());
  EXPECT_EQ(out.at(0).get<Bytes>("bin.gz").str(), big);
  EXPECT_EQ(out.at(0).get<Bytes>("bin.gz").size(), big.size());
}

// Puts `dir` first on PATH for the life of the object.
class PathPrefix {
 public:
  explicit PathPrefix(const std::string& dir) {
    const char* old = std::getenv("PATH");
    if (old) saved_ = old;
    ::setenv("PATH", (dir + ":" + saved_).c_str(), 1);
  }
  ~PathPrefix() { ::setenv("PATH", saved_.c_str(), 1); }
  PathPrefix(const PathPrefix&) = delete;
  PathPrefix& operator=(const PathPrefix&) = delete;

 private:
  std::string saved_;
};

// Field decompression enabled every libarchive filter, and three of them run a program found on
// PATH (lrzip, lzop, grzip) on a field whose bytes merely start like their formats. Fake ones
// that leave a mark must never run; the field is refused as not compressed.
TEST(Decode, CompressedFieldsNeverRunExternalPrograms) {
  test::TempDir dir;
  const std::string marker = dir.file("ran");
  for (std::string prog : {"lrzip", "lzop", "grzip"}) {
    std::string path =
        dir.write("bin/" + prog, "#!/bin/sh\necho " + prog + " >> '" + marker + "'\nexit 1\n");
    ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  }
  const std::string padding(64, '\0');
  const std::pair<std::string, std::string> fields[] = {
      {"lrzip", std::string("LRZI\x00\x06", 6) + padding},
      {"lzop", std::string("\x89LZO\x00\x0d\x0a\x1a\x0a", 9) + padding},
      {"grzip", std::string("GRZipII\x00\x02\x04:)", 12) + padding}};
  PathPrefix path(dir.file("bin"));
  for (const auto& [format, bytes] : fields) {
    std::string what;
    EXPECT_EQ(test::error_code(
                  [&] {
                    run({raw("k", {{"txt.gz", bytes}})}, decode());
                  },
                  &what),
              ErrorCode::corrupt_data)
        << format;
    EXPECT_NE(what.find("k.txt.gz"), std::string::npos) << what;
    EXPECT_NE(what.find("not compressed"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(marker)) << "ran: " << test::read_file(marker);
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

// --- decoding into batch slots ---

// A picture that differs with `seed` at every pixel, encoded losslessly.
std::string picture(int w, int h, int seed) {
  cv::Mat m(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      m.at<cv::Vec3b>(y, x) =
          cv::Vec3b(static_cast<uchar>(x * 7 + seed * 13), static_cast<uchar>(y * 5 + seed * 29),
                    static_cast<uchar>(x + y + seed * 41));
    }
  }
  std::vector<uchar> buf;
  cv::imencode(".png", m, buf);
  return std::string(buf.begin(), buf.end());
}

// Samples "s<i>" with a png (of size(i), width x height) and cls i.
std::vector<Sample> pictures(int n, const std::function<std::pair<int, int>(int)>& size) {
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    auto [w, h] = size(i);
    out.push_back(
        raw("s" + std::to_string(i), {{"png", picture(w, h, i)}, {"cls", std::to_string(i)}}));
  }
  return out;
}

std::pair<int, int> same_size(int) {
  return {40, 30};
}
std::pair<int, int> varied_size(int i) {
  return {30 + 7 * i, 50 - 3 * i};
}

// What decode_image gives sample i's png, one by one.
Tensor one_by_one(const std::vector<Sample>& samples, std::int64_t i, std::string_view spec,
                  const ImageDecodeOptions& options) {
  return decode_image(samples.at(static_cast<std::size_t>(i)).at("png").span(),
                      parse_image_spec(spec), options);
}

// The images of the samples a batch's labels name, decoded one by one and stacked.
Tensor stacked(const std::vector<Sample>& samples, const Tensor& labels, std::string_view spec,
               const ImageDecodeOptions& options = {}) {
  std::vector<Value> column;
  for (std::int64_t i : labels.values<std::int64_t>()) {
    column.emplace_back(one_by_one(samples, i, spec, options));
  }
  return collate_column(std::move(column)).get<Tensor>();
}

TEST(DecodeSlots, BatchesEqualImagesDecodedOneByOne) {
  struct Case {
    std::pair<int, int> (*size)(int);
    ImageDecodeOptions options;
  };
  const Case cases[] = {{same_size, {}}, {varied_size, {.resize = 24, .crop = 20}}};
  for (std::string_view spec : {"rgb8", "bgr8", "torchrgb8", "rgb", "torchrgb", "l8", "rgba8"}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(spec) + " crop " + std::to_string(c.options.crop));
      const std::vector<Sample> samples = pictures(10, c.size);
      std::vector<const std::byte*> rows;
      auto p = from_vector(samples) | decode(spec, {.image = c.options}) | to_tuple("png", "cls") |
               test::note_rows(rows) | batched(4);
      std::size_t seen = 0, batches = 0;
      for (Tuple& b : p) {
        const Tensor& images = b[0].get<Tensor>();
        const Tensor& labels = b[1].get<Tensor>();
        const std::size_t n = static_cast<std::size_t>(images.dim(0));
        EXPECT_EQ(n, batches < 2 ? 4u : 2u);
        EXPECT_EQ(images, stacked(samples, labels, spec, c.options));
        EXPECT_EQ(labels.values<std::int64_t>()[0], static_cast<std::int64_t>(seen));
        // Each image was decoded into its row of one pooled block, which the batch is a view of.
        EXPECT_EQ(images.data(), images.storage().get());
        for (std::size_t r = 0; r < n; ++r) {
          EXPECT_EQ(rows.at(seen + r), images.data() + r * images[0].nbytes()) << r;
        }
        seen += n;
        ++batches;
      }
      EXPECT_EQ(seen, 10u);
      EXPECT_EQ(p.metrics().decoded, 10u);
      EXPECT_EQ(p.metrics().pool_allocations + p.metrics().pool_reuses, 3u);  // a slab a batch
    }
  }
  // Samples batched field by field, without to_tuple.
  const std::vector<Sample> samples = pictures(5, same_size);
  for (DecodedSample& b : from_vector(samples) | decode("torchrgb8") | batched(2)) {
    const Tensor& images = b.get<Tensor>("png");
    EXPECT_EQ(images, stacked(samples, b.get<Tensor>("cls"), "torchrgb8"));
    EXPECT_EQ(images.data(), images.storage().get());
  }
}

TEST(DecodeSlots, NoBlockIsReusedWhileABatchUsesIt) {
  const std::vector<Sample> samples = pictures(10, same_size);
  auto p = from_vector(samples) | decode("rgb8") | to_tuple("png", "cls") | batched(3);
  std::vector<Tuple> held;
  for (int pass = 0; pass < 3; ++pass) {
    for (Tuple& b : p) held.push_back(b);  // a copy: shares the batch's storage
  }
  ASSERT_EQ(held.size(), 12u);
  EXPECT_EQ(p.metrics().pool_reuses, 0u);
  EXPECT_EQ(p.metrics().pool_allocations, 12u);
  for (const Tuple& b : held) {
    EXPECT_EQ(b[0].get<Tensor>(), stacked(samples, b[1].get<Tensor>(), "rgb8"));
  }
  held.clear();
  std::size_t seen = 0;
  for (Tuple& b : p) {
    EXPECT_EQ(b[0].get<Tensor>(), stacked(samples, b[1].get<Tensor>(), "rgb8"));
    seen += static_cast<std::size_t>(b[0].get<Tensor>().dim(0));
  }
  EXPECT_EQ(seen, 10u);
  EXPECT_GT(p.metrics().pool_reuses, 0u);
}

// A stage of the user's own: passes samples through, and so declines the slots (the default).
class PassThrough final : public Stream<DecodedSample> {
 public:
  explicit PassThrough(StreamPtr<DecodedSample> up) : up_(std::move(up)) {}
  void start(const PassContext& ctx) override { up_->start(ctx); }
  std::optional<DecodedSample> next() override { return up_->next(); }

 private:
  StreamPtr<DecodedSample> up_;
};
struct PassThroughStage {
  StreamPtr<DecodedSample> operator()(StreamPtr<DecodedSample> up) const {
    return std::make_unique<PassThrough>(std::move(up));
  }
};

TEST(DecodeSlots, ShuffleAndCustomStagesGetNoSlotsAndTheSameValues) {
  const std::vector<Sample> samples = pictures(9, same_size);
  auto check = [&](Pipeline<Tuple>& p, const std::vector<const std::byte*>& rows) {
    std::vector<std::int64_t> labels;
    std::size_t seen = 0;
    for (Tuple& b : p) {
      const Tensor& images = b[0].get<Tensor>();
      EXPECT_EQ(images, stacked(samples, b[1].get<Tensor>(), "rgb8"));
      for (std::int64_t i : b[1].get<Tensor>().values<std::int64_t>()) labels.push_back(i);
      // Copied: the images were not decoded into their rows (addresses of freed images may
      // come back, so only all rows in place would show slots).
      bool in_place = true;
      for (std::int64_t r = 0; r < images.dim(0); ++r) {
        in_place = in_place && rows.at(seen + static_cast<std::size_t>(r)) ==
                                   images.data() + r * images[0].nbytes();
      }
      EXPECT_FALSE(in_place);
      seen += static_cast<std::size_t>(images.dim(0));
    }
    std::sort(labels.begin(), labels.end());
    EXPECT_EQ(labels, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  };
  std::vector<const std::byte*> rows;
  auto shuffled = from_vector(samples) | decode("rgb8") | shuffle(5, 3) | to_tuple("png", "cls") |
                  test::note_rows(rows) | batched(4);
  check(shuffled, rows);
  rows.clear();
  auto custom = from_vector(samples) | decode("rgb8") | PassThroughStage{} |
                to_tuple("png", "cls") | test::note_rows(rows) | batched(4);
  check(custom, rows);
}

TEST(DecodeSlots, ItemsDroppedOnTheWayLeaveNoGaps) {
  const std::vector<Sample> samples = pictures(14, same_size);
  auto p = from_vector(samples) | decode("torchrgb8") |
           select([](const DecodedSample& s) { return s.get<std::int64_t>("cls") % 3 != 0; }) |
           to_tuple("png", "cls") | map([](Tuple&& t) -> std::optional<Tuple> {
             if (t[1].get<std::int64_t>() == 7) return std::nullopt;
             return std::move(t);
           }) |
           map(
               [](Tuple&& t) {
                 if (t[1].get<std::int64_t>() == 10) throw std::runtime_error("no ten");
                 return std::move(t);
               },
               ignore_and_continue) |
           batched(4);
  std::vector<std::int64_t> labels;
  for (Tuple& b : p) {
    const Tensor& images = b[0].get<Tensor>();
    EXPECT_EQ(images, stacked(samples, b[1].get<Tensor>(), "torchrgb8"));
    EXPECT_EQ(images.data(), images.storage().get());
    for (std::int64_t i : b[1].get<Tensor>().values<std::int64_t>()) labels.push_back(i);
  }
  EXPECT_EQ(labels, (std::vector<std::int64_t>{1, 2, 4, 5, 8, 11, 13}));
  EXPECT_EQ(p.metrics().dropped, 1u);  // the handler's; select and nullopt are no errors
}

// Scenario: a user's map keeps the image of a sample it drops (a cache, a log of rejects). The
// next sample must not be decoded into the same row of the batch, which would change the kept
// image under the user's feet.
TEST(DecodeSlots, ATensorKeptFromADroppedItemIsNeverOverwritten) {
  const std::vector<Sample> samples = pictures(12, same_size);
  std::vector<std::pair<std::int64_t, Tensor>> kept;
  auto p = from_vector(samples) | decode("rgb8") | to_tuple("png", "cls") |
           map([&kept](Tuple&& t) -> std::optional<Tuple> {
             const std::int64_t label = t[1].get<std::int64_t>();
             if (label % 4 == 1) {
               kept.emplace_back(label, t[0].get<Tensor>());
               return std::nullopt;
             }
             return std::move(t);
           }) |
           batched(3);
  std::vector<std::int64_t> labels;
  for (Tuple& b : p) {
    EXPECT_EQ(b[0].get<Tensor>(), stacked(samples, b[1].get<Tensor>(), "rgb8"));
    for (std::int64_t i : b[1].get<Tensor>().values<std::int64_t>()) labels.push_back(i);
  }
  EXPECT_EQ(labels, (std::vector<std::int64_t>{0, 2, 3, 4, 6, 7, 8, 10, 11}));
  ASSERT_EQ(kept.size(), 3u);
  for (const auto& [label, image] : kept) {
    EXPECT_EQ(image, one_by_one(samples, label, "rgb8", {}))
        << "the image kept from sample " << label << " was overwritten";
  }
}

TEST(DecodeSlots, RaggedImagesBehaveAsWithoutSlots) {
  // Rows 0, 1, 3, 4 of one size (decoded into the batch), 2 and 5 of another (declined).
  const std::vector<Sample> samples = pictures(6, [](int i) {
    return i % 3 == 2 ? std::pair{20, 30} : std::pair{30, 20};
  });
  auto p = from_vector(samples) | decode("rgb8") | to_tuple("png", "cls") | batched(6);
  std::string what;
  EXPECT_EQ(test::error_code([&] { run_all(p); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("row 2 is uint8[30, 20, 3], row 0 uint8[20, 30, 3]"), std::string::npos)
      << what;
  EXPECT_NE(what.find("tensors must match"), std::string::npos) << what;
  // A collate function of one's own receives every row intact.
  auto q = from_vector(samples) | decode("rgb8") | to_tuple("png", "cls") |
           batched(4, [](std::vector<Tuple>&& rows) { return std::move(rows); });
  std::size_t seen = 0;
  for (std::vector<Tuple>& rows : q) {
    for (Tuple& row : rows) {
      const std::int64_t i = row[1].get<std::int64_t>();
      EXPECT_EQ(i, static_cast<std::int64_t>(seen++));
      EXPECT_EQ(row[0].get<Tensor>(), one_by_one(samples, i, "rgb8", {}));
    }
  }
  EXPECT_EQ(seen, 6u);
}

TEST(DecodeMetrics, CountsDecodedAndDropped) {
  for (ErrorHandler handler :
       {ErrorHandler(warn_and_continue), ErrorHandler(ignore_and_continue)}) {
    std::vector<Sample> samples = pictures(6, same_size);
    samples[2] = raw("bad", {{"png", "\x89PNG not really"}, {"cls", "2"}});
    auto p = from_vector(samples) | decode("rgb8", {.handler = handler});
    std::size_t n = 0;
    for ([[maybe_unused]] DecodedSample& s : p) ++n;
    EXPECT_EQ(n, 5u);
    const Metrics m = p.metrics();
    EXPECT_EQ(m.decoded, 5u);
    EXPECT_EQ(m.dropped, 1u);
    EXPECT_GT(m.decode_seconds, 0.0);
  }
}

}  // namespace
}  // namespace wds
