#include "wds/tenbin.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "wds/error.hpp"

namespace wds {

namespace {

constexpr std::string_view kMagic = "~TenBin~";
constexpr std::size_t kChunkHead = 16;  // magic and length
constexpr std::size_t kAlign = 64;      // payloads are padded to a multiple of this
constexpr std::size_t kMaxNdim = 9;     // webdataset's writer's limit

struct Code {
  std::string_view code;
  DType dtype;
};
constexpr Code kCodes[] = {
    {"f2", DType::float16}, {"f4", DType::float32}, {"f8", DType::float64}, {"i1", DType::int8},
    {"i2", DType::int16},   {"i4", DType::int32},   {"i8", DType::int64},   {"u1", DType::uint8},
    {"u2", DType::uint16},  {"u4", DType::uint32},  {"u8", DType::uint64},
};

std::optional<DType> dtype_of_code(std::string_view code) {
  for (const Code& c : kCodes) {
    if (c.code == code) return c.dtype;
  }
  return std::nullopt;
}

std::optional<std::string_view> code_of(DType dtype) {
  for (const Code& c : kCodes) {
    if (c.dtype == dtype) return c.code;
  }
  return std::nullopt;
}

std::uint64_t load_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

void store_le64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i, v >>= 8) p[i] = static_cast<std::byte>(v & 0xff);
}

// An 8-byte ASCII field without its NUL padding, printable for messages.
std::string text_of(const std::byte* p) {
  std::string s;
  for (int i = 0; i < 8 && p[i] != std::byte{0}; ++i) {
    const auto c = static_cast<unsigned char>(p[i]);
    if (c >= 0x20 && c < 0x7f) {
      s += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      s += "\\x";
      s += kHex[c >> 4];
      s += kHex[c & 15];
    }
  }
  return s;
}

struct Array {
  DType dtype;
  Tensor::Shape shape;
  std::size_t offset;  // of the elements in the buffer
  std::size_t nbytes;
  std::string info;
};

class Reader {
 public:
  Reader(std::span<const std::byte> data, std::string_view url, std::string_view member)
      : data_(data), url_(url), member_(member) {}

  std::vector<Array> arrays() {
    std::vector<Array> out;
    while (pos_ < data_.size()) {
      const auto [header_at, header_size] = chunk();
      Array a = header(header_at, header_size);
      if (pos_ >= data_.size()) {
        fail("a header without its data (offset " + at(header_at - kChunkHead) + ")");
      }
      const auto [data_at, data_size] = chunk();
      if (data_size != a.nbytes) {
        fail("data is " + std::to_string(data_size) + " bytes at offset " +
             at(data_at - kChunkHead) + ", the header's shape " + shape_text(a) + " needs " +
             std::to_string(a.nbytes));
      }
      a.offset = data_at;
      out.push_back(std::move(a));
    }
    return out;
  }

 private:
  [[noreturn]] void fail(std::string cause) const {
    throw Error::corrupt_data(std::string(url_), std::string(member_), "tenbin: " + cause);
  }
  static std::string at(std::size_t offset) { return std::to_string(offset); }
  static std::string shape_text(const Array& a) {
    std::string s(to_string(a.dtype));
    s += '[';
    for (std::size_t i = 0; i < a.shape.size(); ++i) {
      s += (i ? ", " : "") + std::to_string(a.shape[i]);
    }
    return s + ']';
  }

  // The next chunk's payload (offset, size); pos_ moves past its padding.
  std::pair<std::size_t, std::size_t> chunk() {
    const std::size_t left = data_.size() - pos_;
    if (left < kChunkHead) {
      fail(std::to_string(left) + " bytes at offset " + at(pos_) + ", too few for a chunk");
    }
    if (std::memcmp(data_.data() + pos_, kMagic.data(), kMagic.size()) != 0) {
      fail("no tenbin magic at offset " + at(pos_));
    }
    const std::uint64_t n = load_le64(data_.data() + pos_ + 8);
    if (n > left - kChunkHead) {
      fail("chunk of " + std::to_string(static_cast<std::int64_t>(n)) + " bytes at offset " +
           at(pos_) + ", " + std::to_string(left - kChunkHead) + " left");
    }
    const std::size_t payload = pos_ + kChunkHead;
    const std::size_t padded = (n + kAlign - 1) / kAlign * kAlign;
    pos_ = padded > data_.size() - payload ? data_.size() : payload + padded;
    return {payload, static_cast<std::size_t>(n)};
  }

  Array header(std::size_t offset, std::size_t size) {
    const std::byte* h = data_.data() + offset;
    if (size < 24 || size % 8 != 0) {
      fail("header of " + std::to_string(size) + " bytes at offset " + at(offset - kChunkHead) +
           " (int64s: dtype, info, ndim, shape)");
    }
    const std::string code = text_of(h);
    const std::optional<DType> dtype = dtype_of_code(code);
    if (!dtype) {
      fail("unsupported tenbin dtype code '" + code + "' at offset " + at(offset - kChunkHead) +
           " (f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8)");
    }
    const std::uint64_t ndim = load_le64(h + 16);
    if (ndim > size / 8 - 3) {
      fail("header of " + std::to_string(size) + " bytes at offset " + at(offset - kChunkHead) +
           " for " + std::to_string(static_cast<std::int64_t>(ndim)) + " dimensions");
    }
    Array a{*dtype, {}, 0, dtype_size(*dtype), text_of(h + 8)};
    for (std::uint64_t i = 0; i < ndim; ++i) {
      const auto d = static_cast<std::int64_t>(load_le64(h + 24 + 8 * i));
      if (d < 0) {
        fail("negative dimension " + std::to_string(d) + " at offset " + at(offset - kChunkHead));
      }
      a.shape.push_back(d);
      // Checked against 2^63: a size that overflows is no size of data that is here.
      if (__builtin_mul_overflow(a.nbytes, static_cast<std::size_t>(d), &a.nbytes) ||
          a.nbytes > static_cast<std::size_t>(INT64_MAX)) {
        fail("the shape at offset " + at(offset - kChunkHead) + " overflows (2^63 bytes or more)");
      }
    }
    return a;
  }

