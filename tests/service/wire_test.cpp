// Tests of service/wire.hpp, the data service's batch format: round trips of every value type,
// where values travel (inline or in frames) and that tensors do so without copies, the exact
// bytes of a small description, each malformed description decode() must refuse (written byte
// by byte here), truncated and corrupted descriptions, and the record conversions.
#include "service/wire.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "wds/error.hpp"

namespace wds::wire {
namespace {

// Same type and contents; doubles compared by bits (NaN equals itself), tensors by dtype, shape
// and elements.
bool same(const Value& a, const Value& b) {
  if (a.variant().index() != b.variant().index()) return false;
  if (a.is_none()) return true;
  if (auto* x = a.get_if<Bytes>()) return *x == b.get<Bytes>();
  if (auto* x = a.get_if<std::string>()) return *x == b.get<std::string>();
  if (auto* x = a.get_if<std::int64_t>()) return *x == b.get<std::int64_t>();
  if (auto* x = a.get_if<double>()) {
    return std::bit_cast<std::uint64_t>(*x) == std::bit_cast<std::uint64_t>(b.get<double>());
  }
  if (auto* x = a.get_if<Json>()) return *x == b.get<Json>();
  if (auto* x = a.get_if<Tensor>()) return *x == b.get<Tensor>();
  const Tuple& ta = a.get<Tuple>();
  const Tuple& tb = b.get<Tuple>();
  if (ta.size() != tb.size()) return false;
  for (std::size_t i = 0; i < ta.size(); ++i) {
    if (!same(ta[i], tb[i])) return false;
  }
  return true;
}

void expect_same(const Record& a, const Record& b) {
  EXPECT_EQ(a.names, b.names);
  ASSERT_EQ(a.values.size(), b.values.size());
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    EXPECT_TRUE(same(a.values[i], b.values[i]))
        << "value " << i << ": " << a.values[i].describe() << " vs " << b.values[i].describe();
  }
}

Bytes pattern_bytes(std::size_t n, int seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b.data()[i] = std::byte((i * 31 + seed) & 0xff);
  return b;
}

template <class T>
Tensor iota_tensor(Tensor::Shape shape) {
  Tensor t(dtype_of<T>(), std::move(shape));
  std::span<T> v = t.values<T>();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(i * 3 + 1);
  return t;
}

// A record holding every type, nested tuples, small and large bytes, and odd tensors.
Record every_type() {
  Record r;
  r.names = {"none", "small", "large", "txt",    "cls",   "score",
             "json", "img",   "empty", "scalar", "nested"};
  r.values.emplace_back();
  r.values.emplace_back(pattern_bytes(17, 1));
  r.values.emplace_back(pattern_bytes(kInlineLimit + 5, 2));
  r.values.emplace_back(std::string("caf\xc3\xa9 \0 with a NUL", 18));
  r.values.emplace_back(std::numeric_limits<std::int64_t>::min());
  r.values.emplace_back(-0.25);
  r.values.emplace_back(Json::parse(R"({"a": [1, 2.5, "x", null, true], "b": {"c": {}}})"));
  r.values.emplace_back(iota_tensor<float>({2, 3, 4}));
  r.values.emplace_back(Tensor(DType::int16, {0, 7}));
  Tensor scalar(DType::float64, {});
  scalar.values<double>()[0] = 6.5;
  r.values.emplace_back(scalar);
  Tuple inner{Value(std::int64_t{7}), Value(Tuple{}), Value(iota_tensor<std::uint8_t>({5})),
              Value(pattern_bytes(kInlineLimit, 3))};
  r.values.emplace_back(Tuple{Value("k1"), Value(std::move(inner)), Value()});
  return r;
}

// A description written field by field, as the format comment in wire.cpp lays it out.
class Desc {
 public:
  // The header: magic, version, flags, reserved, value count, has_names.
  static Desc header(std::uint32_t count, std::uint8_t has_names = 0,
                     std::uint8_t version = kRecordVersion, std::uint8_t flags = 0) {
    Desc d;
    d.raw("WDSR").u8(version).u8(flags).u16(0).u32(count).u8(has_names);
    return d;
  }
  Desc& raw(std::string_view s) {
    bytes_ += s;
    return *this;
  }
  Desc& u8(std::uint8_t v) { return le(v, 1); }
  Desc& u16(std::uint16_t v) { return le(v, 2); }
  Desc& u32(std::uint32_t v) { return le(v, 4); }
  Desc& u64(std::uint64_t v) { return le(v, 8); }
  Desc& str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    return raw(s);
  }
  // A tensor value: tag, dtype, rank, dims, frame index.
  Desc& tensor(DType dtype, const std::vector<std::int64_t>& dims, std::uint32_t frame) {
    u8(7).u8(static_cast<std::uint8_t>(dtype)).u8(static_cast<std::uint8_t>(dims.size()));
    for (std::int64_t d : dims) u64(static_cast<std::uint64_t>(d));
    return u32(frame);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  Desc& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_ += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  std::string bytes_;
};

// A frame owning a copy of `s`, starting `offset` bytes into its buffer (to misalign it).
Frame frame_of(std::string_view s, std::size_t offset = 0) {
  auto buffer = std::make_shared<std::vector<std::byte>>(s.size() + offset + 1);
  std::memcpy(buffer->data() + offset, s.data(), s.size());
  return Frame{std::span<const std::byte>(buffer->data() + offset, s.size()), buffer};
}

std::vector<Frame> message(const Desc& d, const std::vector<std::string>& data = {}) {
  std::vector<Frame> frames{frame_of(d.bytes())};
  for (const std::string& s : data) frames.push_back(frame_of(s));
  return frames;
}

// decode() must refuse with corrupt_data naming the connection and saying `what`.
void expect_refused(const std::vector<Frame>& frames, const std::string& what) {
  try {
    decode(frames, "tcp://10.0.0.7:5555");
    ADD_FAILURE() << "decoded; expected an error saying: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data) << e.what();
    EXPECT_EQ(e.url(), "tcp://10.0.0.7:5555");
    EXPECT_NE(e.cause().find("malformed batch message: "), std::string::npos) << e.what();
    EXPECT_NE(e.cause().find(what), std::string::npos) << e.what();
  }
}

TEST(Wire, EveryTypeRoundTripsThroughBothEncoders) {
  const Record original = every_type();
  expect_same(decode(encode(original), "test"), original);
  Record moved = every_type();
  expect_same(decode(encode(std::move(moved)), "test"), original);
}

TEST(Wire, UnnamedValuesAndEmptyRecordsRoundTrip) {
  Record r;
  r.values = {Value(std::int64_t{1}), Value(std::string("two")), Value(3.0)};
  Record back = decode(encode(r), "test");
  EXPECT_TRUE(back.names.empty());
  expect_same(back, r);
  Record empty = decode(encode(Record{}), "test");
  EXPECT_TRUE(empty.names.empty());
  EXPECT_TRUE(empty.values.empty());
}

TEST(Wire, SpecialDoublesKeepTheirBits) {
  Record r;
  for (double d :
       {std::numeric_limits<double>::quiet_NaN(), -0.0, std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::denorm_min()})
    r.values.emplace_back(d);
  expect_same(decode(encode(r), "test"), r);
}

TEST(Wire, SmallBytesTravelInlineLargeOnesInAFrame) {
  Record small;
  small.values.emplace_back(pattern_bytes(kInlineLimit - 1, 0));
  EXPECT_EQ(encode(small).size(), 1u);
  Record large;
  large.values.emplace_back(pattern_bytes(kInlineLimit, 0));
  const std::vector<Frame> frames = encode(large);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[1].bytes.size(), kInlineLimit);
  expect_same(decode(frames, "test"), large);
}

