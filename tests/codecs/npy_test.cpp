// Tests of wds/npy.hpp: parsing hand-built .npy files (every dtype, every byte order, Fortran
// order, header spellings, versions), zero-copy adoption of the buffer, write_npy's layout and
// round trips, malformed input, and interop with real NumPy (/usr/bin/python3 with numpy).
#include "wds/npy.hpp"

#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using test::read_file;

using test::TempDir;

struct DTypeCase {
  DType dtype;
  std::string code;  // the descr without its byte-order character
};

const std::vector<DTypeCase> kDTypes = {
    {DType::boolean, "b1"},   {DType::int8, "i1"},        {DType::int16, "i2"},
    {DType::int32, "i4"},     {DType::int64, "i8"},       {DType::uint8, "u1"},
    {DType::uint16, "u2"},    {DType::uint32, "u4"},      {DType::uint64, "u8"},
    {DType::float16, "f2"},   {DType::float32, "f4"},     {DType::float64, "f8"},
    {DType::complex64, "c8"}, {DType::complex128, "c16"},
};

bool is_complex(DType d) {
  return d == DType::complex64 || d == DType::complex128;
}

std::string as_string(const Bytes& b) {
  return std::string(b.str());
}

std::string le_bytes(std::uint64_t v, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i, v >>= 8) out += static_cast<char>(v & 0xff);
  return out;
}

// A .npy file built by hand: preamble of version major.minor, `dict` as the header, padded with
// spaces and a '\n' to a multiple of 64 when `pad`, then `data`.
std::string npy_file(const std::string& dict, const std::string& data, int major = 1,
                     bool pad = true, int minor = 0) {
  const std::size_t len_size = major == 1 ? 2 : 4;
  std::string header = dict;
  if (pad) {
    const std::size_t used = 8 + len_size + header.size() + 1;
    header.append((64 - used % 64) % 64, ' ');
    header += '\n';
  }
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += static_cast<char>(minor);
  out += le_bytes(header.size(), len_size);
  return out + header + data;
}

std::string shape_tuple(const Tensor::Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string dict_for(const std::string& descr, const Tensor::Shape& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape_tuple(shape) + ", }";
}

std::size_t numel(const Tensor::Shape& shape) {
  std::size_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

// Distinct bytes for every element and every byte of it (bools 0/1), host (little-endian) order.
std::string pattern(DType d, std::size_t n) {
  const std::size_t size = dtype_size(d);
  std::string out;
  for (std::size_t k = 0; k < n; ++k) {
    for (std::size_t b = 0; b < size; ++b) {
      out += d == DType::boolean ? static_cast<char>(k % 2)
                                 : static_cast<char>((k * 37 + b * 11 + 3) & 0xff);
    }
  }
  return out;
}

// The elements in the other byte order: each element reversed, each half of a complex one.
std::string swapped(DType d, std::string bytes) {
  const std::size_t unit = is_complex(d) ? dtype_size(d) / 2 : dtype_size(d);
  for (std::size_t i = 0; i + unit <= bytes.size(); i += unit) {
    std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(i),
                 bytes.begin() + static_cast<std::ptrdiff_t>(i + unit));
  }
  return bytes;
}

// C-order elements laid out in Fortran order (element (i0, i1, ...) at i0 + n0 * (i1 + ...)).
std::string to_fortran(const std::string& c, const Tensor::Shape& shape, std::size_t size) {
  std::string f(c.size(), '\0');
  const std::size_t n = numel(shape);
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t rest = k, offset = 0, stride = 1;
    std::vector<std::size_t> index(shape.size());
    for (std::size_t i = shape.size(); i-- > 0;) {
      index[i] = rest % static_cast<std::size_t>(shape[i]);
      rest /= static_cast<std::size_t>(shape[i]);
    }
    for (std::size_t i = 0; i < shape.size(); ++i) {
      offset += index[i] * stride;
      stride *= static_cast<std::size_t>(shape[i]);
    }
    std::memcpy(f.data() + offset * size, c.data() + k * size, size);
  }
  return f;
}

Tensor tensor_of(DType d, const Tensor::Shape& shape, const std::string& bytes) {
  Tensor t(d, shape);
  EXPECT_EQ(t.nbytes(), bytes.size());
  if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

// IEEE half bits of a float that a half represents exactly (a normal number or zero).
std::uint16_t half_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  const auto sign = static_cast<std::uint16_t>((b >> 16) & 0x8000);
  if ((b & 0x7fffffff) == 0) return sign;
  const int exponent = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
  const std::uint32_t mantissa = b & 0x7fffff;
  EXPECT_TRUE(exponent > 0 && exponent < 31 && (mantissa & 0x1fff) == 0) << f;
  return static_cast<std::uint16_t>(sign | (exponent << 10) | (mantissa >> 13));
}

