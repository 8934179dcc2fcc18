#include "wds/npy.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wds/error.hpp"

// The format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//
//   "\x93NUMPY" major minor  header_len (u16 LE for 1.0, u32 LE for 2.0 and 3.0)
//   header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//           padded with spaces and ending in '\n'
//   data:   prod(shape) elements, C or Fortran order, in the descr's byte order

namespace wds {

namespace {

static_assert(sizeof(std::size_t) >= sizeof(std::int64_t), "sizes are checked against 2^63");

constexpr std::string_view kMagic("\x93NUMPY", 6);
// np.save aligns the data to this, and reserves room for a longer first dimension
// (numpy/lib/format.py: ARRAY_ALIGN, GROWTH_AXIS_MAX_DIGITS).
constexpr std::size_t kArrayAlign = 64;
constexpr std::size_t kGrowthAxisMaxDigits = 21;
// How much of a bad header an error message quotes.
constexpr std::size_t kExcerpt = 120;

[[noreturn]] void fail(std::string_view url, std::string_view member, std::string cause) {
  throw Error::corrupt_data(std::string(url), std::string(member), std::move(cause));
}

// Printable ASCII as is, everything else as \xNN, cut to kExcerpt characters.
std::string excerpt(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, kExcerpt)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  if (text.size() > kExcerpt) out += "...";
  return out;
}

bool is_complex(DType d) {
  return d == DType::complex64 || d == DType::complex128;
}

// Bytes swapped as one unit: the element, or each half of a complex element.
std::size_t swap_unit(DType d) {
  return is_complex(d) ? dtype_size(d) / 2 : dtype_size(d);
}

// The alignment the element type needs in memory (alignof its C++ type).
std::size_t element_alignment(DType d) {
  return swap_unit(d);
}

std::string shape_text(DType dtype, const Tensor::Shape& shape) {
  // describe() reads only dtype and shape: no storage needed.
  return Tensor(dtype, shape, nullptr, nullptr).describe();
}

struct Header {
  DType dtype = DType::uint8;
  bool swap = false;     // the data's byte order is not the host's
  bool fortran = false;  // fortran_order True with two or more dimensions longer than 1
  Tensor::Shape shape;
  std::size_t nbytes = 0;
};

// The dtype of a descr such as '<f4', '|b1', '>c16', 'u2'; sets swap. Throws for others.
DType parse_descr(std::string_view descr, bool& swap, std::string_view url,
                  std::string_view member) {
  std::string_view rest = descr;
  char order = '=';
  if (!rest.empty() && (rest[0] == '<' || rest[0] == '>' || rest[0] == '|' || rest[0] == '=')) {
    order = rest[0];
    rest.remove_prefix(1);
  }
  if (!rest.empty() && rest[0] == 'O') fail(url, member, "object arrays are not supported");
  struct Code {
    std::string_view code;
    DType dtype;
  };
  static constexpr Code kCodes[] = {
      {"b1", DType::boolean}, {"?", DType::boolean},    {"i1", DType::int8},
      {"i2", DType::int16},   {"i4", DType::int32},     {"i8", DType::int64},
      {"u1", DType::uint8},   {"u2", DType::uint16},    {"u4", DType::uint32},
      {"u8", DType::uint64},  {"f2", DType::float16},   {"f4", DType::float32},
      {"f8", DType::float64}, {"c8", DType::complex64}, {"c16", DType::complex128},
  };
  for (const Code& c : kCodes) {
    if (rest != c.code) continue;
    const bool little = std::endian::native == std::endian::little;
    swap = dtype_size(c.dtype) > 1 && ((order == '<' && !little) || (order == '>' && little));
    return c.dtype;
  }
  fail(url, member, "unsupported dtype '" + excerpt(descr) + "' (only numeric dtypes)");
}

// A parser for exactly the dict literals .npy headers hold: string keys, a string, a bool and a
// tuple of non-negative ints as values. Keys may come in any order and use either quote; a
// trailing comma and any whitespace are fine, as is Python 2's 'L' suffix on ints.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view url, std::string_view member)
      : text_(text), url_(url), member_(member) {}