TEST(Wire, EveryTensorTravelsInAFrameOfItsOwnEvenEmpty) {
  Record r;
  r.values = {Value(Tensor(DType::uint8, {0})), Value(Tensor(DType::int32, {}))};
  const std::vector<Frame> frames = encode(r);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[1].bytes.size(), 0u);
  EXPECT_EQ(frames[2].bytes.size(), 4u);
  Record back = decode(frames, "test");
  const Tensor& empty = back.values[0].get<Tensor>();
  EXPECT_TRUE(empty.defined());
  EXPECT_EQ(empty.shape(), Tensor::Shape{0});
  EXPECT_EQ(back.values[1].get<Tensor>().ndim(), 0u);
}

// The documented layout, byte for byte: others (and other languages) code against it.
TEST(Wire, DescriptionBytesAreTheDocumentedLayout) {
  Record r;
  r.names = {"cls"};
  r.values.emplace_back(std::int64_t{0x0102030405060708});
  const std::vector<Frame> frames = encode(r);
  ASSERT_EQ(frames.size(), 1u);
  const std::string expected = Desc::header(1, 1).str("cls").u8(4).u64(0x0102030405060708).bytes();
  const std::string_view got(reinterpret_cast<const char*>(frames[0].bytes.data()),
                             frames[0].bytes.size());
  EXPECT_EQ(got, expected);
}