template <class T>
void put(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// The values the NumPy scripts below compute (VALUES in kPythonCommon), element k in C order.
Tensor expected_values(DType d, const Tensor::Shape& shape) {
  Tensor t(d, shape);
  const std::size_t size = dtype_size(d);
  for (std::size_t i = 0; i < t.numel(); ++i) {
    std::byte* p = t.data() + i * size;
    const auto k = static_cast<std::int64_t>(i);
    const std::int64_t s = k - 12;
    switch (d) {
      case DType::boolean:
        put<std::uint8_t>(p, k % 3 == 0);
        break;
      case DType::int8:
        put<std::int8_t>(p, static_cast<std::int8_t>(s));
        break;
      case DType::int16:
        put<std::int16_t>(p, static_cast<std::int16_t>(s * 1000));
        break;
      case DType::int32:
        put<std::int32_t>(p, static_cast<std::int32_t>(s * 100000007));
        break;
      case DType::int64:
        put<std::int64_t>(p, s * 1000000000007);
        break;
      case DType::uint8:
        put<std::uint8_t>(p, static_cast<std::uint8_t>(k * 10));
        break;
      case DType::uint16:
        put<std::uint16_t>(p, static_cast<std::uint16_t>(k * 2000));
        break;
      case DType::uint32:
        put<std::uint32_t>(p, static_cast<std::uint32_t>(k * 100000007));
        break;
      case DType::uint64:
        put<std::uint64_t>(p, static_cast<std::uint64_t>(k * 1000000000007));
        break;
      case DType::float16:
        put<std::uint16_t>(p, half_bits(static_cast<float>(s) * 0.5f));
        break;
      case DType::float32:
        put<float>(p, static_cast<float>(s / 8.0 + 4096));
        break;
      case DType::float64:
        put<double>(p, s / 1024.0 + 1e6);
        break;
      case DType::complex64:
        put<float>(p, static_cast<float>(s / 8.0 + 4096));
        put<float>(p + 4, static_cast<float>(2.5 * k - 7));
        break;
      case DType::complex128:
        put<double>(p, s / 1024.0 + 1e6);
        put<double>(p + 8, 2.5 * k - 7);
        break;
    }
  }
  return t;
}

constexpr char kUrl[] = "s3://bucket/shard-000007.tar";
constexpr char kMember[] = "sample42.npy";

// Both overloads reject `file` with corrupt_data naming the url and member; returns the cause.
std::string corrupt_cause(const std::string& file) {
  std::string causes[2];
  for (int overload = 0; overload < 2; ++overload) {
    try {
      if (overload == 0) {
        parse_npy(Bytes::copy_of(file), kUrl, kMember);
      } else {
        parse_npy(std::as_bytes(std::span(file)), kUrl, kMember);
      }
      ADD_FAILURE() << "no error for overload " << overload;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt_data) << e.what();
      EXPECT_EQ(e.url(), kUrl);
      EXPECT_EQ(e.member(), kMember);
      EXPECT_NE(std::string(e.what()).find(kUrl), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(kMember), std::string::npos) << e.what();
      causes[overload] = e.cause();
    }
  }
  EXPECT_EQ(causes[0], causes[1]);
  return causes[0];
}

bool inside(const std::byte* p, const std::byte* begin, std::size_t size) {
  return std::less_equal<>()(begin, p) && std::less<>()(p, begin + size);
}

// ---------------------------------------------------------------------------------------------
// Parsing hand-built files

TEST(NpyParse, EveryDTypeInEveryByteOrder) {
  const Tensor::Shape shape{2, 3};
  for (const DTypeCase& c : kDTypes) {
    const std::string le = pattern(c.dtype, 6);
    const Tensor want = tensor_of(c.dtype, shape, le);
    for (char order : {'<', '>', '|', '='}) {
      const std::string descr = order + c.code;
      const std::string data = order == '>' ? swapped(c.dtype, le) : le;
      const std::string file = npy_file(dict_for(descr, shape), data);
      const Tensor got = parse_npy(Bytes::copy_of(file));
      EXPECT_EQ(got.dtype(), c.dtype) << descr;
      EXPECT_EQ(got.shape(), shape) << descr;
      EXPECT_TRUE(got == want) << descr;
      EXPECT_TRUE(parse_npy(std::as_bytes(std::span(file))) == want) << descr;
    }
  }
}

TEST(NpyParse, BigEndianValues) {
  {
    const Tensor t = parse_npy(Bytes::copy_of(
        npy_file(dict_for(">i4", {2}), std::string("\x01\x02\x03\x04\xff\xff\xff\xfe", 8))));
    ASSERT_EQ(t.dtype(), DType::int32);
    EXPECT_EQ(t.values<std::int32_t>()[0], 0x01020304);
    EXPECT_EQ(t.values<std::int32_t>()[1], -2);
  }
  {
    const Tensor t = parse_npy(Bytes::copy_of(
        npy_file(dict_for(">f8", {}), std::string("\x3f\xf8\x00\x00\x00\x00\x00\x00", 8))));
    ASSERT_EQ(t.ndim(), 0u);
    EXPECT_EQ(t.values<double>()[0], 1.5);
  }
  {
    // complex64 (1 - 2j): each half swapped on its own.
    const Tensor t = parse_npy(Bytes::copy_of(
        npy_file(dict_for(">c8", {1}), std::string("\x3f\x80\x00\x00\xc0\x00\x00\x00", 8))));
    ASSERT_EQ(t.dtype(), DType::complex64);
    float parts[2];
    std::memcpy(parts, t.data(), 8);
    EXPECT_EQ(parts[0], 1.0f);
    EXPECT_EQ(parts[1], -2.0f);
  }
  {
    const Tensor t = parse_npy(
        Bytes::copy_of(npy_file(dict_for(">f2", {2}), std::string("\x3c\x00\xc0\x00", 4))));
    ASSERT_EQ(t.dtype(), DType::float16);
    std::uint16_t h[2];
    std::memcpy(h, t.data(), 4);
    EXPECT_EQ(h[0], 0x3c00);  // 1.0
    EXPECT_EQ(h[1], 0xc000);  // -2.0
    EXPECT_EQ(half_bits(1.0f), 0x3c00);
    EXPECT_EQ(half_bits(-2.0f), 0xc000);
  }
}