  Header parse() {
    Header h;
    bool have_descr = false, have_order = false, have_shape = false;
    std::string descr;
    bool fortran = false;
    expect('{', "at the start");
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::size_t key_pos = pos_;
      const std::string key = parse_string("a key");
      expect(':', "after '" + excerpt(key) + "'");
      bool* seen = nullptr;
      if (key == "descr") {
        seen = &have_descr;
        skip_space();
        if (peek() == '[') {
          fail(url_, member_, "unsupported dtype: structured arrays (only numeric dtypes)");
        }
        descr = parse_string("the 'descr' value (a string)");
      } else if (key == "fortran_order") {
        seen = &have_order;
        fortran = parse_bool();
      } else if (key == "shape") {
        seen = &have_shape;
        h.shape = parse_shape();
      } else {
        pos_ = key_pos;
        bad("unexpected key '" + excerpt(key) + "'");
      }
      if (*seen) {
        pos_ = key_pos;
        bad("duplicate key '" + key + "'");
      }
      *seen = true;
      skip_space();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != '}') {
        bad("expected ',' or '}'");
      }
    }
    ++pos_;  // '}'
    skip_space();
    if (pos_ != text_.size()) bad("unexpected text after the dict");
    if (!have_descr) bad("missing key 'descr'");
    if (!have_order) bad("missing key 'fortran_order'");
    if (!have_shape) bad("missing key 'shape'");

    h.dtype = parse_descr(descr, h.swap, url_, member_);
    // Fortran and C order are the same layout unless two dimensions are longer than 1.
    h.fortran = fortran && std::count_if(h.shape.begin(), h.shape.end(),
                                         [](std::int64_t d) { return d > 1; }) > 1;
    // Like numpy: the product of the non-zero dimensions, in bytes, must fit in a signed 64-bit
    // size, also when another dimension is 0.
    std::uint64_t bytes = dtype_size(h.dtype);
    bool zero = false;
    for (std::int64_t d : h.shape) {
      if (d == 0) {
        zero = true;
        continue;
      }
      if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes) ||
          bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail(url_, member_,
             "bad .npy header: shape " + shape_text(h.dtype, h.shape) +
                 " overflows (2^63 bytes or more)");
      }
    }
    h.nbytes = zero ? 0 : static_cast<std::size_t>(bytes);
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(url_, member_,
         "bad .npy header: " + what + " at column " + std::to_string(pos_ + 1) + " of \"" +
             excerpt(text_) + "\"");
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r' || text_[pos_] == '\f' || text_[pos_] == '\v')) {
      ++pos_;
    }
  }

  void expect(char c, const std::string& where) {
    skip_space();
    if (peek() != c || pos_ >= text_.size()) bad(std::string("expected '") + c + "' " + where);
    ++pos_;
  }

  // A quoted string: '...' or "...", a backslash escaping the next character.
  std::string parse_string(const std::string& what) {
    skip_space();
    const char quote = peek();
    if (pos_ >= text_.size() || (quote != '\'' && quote != '"')) bad("expected " + what);
    const std::size_t start = pos_++;
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') ++pos_;
      if (pos_ < text_.size()) out += text_[pos_++];
    }
    if (pos_ >= text_.size()) {
      pos_ = start;
      bad("unterminated string");
    }
    ++pos_;
    return out;
  }

  bool parse_bool() {
    skip_space();
    const std::string_view rest = text_.substr(pos_);
    if (rest.starts_with("True")) {
      pos_ += 4;
      return true;
    }
    if (rest.starts_with("False")) {
      pos_ += 5;
      return false;
    }
    bad("expected True or False for 'fortran_order'");
  }

  // (), (3,), (2, 3), (2, 3,); also (3) (which Python would read as an int).
  Tensor::Shape parse_shape() {
    Tensor::Shape shape;
    expect('(', "to open the 'shape' tuple");
    skip_space();
    if (peek() == ')') {
      ++pos_;
      return shape;
    }
    while (true) {
      shape.push_back(parse_dim());
      skip_space();
      if (peek() == ')') {
        ++pos_;
        return shape;
      }
      if (peek() != ',') bad("expected ',' or ')' in 'shape'");
      ++pos_;
      skip_space();
      if (peek() == ')') {
        ++pos_;
        return shape;
      }
    }
  }

  std::int64_t parse_dim() {
    skip_space();
    const std::size_t start = pos_;
    if (peek() == '-') bad("negative dimension in 'shape'");
    const char* first = text_.data() + pos_;
    const char* last = text_.data() + text_.size();
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(first, last, value);
    if (ec == std::errc::result_out_of_range) {
      bad("dimension " + excerpt(text_.substr(start, static_cast<std::size_t>(end - first))) +
          " in 'shape' is too large");
    }
    if (ec != std::errc() || end == first) bad("expected a dimension (an int) in 'shape'");
    pos_ += static_cast<std::size_t>(end - first);
    if (peek() == 'L' || peek() == 'l') ++pos_;  // Python 2's long literal
    return value;
  }

  std::string_view text_;
  std::string_view url_;
  std::string_view member_;
  std::size_t pos_ = 0;
};

std::uint32_t read_le(const std::byte* p, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}