TEST(Wire, EncodedFramesAreTheValuesOwnMemory) {
  Tensor t = iota_tensor<std::int32_t>({4, 4});
  Bytes big = pattern_bytes(kInlineLimit * 2, 5);
  const std::byte* big_data = big.data();
  Record r;
  r.values.emplace_back(t);
  r.values.emplace_back(std::move(big));  // not through an initializer list: that would copy
  std::vector<Frame> frames = encode(std::move(r));
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[1].bytes.data(), t.data());
  EXPECT_EQ(frames[1].bytes.size(), t.nbytes());
  EXPECT_EQ(frames[1].owner, t.storage());
  // Moved, not copied: the frame is the bytes value's buffer.
  EXPECT_EQ(frames[2].bytes.data(), big_data);

  // The copying encoder still shares tensor storage.
  Record c;
  c.values = {Value(t)};
  EXPECT_EQ(encode(c)[1].bytes.data(), t.data());
}

TEST(Wire, FramesKeepTheirMemoryAliveAfterTheRecordIsGone) {
  std::vector<Frame> frames;
  {
    Record r = every_type();
    frames = encode(std::move(r));
  }
  expect_same(decode(frames, "test"), every_type());
}

TEST(Wire, DecodedTensorAdoptsTheReceivedFrame) {
  Record r;
  r.values = {Value(iota_tensor<double>({3, 5}))};
  std::vector<Frame> frames = encode(r);
  Record back = decode(frames, "test");
  const Tensor& t = back.values[0].get<Tensor>();
  EXPECT_EQ(t.data(), frames[1].bytes.data());
  // The tensor keeps the frame's owner alive.
  EXPECT_EQ(t.storage(), frames[1].owner);
}

TEST(Wire, UnalignedFrameIsCopiedIntoAnAlignedTensor) {
  Tensor original = iota_tensor<float>({3, 7});
  Record r;
  r.values = {Value(original)};
  std::vector<Frame> frames = encode(r);
  const std::string data(reinterpret_cast<const char*>(original.data()), original.nbytes());
  frames[1] = frame_of(data, 1);
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(frames[1].bytes.data()) % alignof(float), 0u);
  Record back = decode(frames, "test");
  const Tensor& t = back.values[0].get<Tensor>();
  EXPECT_NE(t.data(), frames[1].bytes.data());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % alignof(float), 0u);
  EXPECT_EQ(t, original);
}

TEST(Wire, NestingUpToTheLimitDecodes) {
  Desc d = Desc::header(1);
  for (std::size_t i = 1; i < kMaxDepth; ++i) d.u8(8).u32(1);
  d.u8(0);
  Record back = decode(message(d), "test");
  const Value* v = &back.values[0];
  for (std::size_t i = 1; i < kMaxDepth; ++i) v = &v->get<Tuple>().at(0);
  EXPECT_TRUE(v->is_none());
}

// Malformed descriptions, one rule each.

TEST(WireRefuses, NoFramesAtAll) {
  expect_refused({}, "no frames");
}

TEST(WireRefuses, DescriptionShorterThanTheHeader) {
  expect_refused(message(Desc().raw("WDSR").u8(1)), "shorter than the 13-byte header");
}

TEST(WireRefuses, WrongMagic) {
  Desc d;
  d.raw("WDSX").u8(1).u8(0).u16(0).u32(0).u8(0);
  expect_refused(message(d), "wrong magic");
}