TEST(NpyParse, Fortran2x3x4ComesOutInCOrder) {
  // value(i, j, k) = 100 i + 10 j + k, stored at i + 2 j + 6 k.
  std::vector<std::int16_t> fortran(24);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) {
        fortran[static_cast<std::size_t>(i + 2 * j + 6 * k)] =
            static_cast<std::int16_t>(100 * i + 10 * j + k);
      }
    }
  }
  std::string data(reinterpret_cast<const char*>(fortran.data()), 48);
  for (const std::string descr : {"<i2", ">i2"}) {
    const std::string bytes = descr[0] == '>' ? swapped(DType::int16, data) : data;
    const Tensor t = parse_npy(Bytes::copy_of(npy_file(dict_for(descr, {2, 3, 4}, true), bytes)));
    ASSERT_EQ(t.shape(), (Tensor::Shape{2, 3, 4}));
    const std::span<const std::int16_t> v = t.values<std::int16_t>();
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 3; ++j) {
        for (int k = 0; k < 4; ++k) {
          EXPECT_EQ(v[static_cast<std::size_t>(i * 12 + j * 4 + k)], 100 * i + 10 * j + k)
              << descr << " at " << i << "," << j << "," << k;
        }
      }
    }
    // Views of the result index in C order.
    EXPECT_EQ(t[1][2].values<std::int16_t>()[3], 123);
  }
}

TEST(NpyParse, FortranOrderEveryDTypeAndRank) {
  const std::vector<Tensor::Shape> shapes = {
      {2, 3, 4}, {3, 1, 2, 2}, {2, 2, 1, 3, 2}, {5, 4}, {4, 1}, {1, 6}, {7}, {}, {2, 0, 3}};
  for (const DTypeCase& c : kDTypes) {
    for (const Tensor::Shape& shape : shapes) {
      const std::string le = pattern(c.dtype, numel(shape));
      const Tensor want = tensor_of(c.dtype, shape, le);
      const std::string f = to_fortran(le, shape, dtype_size(c.dtype));
      for (char order : {'<', '>'}) {
        const std::string descr = (dtype_size(c.dtype) == 1 ? '|' : order) + c.code;
        const std::string file =
            npy_file(dict_for(descr, shape, true), order == '>' ? swapped(c.dtype, f) : f);
        const Tensor got = parse_npy(Bytes::copy_of(file));
        EXPECT_TRUE(got == want) << descr << " " << want.describe();
        EXPECT_TRUE(parse_npy(std::as_bytes(std::span(file))) == want) << descr;
      }
    }
  }
}

TEST(NpyParse, HeaderSpellings) {
  const std::string data = pattern(DType::uint16, 6);
  const Tensor want = tensor_of(DType::uint16, {2, 3}, data);
  const std::vector<std::string> dicts = {
      "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }",
      "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3)}",
      "{\"shape\": (2, 3), \"descr\": \"<u2\", \"fortran_order\": False}",
      "{'fortran_order':False,'shape':(2,3,),'descr':'<u2',}",
      "  {\t'descr' :\n'<u2' ,\r\n 'fortran_order' : False ,'shape' : ( 2 , 3 ) }  \n",
      "{'descr': '<u2', 'fortran_order': False, 'shape': (2L, 3L), }",  // Python 2
      "{'descr': 'u2', 'fortran_order': False, 'shape': (2, 3), }",     // no byte order: native
      "{'descr': '<\\u2', 'fortran_order': False, 'shape': (2, 3), }",  // an escaped character
  };
  for (const std::string& dict : dicts) {
    for (bool pad : {true, false}) {
      const std::string file = npy_file(dict, data, 1, pad);
      EXPECT_TRUE(parse_npy(Bytes::copy_of(file)) == want) << dict;
    }
  }
  // Python would read (6) as an int; it is taken as a 1-d shape.
  EXPECT_EQ(parse_npy(Bytes::copy_of(
                          npy_file("{'descr': '<u2', 'fortran_order': False, 'shape': (6)}", data)))
                .shape(),
            Tensor::Shape{6});
  // '?' is numpy's character code for bool.
  EXPECT_EQ(
      parse_npy(Bytes::copy_of(npy_file(dict_for("|?", {2}), std::string("\x01\x00", 2)))).dtype(),
      DType::boolean);
}

TEST(NpyParse, Versions2And3) {
  const std::string data = pattern(DType::float64, 4);
  const Tensor want = tensor_of(DType::float64, {4}, data);
  for (int major : {1, 2, 3}) {
    const std::string file = npy_file(dict_for("<f8", {4}), data, major);
    EXPECT_EQ(static_cast<int>(file[6]), major);
    EXPECT_TRUE(parse_npy(Bytes::copy_of(file)) == want) << major;
  }
}

TEST(NpyParse, RankZeroAndEmptyArrays) {
  const Tensor scalar = parse_npy(Bytes::copy_of(npy_file(dict_for("<i8", {}), le_bytes(42, 8))));
  EXPECT_TRUE(scalar.defined());
  EXPECT_EQ(scalar.ndim(), 0u);
  EXPECT_EQ(scalar.values<std::int64_t>()[0], 42);

  const Tensor empty = parse_npy(Bytes::copy_of(npy_file(dict_for("<f4", {3, 0, 2}), "")));
  EXPECT_TRUE(empty.defined());
  EXPECT_EQ(empty.shape(), (Tensor::Shape{3, 0, 2}));
  EXPECT_EQ(empty.numel(), 0u);
  EXPECT_NE(empty.data(), nullptr);
}

