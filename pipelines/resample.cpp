// The antialiased resize and the fused output stage (pipelines/resample.hpp).
//
// Why not cv::resize: INTER_AREA is slow for the non-integer factors photos need (500x375 ->
// 341x256 cost more than the decode), and INTER_LINEAR does not antialias. This is PIL's
// algorithm (what torchvision applies to PIL images): cheap because the taps are precomputed per
// axis and the vertical pass, the bulk of the work, vectorises across a whole row.
#include "pipelines/resample.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "wds/error.hpp"

namespace wds::detail {

namespace {

constexpr int kWeightBits = 22;  // PIL's PRECISION_BITS for 8-bit images
constexpr std::int32_t kHalf = std::int32_t{1} << (kWeightBits - 1);

// The triangle (bilinear) filter; support 1.
double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

std::uint8_t clip8(std::int32_t acc) {
  const std::int32_t v = acc >> kWeightBits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// The horizontal pass over one row: `row` points at source column x.lo.
template <int C, int Taps>
void horizontal_row(const std::uint8_t* row, const AxisTaps& x, std::uint8_t* out) {
  const int taps = Taps ? Taps : x.taps;
  const std::int32_t* w = x.weights.data();
  for (int o = 0; o < x.n; ++o, w += taps) {
    const std::uint8_t* p = row + static_cast<std::ptrdiff_t>(x.first[o] - x.lo) * C;
    std::int32_t acc[C];
    for (int c = 0; c < C; ++c) acc[c] = kHalf;
    for (int t = 0; t < taps; ++t) {
      for (int c = 0; c < C; ++c) acc[c] += std::int32_t{p[t * C + c]} * w[t];
    }
    for (int c = 0; c < C; ++c) out[o * C + c] = clip8(acc[c]);
  }
}

template <int C>
void horizontal_rows(const std::uint8_t* rows, std::ptrdiff_t stride, int count, const AxisTaps& x,
                     std::uint8_t* out) {
  auto run = [&](auto kernel) {
    for (int r = 0; r < count; ++r) {
      kernel(rows + r * stride, x, out + static_cast<std::ptrdiff_t>(r) * x.n * C);
    }
  };
  // Fixed tap counts unroll: the common shrink factors (1-3.5) need 2 to 8.
  switch (x.taps) {
    case 2:
      return run(horizontal_row<C, 2>);
    case 3:
      return run(horizontal_row<C, 3>);
    case 4:
      return run(horizontal_row<C, 4>);
    case 5:
      return run(horizontal_row<C, 5>);
    case 6:
      return run(horizontal_row<C, 6>);
    case 7:
      return run(horizontal_row<C, 7>);
    case 8:
      return run(horizontal_row<C, 8>);
    default:
      return run(horizontal_row<C, 0>);
  }
}

// The vertical pass for one output row: `len` values, each the weighted sum of `taps` rows.
__attribute__((target_clones("avx2", "default"))) void vertical_row(const std::uint8_t* first_row,
                                                                    std::ptrdiff_t stride,
                                                                    const std::int32_t* w, int taps,
                                                                    int len, std::int32_t* acc,
                                                                    std::uint8_t* out) {
  for (int i = 0; i < len; ++i) acc[i] = kHalf;
  for (int t = 0; t < taps; ++t) {
    const std::int32_t wt = w[t];
    if (wt == 0) continue;
    const std::uint8_t* r = first_row + t * stride;
    for (int i = 0; i < len; ++i) acc[i] += std::int32_t{r[i]} * wt;
  }
  for (int i = 0; i < len; ++i) {
    const std::int32_t v = acc[i] >> kWeightBits;
    out[i] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

std::uint16_t half_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
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

AxisTaps plan_axis(const ResizeAxis& a) {
  AxisTaps t;
  t.n = a.n;
  if (a.n <= 0 || a.hi <= a.lo || !(a.scale > 0)) {
    throw Error(ErrorCode::invalid_argument, "", "", "image resize: empty axis");
  }
  t.first.resize(static_cast<std::size_t>(a.n));
  const auto start = static_cast<std::int64_t>(a.start);
  if (a.scale == 1.0 && static_cast<double>(start) == a.start && start >= a.lo &&
      start + a.n <= a.hi) {
    t.identity = true;
    t.taps = 1;
    t.weights.assign(static_cast<std::size_t>(a.n), std::int32_t{1} << kWeightBits);
    for (int o = 0; o < a.n; ++o) t.first[o] = static_cast<int>(start) + o;
    t.lo = static_cast<int>(start);
    t.hi = t.lo + a.n;
    return t;
  }
  const double filterscale = std::max(a.scale, 1.0);
  const double support = filterscale;  // the triangle's support (1) at the filter's scale
  const int span = a.hi - a.lo;
  const int max_taps = std::min(static_cast<int>(std::ceil(support)) * 2 + 1, span);
  std::vector<double> w(static_cast<std::size_t>(max_taps) + 2);
  std::vector<int> xmins(static_cast<std::size_t>(a.n)), counts(static_cast<std::size_t>(a.n));
  std::vector<double> all(static_cast<std::size_t>(a.n) * (max_taps + 2));
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
  t.weights.assign(static_cast<std::size_t>(a.n) * taps, 0);
  t.lo = a.hi;
  t.hi = a.lo;
  for (int o = 0; o < a.n; ++o) {
    // Every output reads `taps` pixels; near the upper bound the window starts earlier and the
    // extra leading taps weigh 0.
    const int first = std::max(std::min(xmins[o], a.hi - taps), a.lo);
    const int offset = xmins[o] - first;
    const double* k = &all[static_cast<std::size_t>(o) * (max_taps + 2)];
    for (int i = 0; i < counts[o] && offset + i < taps; ++i) {
      const double scaled = k[i] * (1 << kWeightBits);
      t.weights[static_cast<std::size_t>(o) * taps + offset + i] =
          static_cast<std::int32_t>(scaled < 0 ? scaled - 0.5 : scaled + 0.5);
    }
    t.first[o] = first;
    t.lo = std::min(t.lo, first);
    t.hi = std::max(t.hi, first + taps);
  }
  return t;
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
    return src.data + static_cast<std::ptrdiff_t>(sy - src.y0) * src.stride;
  };
  // Horizontal pass over the rows the vertical one reads, into `rows` (stride rows_stride).
  thread_local std::vector<std::uint8_t> horizontal;
  const std::uint8_t* rows = nullptr;
  std::ptrdiff_t rows_stride = 0;
  if (x.identity) {
    rows = source_row(y.lo) + static_cast<std::ptrdiff_t>(x.first[0] - src.x0) * channels;
    rows_stride = src.stride;
  } else {
    const int count = y.hi - y.lo;
    horizontal.resize(static_cast<std::size_t>(count) * row_len);
    const std::uint8_t* first =
        source_row(y.lo) + static_cast<std::ptrdiff_t>(x.lo - src.x0) * channels;
    switch (channels) {
      case 1:
        horizontal_rows<1>(first, src.stride, count, x, horizontal.data());
        break;
      case 3:
        horizontal_rows<3>(first, src.stride, count, x, horizontal.data());
        break;
      default:
        horizontal_rows<4>(first, src.stride, count, x, horizontal.data());
        break;
    }
    rows = horizontal.data();
    rows_stride = row_len;
  }

  thread_local std::vector<std::int32_t> acc;
  thread_local std::vector<std::uint8_t> vertical;
  acc.resize(static_cast<std::size_t>(row_len));
  vertical.resize(static_cast<std::size_t>(row_len));
  auto each_row = [&](auto write) {
    for (int oy = 0; oy < height; ++oy) {
      const std::uint8_t* first =
          rows + static_cast<std::ptrdiff_t>(y.first[oy] - y.lo) * rows_stride;
      if (y.identity) {
        write(first, oy);
        continue;
      }
      vertical_row(first, rows_stride, &y.weights[static_cast<std::size_t>(oy) * y.taps], y.taps,
                   static_cast<int>(row_len), acc.data(), vertical.data());
      write(vertical.data(), oy);
    }
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
      throw Error(ErrorCode::invalid_argument, "", "",
                  "image output dtype " + std::string(to_string(format.spec.dtype)) +
                      " (use uint8, float16 or float32)");
  }
}

}  // namespace wds::detail
