#include "service/wire.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "wds/error.hpp"

// The batch format, version 1. All integers are little-endian.
//
// Frame 0, the description:
//   "WDSR"            magic, 4 bytes
//   u8  version       kRecordVersion
//   u8  flags         0
//   u16 reserved      0
//   u32 count         values at the top level
//   u8  has_names     0 or 1; if 1, count names follow, each u32 length + bytes
//   count values, in pre-order
//
// A value is a u8 tag and what the tag says:
//   0 none
//   1 bytes, inline     u32 length + data
//   2 bytes, in a frame u32 frame index
//   3 string            u32 length + data
//   4 int64             8 bytes
//   5 double            8 bytes, IEEE 754
//   6 json              u32 length + dump() text
//   7 tensor            u8 dtype, u8 ndim, ndim x i64 dims, u32 frame index
//   8 tuple             u32 count + count values
//
// Frames 1..N are data frames, in the order values first reference them; each is referenced
// exactly once. Bytes values of kInlineLimit bytes or more travel in a frame, smaller ones
// inline; tensors always travel in a frame (even an empty one), so that they are sent from and
// received into their own memory.

namespace wds::wire {

namespace {

constexpr char kMagic[4] = {'W', 'D', 'S', 'R'};
constexpr std::size_t kHeaderSize = 4 + 1 + 1 + 2 + 4 + 1;
constexpr std::uint32_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();
// JSON nesting a decoded document may have: nlohmann parses iteratively, but copying, comparing
// and dumping a document recurse, so a hostile one must not be able to exhaust the stack.
constexpr int kMaxJsonDepth = 512;

enum Tag : std::uint8_t {
  kNone = 0,
  kBytesInline = 1,
  kBytesFrame = 2,
  kString = 3,
  kInt = 4,
  kDouble = 5,
  kJson = 6,
  kTensor = 7,
  kTuple = 8,
};

[[noreturn]] void refuse(std::string what) {
  throw Error::invalid_argument("cannot send batch: " + std::move(what));
}

// Appends the description's fields to a string.
class Writer {
 public:
  void u8(std::uint8_t v) { out_ += static_cast<char>(v); }
  void u16(std::uint16_t v) { le(v, 2); }
  void u32(std::uint32_t v) { le(v, 4); }
  void u64(std::uint64_t v) { le(v, 8); }
  void text(std::string_view s) { out_.append(s); }
  // A u32 length, then the bytes.
  void sized(std::string_view s, std::string_view what) {
    if (s.size() > kMaxU32)
      refuse(std::string(what) + " of " + std::to_string(s.size()) + " bytes");
    u32(static_cast<std::uint32_t>(s.size()));
    text(s);
  }
  std::string& str() noexcept { return out_; }

 private:
  void le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

std::string_view as_text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// Writes the description while collecting the data frames. kTake: the values are the caller's
// to move from (encode(Record&&)), so large bytes values change owner instead of being copied.
class Encoder {
 public:
  Encoder() { frames_.emplace_back(); }

  template <bool kTake, class R>
  std::vector<Frame> run(R& record) {
    if (!record.names.empty() && record.names.size() != record.values.size()) {
      refuse(std::to_string(record.names.size()) + " names for " +
             std::to_string(record.values.size()) + " values");
    }
    out_.text(std::string_view(kMagic, sizeof kMagic));
    out_.u8(kRecordVersion);
    out_.u8(0);   // flags
    out_.u16(0);  // reserved
    out_.u32(count(record.values.size(), "values"));
    out_.u8(record.names.empty() ? 0 : 1);
    for (const std::string& name : record.names) out_.sized(name, "a name");
    for (auto& v : record.values) value<kTake>(v, 1);

    auto description = std::make_shared<std::string>(std::move(out_.str()));
    frames_[0] = Frame{std::as_bytes(std::span(*description)), description};
    return std::move(frames_);
  }

 private:
  static std::uint32_t count(std::size_t n, std::string_view what) {
    if (n > kMaxU32) refuse("a list of " + std::to_string(n) + " " + std::string(what));
    return static_cast<std::uint32_t>(n);
  }

  void frame(std::span<const std::byte> bytes, std::shared_ptr<const void> owner) {
    out_.u32(count(frames_.size(), "frames"));
    frames_.push_back(Frame{bytes, std::move(owner)});
  }

