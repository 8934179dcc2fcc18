// The antialiased resize and the fused output stage (codecs/resample.hpp).
//
// Why not cv::resize: INTER_AREA is slow for the non-integer factors photos need (500x375 ->
// 341x256 cost more than the decode), and INTER_LINEAR does not antialias. This is PIL's
// algorithm (what torchvision applies to PIL images): cheap because the taps are precomputed per
// axis and the vertical pass, the bulk of the work, vectorises across a whole row.
#include "codecs/resample.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "wds/error.hpp"

namespace wds::detail {

namespace {

constexpr int kWeightBits = 14;  // fits a weight of 1.0 in int16 for 16-bit multiply-adds

// The triangle (bilinear) filter; support 1.
double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

#if defined(__x86_64__)
// The horizontal pass over one RGB row with SSE4.1: per output pixel, each pair of taps is one
// 8-byte load, one shuffle to 16-bit {R0, R1, G0, G1, B0, B1, 0, 0} and one multiply-add with
// the pair's weights. Outputs whose loads would pass the row's end (`row_bytes`) are left to the
// scalar kernel: returns how many were done, from 0.
template <int Pairs>
__attribute__((target("sse4.1"))) int horizontal_rgb_sse41(const std::uint8_t* row,
                                                           std::ptrdiff_t row_bytes,
                                                           const AxisTaps& x, std::uint8_t* out) {
  const int pairs = Pairs ? Pairs : (x.taps + 1) / 2;
  const __m128i spread = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m128i half = _mm_set1_epi32(1 << (kWeightBits - 1));
  const __m128i* w = reinterpret_cast<const __m128i*>(x.pair_weights.data());
  const int* first = x.first.data();
  const int n = x.n, lo = x.lo;
  // The last load of an output reads 8 bytes from its last pair's start.
  const std::ptrdiff_t limit = row_bytes - (pairs - 1) * 6 - 8;
  int o = 0;
  for (; o < n; ++o, w += pairs) {
    const std::ptrdiff_t at = static_cast<std::ptrdiff_t>(first[o] - lo) * 3;
    if (at > limit) break;
    __m128i acc = half;
    for (int p = 0; p < pairs; ++p) {
      const __m128i px = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + at + p * 6));
      acc =
          _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(px, spread), _mm_loadu_si128(w + p)));
    }
    const __m128i v = _mm_srai_epi32(acc, kWeightBits);
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
    // Four bytes: the fourth is the next pixel's, written over next (the row has room after).
    const auto rgbx = static_cast<std::uint32_t>(_mm_cvtsi128_si32(bytes));
    std::memcpy(out + o * 3, &rgbx, 4);
  }
  return o;
}

int horizontal_rgb(const std::uint8_t* row, std::ptrdiff_t row_bytes, const AxisTaps& x,
                   std::uint8_t* out) {
  // Fixed pair counts unroll: shrinking by up to 2 (after DCT scaling) needs 1 to 3 pairs.
  switch ((x.taps + 1) / 2) {
    case 1:
      return horizontal_rgb_sse41<1>(row, row_bytes, x, out);
    case 2:
      return horizontal_rgb_sse41<2>(row, row_bytes, x, out);
    case 3:
      return horizontal_rgb_sse41<3>(row, row_bytes, x, out);
    default:
      return horizontal_rgb_sse41<0>(row, row_bytes, x, out);
  }
}

bool have_sse41() {
  static const bool yes = __builtin_cpu_supports("sse4.1");
  return yes;
}
#endif

