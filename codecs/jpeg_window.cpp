// libjpeg-turbo's decompressor behind JpegWindow (codecs/jpeg_window.hpp).
//
// libjpeg reports fatal errors through error_exit, which must not return: it longjmps back to
// the call that started the libjpeg work. Those functions create no object with a destructor
// after their setjmp, so the jump skips nothing but libjpeg's own C frames.
#include "codecs/jpeg_window.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

namespace wds::detail {

namespace {

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void on_fatal_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

}  // namespace

struct JpegWindow::State {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  bool started = false;  // between jpeg_read_header and close()
};

JpegWindow::JpegWindow() : s_(std::make_unique<State>()) {
  s_->cinfo.err = jpeg_std_error(&s_->err.pub);
  s_->err.pub.error_exit = on_fatal_error;
  // jpeg_create_decompress reports errors only for a version mismatch or no memory; both fatal.
  if (setjmp(s_->err.jump)) std::abort();
  jpeg_create_decompress(&s_->cinfo);
}

JpegWindow::~JpegWindow() {
  jpeg_destroy_decompress(&s_->cinfo);
}

bool JpegWindow::open(std::span<const std::byte> data) {
  close();
  error_.clear();
  jpeg_decompress_struct* c = &s_->cinfo;
  s_->err.pub.num_warnings = 0;
  if (setjmp(s_->err.jump)) {
    jpeg_abort_decompress(c);
    error_ = s_->err.message;
    return false;
  }
  jpeg_mem_src(c, reinterpret_cast<const unsigned char*>(data.data()),
               static_cast<unsigned long>(data.size()));
  s_->started = true;
  if (jpeg_read_header(c, TRUE) != JPEG_HEADER_OK) {
    jpeg_abort_decompress(c);
    s_->started = false;
    error_ = "no image in the JPEG stream (tables only)";
    return false;
  }
  return true;
}

int JpegWindow::width() const {
  return static_cast<int>(s_->cinfo.image_width);
}
int JpegWindow::height() const {
  return static_cast<int>(s_->cinfo.image_height);
}
bool JpegWindow::converts_to_rgb() const {
  return s_->cinfo.jpeg_color_space != JCS_CMYK && s_->cinfo.jpeg_color_space != JCS_YCCK;
}
int JpegWindow::scaled_width(int denom) const {
  return (width() + denom - 1) / denom;
}
int JpegWindow::scaled_height(int denom) const {
  return (height() + denom - 1) / denom;
}

void JpegWindow::close() {
  if (s_->started) jpeg_abort_decompress(&s_->cinfo);
  s_->started = false;
}

bool JpegWindow::decode(int denom, int channels, bool bgr, int x0, int x1, int y0, int y1,
                        Region& out) {
  jpeg_decompress_struct* c = &s_->cinfo;
  error_.clear();
  c->scale_num = 1;
  c->scale_denom = static_cast<unsigned>(denom);
  c->out_color_space = channels == 1   ? JCS_GRAYSCALE
                       : channels == 3 ? (bgr ? JCS_EXT_BGR : JCS_EXT_RGB)
                                       : (bgr ? JCS_EXT_BGRA : JCS_EXT_RGBA);
  if (setjmp(s_->err.jump)) {
    close();
    error_ = s_->err.message;
    return false;
  }
  return read_region(channels, x0, x1, y0, y1, out);
}

// The libjpeg calls of decode(), whose setjmp catches their errors: in a frame of their own, so
// that the variables they change are not the ones the jump returns to.
bool JpegWindow::read_region(int channels, int x0, int x1, int y0, int y1, Region& out) {
  jpeg_decompress_struct* c = &s_->cinfo;
  jpeg_start_decompress(c);
  const int full_width = static_cast<int>(c->output_width);
  const int full_height = static_cast<int>(c->output_height);
  x0 = std::clamp(x0, 0, full_width - 1);
  x1 = std::clamp(x1, x0 + 1, full_width);
  y0 = std::clamp(y0, 0, full_height - 1);
  y1 = std::clamp(y1, y0 + 1, full_height);
  JDIMENSION xoffset = static_cast<JDIMENSION>(x0);
  JDIMENSION width = static_cast<JDIMENSION>(x1 - x0);
  if (x0 > 0 || x1 < full_width) jpeg_crop_scanline(c, &xoffset, &width);
  if (y0 > 0) jpeg_skip_scanlines(c, static_cast<JDIMENSION>(y0));
  const std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(width) * channels;
  pixels_.resize(static_cast<std::size_t>(stride) * static_cast<std::size_t>(y1 - y0));
  while (c->output_scanline < static_cast<JDIMENSION>(y1)) {
    JSAMPROW rows[8];
    const JDIMENSION want =
        std::min<JDIMENSION>(8, static_cast<JDIMENSION>(y1) - c->output_scanline);
    for (JDIMENSION i = 0; i < want; ++i) {
      rows[i] = pixels_.data() + (c->output_scanline - static_cast<JDIMENSION>(y0) + i) * stride;
    }
    if (jpeg_read_scanlines(c, rows, want) == 0) break;  // suspended: cannot happen from memory
  }
  const int got = static_cast<int>(c->output_scanline) - y0;
  close();
  out.data = pixels_.data();
  out.stride = stride;
  out.x0 = static_cast<int>(xoffset);
  out.y0 = y0;
  out.cols = static_cast<int>(width);
  out.rows = got;
  if (got == y1 - y0) return true;
  error_ =
      "JPEG data ends early (" + std::to_string(got) + " of " + std::to_string(y1 - y0) + " rows)";
  return false;
}

}  // namespace wds::detail