  // V is Value when taking, const Value when copying.
  template <bool kTake, class V>
  void value(V& v, std::size_t depth) {
    if (depth > kMaxDepth) {
      refuse("values nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    if (v.is_none()) {
      out_.u8(kNone);
    } else if (auto* b = v.template get_if<Bytes>()) {
      if (b->size() < kInlineLimit) {
        out_.u8(kBytesInline);
        out_.sized(b->str(), "a bytes value");
      } else {
        out_.u8(kBytesFrame);
        std::shared_ptr<Bytes> owner;
        if constexpr (kTake) {
          owner = std::make_shared<Bytes>(std::move(*b));
        } else {
          owner = std::make_shared<Bytes>(*b);
        }
        frame(owner->span(), owner);
      }
    } else if (auto* s = v.template get_if<std::string>()) {
      out_.u8(kString);
      out_.sized(*s, "a string");
    } else if (auto* i = v.template get_if<std::int64_t>()) {
      out_.u8(kInt);
      out_.u64(static_cast<std::uint64_t>(*i));
    } else if (auto* d = v.template get_if<double>()) {
      out_.u8(kDouble);
      out_.u64(std::bit_cast<std::uint64_t>(*d));
    } else if (auto* j = v.template get_if<Json>()) {
      std::string text;
      try {
        text = j->dump();
      } catch (const Json::exception& e) {
        refuse(std::string("a JSON value that does not serialise: ") + e.what());
      }
      out_.u8(kJson);
      out_.sized(text, "a JSON value");
    } else if (auto* t = v.template get_if<Tensor>()) {
      // An empty Tensor() has no dtype or shape to send; numel() of it would even say 1.
      if (!t->defined()) refuse("an undefined tensor (wds::Tensor())");
      if (t->ndim() > 255) refuse("a tensor of " + std::to_string(t->ndim()) + " dimensions");
      out_.u8(kTensor);
      out_.u8(static_cast<std::uint8_t>(t->dtype()));
      out_.u8(static_cast<std::uint8_t>(t->ndim()));
      for (std::int64_t d : t->shape()) out_.u64(static_cast<std::uint64_t>(d));
      frame(t->bytes(), t->storage());
    } else if (auto* tuple = v.template get_if<Tuple>()) {
      out_.u8(kTuple);
      out_.u32(count(tuple->size(), "values"));
      for (auto& item : *tuple) value<kTake>(item, depth + 1);
    } else if (v.template is<Dict>()) {
      // An npz field's named arrays: not in the batch format (yet); map them to a tensor or a
      // list first.
      refuse("a dict value (" + v.describe() + ")");
    }
  }

  Writer out_;
  std::vector<Frame> frames_;
};

// Reads the description, checking every field against what is left of it and every frame
// reference against the frames received.
class Decoder {
 public:
  Decoder(std::span<const Frame> frames, std::string_view where)
      : frames_(frames), used_(frames.size(), false), where_(where) {}

  Record run() {
    if (frames_.empty()) fail("no frames");
    in_ = frames_[0].bytes;
    if (in_.size() < kHeaderSize) {
      fail("description of " + std::to_string(in_.size()) + " bytes, shorter than the " +
           std::to_string(kHeaderSize) + "-byte header");
    }
    if (as_text(take(4, "magic")) != std::string_view(kMagic, sizeof kMagic)) {
      fail("wrong magic (not a wds batch)");
    }
    const std::uint8_t version = u8("version");
    if (version != kRecordVersion) {
      fail("batch format version " + std::to_string(version) + ", this build reads " +
           std::to_string(kRecordVersion));
    }
    if (const std::uint8_t flags = u8("flags"); flags != 0) {
      fail("unknown flags " + std::to_string(flags));
    }
    if (le(2, "reserved") != 0) fail("reserved header bytes are not zero");
    const std::uint32_t n = count("value count");
    const std::uint8_t has_names = u8("has_names");
    if (has_names > 1) fail("has_names is " + std::to_string(has_names) + ", not 0 or 1");

    Record record;
    if (has_names) {
      record.names.reserve(n);
      for (std::uint32_t i = 0; i < n; ++i) record.names.emplace_back(as_text(sized("name")));
    }
    record.values.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) record.values.push_back(value(1));