// One output row of the horizontal pass: `row` holds source columns [x.lo, x.hi).
template <int C>
void horizontal_one(const std::uint8_t* row, const AxisTaps& x, std::uint8_t* out) {
  int done = 0;
#if defined(__x86_64__)
  if (C == 3 && have_sse41()) {
    done = horizontal_rgb(row, static_cast<std::ptrdiff_t>(x.hi - x.lo) * 3, x, out);
    if (done == x.n) return;
  }
#endif
  // The rest (or all, without SSE4.1 or for 1 and 4 channels): the same 14-bit arithmetic, so
  // an output pixel's value does not depend on which kernel computed it.
  const int taps = x.taps, pairs = (taps + 1) / 2;
  for (int o = done; o < x.n; ++o) {
    const std::int16_t* w = &x.pair_weights[static_cast<std::size_t>(o) * pairs * 8];
    const std::uint8_t* p = row + static_cast<std::ptrdiff_t>(x.first[o] - x.lo) * C;
    std::int32_t acc[C];
    for (int c = 0; c < C; ++c) acc[c] = 1 << (kWeightBits - 1);
    for (int t = 0; t < taps; ++t) {
      const std::int32_t wt = w[(t / 2) * 8 + t % 2];
      for (int c = 0; c < C; ++c) acc[c] += std::int32_t{p[t * C + c]} * wt;
    }
    for (int c = 0; c < C; ++c) {
      const std::int32_t v = acc[c] >> kWeightBits;
      out[o * C + c] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

// The vertical pass for one output row: `len` values, each the weighted sum of `taps` rows with
// the 14-bit weights (pairs layout: tap t's at w[(t / 2) * 8 + t % 2]).
std::int32_t vertical_weight(const std::int16_t* w, int t) {
  return w[(t / 2) * 8 + t % 2];
}

void vertical_scalar(const std::uint8_t* first_row, std::ptrdiff_t stride, const std::int16_t* w,
                     int taps, int from, int len, std::int32_t* acc, std::uint8_t* out) {
  for (int i = from; i < len; ++i) acc[i] = 1 << (kWeightBits - 1);
  for (int t = 0; t < taps; ++t) {
    const std::int32_t wt = vertical_weight(w, t);
    if (wt == 0) continue;
    const std::uint8_t* r = first_row + t * stride;
    for (int i = from; i < len; ++i) acc[i] += std::int32_t{r[i]} * wt;
  }
  for (int i = from; i < len; ++i) {
    const std::int32_t v = acc[i] >> kWeightBits;
    out[i] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

#if defined(__x86_64__)
// AVX2: 16 values at a time; two rows' bytes widened and interleaved into 16-bit pairs, one
// multiply-add with the two rows' weights. Returns how many values were done (a multiple of 16).
__attribute__((target("avx2"))) int vertical_avx2(const std::uint8_t* first_row,
                                                  std::ptrdiff_t stride, const std::int16_t* w,
                                                  int taps, int len, std::uint8_t* out) {
  const int pairs = (taps + 1) / 2;
  __m256i weights[8];
  if (pairs > 8) return 0;
  for (int p = 0; p < pairs; ++p) {
    const auto lo = static_cast<std::uint16_t>(vertical_weight(w, 2 * p));
    const auto hi =
        static_cast<std::uint16_t>(2 * p + 1 < taps ? vertical_weight(w, 2 * p + 1) : 0);
    weights[p] = _mm256_set1_epi32(static_cast<int>(std::uint32_t{hi} << 16 | lo));
  }
  const __m256i half = _mm256_set1_epi32(1 << (kWeightBits - 1));
  int i = 0;
  for (; i + 16 <= len; i += 16) {
    __m256i acc_lo = half, acc_hi = half;
    for (int p = 0; p < pairs; ++p) {
      const std::uint8_t* ra = first_row + (2 * p) * stride + i;
      const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ra)));
      const __m256i b =
          2 * p + 1 < taps
              ? _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ra + stride)))
              : _mm256_setzero_si256();
      acc_lo = _mm256_add_epi32(acc_lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), weights[p]));
      acc_hi = _mm256_add_epi32(acc_hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), weights[p]));
    }
    // packs works within 128-bit lanes, which puts values 0-7 and 8-15 back in order.
    const __m256i words = _mm256_packs_epi32(_mm256_srai_epi32(acc_lo, kWeightBits),
                                             _mm256_srai_epi32(acc_hi, kWeightBits));
    const __m256i bytes = _mm256_packus_epi16(words, words);
    const __m256i ordered = _mm256_permute4x64_epi64(bytes, 0x08);  // qwords 0 and 2
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(ordered));
  }
  return i;
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