// Parses the preamble and header; sets `offset` to where the data starts (data.size() - offset
// == the header's nbytes, checked).
Header parse_header(std::span<const std::byte> data, std::size_t& offset, std::string_view url,
                    std::string_view member) {
  const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  const std::size_t n = std::min(text.size(), kMagic.size());
  if (text.substr(0, n) != kMagic.substr(0, n)) fail(url, member, "not a .npy file (bad magic)");
  if (text.size() < kMagic.size() + 2) {
    fail(url, member,
         "bad .npy header: the file ends after " + std::to_string(text.size()) +
             " bytes, inside the preamble");
  }
  const int major = std::to_integer<int>(data[6]);
  const int minor = std::to_integer<int>(data[7]);
  if (minor != 0 || major < 1 || major > 3) {
    fail(url, member,
         "unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor));
  }
  const std::size_t len_size = major == 1 ? 2 : 4;
  const std::size_t start = kMagic.size() + 2 + len_size;
  if (data.size() < start) {
    fail(url, member,
         "bad .npy header: the file ends after " + std::to_string(text.size()) +
             " bytes, inside the preamble");
  }
  const std::size_t header_len = read_le(data.data() + 8, len_size);
  if (header_len > data.size() - start) {
    fail(url, member,
         "bad .npy header: the header is " + std::to_string(header_len) +
             " bytes but the file has only " + std::to_string(data.size() - start) +
             " after the preamble");
  }
  Header h = HeaderParser(text.substr(start, header_len), url, member).parse();
  offset = start + header_len;
  const std::size_t have = data.size() - offset;
  if (have != h.nbytes) {
    fail(url, member,
         "data is " + std::to_string(have) + " bytes, the header's shape " +
             shape_text(h.dtype, h.shape) + " needs " + std::to_string(h.nbytes));
  }
  return h;
}

// Copies the elements of a Fortran-order array into C order, for elements of N bytes.
template <std::size_t N>
void fortran_to_c(const std::byte* src, std::byte* dst, const Tensor::Shape& shape) {
  const std::size_t rank = shape.size();
  std::vector<std::size_t> stride(rank), index(rank, 0);  // Fortran strides, in elements
  std::size_t s = 1, total = 1;
  for (std::size_t i = 0; i < rank; ++i) {
    stride[i] = s;
    s *= static_cast<std::size_t>(shape[i]);
    total *= static_cast<std::size_t>(shape[i]);
  }
  if (total == 0) return;
  // The last dimension, contiguous in the output, is the inner loop.
  const std::size_t inner = static_cast<std::size_t>(shape[rank - 1]);
  const std::size_t inner_step = stride[rank - 1] * N;
  std::size_t offset = 0;  // in elements, of index[0..rank-2] in the source
  for (std::size_t done = 0; done < total; done += inner) {
    const std::byte* p = src + offset * N;
    for (std::size_t i = 0; i < inner; ++i, p += inner_step, dst += N) std::memcpy(dst, p, N);
    for (std::size_t j = rank - 1; j-- > 0;) {
      if (++index[j] < static_cast<std::size_t>(shape[j])) {
        offset += stride[j];
        break;
      }
      offset -= stride[j] * (index[j] - 1);
      index[j] = 0;
    }
  }
}

void reverse_units(std::byte* p, std::size_t count, std::size_t unit) {
  switch (unit) {
    case 2:
      for (std::size_t i = 0; i < count; ++i, p += 2) {
        std::uint16_t v;
        std::memcpy(&v, p, 2);
        v = __builtin_bswap16(v);
        std::memcpy(p, &v, 2);
      }
      return;
    case 4:
      for (std::size_t i = 0; i < count; ++i, p += 4) {
        std::uint32_t v;
        std::memcpy(&v, p, 4);
        v = __builtin_bswap32(v);
        std::memcpy(p, &v, 4);
      }
      return;
    case 8:
      for (std::size_t i = 0; i < count; ++i, p += 8) {
        std::uint64_t v;
        std::memcpy(&v, p, 8);
        v = __builtin_bswap64(v);
        std::memcpy(p, &v, 8);
      }
      return;
    default:
      for (std::size_t i = 0; i < count; ++i, p += unit) std::reverse(p, p + unit);
  }
}

// Any byte other than 0 becomes 1, so every element is a valid C++ bool.
void normalise_bools(std::byte* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (std::to_integer<unsigned>(p[i]) > 1) p[i] = std::byte{1};
  }
}