TEST(NpyParse, BoolsAreNormalisedToZeroOrOne) {
  const std::string file = npy_file(dict_for("|b1", {4}), std::string("\x00\x01\x02\xff", 4));
  const std::string want("\x00\x01\x01\x01", 4);
  const Tensor adopted = parse_npy(Bytes::copy_of(file));
  const Tensor copied = parse_npy(std::as_bytes(std::span(file)));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(adopted.data()), 4), want);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(copied.data()), 4), want);
  EXPECT_TRUE(adopted.values<bool>()[3]);
}

// ---------------------------------------------------------------------------------------------
// Zero copy

TEST(NpyZeroCopy, AdoptsTheBufferForNativeCOrder) {
  for (const DTypeCase& c : kDTypes) {
    for (char order : {'<', '|', '='}) {
      const std::string le = pattern(c.dtype, 24);
      Bytes file = Bytes::copy_of(npy_file(dict_for(order + c.code, {2, 3, 4}), le));
      const std::byte* begin = file.data();
      const std::size_t size = file.size();
      const Tensor t = parse_npy(std::move(file));
      EXPECT_TRUE(file.empty());
      EXPECT_TRUE(inside(t.data(), begin, size)) << order << c.code;
      EXPECT_EQ(t.data(), begin + (size - le.size()));
      EXPECT_TRUE(t == tensor_of(c.dtype, {2, 3, 4}, le));
      // The storage keeps the buffer alive after the tensor is copied around and views taken.
      Tensor row;
      {
        const Tensor copy = t;
        row = copy[1];
      }
      EXPECT_EQ(row.data(), t.data() + 12 * dtype_size(c.dtype));
      EXPECT_NE(t.storage(), nullptr);
    }
  }
  // A single-byte type in '>' order needs no swap: adopted too.
  Bytes file = Bytes::copy_of(npy_file(dict_for(">u1", {5}), "abcde"));
  const std::byte* begin = file.data();
  const std::size_t size = file.size();
  EXPECT_TRUE(inside(parse_npy(std::move(file)).data(), begin, size));
}

TEST(NpyZeroCopy, ConvertsBigEndianAndFortranIntoFreshStorage) {
  const std::string le = pattern(DType::int32, 6);
  const Tensor want = tensor_of(DType::int32, {2, 3}, le);
  for (const std::string& file :
       {npy_file(dict_for(">i4", {2, 3}), swapped(DType::int32, le)),
        npy_file(dict_for("<i4", {2, 3}, true), to_fortran(le, {2, 3}, 4))}) {
    Bytes bytes = Bytes::copy_of(file);
    const std::byte* begin = bytes.data();
    const std::size_t size = bytes.size();
    const Tensor t = parse_npy(std::move(bytes));
    EXPECT_FALSE(inside(t.data(), begin, size));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
    EXPECT_TRUE(t == want);
  }
}

TEST(NpyZeroCopy, CopiesWhenTheDataIsMisaligned) {
  // No padding: the data starts at 10 + 58 + 1 = 69, odd.
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
  const std::string le = pattern(DType::float64, 3);
  const std::string file = npy_file(dict + "  \n", le, 1, false);
  ASSERT_NE((file.size() - le.size()) % 8, 0u);
  Bytes bytes = Bytes::copy_of(file);
  const std::byte* begin = bytes.data();
  const std::size_t size = bytes.size();
  const Tensor t = parse_npy(std::move(bytes));
  EXPECT_FALSE(inside(t.data(), begin, size));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % alignof(double), 0u);
  EXPECT_TRUE(t == tensor_of(DType::float64, {3}, le));
  // Single bytes are never misaligned.
  Bytes u8 = Bytes::copy_of(npy_file(dict_for("|u1", {3}) + " \n", "xyz", 1, false));
  begin = u8.data();
  const std::size_t u8_size = u8.size();
  EXPECT_TRUE(inside(parse_npy(std::move(u8)).data(), begin, u8_size));
}

TEST(NpyZeroCopy, SpanOverloadCopies) {
  const std::string file = npy_file(dict_for("<u4", {4}), pattern(DType::uint32, 4));
  const auto span = std::as_bytes(std::span(file));
  const Tensor t = parse_npy(span);
  EXPECT_FALSE(inside(t.data(), span.data(), span.size()));
  EXPECT_TRUE(t == tensor_of(DType::uint32, {4}, pattern(DType::uint32, 4)));
}

// ---------------------------------------------------------------------------------------------
// Writing