TEST(WireRefuses, WrongVersion) {
  expect_refused(message(Desc::header(0, 0, 2)), "batch format version 2, this build reads 1");
}

TEST(WireRefuses, NonzeroFlags) {
  expect_refused(message(Desc::header(0, 0, kRecordVersion, 4)), "unknown flags 4");
}

TEST(WireRefuses, NonzeroReservedBytes) {
  Desc d;
  d.raw("WDSR").u8(1).u8(0).u16(9).u32(0).u8(0);
  expect_refused(message(d), "reserved");
}

TEST(WireRefuses, HasNamesNeitherZeroNorOne) {
  expect_refused(message(Desc::header(0, 2)), "has_names is 2");
}

TEST(WireRefuses, ValueCountBeyondWhatTheBytesHold) {
  // Four billion values claimed, two bytes given: refused before allocating for them.
  expect_refused(message(Desc::header(0xffffffff).u8(0).u8(0)), "value count 4294967295");
}

TEST(WireRefuses, TupleCountBeyondWhatTheBytesHold) {
  expect_refused(message(Desc::header(1).u8(8).u32(1000).u8(0)), "tuple count 1000");
}

TEST(WireRefuses, NestingDeeperThanTheLimit) {
  Desc d = Desc::header(1);
  for (std::size_t i = 0; i < kMaxDepth; ++i) d.u8(8).u32(1);
  d.u8(0);
  expect_refused(message(d), "nested deeper than 64");
}

TEST(WireRefuses, UnknownValueTag) {
  expect_refused(message(Desc::header(1).u8(9)), "unknown value tag 9");
}

TEST(WireRefuses, UnknownDtype) {
  expect_refused(message(Desc::header(1).u8(7).u8(14).u8(0).u32(1), {"x"}),
                 "unknown tensor dtype 14");
}

TEST(WireRefuses, NegativeDimension) {
  expect_refused(message(Desc::header(1).tensor(DType::uint8, {2, -3}, 1), {""}),
                 "negative dimension -3");
}

TEST(WireRefuses, DimensionsWhoseSizeOverflows) {
  // 2^32 x 2^32 elements of 2 bytes: the element count fits in 64 bits, the byte size does not.
  expect_refused(message(Desc::header(1).tensor(DType::int16, {1LL << 32, 1LL << 32}, 1), {""}),
                 "overflows");
}

TEST(WireRefuses, TensorFrameOfTheWrongSize) {
  expect_refused(message(Desc::header(1).tensor(DType::float32, {2, 3}, 1), {std::string(20, 'x')}),
                 "tensor float32[2, 3] at offset 13 needs 24 bytes, its frame has 20");
}

TEST(WireRefuses, FrameIndexZeroIsTheDescription) {
  expect_refused(message(Desc::header(1).u8(2).u32(0)), "frame index 0 out of range");
}

TEST(WireRefuses, FrameIndexPastTheLastFrame) {
  expect_refused(message(Desc::header(1).u8(2).u32(2), {"a"}),
                 "frame index 2 out of range (the message has 1 data frames)");
}

TEST(WireRefuses, FrameReferencedTwice) {
  const Desc d = Desc::header(2).tensor(DType::uint8, {4}, 1).tensor(DType::uint8, {4}, 1);
  expect_refused(message(d, {"abcd"}), "data frame 1 referenced twice");
}

TEST(WireRefuses, DataFrameNeverReferenced) {
  expect_refused(message(Desc::header(1).u8(0), {"stray"}), "data frame 1 is never referenced");
}

TEST(WireRefuses, TrailingBytesAfterTheLastValue) {
  expect_refused(message(Desc::header(1).u8(0).raw("xyz")), "3 trailing bytes");
}

TEST(WireRefuses, StringLengthPastTheEnd) {
  expect_refused(message(Desc::header(1).u8(3).u32(100).raw("short")),
                 "string of 100 bytes at offset 18 runs past the end");
}

TEST(WireRefuses, NameLengthPastTheEnd) {
  expect_refused(message(Desc::header(1, 1).u32(0x7fffffff).raw("n").u8(0)), "name of 2147483647");
}

TEST(WireRefuses, InlineBytesLengthPastTheEnd) {
  expect_refused(message(Desc::header(1).u8(1).u32(5).raw("abc")), "bytes value of 5 bytes");
}

