// The image codec's window decode (codecs/jpeg_window.cpp, libjpeg-turbo's own API) and the
// resize that reads its output (codecs/resample.cpp), on hostile JPEGs.
//
// Input: a JPEG. Its header picks a RandomResizedCrop(16) window (seed: the input's size) and
// its DCT scale (1/2 to 1/8 for large windows) with the codec's own functions
// (codecs/resample.hpp). Checks: no crash, out-of-bounds read, UB or leak (libjpeg's errors
// longjmp out of its C frames into JpegWindow); a decode that succeeds covers the rows and
// columns the resize reads; the resize writes its 3x16x16 float tensor; a failed decode says
// why. The fuzz build has no OpenCV, so image.cpp itself is not linked: this drives the same
// calls it makes.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "codecs/jpeg_window.hpp"
#include "codecs/resample.hpp"
#include "wds/image.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static wds::detail::JpegWindow jpeg;  // reused from image to image, as the codec does
  if (!jpeg.open(wds_fuzz::as_bytes(data, size))) return 0;
  const std::int64_t pixels = std::int64_t{jpeg.width()} * jpeg.height();
  if (!jpeg.converts_to_rgb() || pixels > (std::int64_t{1} << 22)) {  // the codec's own limit
    jpeg.close();                                                     // is 2^30; keep runs fast
    return 0;
  }
  constexpr int kOut = 16;
  const wds::CropBox b =
      wds::random_resized_crop_box({jpeg.width(), jpeg.height()}, {.size = kOut}, size);
  // As codecs/image.cpp plans a RandomResizedCrop: the window, then its DCT scale.
  const wds::detail::ResizeAxis x{double(b.x), double(b.width) / kOut, b.x, b.x + b.width, kOut};
  const wds::detail::ResizeAxis y{double(b.y), double(b.height) / kOut, b.y, b.y + b.height, kOut};
  const int k = wds::detail::dct_denominator(x, y);
  wds::detail::AxisTaps tx, ty;
  wds::detail::plan_axis(wds::detail::scaled_axis(x, k, jpeg.scaled_width(k)), tx);
  wds::detail::plan_axis(wds::detail::scaled_axis(y, k, jpeg.scaled_height(k)), ty);
  const bool bgr = size % 2 != 0;  // either order
  wds::detail::JpegWindow::Region r;
  if (!jpeg.decode(k, 3, bgr, tx.lo - 1, tx.hi + 1, ty.lo - 1, ty.hi + 1, r)) {
    wds_fuzz::check(!jpeg.error().empty(), "a failed decode says why");
    return 0;
  }
  wds_fuzz::check(
      r.x0 <= tx.lo && r.x0 + r.cols >= tx.hi && r.y0 <= ty.lo && r.y0 + r.rows >= ty.hi,
      "the decoded region covers what the resize reads");
  const wds::detail::PixelView view{r.data, r.stride, r.x0, r.y0, r.cols, r.rows, 3, bgr};
  wds::ImageSpec spec = wds::parse_image_spec("torchrgb");
  const wds::Tensor out(wds::DType::float32, {3, kOut, kOut});
  wds::detail::resample_into(view, tx, ty, {spec, true, nullptr, nullptr}, out);
  return 0;
}