  std::span<const std::byte> data_;
  std::string_view url_, member_;
  std::size_t pos_ = 0;
};

// Elements are little-endian: a big-endian host swaps each one.
void to_host_order(std::byte* p, std::size_t nbytes, std::size_t unit) {
  if constexpr (std::endian::native == std::endian::big) {
    for (std::size_t i = 0; i + unit <= nbytes; i += unit) {
      for (std::size_t a = i, b = i + unit - 1; a < b; ++a, --b) std::swap(p[a], p[b]);
    }
  } else {
    (void)p, (void)nbytes, (void)unit;
  }
}

Tensor copy_of(const Array& a, const std::byte* base) {
  Tensor t(a.dtype, a.shape);
  if (a.nbytes) {
    std::memcpy(t.data(), base + a.offset, a.nbytes);
    to_host_order(t.data(), a.nbytes, dtype_size(a.dtype));
  }
  return t;
}

void give_infos(std::vector<Array>& arrays, std::vector<std::string>* infos) {
  if (!infos) return;
  infos->clear();
  for (Array& a : arrays) infos->push_back(std::move(a.info));
}

}  // namespace

Tuple parse_tenbin(std::span<const std::byte> data, std::string_view url, std::string_view member,
                   std::vector<std::string>* infos) {
  std::vector<Array> arrays = Reader(data, url, member).arrays();
  Tuple out;
  out.reserve(arrays.size());
  for (const Array& a : arrays) out.emplace_back(copy_of(a, data.data()));
  give_infos(arrays, infos);
  return out;
}

Tuple parse_tenbin(Bytes&& data, std::string_view url, std::string_view member,
                   std::vector<std::string>* infos) {
  auto holder = std::make_shared<Bytes>(std::move(data));
  std::vector<Array> arrays = Reader(holder->span(), url, member).arrays();
  Tuple out;
  out.reserve(arrays.size());
  for (const Array& a : arrays) {
    std::byte* elements = holder->data() + a.offset;
    const bool aligned = reinterpret_cast<std::uintptr_t>(elements) % dtype_size(a.dtype) == 0;
    if (std::endian::native == std::endian::little && aligned && a.nbytes) {
      out.emplace_back(Tensor(a.dtype, a.shape, holder, elements));
    } else {
      out.emplace_back(copy_of(a, holder->data()));
    }
  }
  give_infos(arrays, infos);
  return out;
}

Bytes write_tenbin(std::span<const Tensor> tensors, std::span<const std::string> infos) {
  if (!infos.empty() && infos.size() != tensors.size()) {
    throw Error::invalid_argument("write_tenbin: " + std::to_string(tensors.size()) +
                                  " tensors but " + std::to_string(infos.size()) + " infos");
  }
  auto padded = [](std::size_t n) { return kChunkHead + (n + kAlign - 1) / kAlign * kAlign; };
  std::size_t total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string where = "write_tenbin: tensor " + std::to_string(i);
    if (!t.defined()) throw Error::invalid_argument(where + " is undefined");
    if (!code_of(t.dtype())) {
      throw Error::invalid_argument(where + " is " + t.describe() + ": tenbin has no dtype " +
                                    std::string(to_string(t.dtype())));
    }
    if (t.ndim() > kMaxNdim) {
      throw Error::invalid_argument(where + " has " + std::to_string(t.ndim()) +
                                    " dimensions, tenbin at most " + std::to_string(kMaxNdim));
    }
    if (!infos.empty()) {
      const std::string& info = infos[i];
      bool ascii = info.size() <= 8;
      for (char c : info) ascii = ascii && c > 0 && static_cast<unsigned char>(c) < 0x80;
      if (!ascii) {
        throw Error::invalid_argument(where + ": info '" + info +
                                      "' is not at most 8 ASCII characters");
      }
    }
    total += padded(8 * (3 + t.ndim())) + padded(t.nbytes());
  }
  Bytes out(total);
  if (total) std::memset(out.data(), 0, total);  // the padding
  std::byte* p = out.data();
  auto put_chunk_head = [&](std::size_t n) {
    std::memcpy(p, kMagic.data(), kMagic.size());
    store_le64(p + 8, n);
  };
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::size_t hsize = 8 * (3 + t.ndim());
    put_chunk_head(hsize);
    std::byte* h = p + kChunkHead;
    const std::string_view code = *code_of(t.dtype());
    std::memcpy(h, code.data(), code.size());
    if (!infos.empty()) std::memcpy(h + 8, infos[i].data(), infos[i].size());
    store_le64(h + 16, t.ndim());
    for (std::size_t d = 0; d < t.ndim(); ++d) {
      store_le64(h + 24 + 8 * d, static_cast<std::uint64_t>(t.shape()[d]));
    }
    p += padded(hsize);
    put_chunk_head(t.nbytes());
    if (t.nbytes()) {
      std::memcpy(p + kChunkHead, t.data(), t.nbytes());
      to_host_order(p + kChunkHead, t.nbytes(), dtype_size(t.dtype()));
    }
    p += padded(t.nbytes());
  }
  return out;
}

}  // namespace wds
