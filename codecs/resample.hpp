// The image codec's resize and output stage (private to codecs/image.cpp): an antialiased
// separable resize of 8-bit pixels (a triangle filter whose support grows with the shrink factor,
// as PIL's BILINEAR and torchvision's antialias=True), whose last pass writes each output row
// straight into the tensor: channel order, horizontal flip, normalisation, layout (HWC or CHW) and
// dtype (uint8, float16, float32) in one go.
//
// Weights are 14-bit fixed point (PIL uses 22), precomputed per axis. The vertical pass runs
// first (AVX2 multiply-adds of row pairs across the row), then the horizontal one on only the
// output rows (SSE4.1 multiply-adds of tap pairs for RGB); each rounds to 8 bits. PIL runs them
// the other way round: values are within 1 of PIL's (of the exact result, tests say).
//
// Thread safety: plain functions on the caller's buffers; scratch buffers are per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "wds/image.hpp"
#include "wds/tensor.hpp"

namespace wds::detail {

// One axis of a resize, in source pixels: output pixel o (0 <= o < n) is centred on source
// coordinate start + (o + 0.5) * scale, and its filter reads only source pixels in [lo, hi).
struct ResizeAxis {
  double start = 0;
  double scale = 1;
  int lo = 0;
  int hi = 0;
  int n = 0;
};

// `axis` (in a JPEG's full-size pixels) at 1/k scale, the JPEG's scaled size being
// `scaled_size`: libjpeg's scaled pixel p covers full pixels [p * k, (p + 1) * k).
ResizeAxis scaled_axis(const ResizeAxis& axis, int k, int scaled_size);
// The largest DCT scaling (8, 4 or 2; 1 for none) that still leaves at least one source pixel
// per output pixel each way (libjpeg-turbo vectorises only these; other M/8 scales were slower
// than none).
int dct_denominator(const ResizeAxis& x, const ResizeAxis& y);

// An axis's filter taps: output o reads `taps` source pixels from first[o] (all inside [lo, hi);
// unused taps have weight 0).
struct AxisTaps {
  int n = 0;
  int taps = 0;
  int lo = 0;  // the source pixels read: [lo, hi)
  int hi = 0;
  bool identity = false;  // output o is source pixel first[o], unchanged
  std::vector<int> first;
  // The weights, 14 fractional bits, in pairs of taps laid out for a 3-channel SIMD
  // multiply-add: per output, per pair p, {w[2p], w[2p+1]} three times and {0, 0}.
  std::vector<std::int16_t> pair_weights;
};

// Plans `axis` into `taps`, reusing its buffers (no allocation once they are large enough).
void plan_axis(const ResizeAxis& axis, AxisTaps& taps);

// 8-bit pixels with interleaved channels; (x0, y0) is the source coordinate of data's first pixel.
struct PixelView {
  const std::uint8_t* data = nullptr;
  std::ptrdiff_t stride = 0;  // bytes from one row to the next
  int x0 = 0;
  int y0 = 0;
  int cols = 0;
  int rows = 0;
  int channels = 3;  // 1, 3 or 4, as the spec's
  bool bgr = false;  // colour channels in B, G, R order
};

// How output rows are written into `out`, a tensor of shape output_shape(spec, rows, cols).
struct OutputFormat {
  ImageSpec spec;
  bool flip = false;
  const std::vector<float>* mean = nullptr;  // Normalize; null or empty: value / 255 for floats
  const std::vector<float>* std = nullptr;
};

// Resizes the source pixels the taps read (they must lie inside `src`) and writes the result.
void resample_into(const PixelView& src, const AxisTaps& x, const AxisTaps& y,
                   const OutputFormat& format, const Tensor& out);

}  // namespace wds::detail