TEST(WireRefuses, JsonThatDoesNotParse) {
  expect_refused(message(Desc::header(1).u8(6).str("{\"a\": ")), "does not parse");
}

TEST(WireRefuses, JsonNestedTooDeep) {
  // Parsing is iterative, but copying, comparing and printing the document would recurse.
  expect_refused(message(Desc::header(1).u8(6).str(std::string(100000, '['))), "nested deeper");
}

TEST(WireRefuses, TruncatedOrCorruptedDescriptionsOnlyWithErrors) {
  const std::vector<Frame> valid = encode(every_type());
  const std::string desc(reinterpret_cast<const char*>(valid[0].bytes.data()),
                         valid[0].bytes.size());
  auto attempt = [&](std::string d) {
    std::vector<Frame> frames = valid;
    frames[0] = frame_of(d);
    try {
      decode(frames, "test");
      return true;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt_data) << e.what();
      return false;
    }
  };
  // Every prefix leaves values, names or lengths missing.
  for (std::size_t n = 0; n < desc.size(); ++n) {
    EXPECT_FALSE(attempt(desc.substr(0, n))) << "prefix of " << n << " bytes decoded";
  }
  // Flipped bytes: decoded or refused, never a crash or another exception.
  for (std::size_t i = 0; i < desc.size(); ++i) {
    for (unsigned mask : {0x01u, 0x80u, 0xffu}) {
      std::string d = desc;
      d[i] = static_cast<char>(static_cast<unsigned char>(d[i]) ^ mask);
      attempt(d);
    }
  }
  // Data frames dropped or added.
  std::vector<Frame> fewer(valid.begin(), valid.end() - 1);
  EXPECT_THROW(decode(fewer, "test"), Error);
  std::vector<Frame> more = valid;
  more.push_back(frame_of("extra"));
  EXPECT_THROW(decode(more, "test"), Error);
}

// What encode() refuses to send.

TEST(WireEncode, NamesThatDoNotMatchTheValues) {
  Record r;
  r.names = {"a", "b"};
  r.values = {Value(std::int64_t{1})};
  try {
    encode(r);
    FAIL() << "encoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.cause().find("2 names for 1 values"), std::string::npos) << e.what();
  }
}

TEST(WireEncode, AnUndefinedTensor) {
  Record r;
  r.values = {Value(Tensor())};
  EXPECT_THROW(encode(r), Error);
}

TEST(WireEncode, NestingTheReceiverWouldRefuse) {
  Value v;
  for (std::size_t i = 0; i < kMaxDepth; ++i) v = Value(Tuple{std::move(v)});
  Record r;
  r.values.push_back(std::move(v));
  EXPECT_THROW(encode(r), Error);
}

// Conversions.

TEST(WireRecord, TupleTakesNamesOfItsSizeOnly) {
  Record r = to_record(Tuple{Value(std::int64_t{1}), Value("x")}, {"cls", "txt"});
  EXPECT_EQ(r.names, (std::vector<std::string>{"cls", "txt"}));
  EXPECT_TRUE(to_record(Tuple{Value(), Value()}, {}).names.empty());
  try {
    to_record(Tuple{Value()}, {"a", "b"});
    FAIL() << "converted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
  Tuple back;
  from_record(std::move(r), back);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].get<std::string>(), "x");
}

TEST(WireRecord, SingleSampleKeepsItsKeyAcrossTheWire) {
  DecodedSample s("shard-0/img7");
  s.set("jpg", Value(iota_tensor<std::uint8_t>({2, 2, 3})));
  s.set("cls", Value(std::int64_t{3}));
  Record r = to_record(std::move(s));
  EXPECT_EQ(r.names, (std::vector<std::string>{"jpg", "cls", "__key__"}));
  EXPECT_EQ(r.values[2].get<std::string>(), "shard-0/img7");

  DecodedSample back;
  from_record(decode(encode(std::move(r)), "test"), back);
  EXPECT_EQ(back.key(), "shard-0/img7");
  EXPECT_EQ(back.get<std::int64_t>("cls"), 3);
  EXPECT_EQ(back.get<Tensor>("jpg").shape(), (Tensor::Shape{2, 2, 3}));
}

