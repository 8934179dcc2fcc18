// Decoding part of a JPEG with libjpeg-turbo's own API (private to codecs/image.cpp): the
// rows and columns a crop needs, at 1/1, 1/2, 1/4 or 1/8 scale. Columns are cut with
// jpeg_crop_scanline (whole iMCUs, so the region may start left of where it was asked), the rows
// above with jpeg_skip_scanlines (entropy-decoded, not transformed), and decoding stops after the
// last row asked for.
//
// Thread safety: one JpegWindow per thread (image.cpp keeps one per thread and reuses it).
#pragma once

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace wds::detail {

class JpegWindow {
 public:
  JpegWindow();
  ~JpegWindow();
  JpegWindow(const JpegWindow&) = delete;
  JpegWindow& operator=(const JpegWindow&) = delete;

  // Reads the headers of `data` (which must outlive the decode). False, with error(), if they
  // are malformed.
  bool open(std::span<const std::byte> data);
  int width() const;
  int height() const;
  // False for CMYK and YCCK images: libjpeg cannot convert them to RGB (OpenCV decodes them).
  bool converts_to_rgb() const;
  // The image's size at 1/denom scale (denom 1, 2, 4 or 8): ceil(size / denom).
  int scaled_width(int denom) const;
  int scaled_height(int denom) const;

  struct Region {
    const std::uint8_t* data = nullptr;
    std::ptrdiff_t stride = 0;
    int x0 = 0;  // the scaled image's column and row of data's first pixel
    int y0 = 0;
    int cols = 0;
    int rows = 0;
  };
  // Decodes columns [x0, x1) and rows [y0, y1) of the image at 1/denom scale with `channels`
  // (1 grey, 3 colour, 4 colour + opaque alpha) in RGB or BGR order, into a buffer of this
  // object's (valid until the next call). The region covers at least the one asked for.
  // False, with error(), if libjpeg fails or the data ends before the last row.
  bool decode(int denom, int channels, bool bgr, int x0, int x1, int y0, int y1, Region& out);
  // Ends the current image (after open, whether or not decode ran).
  void close();

  const std::string& error() const { return error_; }

 private:
  bool read_region(int channels, int x0, int x1, int y0, int y1, Region& out);

  struct State;
  std::unique_ptr<State> s_;
  std::vector<std::uint8_t> pixels_;
  std::string error_;
};

}  // namespace wds::detail