// A fresh C-order, host-order tensor with the elements at `src`.
Tensor convert(const Header& h, const std::byte* src) {
  Tensor out(h.dtype, h.shape);
  if (h.nbytes == 0) return out;
  if (h.fortran) {
    switch (dtype_size(h.dtype)) {
      case 1:
        fortran_to_c<1>(src, out.data(), h.shape);
        break;
      case 2:
        fortran_to_c<2>(src, out.data(), h.shape);
        break;
      case 4:
        fortran_to_c<4>(src, out.data(), h.shape);
        break;
      case 8:
        fortran_to_c<8>(src, out.data(), h.shape);
        break;
      default:
        fortran_to_c<16>(src, out.data(), h.shape);
        break;
    }
  } else {
    std::memcpy(out.data(), src, h.nbytes);
  }
  if (h.swap) {
    const std::size_t unit = swap_unit(h.dtype);
    reverse_units(out.data(), h.nbytes / unit, unit);
  }
  if (h.dtype == DType::boolean) normalise_bools(out.data(), h.nbytes);
  return out;
}

std::string_view descr_code(DType d) {
  switch (d) {
    case DType::boolean:
      return "b1";
    case DType::int8:
      return "i1";
    case DType::int16:
      return "i2";
    case DType::int32:
      return "i4";
    case DType::int64:
      return "i8";
    case DType::uint8:
      return "u1";
    case DType::uint16:
      return "u2";
    case DType::uint32:
      return "u4";
    case DType::uint64:
      return "u8";
    case DType::float16:
      return "f2";
    case DType::float32:
      return "f4";
    case DType::float64:
      return "f8";
    case DType::complex64:
      return "c8";
    case DType::complex128:
      return "c16";
  }
  return "u1";
}

}  // namespace

Tensor parse_npy(Bytes&& data, std::string_view url, std::string_view member) {
  Bytes owned = std::move(data);
  std::size_t offset = 0;
  const Header h = parse_header(owned.span(), offset, url, member);
  const std::byte* src = owned.data() + offset;
  const bool aligned = reinterpret_cast<std::uintptr_t>(src) % element_alignment(h.dtype) == 0;
  if (h.swap || h.fortran || !aligned || h.nbytes == 0) return convert(h, src);
  auto holder = std::make_shared<Bytes>(std::move(owned));
  std::byte* elements = holder->data() + offset;
  if (h.dtype == DType::boolean) normalise_bools(elements, h.nbytes);
  return Tensor(h.dtype, h.shape, std::move(holder), elements);
}

Tensor parse_npy(std::span<const std::byte> data, std::string_view url, std::string_view member) {
  std::size_t offset = 0;
  const Header h = parse_header(data, offset, url, member);
  return convert(h, data.data() + offset);
}

Bytes write_npy(const Tensor& t) {
  if (!t.defined()) {
    throw Error::invalid_argument("write_npy: the tensor is undefined");
  }
  const DType d = t.dtype();
  std::string header = "{'descr': '";
  header += dtype_size(d) == 1 ? '|' : '<';
  header += descr_code(d);
  header += "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < t.ndim(); ++i) {
    if (i) header += ", ";
    header += std::to_string(t.shape()[i]);
  }
  if (t.ndim() == 1) header += ',';
  header += "), }";
  // As np.save: room for the first dimension to grow to 21 digits, then 1 to 64 spaces and a
  // '\n' so that the data starts at a multiple of 64.
  if (t.ndim() > 0) {
    const std::size_t digits = std::to_string(t.shape()[0]).size();
    if (digits < kGrowthAxisMaxDigits) header.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  const std::size_t hlen = header.size() + 1;
  std::size_t preamble = kMagic.size() + 2 + 2;
  std::size_t padding = kArrayAlign - (preamble + hlen) % kArrayAlign;
  int major = 1;
  if (hlen + padding > 0xffff) {
    major = 2;
    preamble = kMagic.size() + 2 + 4;
    padding = kArrayAlign - (preamble + hlen) % kArrayAlign;
  }
  header.append(padding, ' ');
  header += '\n';

  const std::size_t nbytes = t.nbytes();
  Bytes out(preamble + header.size() + nbytes);
  std::byte* p = out.data();
  std::memcpy(p, kMagic.data(), kMagic.size());
  p += kMagic.size();
  *p++ = static_cast<std::byte>(major);
  *p++ = std::byte{0};
  std::uint32_t len = static_cast<std::uint32_t>(header.size());
  for (std::size_t i = 0; i < preamble - kMagic.size() - 2; ++i, len >>= 8) {
    *p++ = static_cast<std::byte>(len & 0xff);
  }
  std::memcpy(p, header.data(), header.size());
  p += header.size();
  if (nbytes) {
    std::memcpy(p, t.data(), nbytes);
    if constexpr (std::endian::native == std::endian::big) {
      const std::size_t unit = swap_unit(d);
      if (unit > 1) reverse_units(p, nbytes / unit, unit);
    }
  }
  return out;
}

}  // namespace wds