TEST(WireRecord, CollatedBatchKeepsItsListOfKeys) {
  DecodedSample batch("k0");
  batch.set("__key__", Value(Tuple{Value("k0"), Value("k1")}));
  batch.set("cls", Value(Tuple{Value(std::int64_t{0}), Value(std::int64_t{1})}));
  Record r = to_record(std::move(batch));
  EXPECT_EQ(r.names, (std::vector<std::string>{"__key__", "cls"}));
  DecodedSample back;
  from_record(std::move(r), back);
  // Not a string: no single key, the list stays a field.
  EXPECT_EQ(back.key(), "");
  EXPECT_EQ(back.get<Tuple>("__key__").size(), 2u);
}

TEST(WireRecord, UnnamedValuesBecomeNumberedFields) {
  Record r;
  r.values = {Value("a"), Value(std::int64_t{2})};
  DecodedSample s;
  from_record(std::move(r), s);
  ASSERT_EQ(s.fields().size(), 2u);
  EXPECT_EQ(s.fields()[0].ext, "0");
  EXPECT_EQ(s.fields()[1].ext, "1");
  EXPECT_EQ(s.key(), "");
}

// The seeds of fuzz/fuzz_wire.cpp, in its input layout: a control byte (bits 0-3 the number of
// data frames, bit 7 misaligns them), each data frame as a u16 length and bytes, then the
// description. Checked here; written to $WDS_WIRE_CORPUS (fuzz/corpus/wire) when that is set.
TEST(WireFuzzSeeds, EncodeAndSplitBack) {
  std::vector<std::pair<std::string, Record>> seeds;
  {
    Record r;
    r.names = {"cls", "txt", "score"};
    r.values = {Value(std::int64_t{7}), Value("a caption"), Value(0.5)};
    seeds.emplace_back("scalars", std::move(r));
  }
  {
    Record r;
    r.values = {Value(iota_tensor<std::uint8_t>({2, 3, 3})), Value(iota_tensor<float>({4})),
                Value(Tensor(DType::int64, {0}))};
    seeds.emplace_back("tensors", std::move(r));
  }
  {
    Record r;
    r.names = {"__key__", "json", "bytes", "list"};
    r.values = {Value(Tuple{Value("k0"), Value("k1")}),
                Value(Json::parse(R"({"a":[1,{"b":null}]})")), Value(pattern_bytes(9, 4)),
                Value(Tuple{Value(), Value(Tuple{Value(std::int64_t{-1})})})};
    seeds.emplace_back("nested", std::move(r));
  }
  const std::string dir = [] {
    const char* d = std::getenv("WDS_WIRE_CORPUS");
    return d ? std::string(d) : std::string();
  }();
  for (auto& [name, record] : seeds) {
    const std::vector<Frame> frames = encode(record);
    ASSERT_LE(frames.size() - 1, 15u);
    std::string input(1, static_cast<char>(frames.size() - 1));
    for (std::size_t i = 1; i < frames.size(); ++i) {
      ASSERT_LE(frames[i].bytes.size(), 0xffffu);
      const auto n = static_cast<std::uint16_t>(frames[i].bytes.size());
      input += static_cast<char>(n & 0xff);
      input += static_cast<char>(n >> 8);
      input.append(reinterpret_cast<const char*>(frames[i].bytes.data()), n);
    }
    input.append(reinterpret_cast<const char*>(frames[0].bytes.data()), frames[0].bytes.size());

    // Split back as the fuzz target does.
    std::size_t pos = 1;
    std::vector<Frame> split(1);
    for (int i = 0; i < (input[0] & 15); ++i) {
      const std::size_t n = static_cast<unsigned char>(input[pos]) |
                            (std::size_t{static_cast<unsigned char>(input[pos + 1])} << 8);
      split.push_back(frame_of(std::string_view(input).substr(pos + 2, n)));
      pos += 2 + n;
    }
    split[0] = frame_of(std::string_view(input).substr(pos));
    expect_same(decode(split, name), record);

    if (!dir.empty()) {
      std::filesystem::create_directories(dir);
      std::ofstream(std::filesystem::path(dir) / name, std::ios::binary) << input;
    }
  }
}

}  // namespace
}  // namespace wds::wire