    if (pos_ != in_.size()) {
      fail(std::to_string(in_.size() - pos_) + " trailing bytes after the last value (offset " +
           std::to_string(pos_) + ")");
    }
    for (std::size_t i = 1; i < frames_.size(); ++i) {
      if (!used_[i]) fail("data frame " + std::to_string(i) + " is never referenced");
    }
    return record;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error::corrupt_data(std::string(where_), "", "malformed batch message: " + what);
  }

  std::size_t left() const noexcept { return in_.size() - pos_; }

  std::span<const std::byte> take(std::size_t n, std::string_view what) {
    if (n > left()) {
      fail(std::string(what) + " of " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos_) + " runs past the end of the description (" +
           std::to_string(in_.size()) + " bytes)");
    }
    std::span<const std::byte> out = in_.subspan(pos_, n);
    pos_ += n;
    return out;
  }

  std::uint64_t le(std::size_t n, std::string_view what) {
    std::uint64_t v = 0;
    std::span<const std::byte> b = take(n, what);
    for (std::size_t i = 0; i < n; ++i)
      v |= std::uint64_t{std::to_integer<std::uint8_t>(b[i])} << (8 * i);
    return v;
  }
  std::uint8_t u8(std::string_view what) { return static_cast<std::uint8_t>(le(1, what)); }
  std::uint32_t u32(std::string_view what) { return static_cast<std::uint32_t>(le(4, what)); }
  std::uint64_t u64(std::string_view what) { return le(8, what); }

  // A count of values that follow: each takes at least one byte, so a count beyond what is
  // left is a lie, refused before anything is allocated for it.
  std::uint32_t count(std::string_view what) {
    const std::size_t at = pos_;
    const std::uint32_t n = u32(what);
    if (n > left()) {
      fail(std::string(what) + " " + std::to_string(n) + " at offset " + std::to_string(at) +
           ", but only " + std::to_string(left()) + " bytes follow");
    }
    return n;
  }

  std::span<const std::byte> sized(std::string_view what) { return take(u32(what), what); }

  const Frame& frame() {
    const std::uint32_t i = u32("frame index");
    if (i == 0 || i >= frames_.size()) {
      fail("frame index " + std::to_string(i) + " out of range (the message has " +
           std::to_string(frames_.size() - 1) + " data frames)");
    }
    if (used_[i]) fail("data frame " + std::to_string(i) + " referenced twice");
    used_[i] = true;
    return frames_[i];
  }

  Value value(std::size_t depth) {
    if (depth > kMaxDepth) {
      fail("values nested deeper than " + std::to_string(kMaxDepth) + " levels (offset " +
           std::to_string(pos_) + ")");
    }
    const std::size_t at = pos_;
    const std::uint8_t tag = u8("value tag");
    switch (tag) {
      case kNone:
        return Value();
      case kBytesInline:
        return Value(Bytes::copy_of(sized("bytes value")));
      case kBytesFrame:
        // Bytes owns its memory and cannot adopt the frame's.
        return Value(Bytes::copy_of(frame().bytes));
      case kString:
        return Value(std::string(as_text(sized("string"))));
      case kInt:
        return Value(static_cast<std::int64_t>(u64("int64")));
      case kDouble:
        return Value(std::bit_cast<double>(u64("double")));
      case kJson:
        return Value(json(as_text(sized("JSON value")), at));
      case kTensor:
        return Value(tensor(at));
      case kTuple: {
        const std::uint32_t n = count("tuple count");
        Tuple tuple;
        tuple.reserve(n);
        for (std::uint32_t i = 0; i < n; ++i) tuple.push_back(value(depth + 1));
        return Value(std::move(tuple));
      }
      default:
        fail("unknown value tag " + std::to_string(tag) + " at offset " + std::to_string(at));
    }
  }

  Json json(std::string_view text, std::size_t at) {
    const Json::parser_callback_t limit_depth = [&](int depth, Json::parse_event_t, Json&) {
      if (depth > kMaxJsonDepth) {
        fail("JSON value at offset " + std::to_string(at) + " nested deeper than " +
             std::to_string(kMaxJsonDepth) + " levels");
      }
      return true;
    };
    try {
      return Json::parse(text, limit_depth);
    } catch (const Json::exception& e) {
      fail("JSON value at offset " + std::to_string(at) + " does not parse: " + e.what());
    }
  }