// The header text of a .npy file written by write_npy, checked for layout.
std::string written_header(const std::string& file) {
  EXPECT_GE(file.size(), 10u);
  EXPECT_EQ(file.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t len = static_cast<unsigned char>(file[8]) |
                          (static_cast<std::size_t>(static_cast<unsigned char>(file[9])) << 8);
  EXPECT_EQ((10 + len) % 64, 0u);
  EXPECT_LE(10 + len, file.size());
  const std::string header = file.substr(10, len);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(header[header.size() - 2], ' ');
  return header;
}

TEST(NpyWrite, HeaderAsNumpyWritesIt) {
  struct Case {
    DType dtype;
    Tensor::Shape shape;
    std::string dict;
  };
  const std::vector<Case> cases = {
      {DType::float32, {2, 3, 4}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }"},
      {DType::int16, {3}, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }"},
      {DType::float64, {}, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }"},
      {DType::boolean, {2, 0}, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 0), }"},
      {DType::uint8, {1}, "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }"},
      {DType::int8, {1}, "{'descr': '|i1', 'fortran_order': False, 'shape': (1,), }"},
      {DType::complex128, {1}, "{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }"},
      {DType::float16, {1}, "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }"},
      {DType::float32,
       {2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
       "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
       "1, 1, 1), }"},
      {DType::uint16,
       {1234567, 0},
       "{'descr': '<u2', 'fortran_order': False, 'shape': (1234567, 0), }"},
  };
  for (const Case& c : cases) {
    const Tensor t = expected_values(c.dtype, c.shape);
    const std::string file = as_string(write_npy(t));
    const std::string header = written_header(file);
    EXPECT_EQ(header.substr(0, c.dict.size()), c.dict);
    // Then only spaces (room for the first dimension to grow, and alignment) and the '\n'.
    EXPECT_EQ(header.find_first_not_of(' ', c.dict.size()), header.size() - 1) << header;
    // numpy's length: 21 - digits of the first dimension spaces, then 1 to 64 to align.
    std::size_t length = c.dict.size() + 1;
    if (!c.shape.empty()) length += 21 - std::to_string(c.shape[0]).size();
    length += 64 - (10 + length) % 64;
    EXPECT_EQ(header.size(), length) << c.dict;
    EXPECT_EQ(file.size(), 10 + header.size() + t.nbytes());
    EXPECT_EQ(file.substr(10 + header.size()),
              std::string(reinterpret_cast<const char*>(t.data()), t.nbytes()));
  }
}

TEST(NpyWrite, RoundTripEveryDTypeAndRank) {
  const std::vector<Tensor::Shape> shapes = {{},           {7},       {2, 3}, {2, 3, 4},
                                             {2, 1, 3, 2}, {3, 0, 2}, {0}};
  for (const DTypeCase& c : kDTypes) {
    for (const Tensor::Shape& shape : shapes) {
      const Tensor t = tensor_of(c.dtype, shape, pattern(c.dtype, numel(shape)));
      Bytes file = write_npy(t);
      written_header(as_string(file));
      EXPECT_TRUE(parse_npy(file.span()) == t) << t.describe();
      const Tensor back = parse_npy(std::move(file), "u", "m");
      EXPECT_TRUE(back == t) << t.describe();
      EXPECT_EQ(back.shape(), shape);
      EXPECT_EQ(back.dtype(), c.dtype);
    }
  }
}

TEST(NpyWrite, HeaderOver64KiBUsesVersion2) {
  const Tensor t = tensor_of(DType::int16, Tensor::Shape(30000, 1), pattern(DType::int16, 1));
  const Bytes file = write_npy(t);
  const std::string s = as_string(file);
  ASSERT_EQ(s.substr(0, 8), std::string("\x93NUMPY\x02\x00", 8));
  const std::size_t len = static_cast<unsigned char>(s[8]) |
                          static_cast<std::size_t>(static_cast<unsigned char>(s[9])) << 8 |
                          static_cast<std::size_t>(static_cast<unsigned char>(s[10])) << 16 |
                          static_cast<std::size_t>(static_cast<unsigned char>(s[11])) << 24;
  EXPECT_GT(len, 65535u);
  EXPECT_EQ((12 + len) % 64, 0u);
  EXPECT_EQ(s[12 + len - 1], '\n');
  EXPECT_TRUE(parse_npy(file.span()) == t);
}

TEST(NpyWrite, UndefinedTensorIsAnInvalidArgument) {
  EXPECT_EQ(test::error_code([] { write_npy(Tensor()); }), ErrorCode::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Malformed input

TEST(NpyMalformed, BadMagic) {
  EXPECT_EQ(corrupt_cause("PK\x03\x04 not numpy at all"), "not a .npy file (bad magic)");
  EXPECT_EQ(corrupt_cause("\x93NUMPx\x01\x00"), "not a .npy file (bad magic)");
  EXPECT_EQ(corrupt_cause("{'descr': '<f4'}"), "not a .npy file (bad magic)");
}

TEST(NpyMalformed, EveryTruncationIsCorruptData) {
  const std::string file = npy_file(dict_for("<i4", {2, 3}), pattern(DType::int32, 6));
  const std::size_t header_len = file.size() - 24 - 10;
  for (std::size_t n = 0; n < file.size(); ++n) {
    const std::string cause = corrupt_cause(file.substr(0, n));
    if (n < 10) {
      EXPECT_EQ(cause, "bad .npy header: the file ends after " + std::to_string(n) +
                           " bytes, inside the preamble");
    } else if (n < 10 + header_len) {
      EXPECT_EQ(cause, "bad .npy header: the header is " + std::to_string(header_len) +
                           " bytes but the file has only " + std::to_string(n - 10) +
                           " after the preamble");
    } else {
      EXPECT_EQ(cause, "data is " + std::to_string(n - 10 - header_len) +
                           " bytes, the header's shape int32[2, 3] needs 24");
    }
  }
}

TEST(NpyMalformed, UnsupportedVersions) {
  const std::string dict = dict_for("<f4", {1});
  EXPECT_EQ(corrupt_cause(npy_file(dict, "abcd", 4)), "unsupported .npy version 4.0");
  EXPECT_EQ(corrupt_cause(npy_file(dict, "abcd", 0)), "unsupported .npy version 0.0");
  EXPECT_EQ(corrupt_cause(npy_file(dict, "abcd", 1, true, 1)), "unsupported .npy version 1.1");
  EXPECT_EQ(corrupt_cause(npy_file(dict, "abcd", 255)), "unsupported .npy version 255.0");
}

TEST(NpyMalformed, BadDicts) {
  struct Case {
    std::string dict;
    std::string cause;  // a part of it
  };
  const std::vector<Case> cases = {
      {"", "expected '{' at the start at column "},
      {"[1, 2]", "expected '{' at the start"},
      {"{", "expected a key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
      {"{'fortran_order': False, 'shape': (2,)}", "missing key 'descr'"},
      {"{'descr': '<f4', 'shape': (2,)}", "missing key 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
       "unexpected key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
       "duplicate key 'descr'"},
      {"{'descr': <f4, 'fortran_order': False, 'shape': (2,)}",
       "expected the 'descr' value (a string)"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", "expected ',' or '}'"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", "expected ':' after 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'a", "unterminated string"},
      {"{'descr': '<f4', 'fortran_order': 'False', 'shape': (2,)}", "expected True or False"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", "expected True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", "expected '(' to open"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}", "expected a dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 2)}", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (a,)}", "expected a dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (+2,)}", "expected a dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", "unexpected text after"},
      {std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}") + '\0',
       "unexpected text after"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}{}", "unexpected text after"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (", "expected a dimension"},
  };
  for (const Case& c : cases) {
    const std::string cause = corrupt_cause(npy_file(c.dict, "12345678"));
    EXPECT_TRUE(cause.starts_with("bad .npy header: ")) << cause;
    EXPECT_NE(cause.find(c.cause), std::string::npos) << c.dict << " -> " << cause;
  }
  // The message quotes the header, with control bytes escaped.
  EXPECT_EQ(corrupt_cause(npy_file("{\x01}", "", 1, false)),
            "bad .npy header: expected a key at column 2 of \"{\\x01}\"");
}

TEST(NpyMalformed, NegativeAndAbsurdShapes) {
  const std::string big = "4611686018427387904";  // 2^62
  const auto dict = [](const std::string& descr, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  };
  EXPECT_NE(corrupt_cause(npy_file(dict("<i2", "(-3,)"), "")).find("negative dimension"),
            std::string::npos);
  EXPECT_EQ(
      corrupt_cause(npy_file(dict("<i2", "(" + big + ", " + big + ")"), "")),
      "bad .npy header: shape int16[" + big + ", " + big + "] overflows (2^63 bytes or more)");
  // Zero elements, but numpy too refuses shapes whose other dimensions overflow.
  EXPECT_NE(
      corrupt_cause(npy_file(dict("|u1", "(0, " + big + ", " + big + ")"), "")).find("overflows"),
      std::string::npos);
  // 2^62 int16 elements are 2^63 bytes: one too many.
  EXPECT_NE(corrupt_cause(npy_file(dict("<i2", "(" + big + ",)"), "")).find("overflows"),
            std::string::npos);
  EXPECT_EQ(corrupt_cause(npy_file(dict("|u1", "(" + big + ",)"), "ab")),
            "data is 2 bytes, the header's shape uint8[" + big + "] needs " + big);
  EXPECT_NE(corrupt_cause(npy_file(dict("<f8", "(99999999999999999999,)"), ""))
                .find("dimension 99999999999999999999 in 'shape' is too large"),
            std::string::npos);
}

TEST(NpyMalformed, DataTooShortOrTooLong) {
  const std::string dict = dict_for("<i2", {3, 4});
  EXPECT_EQ(corrupt_cause(npy_file(dict, std::string(22, 'x'))),
            "data is 22 bytes, the header's shape int16[3, 4] needs 24");
  EXPECT_EQ(corrupt_cause(npy_file(dict, std::string(26, 'x'))),
            "data is 26 bytes, the header's shape int16[3, 4] needs 24");
  EXPECT_EQ(corrupt_cause(npy_file(dict_for("<f4", {0}), "x")),
            "data is 1 bytes, the header's shape float32[0] needs 0");
  // A header length pointing past the end of the file.
  std::string file = npy_file(dict, std::string(24, 'x'));
  file[8] = '\xff';
  file[9] = '\xff';
  EXPECT_EQ(corrupt_cause(file),
            "bad .npy header: the header is 65535 bytes but the file has only " +
                std::to_string(file.size() - 10) + " after the preamble");
  std::string v2 = npy_file(dict, std::string(24, 'x'), 2);
  v2[11] = '\xff';
  EXPECT_NE(corrupt_cause(v2).find("bad .npy header: the header is "), std::string::npos);
}

TEST(NpyMalformed, UnsupportedDTypes) {
  for (const std::string descr : {"<U10", "|S5", "|V8", "<M8[ns]", "<m8[s]", "<f16", "<c32", "<i3",
                                  "<u16", "b", "float32", "", "<", "<i", "i4x", "<b2"}) {
    EXPECT_EQ(corrupt_cause(npy_file(dict_for(descr, {2}), "12345678")),
              "unsupported dtype '" + descr + "' (only numeric dtypes)");
  }
  for (const std::string descr : {"|O", "<O8", "O"}) {
    EXPECT_EQ(corrupt_cause(npy_file(dict_for(descr, {1}), "12345678")),
              "object arrays are not supported");
  }
  EXPECT_NE(corrupt_cause(npy_file("{'descr': [('a', '<i4'), ('b', '<f8')], 'fortran_order': "
                                   "False, 'shape': (1,), }",
                                   "123456789012"))
                .find("structured arrays"),
            std::string::npos);
}

TEST(NpyMalformed, RandomCorruptionNeverCrashes) {
  const std::string file =
      npy_file(dict_for(">f4", {2, 3, 2}, true), pattern(DType::float32, 12), 2);
  std::mt19937 rng(20240531);
  std::size_t parsed = 0, rejected = 0;
  for (int round = 0; round < 4000; ++round) {
    std::string bad = file;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % (round % 4 == 0 ? bad.size() : 80);
      switch (rng() % 4) {
        case 0:
          bad[at] = static_cast<char>(rng());
          break;
        case 1:
          bad[at] = "(),:'\"-0123456789{} TFLe"[rng() % 24];
          break;
        case 2:
          bad.erase(at, 1 + rng() % 3);
          break;
        default:
          bad.insert(at, 1, "(),:'\" 9"[rng() % 8]);
          break;
      }
    }
    for (int overload = 0; overload < 2; ++overload) {
      try {
        const Tensor t = overload ? parse_npy(std::as_bytes(std::span(bad)))
                                  : parse_npy(Bytes::copy_of(bad), "u", "m");
        volatile std::uint64_t sum = 0;
        for (std::byte b : t.bytes()) sum = sum + std::to_integer<unsigned>(b);
        ++parsed;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::corrupt_data) << e.what();
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(parsed, 0u);
}

// ---------------------------------------------------------------------------------------------
// Interop with NumPy (/usr/bin/python3; the python3 on PATH may lack numpy)

constexpr char kPython[] = "/usr/bin/python3";

using test::ProcessResult;

// With its standard error in the output, for failure messages.
ProcessResult run(const std::string& command) {
  return test::run_command(command + " 2>&1");
}

bool have_numpy() {
  static const bool have = std::filesystem::exists(kPython) &&
                           run(std::string(kPython) + " -c 'import numpy'").status == 0;
  return have;
}

// The cases of a manifest: "name descr C|F d0,d1,..." ('-' for rank 0), one a line.
struct NumpyCase {
  std::string name;
  DType dtype;
  std::string descr;
  bool fortran;
  Tensor::Shape shape;
};

std::string manifest(const std::vector<NumpyCase>& cases) {
  std::string out;
  for (const NumpyCase& c : cases) {
    std::string dims;
    for (std::size_t i = 0; i < c.shape.size(); ++i) {
      dims += (i ? "," : "") + std::to_string(c.shape[i]);
    }
    out += c.name + " " + c.descr + " " + (c.fortran ? "F" : "C") + " " +
           (dims.empty() ? "-" : dims) + "\n";
  }
  return out;
}

// VALUES: the same as expected_values().
constexpr char kPythonCommon[] = R"(
import io, sys
import numpy as np

def complex_of(real, imag):
    v = np.empty(real.shape, dtype=np.complex128)
    v.real = real
    v.imag = imag
    return v

def values(descr, shape):
    base = descr.lstrip('<>|=')
    k = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    s = k - 12
    v = {
        'b1': lambda: k % 3 == 0,
        'i1': lambda: s,
        'i2': lambda: s * 1000,
        'i4': lambda: s * 100000007,
        'i8': lambda: s * 1000000000007,
        'u1': lambda: k * 10,
        'u2': lambda: k * 2000,
        'u4': lambda: k * 100000007,
        'u8': lambda: k * 1000000000007,
        'f2': lambda: s * 0.5,
        'f4': lambda: s / 8.0 + 4096,
        'f8': lambda: s / 1024.0 + 1e6,
        'c8': lambda: complex_of(s / 8.0 + 4096, 2.5 * k - 7),
        'c16': lambda: complex_of(s / 1024.0 + 1e6, 2.5 * k - 7),
    }[base]()
    return v.astype(np.dtype(descr)).reshape(shape)

def cases(d):
    with open(d + '/manifest.txt') as f:
        for line in f:
            name, descr, layout, dims = line.split()
            shape = () if dims == '-' else tuple(int(x) for x in dims.split(','))
            yield name, descr, layout, shape
)";

constexpr char kPythonSave[] = R"(
d = sys.argv[1]
for name, descr, layout, shape in cases(d):
    a = values(descr, shape)
    if layout == 'F':
        a = np.asfortranarray(a)
    np.save(d + '/' + name + '.npy', a)
)";