#if defined(__x86_64__)
// An RGB row (interleaved bytes) to three float planes through per-channel tables: 16 pixels at
// a time, split into planes with byte shuffles, then each byte looked up with an 8-wide gather
// and streamed to its plane (mirrored when `flip`). width % 16 == 0; planes 32-byte aligned.
__attribute__((target("avx2"))) void rgb_planes_avx2(const std::uint8_t* row, int width,
                                                     const float* const values[3],
                                                     float* const planes[3], bool flip) {
  const __m128i a_mask[3] = {
      _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
      _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
      _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)};
  const __m128i b_mask[3] = {
      _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1),
      _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1),
      _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1)};
  const __m128i c_mask[3] = {
      _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13),
      _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14),
      _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15)};
  const __m256i reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  for (int x = 0; x < width; x += 16) {
    const std::uint8_t* p = row + x * 3;
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32));
    for (int ch = 0; ch < 3; ++ch) {
      const __m128i plane = _mm_or_si128(
          _mm_or_si128(_mm_shuffle_epi8(a, a_mask[ch]), _mm_shuffle_epi8(b, b_mask[ch])),
          _mm_shuffle_epi8(c, c_mask[ch]));
      for (int half = 0; half < 2; ++half) {
        const __m256i index = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(plane, 8) : plane);
        __m256 v = _mm256_i32gather_ps(values[ch], index, 4);
        const int at = x + half * 8;
        if (flip) {
          v = _mm256_permutevar8x32_ps(v, reverse);
          _mm256_stream_ps(planes[ch] + (width - 8 - at), v);
        } else {
          _mm256_stream_ps(planes[ch] + at, v);
        }
      }
    }
  }
}
#endif

void vertical_row(const std::uint8_t* first_row, std::ptrdiff_t stride, const std::int16_t* w,
                  int taps, int len, std::int32_t* acc, std::uint8_t* out) {
  int done = 0;
#if defined(__x86_64__)
  if (have_avx2()) done = vertical_avx2(first_row, stride, w, taps, len, out);
#endif
  if (done < len) vertical_scalar(first_row, stride, w, taps, done, len, acc, out);
}

// IEEE binary16 bits of f, rounded to nearest even (by hand: clang 14 has no _Float16 on x86).
std::uint16_t half_bits(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000);
  const std::uint32_t magnitude = x & 0x7fffffff;
  if (magnitude >= 0x7f800000) {  // infinity, NaN
    return static_cast<std::uint16_t>(sign | (magnitude > 0x7f800000 ? 0x7e00 : 0x7c00));
  }
  if (magnitude >= 0x477ff000) return static_cast<std::uint16_t>(sign | 0x7c00);  // >= 65520
  if (magnitude < 0x38800000) {  // below 2^-14: a subnormal half, in units of 2^-24
    float value;
    std::memcpy(&value, &magnitude, sizeof value);
    return static_cast<std::uint16_t>(
        sign | static_cast<std::uint16_t>(std::nearbyint(value * 16777216.0f)));
  }
  const std::uint32_t exponent = (magnitude >> 23) - 127 + 15;
  const std::uint32_t mantissa = magnitude & 0x7fffff;
  std::uint32_t h = exponent << 10 | mantissa >> 13;
  const std::uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is right
  return static_cast<std::uint16_t>(sign | h);
}

// Each channel's 256 output values (ToTensor, then Normalize), in the tensor's element type.
template <class T>
struct ValueTable {
  std::array<std::array<T, 256>, 4> values;
};

// The value of byte v of channel c as torch computes it: v / 255 in float32, then (x - m) / s.
float unit_value(int v, int c, const OutputFormat& f) {
  float x = static_cast<float>(v) / 255.0f;
  if (f.mean && !f.mean->empty()) x = (x - (*f.mean)[c]) / (*f.std)[c];
  return x;
}