  Tensor tensor(std::size_t at) {
    const std::uint8_t code = u8("tensor dtype");
    if (code > static_cast<std::uint8_t>(DType::complex128)) {
      fail("unknown tensor dtype " + std::to_string(code) + " at offset " + std::to_string(at));
    }
    const auto dtype = static_cast<DType>(code);
    const std::uint8_t ndim = u8("tensor rank");
    Tensor::Shape shape(ndim);
    // The element count and byte size, refused as soon as they would overflow: a frame can
    // never be that large.
    std::uint64_t nbytes = dtype_size(dtype);
    for (std::int64_t& d : shape) {
      d = static_cast<std::int64_t>(u64("tensor dimension"));
      if (d < 0) {
        fail("tensor at offset " + std::to_string(at) + " has a negative dimension " +
             std::to_string(d));
      }
      if (d != 0 && nbytes > std::numeric_limits<std::uint64_t>::max() / std::uint64_t(d)) {
        fail("tensor at offset " + std::to_string(at) + " has dimensions whose size overflows");
      }
      nbytes *= static_cast<std::uint64_t>(d);
    }
    const Frame& f = frame();
    if (nbytes != f.bytes.size()) {
      // describe() reads only the dtype and shape: no storage needed.
      fail("tensor " + Tensor(dtype, shape, nullptr, nullptr).describe() + " at offset " +
           std::to_string(at) + " needs " + std::to_string(nbytes) + " bytes, its frame has " +
           std::to_string(f.bytes.size()));
    }
    const auto address = reinterpret_cast<std::uintptr_t>(f.bytes.data());
    if (nbytes == 0 || address % dtype_size(dtype) != 0) {
      // A fresh tensor: an empty one gets valid (if unused) storage, a misaligned frame is
      // copied so that the elements can be read as their type.
      Tensor t(dtype, std::move(shape));
      if (nbytes != 0) std::memcpy(t.data(), f.bytes.data(), nbytes);
      return t;
    }
    // A received frame is ours alone: the tensor may write to it.
    auto* data = const_cast<std::byte*>(f.bytes.data());
    return Tensor(dtype, std::move(shape), f.owner, data);
  }

  std::span<const Frame> frames_;
  std::vector<bool> used_;
  std::string_view where_;
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<Frame> encode(const Record& record) {
  return Encoder().run<false>(record);
}

std::vector<Frame> encode(Record&& record) {
  return Encoder().run<true>(record);
}

Record decode(std::span<const Frame> frames, std::string_view where) {
  return Decoder(frames, where).run();
}

Record to_record(Tuple&& tuple, const std::vector<std::string>& names) {
  if (!names.empty() && names.size() != tuple.size()) {
    throw Error::invalid_argument(std::to_string(names.size()) + " names given for a tuple of " +
                                  std::to_string(tuple.size()) + " values");
  }
  return Record{names, std::move(tuple)};
}

Record to_record(DecodedSample&& sample) {
  // A single sample keeps its key; a collated batch already has "__key__", the list of keys.
  const bool add_key = !sample.key().empty() && sample.find("__key__") == nullptr;
  Record record;
  record.names.reserve(sample.fields().size() + 1);
  record.values.reserve(sample.fields().size() + 1);
  for (DecodedSample::Field& f : sample.fields()) {
    record.names.push_back(std::move(f.ext));
    record.values.push_back(std::move(f.value));
  }
  if (add_key) {
    record.names.emplace_back("__key__");
    record.values.emplace_back(sample.key());
  }
  return record;
}

void from_record(Record&& record, Tuple& out) {
  out = std::move(record.values);
}

void from_record(Record&& record, DecodedSample& out) {
  if (!record.names.empty() && record.names.size() != record.values.size()) {
    throw Error::invalid_argument("a record of " + std::to_string(record.values.size()) +
                                  " values has " + std::to_string(record.names.size()) + " names");
  }
  std::string key;
  for (std::size_t i = 0; i < record.names.size(); ++i) {
    if (record.names[i] != "__key__") continue;
    if (const auto* s = record.values[i].get_if<std::string>()) key = *s;
    break;
  }
  out = DecodedSample(std::move(key));
  out.fields().reserve(record.values.size());
  for (std::size_t i = 0; i < record.values.size(); ++i) {
    std::string name = record.names.empty() ? std::to_string(i) : std::move(record.names[i]);
    out.fields().push_back(DecodedSample::Field{std::move(name), std::move(record.values[i])});
  }
}

}  // namespace wds::wire