constexpr char kPythonCheck[] = R"(
d = sys.argv[1]
# numpy >= 1.24 leaves room for the first dimension to grow; write_npy does the same.
same_bytes = np.lib.NumpyVersion(np.__version__) >= '1.24.0'
failed = 0
for name, descr, layout, shape in cases(d):
    path = d + '/' + name + '.npy'
    want = values(descr, shape)
    got = np.load(path, allow_pickle=False)
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        print(f'{name}: got {got.dtype} {got.shape} {got!r}, want {want.dtype} {want.shape} {want!r}')
        failed += 1
    with open(path, 'rb') as f:
        content = f.read()
        f.seek(0)
        if np.lib.format.read_magic(f) != (1, 0):
            print(f'{name}: not version 1.0')
            failed += 1
        np.lib.format.read_array_header_1_0(f)
        if f.tell() % 64 != 0:
            print(f'{name}: data at offset {f.tell()}, not a multiple of 64')
            failed += 1
    if same_bytes:
        buffer = io.BytesIO()
        np.save(buffer, want)
        if buffer.getvalue() != content:
            print(f'{name}: differs from np.save: {content[:200]!r} vs {buffer.getvalue()[:200]!r}')
            failed += 1
print(f'checked, {failed} failed')
sys.exit(1 if failed else 0)
)";