// The tables for a format, kept per thread and remade only when the normalisation changes.
template <class T>
const ValueTable<T>& value_table(const OutputFormat& f) {
  thread_local ValueTable<T> table;
  thread_local std::vector<float> mean, std;
  thread_local int channels = 0;
  static const std::vector<float> none;
  const std::vector<float>& m = f.mean ? *f.mean : none;
  const std::vector<float>& s = f.std ? *f.std : none;
  if (channels == f.spec.channels && m == mean && s == std) return table;
  for (int c = 0; c < f.spec.channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      const float x = unit_value(v, c, f);
      if constexpr (std::is_same_v<T, float>) {
        table.values[c][v] = x;
      } else {
        table.values[c][v] = half_bits(x);
      }
    }
  }
  channels = f.spec.channels;
  mean = m;
  std = s;
  return table;
}

// Writes one output row (`row`: width x channels bytes in the source's channel order) as row oy.
template <class T, class Convert>
void write_row(const std::uint8_t* row, int oy, int width, int height, int channels,
               const std::array<int, 4>& to, bool flip, bool chw, T* base, Convert convert) {
  if (chw) {
    for (int c = 0; c < channels; ++c) {
      const int d = to[c];
      T* dst = base + (static_cast<std::ptrdiff_t>(d) * height + oy) * width;
      if (flip) {
        for (int x = 0; x < width; ++x) dst[width - 1 - x] = convert(d, row[x * channels + c]);
      } else {
        for (int x = 0; x < width; ++x) dst[x] = convert(d, row[x * channels + c]);
      }
    }
    return;
  }
  T* dst = base + static_cast<std::ptrdiff_t>(oy) * width * channels;
  for (int x = 0; x < width; ++x) {
    T* px = dst + static_cast<std::ptrdiff_t>(flip ? width - 1 - x : x) * channels;
    const std::uint8_t* in = row + x * channels;
    for (int c = 0; c < channels; ++c) px[to[c]] = convert(to[c], in[c]);
  }
}

}  // namespace

ResizeAxis scaled_axis(const ResizeAxis& a, int k, int scaled_size) {
  return {a.start / k, a.scale / k, a.lo / k, std::min((a.hi + k - 1) / k, scaled_size), a.n};
}

int dct_denominator(const ResizeAxis& x, const ResizeAxis& y) {
  for (int k : {8, 4, 2}) {
    if (x.scale >= k && y.scale >= k) return k;
  }
  return 1;
}

