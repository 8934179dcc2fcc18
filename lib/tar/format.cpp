#include "lib/tar/format.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "wds/error.hpp"

namespace wds {
namespace {

struct TarHeader {
  char type = 0;
  std::string name;  // ustar prefix + '/' + name
  std::optional<std::uint64_t> size;
};

std::string_view field(const std::byte* h, std::size_t off, std::size_t len) {
  const char* p = reinterpret_cast<const char*>(h) + off;
  std::size_t n = 0;
  while (n < len && p[n] != '\0') ++n;
  return {p, n};
}

std::optional<std::uint64_t> numeric_field(const std::byte* h, std::size_t off, std::size_t len) {
  const auto* p = reinterpret_cast<const unsigned char*>(h) + off;
  if (p[0] & 0x80) {  // GNU base-256
    std::uint64_t v = p[0] & 0x3f;
    for (std::size_t i = 1; i < len; ++i) {
      if (v > (std::numeric_limits<std::uint64_t>::max() >> 8)) return std::nullopt;
      v = (v << 8) | p[i];
    }
    return v;
  }
  std::size_t i = 0;
  while (i < len && (p[i] == ' ' || p[i] == '\0')) ++i;
  std::uint64_t v = 0;
  bool any = false;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i) {
    v = v * 8 + (p[i] - '0');
    any = true;
  }
  if (!any) return std::nullopt;
  return v;
}

// A 512-byte block that is a tar header with a valid checksum.
std::optional<TarHeader> parse_header(const std::byte* h) {
  std::optional<std::uint64_t> stored = numeric_field(h, 148, 8);
  if (!stored) return std::nullopt;
  std::uint64_t unsigned_sum = 0;
  std::int64_t signed_sum = 0;
  for (std::size_t i = 0; i < kTarBlock; ++i) {
    auto b = static_cast<unsigned char>(h[i]);
    if (i >= 148 && i < 156) b = ' ';
    unsigned_sum += b;
    signed_sum += static_cast<signed char>(b);
  }
  if (*stored != unsigned_sum && static_cast<std::int64_t>(*stored) != signed_sum) {
    return std::nullopt;
  }
  TarHeader out;
  out.type = static_cast<char>(h[156]);
  out.size = numeric_field(h, 124, 12);
  std::string_view name = field(h, 0, 100);
  if (field(h, 257, 5) == "ustar") {
    std::string_view prefix = field(h, 345, 155);
    if (!prefix.empty()) {
      out.name = std::string(prefix) + "/" + std::string(name);
      return out;
    }
  }
  out.name = name;
  return out;
}

// The pax extended header records that matter here. False if the records are malformed (as
// libarchive, which the streaming reader uses, finds them).
bool parse_pax(std::string_view data, std::optional<std::string>& path,
               std::optional<std::uint64_t>& size) {
  while (!data.empty()) {
    std::size_t space = data.find(' ');
    if (space == std::string_view::npos) return false;
    std::size_t len = 0;
    auto [p, ec] = std::from_chars(data.data(), data.data() + space, len);
    if (ec != std::errc() || p != data.data() + space || len <= space + 1 || len > data.size() ||
        data[len - 1] != '\n') {
      return false;
    }
    std::string_view record = data.substr(space + 1, len - space - 2);  // without the '\n'
    data.remove_prefix(len);
    std::size_t eq = record.find('=');
    if (eq == std::string_view::npos) return false;
    std::string_view key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") {
      path = std::string(value);
    } else if (key == "size") {
      std::uint64_t v = 0;
      auto [q, e2] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (e2 == std::errc() && q == value.data() + value.size()) size = v;
    }
  }
  return true;
}

// A numeric field in plain octal: leading spaces, then octal digits, then only NULs or spaces.
// nullopt for anything else (base-256, stray characters), and for a field without digits
// unless `empty_ok`, when it is 0.
std::optional<std::uint64_t> plain_octal(const std::byte* h, std::size_t off, std::size_t len,
                                         bool empty_ok) {
  const char* p = reinterpret_cast<const char*>(h) + off;
  std::size_t i = 0;
  while (i < len && p[i] == ' ') ++i;
  const std::size_t digits_at = i;
  std::uint64_t v = 0;  // at most 12 octal digits: no overflow
  for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i) v = v * 8 + static_cast<unsigned>(p[i] - '0');
  if (i == digits_at && !empty_ok) return std::nullopt;
  for (; i < len; ++i) {
    if (p[i] != '\0' && p[i] != ' ') return std::nullopt;
  }
  return v;
}