class NpyNumpy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (have_numpy()) return;
    if (std::getenv("CI")) FAIL() << kPython << " has no numpy (needed under CI)";
    GTEST_SKIP() << kPython << " has no numpy";
  }

  ProcessResult python(const char* script) {
    const std::string path = dir_.write("script.py", std::string(kPythonCommon) + script);
    return run(std::string(kPython) + " " + path + " " + dir_.path().string());
  }

  TempDir dir_;
};

TEST_F(NpyNumpy, ReadsWhatNumpyWrites) {
  std::vector<NumpyCase> cases;
  for (const DTypeCase& c : kDTypes) {
    const std::vector<char> orders =
        dtype_size(c.dtype) == 1 ? std::vector<char>{'|'} : std::vector<char>{'<', '>'};
    for (char order : orders) {
      for (bool fortran : {false, true}) {
        for (const Tensor::Shape& shape : {Tensor::Shape{2, 3, 4}, Tensor::Shape{3, 2, 1, 2}}) {
          cases.push_back(
              {"r" + std::to_string(cases.size()), c.dtype, order + c.code, fortran, shape});
        }
      }
    }
  }
  cases.push_back({"scalar_f8", DType::float64, "<f8", false, {}});
  cases.push_back({"scalar_c16", DType::complex128, ">c16", false, {}});
  cases.push_back({"empty_i4", DType::int32, "<i4", false, {0, 3}});
  cases.push_back({"empty_f4", DType::float32, ">f4", true, {4, 0, 2}});
  cases.push_back({"vector_u2", DType::uint16, ">u2", false, {5}});
  dir_.write("manifest.txt", manifest(cases));
  const ProcessResult r = python(kPythonSave);
  ASSERT_EQ(r.status, 0) << r.output;

  for (const NumpyCase& c : cases) {
    const std::string path = dir_.file(c.name + ".npy");
    const std::string file = read_file(path);
    ASSERT_FALSE(file.empty()) << path;
    // np.save really wrote the layout and byte order under test.
    const bool really_fortran = c.fortran && c.shape.size() >= 2 && numel(c.shape) > 0;
    EXPECT_EQ(file.find("'fortran_order': True") != std::string::npos, really_fortran) << c.name;
    EXPECT_NE(file.find("'descr': '" + c.descr + "'"), std::string::npos) << c.name;

    const Tensor want = expected_values(c.dtype, c.shape);
    Bytes bytes = Bytes::copy_of(file);
    const std::byte* begin = bytes.data();
    const std::size_t size = bytes.size();
    const Tensor got = parse_npy(std::move(bytes), path, "");
    EXPECT_EQ(got.dtype(), c.dtype) << c.name;
    EXPECT_EQ(got.shape(), c.shape) << c.name;
    EXPECT_TRUE(got == want) << c.name << " " << c.descr << (c.fortran ? " F " : " C ")
                             << want.describe();
    EXPECT_TRUE(parse_npy(std::as_bytes(std::span(file))) == want) << c.name;
    const bool native = c.descr[0] != '>' || dtype_size(c.dtype) == 1;
    if (native && !really_fortran && want.nbytes() > 0) {
      EXPECT_TRUE(inside(got.data(), begin, size)) << c.name << ": not zero-copy";
    }
  }
  // Typed spot checks of the shared value formula.
  const auto i4_case = std::find_if(cases.begin(), cases.end(), [](const NumpyCase& c) {
    return c.descr == "<i4" && !c.fortran && c.shape == Tensor::Shape{2, 3, 4};
  });
  ASSERT_NE(i4_case, cases.end());
  const Tensor i4 = parse_npy(Bytes::copy_of(read_file(dir_.file(i4_case->name + ".npy"))));
  ASSERT_EQ(i4.dtype(), DType::int32);
  EXPECT_EQ(i4.values<std::int32_t>()[0], -12 * 100000007);
  EXPECT_EQ(i4.values<std::int32_t>()[23], 11 * 100000007);
}

TEST_F(NpyNumpy, NumpyReadsWhatWdsWrites) {
  std::vector<NumpyCase> cases;
  for (const DTypeCase& c : kDTypes) {
    // The last two have headers whose length depends on numpy's room for growth.
    for (const Tensor::Shape& shape :
         {Tensor::Shape{}, Tensor::Shape{5}, Tensor::Shape{2, 3, 4}, Tensor::Shape{2, 1, 3, 2},
          Tensor::Shape{3, 0, 2}, Tensor::Shape{2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
          Tensor::Shape{1234567, 0}}) {
      const std::string descr = (dtype_size(c.dtype) == 1 ? "|" : "<") + c.code;
      cases.push_back({"w" + std::to_string(cases.size()), c.dtype, descr, false, shape});
    }
  }
  for (const NumpyCase& c : cases) {
    dir_.write(c.name + ".npy", as_string(write_npy(expected_values(c.dtype, c.shape))));
  }
  dir_.write("manifest.txt", manifest(cases));
  const ProcessResult r = python(kPythonCheck);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("checked, 0 failed"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace wds