void plan_axis(const ResizeAxis& a, AxisTaps& t) {
  t.n = a.n;
  t.identity = false;
  if (a.n <= 0 || a.hi <= a.lo || !(a.scale > 0)) {
    throw Error::invalid_argument("image resize: empty axis");
  }
  t.first.resize(static_cast<std::size_t>(a.n));
  const auto start = static_cast<std::int64_t>(a.start);
  if (a.scale == 1.0 && static_cast<double>(start) == a.start && start >= a.lo &&
      start + a.n <= a.hi) {
    t.identity = true;
    t.taps = 1;
    for (int o = 0; o < a.n; ++o) t.first[o] = static_cast<int>(start) + o;
    t.lo = static_cast<int>(start);
    t.hi = t.lo + a.n;
    return;
  }
  const double filterscale = std::max(a.scale, 1.0);
  const double support = filterscale;  // the triangle's support (1) at the filter's scale
  const int span = a.hi - a.lo;
  const int max_taps = std::min(static_cast<int>(std::ceil(support)) * 2 + 1, span);
  // Scratch kept per thread: planning allocates nothing once the sizes have been seen.
  thread_local std::vector<int> xmins, counts;
  thread_local std::vector<double> all;
  xmins.resize(static_cast<std::size_t>(a.n));
  counts.resize(static_cast<std::size_t>(a.n));
  all.resize(static_cast<std::size_t>(a.n) * (max_taps + 2));
  int taps = 1;
  for (int o = 0; o < a.n; ++o) {
    const double center = a.start + (o + 0.5) * a.scale;
    int xmin = std::max(static_cast<int>(std::floor(center - support + 0.5)), a.lo);
    int xmax = std::min(static_cast<int>(std::floor(center + support + 0.5)), a.hi);
    if (xmax <= xmin) {  // centred outside the bounds: the nearest pixel
      xmin = std::clamp(static_cast<int>(std::floor(center)), a.lo, a.hi - 1);
      xmax = xmin + 1;
    }
    const int count = std::min(xmax - xmin, max_taps + 2);
    double sum = 0;
    double* k = &all[static_cast<std::size_t>(o) * (max_taps + 2)];
    for (int i = 0; i < count; ++i) {
      k[i] = triangle((xmin + i - center + 0.5) / filterscale);
      sum += k[i];
    }
    if (sum != 0) {
      for (int i = 0; i < count; ++i) k[i] /= sum;
    } else {
      k[0] = 1;
    }
    // Trailing zero weights need no tap.
    int used = count;
    while (used > 1 && k[used - 1] == 0) --used;
    xmins[o] = xmin;
    counts[o] = used;
    taps = std::max(taps, used);
  }
  taps = std::min(taps, span);
  t.taps = taps;
  const int pairs = (taps + 1) / 2;
  t.pair_weights.assign(static_cast<std::size_t>(a.n) * pairs * 8, 0);
  t.lo = a.hi;
  t.hi = a.lo;
  for (int o = 0; o < a.n; ++o) {
    // Every output reads `taps` pixels; near the upper bound the window starts earlier and the
    // extra leading taps weigh 0.
    const int first = std::max(std::min(xmins[o], a.hi - taps), a.lo);
    const int offset = xmins[o] - first;
    const double* k = &all[static_cast<std::size_t>(o) * (max_taps + 2)];
    for (int i = 0; i < counts[o] && offset + i < taps; ++i) {
      const double scaled = k[i] * (1 << kWeightBits);  // 1.0 is 16384, within int16
      const auto w = static_cast<std::int16_t>(scaled < 0 ? scaled - 0.5 : scaled + 0.5);
      const int tap = offset + i;
      std::int16_t* pair = &t.pair_weights[(static_cast<std::size_t>(o) * pairs + tap / 2) * 8];
      for (int c = 0; c < 3; ++c) pair[c * 2 + tap % 2] = w;
    }
    t.first[o] = first;
    t.lo = std::min(t.lo, first);
    t.hi = std::max(t.hi, first + taps);
  }
}