// 0x80 in each byte of w that is zero, else 0.
constexpr std::uint64_t zero_bytes(std::uint64_t w) {
  constexpr std::uint64_t k7f = 0x7f7f7f7f7f7f7f7fULL;
  return ~(((w & k7f) + k7f) | w | k7f);
}

// True if the 8 bytes at p are octal digits, then only NULs or spaces (or all NULs or spaces):
// plain_octal's form without leading spaces, as nearly every writer writes mode, uid, gid and
// devices. False for any other form, which plain_octal then judges.
bool octal_word(const char* p) {
  constexpr std::uint64_t k01 = 0x0101010101010101ULL, k80 = 0x8080808080808080ULL;
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  const std::uint64_t digits = zero_bytes((w ^ (k01 * '0')) & (k01 * 0xf8));  // '0'-'7'
  const std::uint64_t ends = zero_bytes(w) | zero_bytes(w ^ (k01 * ' '));
  // The first bytes (little-endian: the low ones) up to the first non-digit, and all after it
  // must be ends.
  const std::uint64_t other = ~digits & k80;
  const std::uint64_t first_other = other & (0 - other);
  const std::uint64_t prefix = first_other ? (first_other >> 7) - 1 : ~std::uint64_t{0};
  return ((ends | prefix) & k80) == k80;
}

bool octal_field_ok(const std::byte* h, std::size_t off, std::size_t len) {
  const char* p = reinterpret_cast<const char*>(h) + off;
  if (len == 8 && octal_word(p)) return true;
  // 12 bytes: eight digits, then bytes 4-11 as one word (its first four are those digits).
  if (len == 12 && octal_word(p) && octal_word(p + 4)) {
    constexpr std::uint64_t k01 = 0x0101010101010101ULL;
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    if (zero_bytes((w ^ (k01 * '0')) & (k01 * 0xf8)) == k01 * 0x80) return true;
  }
  return plain_octal(h, off, len, true).has_value();
}

// The unsigned sum of a header's bytes with its checksum field (148-155) taken as spaces. Eight
// bytes at a time, in 16-bit lanes (64 words add at most 64 * 255 to a lane).
std::uint64_t unsigned_header_sum(const std::byte* h) {
  std::uint64_t sum = 0;
#if defined(__SSE2__)
  __m128i acc = _mm_setzero_si128();
  for (std::size_t i = 0; i < kTarBlock; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    acc = _mm_add_epi64(acc, _mm_sad_epu8(v, _mm_setzero_si128()));
  }
  sum = static_cast<std::uint64_t>(_mm_cvtsi128_si64(acc)) +
        static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
#else
  constexpr std::uint64_t kLow = 0x00ff00ff00ff00ffULL;
  std::uint64_t even = 0, odd = 0;
  for (std::size_t i = 0; i < kTarBlock; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, h + i, 8);
    even += w & kLow;
    odd += (w >> 8) & kLow;
  }
  const std::uint64_t lanes = even + odd;  // each lane at most 2 * 64 * 255 < 2^16
  sum = (lanes & 0xffff) + ((lanes >> 16) & 0xffff) + ((lanes >> 32) & 0xffff) + (lanes >> 48);
#endif
  for (std::size_t i = 148; i < 156; ++i) sum -= static_cast<unsigned char>(h[i]);
  return sum + 8 * ' ';
}

bool printable_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

}  // namespace