void resample_into(const PixelView& src, const AxisTaps& x, const AxisTaps& y,
                   const OutputFormat& format, const Tensor& out) {
  const int channels = src.channels;
  const int width = x.n, height = y.n;
  const std::ptrdiff_t row_len = static_cast<std::ptrdiff_t>(width) * channels;
  // The channel each source channel goes to.
  std::array<int, 4> to{0, 1, 2, 3};
  if (channels >= 3 && src.bgr != (format.spec.order == ChannelOrder::bgr)) to = {2, 1, 0, 3};

  auto source_row = [&](int sy) {
    return src.data + static_cast<std::ptrdiff_t>(sy - src.y0) * src.stride +
           static_cast<std::ptrdiff_t>(x.lo - src.x0) * channels;
  };
  // Row by row: the vertical pass over the columns the horizontal one reads, then the horizontal
  // pass, then the output; both scratch rows stay in the cache.
  const std::ptrdiff_t in_len = static_cast<std::ptrdiff_t>(x.hi - x.lo) * channels;
  thread_local std::vector<std::int32_t> acc;
  thread_local std::vector<std::uint8_t> vertical, horizontal;
  acc.resize(static_cast<std::size_t>(in_len));
  vertical.resize(static_cast<std::size_t>(in_len));
  horizontal.resize(static_cast<std::size_t>(row_len) + 4);  // + the SIMD kernel's extra byte
  auto output_row = [&](int oy) -> const std::uint8_t* {
    const std::uint8_t* in = source_row(y.first[oy]);
    if (!y.identity) {
      vertical_row(in, src.stride,
                   &y.pair_weights[static_cast<std::size_t>(oy) * ((y.taps + 1) / 2) * 8], y.taps,
                   static_cast<int>(in_len), acc.data(), vertical.data());
      in = vertical.data();
    }
    if (x.identity) return in;
    switch (channels) {
      case 1:
        horizontal_one<1>(in, x, horizontal.data());
        break;
      case 3:
        horizontal_one<3>(in, x, horizontal.data());
        break;
      default:
        horizontal_one<4>(in, x, horizontal.data());
        break;
    }
    return horizontal.data();
  };
  auto each_row = [&](auto write) {
    for (int oy = 0; oy < height; ++oy) write(output_row(oy), oy);
  };

  const bool chw = format.spec.chw;
  switch (format.spec.dtype) {
    case DType::uint8: {
      auto* base = reinterpret_cast<std::uint8_t*>(out.data());
      each_row([&](const std::uint8_t* row, int oy) {
        if (!chw && !format.flip && to[0] == 0) {
          std::memcpy(base + oy * row_len, row, static_cast<std::size_t>(row_len));
          return;
        }
        write_row(row, oy, width, height, channels, to, format.flip, chw, base,
                  [](int, std::uint8_t v) { return v; });
      });
      return;
    }
    case DType::float32: {
      const auto& table = value_table<float>(format);
      auto* base = reinterpret_cast<float*>(out.data());
#if defined(__x86_64__)
      if (chw && (reinterpret_cast<std::uintptr_t>(base) & 15) == 0 && width % 4 == 0) {
        // Planes of a batch row, written once and read by another thread: each plane row is
        // made in a scratch row, then streamed past the cache (no read of the destination's
        // lines first, half the memory traffic).
        thread_local std::vector<float> line;
        line.resize(static_cast<std::size_t>(width) + 4);
        float* tmp = line.data();
        const bool gather = channels == 3 && width % 16 == 0 &&
                            (reinterpret_cast<std::uintptr_t>(base) & 31) == 0 && have_avx2();
        each_row([&](const std::uint8_t* row, int oy) {
          if (gather) {
            float* planes[3];
            const float* values[3];
            for (int c = 0; c < 3; ++c) {
              planes[c] = base + (static_cast<std::ptrdiff_t>(to[c]) * height + oy) * width;
              values[c] = table.values[to[c]].data();
            }
            rgb_planes_avx2(row, width, values, planes, format.flip);
            return;
          }
          for (int c = 0; c < channels; ++c) {
            const float* value = table.values[to[c]].data();
            if (format.flip) {
              for (int x = 0; x < width; ++x) tmp[width - 1 - x] = value[row[x * channels + c]];
            } else {
              for (int x = 0; x < width; ++x) tmp[x] = value[row[x * channels + c]];
            }
            float* dst = base + (static_cast<std::ptrdiff_t>(to[c]) * height + oy) * width;
            for (int x = 0; x < width; x += 4) _mm_stream_ps(dst + x, _mm_loadu_ps(tmp + x));
          }
        });
        _mm_sfence();  // the streamed stores are visible before the tensor is handed on
        return;
      }
#endif
      each_row([&](const std::uint8_t* row, int oy) {
        write_row(row, oy, width, height, channels, to, format.flip, chw, base,
                  [&](int c, std::uint8_t v) { return table.values[c][v]; });
      });
      return;
    }
    case DType::float16: {
      const auto& table = value_table<std::uint16_t>(format);
      auto* base = reinterpret_cast<std::uint16_t*>(out.data());
      each_row([&](const std::uint8_t* row, int oy) {
        write_row(row, oy, width, height, channels, to, format.flip, chw, base,
                  [&](int c, std::uint8_t v) { return table.values[c][v]; });
      });
      return;
    }
    default:
      throw Error::invalid_argument("image output dtype " +
                                    std::string(to_string(format.spec.dtype)) +
                                    " (use uint8, float16 or float32)");
  }
}

}  // namespace wds::detail