std::optional<PlainHeader> parse_plain_header(const std::byte* h) {
  if (h[0] == std::byte{0}) return std::nullopt;  // an end block, or no name
  const std::string_view magic(reinterpret_cast<const char*>(h) + 257, 8);
  const bool ustar = magic == std::string_view(
                                  "ustar\0"
                                  "00",
                                  8);
  if (!ustar && magic != std::string_view("ustar  \0", 8)) return std::nullopt;
  if (!ustar) {  // GNU: a sparse map (386-481), its extension flag (482), a real size (483-494)
    for (std::size_t i = 386; i < 495; ++i) {
      if (h[i] != std::byte{0}) return std::nullopt;
    }
  }
  const char type = static_cast<char>(h[156]);
  if (type != '0' && type != '\0' && type != '5') return std::nullopt;
  const std::optional<std::uint64_t> stored = plain_octal(h, 148, 8, false);
  if (!stored || *stored != unsigned_header_sum(h)) return std::nullopt;
  const std::optional<std::uint64_t> size = plain_octal(h, 124, 12, false);
  if (!size) return std::nullopt;
  // mode, uid, gid, mtime, devmajor, devminor
  if (!octal_field_ok(h, 100, 8) || !octal_field_ok(h, 108, 8) || !octal_field_ok(h, 116, 8) ||
      !octal_field_ok(h, 136, 12) || !octal_field_ok(h, 329, 8) || !octal_field_ok(h, 337, 8)) {
    return std::nullopt;
  }
  PlainHeader out;
  out.directory = type == '5';
  if (out.directory && *size != 0) return std::nullopt;
  out.size = *size;
  out.name = field(h, 0, 100);
  if (!printable_ascii(out.name)) return std::nullopt;
  if (ustar) {
    out.prefix = field(h, 345, 155);
    if (!printable_ascii(out.prefix) || (!out.prefix.empty() && out.prefix.back() == '/')) {
      return std::nullopt;
    }
  }
  if (!out.directory && out.name.back() == '/') return std::nullopt;
  return out;
}

std::uint64_t round_up_block(std::uint64_t n) {
  if (n > std::numeric_limits<std::uint64_t>::max() - (kTarBlock - 1)) {
    return std::numeric_limits<std::uint64_t>::max();
  }
  return (n + kTarBlock - 1) / kTarBlock * kTarBlock;
}

bool harmless_warning(archive* ar) {
  const char* msg = archive_error_string(ar);
  return msg && std::string_view(msg).find("can't be converted") != std::string_view::npos;
}

std::optional<MemberHeader> read_member_header(std::span<const std::byte> buf, std::uint64_t base,
                                               std::uint64_t data_offset, const std::string& url,
                                               const std::string& member) {
  const std::size_t header_at = buf.size() - kTarBlock;
  std::optional<TarHeader> h = parse_header(buf.data() + header_at);
  if (!h) return std::nullopt;
  if (h->type != '0' && h->type != '\0' && h->type != '7') return std::nullopt;
  MemberHeader out;
  out.name = h->name;
  out.size = h->size;
  out.first_header = data_offset - kTarBlock;
  std::optional<std::string> pax_path, gnu_path;
  std::optional<std::uint64_t> pax_size;
  std::size_t pos = header_at;
  for (bool found = true; found;) {
    found = false;
    for (std::size_t k = 1; k * kTarBlock <= pos; ++k) {
      const std::size_t at = pos - k * kTarBlock;
      std::optional<TarHeader> x = parse_header(buf.data() + at);
      if (!x || (x->type != 'x' && x->type != 'L' && x->type != 'K') || !x->size) continue;
      // Its data must end where the next header starts, inside the buffer: compared before any
      // arithmetic on the size, which a crafted header can set to anything up to 2^64 - 1.
      const std::uint64_t room = (k - 1) * kTarBlock;
      if (*x->size > room && k == 1) {
        throw Error::corrupt_data(
            url, member,
            "the extension header at byte " + std::to_string(base + at) + " declares " +
                std::to_string(*x->size) +
                " bytes of data, but the next header follows it directly: a damaged or "
                "hostile header");
      }
      if (*x->size > room || round_up_block(*x->size) != room) continue;
      std::string_view data(reinterpret_cast<const char*>(buf.data() + at + kTarBlock),
                            static_cast<std::size_t>(*x->size));
      if (x->type == 'x') {
        if (!parse_pax(data, pax_path, pax_size)) {
          throw Error::corrupt_data(
              url, member, "malformed pax extended header at byte " + std::to_string(base + at));
        }
      } else if (x->type == 'L' && !gnu_path) {
        gnu_path = std::string(data.substr(0, data.find('\0')));
      }
      pos = at;
      found = true;
      out.extended = true;
      break;
    }
  }
  out.first_header = base + pos;
  if (pax_path) {
    out.name = *pax_path;
  } else if (gnu_path) {
    out.name = *gnu_path;
  }
  if (pax_size) out.size = pax_size;
  return out;
}

}  // namespace wds
