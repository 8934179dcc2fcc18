// The image codec: WebDataset's image specs on top of OpenCV's imgcodecs. The only file of the
// library that includes OpenCV, and only when built with WDS_WITH_OPENCV.
//
// Decoding avoids copies: the cv::Mat that cv::imdecode (or cv::resize) allocates becomes the
// tensor's storage whenever its layout is the one asked for, a BGR to RGB swap is done in place,
// and conversions that must write a new buffer (alpha added, float, planes) write straight into
// the tensor.
//
// Given a destination (ImageAllocator, a row of a batch), cv::resize writes into a thread_local
// scratch Mat whose buffer it reuses when size and type match, the crop is a view, and the final
// conversion writes into the destination: the only buffer per image is the one cv::imdecode
// makes, freed on this thread. A scratch buffer never becomes a tensor's storage: if the
// allocator declines, the scratch lets go of it (or it is copied) first.
#include "wds/image.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "codecs/formats.hpp"
#include "codecs/jpeg_window.hpp"
#include "codecs/resample.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

#ifdef WDS_WITH_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#ifdef WDS_IMGCODECS_SONAME
#include <dlfcn.h>
#endif
#endif

namespace wds {

namespace {

Error invalid(std::string what) {
  return Error::invalid_argument(std::move(what));
}

struct NamedSpec {
  std::string_view name;
  ImageSpec spec;
};

constexpr ImageSpec make_spec(int channels, ChannelOrder order, DType dtype, bool chw) {
  ImageSpec s;
  s.channels = channels;
  s.order = order;
  s.dtype = dtype;
  s.chw = chw;
  return s;
}

constexpr ChannelOrder kRgb = ChannelOrder::rgb;
constexpr ChannelOrder kBgr = ChannelOrder::bgr;
constexpr DType kU8 = DType::uint8;
constexpr DType kF32 = DType::float32;

constexpr std::array kSpecs{
    NamedSpec{"l8", make_spec(1, kRgb, kU8, false)},
    NamedSpec{"rgb8", make_spec(3, kRgb, kU8, false)},
    NamedSpec{"rgba8", make_spec(4, kRgb, kU8, false)},
    NamedSpec{"bgr8", make_spec(3, kBgr, kU8, false)},
    NamedSpec{"l", make_spec(1, kRgb, kF32, false)},
    NamedSpec{"rgb", make_spec(3, kRgb, kF32, false)},
    NamedSpec{"rgba", make_spec(4, kRgb, kF32, false)},
    NamedSpec{"bgr", make_spec(3, kBgr, kF32, false)},
    NamedSpec{"torchl8", make_spec(1, kRgb, kU8, true)},
    NamedSpec{"torchrgb8", make_spec(3, kRgb, kU8, true)},
    NamedSpec{"torchrgba8", make_spec(4, kRgb, kU8, true)},
    NamedSpec{"torchl", make_spec(1, kRgb, kF32, true)},
    NamedSpec{"torchrgb", make_spec(3, kRgb, kF32, true)},
    NamedSpec{"torch", make_spec(3, kRgb, kF32, true)},
    NamedSpec{"torchrgba", make_spec(4, kRgb, kF32, true)},
};

// ---------------------------------------------------------------------------------------------
// JPEG headers

struct JpegHeader {
  std::optional<ImageSize> size;  // from the first SOFn segment
  std::size_t scan = 0;           // offset of the first SOS marker; 0 if not reached
};

std::uint8_t byte_at(std::span<const std::byte> d, std::size_t i) {
  return static_cast<std::uint8_t>(d[i]);
}

bool has_jpeg_signature(std::span<const std::byte> d) {
  // FF D8 (SOI) and the FF of the next marker: what OpenCV and libjpeg look for.
  return d.size() >= 3 && byte_at(d, 0) == 0xFF && byte_at(d, 1) == 0xD8 && byte_at(d, 2) == 0xFF;
}

// Walks the marker segments after SOI up to the frame header (SOFn) or, with to_scan, up to the
// start of the first scan (SOS). Every read is bounds-checked.
JpegHeader parse_jpeg(std::span<const std::byte> d, bool to_scan) {
  JpegHeader h;
  if (!has_jpeg_signature(d)) return h;
  const std::size_t n = d.size();
  std::size_t pos = 2;
  while (pos < n) {
    // A marker is one or more 0xFF and a code. Bytes before it are garbage that libjpeg skips
    // with a warning; so do we.
    while (pos < n && byte_at(d, pos) != 0xFF) ++pos;
    while (pos < n && byte_at(d, pos) == 0xFF) ++pos;
    if (pos >= n) break;
    const std::size_t marker_at = pos - 1;
    const std::uint8_t code = byte_at(d, pos++);
    if (code == 0x00) continue;                                    // a stuffed byte: not a marker
    if (code == 0x01 || (code >= 0xD0 && code <= 0xD7)) continue;  // TEM, RSTn: no length
    if (code == 0xD8 || code == 0xD9) break;  // SOI again, or EOI before any scan: malformed
    if (pos + 2 > n) break;
    const std::size_t length = std::size_t{byte_at(d, pos)} << 8 | byte_at(d, pos + 1);
    if (length < 2) break;
    if (code == 0xDA) {  // SOS: the entropy-coded data follows
      if (h.size) h.scan = marker_at;
      break;
    }
    const bool sof = code >= 0xC0 && code <= 0xCF && code != 0xC4 && code != 0xC8 && code != 0xCC;
    if (sof && !h.size) {
      // length(2) precision(1) height(2) width(2) components(1) ...
      if (length < 8 || pos + 7 > n) break;
      const int height = byte_at(d, pos + 3) << 8 | byte_at(d, pos + 4);
      const int width = byte_at(d, pos + 5) << 8 | byte_at(d, pos + 6);
      if (width == 0 || height == 0) break;  // height 0: defined later by DNL; not supported
      h.size = ImageSize{width, height};
      if (!to_scan) break;
    }
    pos += length;
  }
  return h;
}

#ifdef WDS_WITH_OPENCV

// What encode_image writes for an image codec of the format table (codecs/formats.hpp).
struct EncodeFormat {
  detail::Codec codec;
  std::string_view cv_ext;  // the extension OpenCV picks its encoder by
  bool alpha;               // can store RGBA
  int quality_param;        // cv::IMWRITE_* for the quality, or -1
  int default_quality;
  int min_quality;
};

constexpr std::array kEncodeFormats{
    EncodeFormat{detail::Codec::jpeg, ".jpg", false, cv::IMWRITE_JPEG_QUALITY, 100, 0},
    EncodeFormat{detail::Codec::png, ".png", true, -1, 0, 0},
    EncodeFormat{detail::Codec::webp, ".webp", true, cv::IMWRITE_WEBP_QUALITY, 80, 1},
    // OpenCV's .pnm encoder writes P5 for grey and P6 for colour, as PIL's PPM plugin does for
    // ppm, pgm, pbm and pnm (OpenCV's .ppm/.pgm/.pbm insist on one channel count each).
    EncodeFormat{detail::Codec::pnm, ".pnm", false, -1, 0, 0},
    EncodeFormat{detail::Codec::bmp, ".bmp", true, -1, 0, 0},
    EncodeFormat{detail::Codec::tiff, ".tiff", true, -1, 0, 0},
};

// Whether an EOI marker (FF D9) follows the first scan: a JPEG cut short has none (libjpeg would
// pad it with grey and only warn). Bytes after the EOI are allowed.
bool has_eoi_after(std::span<const std::byte> d, std::size_t scan) {
  for (std::size_t i = d.size(); i >= scan + 2; --i) {
    if (byte_at(d, i - 1) == 0xD9 && byte_at(d, i - 2) == 0xFF) return true;
  }
  return false;
}

// torchvision's Resize(int): the shorter side becomes `size`, the longer one
// int(size * long / short), i.e. truncated.
ImageSize resized_size(std::int64_t width, std::int64_t height, int size) {
  if (width <= height) {
    return {size, static_cast<int>(std::min<std::int64_t>(size * height / width, INT_MAX))};
  }
  return {static_cast<int>(std::min<std::int64_t>(size * width / height, INT_MAX)), size};
}

void check_spec(const ImageSpec& spec) {
  if (spec.channels != 1 && spec.channels != 3 && spec.channels != 4) {
    throw invalid("image spec with " + std::to_string(spec.channels) + " channels (use 1, 3 or 4)");
  }
  if (spec.dtype != DType::uint8 && spec.dtype != DType::float16 && spec.dtype != DType::float32) {
    throw invalid("image spec with dtype " + std::string(to_string(spec.dtype)) +
                  " (use uint8, float16 or float32)");
  }
}

[[noreturn]] void corrupt(std::span<const std::byte> data, std::string_view url,
                          std::string_view member, const std::string& why) {
  throw Error::corrupt_data(
      std::string(url), std::string(member),
      "cannot decode image (" + std::to_string(data.size()) + " bytes): " + why);
}

// A tensor that owns `m`'s (continuous) buffer: no copy.
Tensor adopt(cv::Mat m, DType dtype, Tensor::Shape shape) {
  if (!m.isContinuous()) m = m.clone();
  auto holder = std::make_shared<cv::Mat>(std::move(m));
  auto* data = reinterpret_cast<std::byte*>(holder->data);
  return Tensor(dtype, std::move(shape), std::move(holder), data);
}

// A cv::Mat header over a tensor's storage (h x w, `type`).
cv::Mat wrap(const Tensor& t, int rows, int cols, int type) {
  return cv::Mat(rows, cols, type, t.data());
}

// IMREAD_UNCHANGED may give 16-bit or float pixels; the specs are 8-bit.
void to_8bit(cv::Mat& img) {
  switch (img.depth()) {
    case CV_8U:
      return;
    case CV_16U:
      img.convertTo(img, CV_8U, 1.0 / 257.0);
      return;
    case CV_32F:
    case CV_64F:
      img.convertTo(img, CV_8U, 255.0);
      return;
    default:
      img.convertTo(img, CV_8U);
  }
}

// Brings a decoded image to the channels the spec builds on: grey for 1, BGR for 3, BGR or BGRA
// for 4 (an alpha channel is added on output). Only images read with IMREAD_UNCHANGED (rgba
// specs) can differ from that.
void normalize_channels(cv::Mat& img, int channels) {
  const int have = img.channels();
  cv::Mat out;
  if (channels == 1) {
    if (have == 1) return;
    if (have == 2) {
      cv::extractChannel(img, out, 0);
    } else {
      cv::cvtColor(img, out, have == 3 ? cv::COLOR_BGR2GRAY : cv::COLOR_BGRA2GRAY);
    }
  } else if (have == 1) {
    cv::cvtColor(img, out, cv::COLOR_GRAY2BGR);
  } else if (have == 2) {  // grey + alpha
    out.create(img.size(), CV_8UC(channels));
    const std::vector<int> from_to = channels == 4 ? std::vector<int>{0, 0, 0, 1, 0, 2, 1, 3}
                                                   : std::vector<int>{0, 0, 0, 1, 0, 2};
    cv::mixChannels(&img, 1, &out, 1, from_to.data(), from_to.size() / 2);
  } else if (have == 4 && channels == 3) {
    cv::cvtColor(img, out, cv::COLOR_BGRA2BGR);
  } else if (have == 3 || have == 4) {
    return;
  } else {
    throw cv::Exception(cv::Error::StsBadArg,
                        "unsupported number of channels " + std::to_string(have),
                        "normalize_channels", __FILE__, __LINE__);
  }
  img = std::move(out);
}

// The conversion from a normalised image (grey, BGR or BGRA) to the spec's channels in HWC
// order; -1 if there is none.
int hwc_conversion(int have, const ImageSpec& spec) {
  const bool rgb = spec.order == ChannelOrder::rgb;
  switch (spec.channels) {
    case 3:
      return rgb ? cv::COLOR_BGR2RGB : -1;
    case 4:
      if (have == 4) return rgb ? cv::COLOR_BGRA2RGBA : -1;
      return rgb ? cv::COLOR_BGR2RGBA : cv::COLOR_BGR2BGRA;
    default:
      return -1;
  }
}

constexpr double kToUnit = 1.0 / 255.0;

// Writes the channels of `img` (BGR or BGRA, uint8) as planes `base`, `base + h * w`, ... in the
// spec's order; a missing alpha plane is opaque.
void write_planes(const cv::Mat& img, const ImageSpec& spec, std::uint8_t* base) {
  const int h = img.rows, w = img.cols, have = img.channels();
  const std::size_t plane = static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  std::array<cv::Mat, 4> planes;
  for (int i = 0; i < have; ++i) {
    // Source channel i is B, G, R or A; in RGB order B and R trade places.
    int to = i;
    if (spec.order == ChannelOrder::rgb && i < 3) to = 2 - i;
    planes[i] = cv::Mat(h, w, CV_8U, base + static_cast<std::size_t>(to) * plane);
  }
  cv::split(img, planes.data());
  if (spec.channels == 4 && have == 3) std::fill_n(base + 3 * plane, plane, std::uint8_t{255});
}

// The output stage: `img` (a fresh, 8-bit, normalised image that nothing else references) to a
// tensor as `spec` says.
Tensor to_tensor(cv::Mat img, const ImageSpec& spec) {
  const int h = img.rows, w = img.cols, c = spec.channels, have = img.channels();
  const bool u8 = spec.dtype == DType::uint8;
  if (!spec.chw || c == 1) {
    Tensor::Shape shape = spec.chw ? Tensor::Shape{1, h, w}
                          : c == 1 ? Tensor::Shape{h, w}
                                   : Tensor::Shape{h, w, c};
    const int code = hwc_conversion(have, spec);
    if (code >= 0 && have == c) {
      // Swap B and R in place. A second header over the same pixels, because cvtColor copies its
      // input first when given the same Mat object twice; the per-pixel swap is safe in place.
      cv::Mat same = img;
      cv::cvtColor(img, same, code);
    } else if (code >= 0) {  // alpha added: a new buffer anyway
      if (u8) {
        Tensor out(DType::uint8, std::move(shape));
        cv::Mat dst = wrap(out, h, w, CV_8UC(c));
        cv::cvtColor(img, dst, code);
        return out;
      }
      cv::Mat with_alpha;
      cv::cvtColor(img, with_alpha, code);
      img = std::move(with_alpha);
    }
    if (u8) return adopt(std::move(img), DType::uint8, std::move(shape));
    Tensor out(DType::float32, std::move(shape));
    cv::Mat dst = wrap(out, h, w, CV_32FC(c));
    img.convertTo(dst, CV_32F, kToUnit);
    return out;
  }
  // Planes (CxHxW) of a colour image: split straight into the tensor, or for float into uint8
  // planes first and then one conversion of them all.
  Tensor out(spec.dtype, Tensor::Shape{c, h, w});
  if (u8) {
    write_planes(img, spec, reinterpret_cast<std::uint8_t*>(out.data()));
    return out;
  }
  cv::Mat planes8(c * h, w, CV_8U);
  write_planes(img, spec, planes8.ptr<std::uint8_t>());
  cv::Mat dst = wrap(out, c * h, w, CV_32F);
  planes8.convertTo(dst, CV_32F, kToUnit);
  return out;
}

// The shape to_tensor gives an image of h x w.
Tensor::Shape output_shape(const ImageSpec& spec, int h, int w) {
  if (spec.chw) return {spec.channels, h, w};
  if (spec.channels == 1) return {h, w};
  return {h, w, spec.channels};
}

// to_tensor's conversions, written into `out` (of output_shape) instead: the same values. `img`
// may be a view of a scratch buffer (a crop), and is left unchanged.
void write_into(const cv::Mat& img, const ImageSpec& spec, const Tensor& out) {
  const int h = img.rows, w = img.cols, c = spec.channels, have = img.channels();
  const bool u8 = spec.dtype == DType::uint8;
  if (!spec.chw || c == 1) {
    const int code = hwc_conversion(have, spec);
    if (u8) {
      cv::Mat dst = wrap(out, h, w, CV_8UC(c));
      if (code >= 0) {
        cv::cvtColor(img, dst, code);
      } else {
        img.copyTo(dst);
      }
      return;
    }
    cv::Mat dst = wrap(out, h, w, CV_32FC(c));
    if (code >= 0) {
      thread_local cv::Mat converted;
      cv::cvtColor(img, converted, code);
      converted.convertTo(dst, CV_32F, kToUnit);
    } else {
      img.convertTo(dst, CV_32F, kToUnit);
    }
    return;
  }
  if (u8) {
    write_planes(img, spec, reinterpret_cast<std::uint8_t*>(out.data()));
    return;
  }
  thread_local cv::Mat planes8;
  planes8.create(c * h, w, CV_8U);
  write_planes(img, spec, planes8.ptr<std::uint8_t>());
  cv::Mat dst = wrap(out, c * h, w, CV_32F);
  planes8.convertTo(dst, CV_32F, kToUnit);
}

// OpenCV's imgcodecs is opened on first use when WDS_IMGCODECS_SONAME names it (a shared
// OpenCV). Linked, it loads about 115 more shared libraries (GDAL, poppler, HDF5, ...), which
// Debian builds with BIND_NOW: every process that loads libwds paid ~60 ms before main for them
// (bench/README.md, "Reads at the wire's speed"), the `wds` tool's every run and each spawned
// worker included. JPEG decodes through libjpeg-turbo without it.
#ifdef WDS_IMGCODECS_SONAME
using ImdecodeFn = cv::Mat (*)(cv::InputArray, int);
using ImencodeFn = bool (*)(const cv::String&, cv::InputArray, std::vector<uchar>&,
                            const std::vector<int>&);
// Compile-time check that the headers declare exactly the signatures whose (Itanium-mangled)
// names are looked up below.
static_assert(std::is_same_v<decltype(static_cast<ImdecodeFn>(&cv::imdecode)), ImdecodeFn>);
static_assert(std::is_same_v<decltype(static_cast<ImencodeFn>(&cv::imencode)), ImencodeFn>);

struct Imgcodecs {
  ImdecodeFn imdecode = nullptr;
  ImencodeFn imencode = nullptr;
};

const Imgcodecs& imgcodecs() {
  static const Imgcodecs loaded = [] {
    void* lib = ::dlopen(WDS_IMGCODECS_SONAME, RTLD_NOW | RTLD_LOCAL);  // never closed
    if (lib == nullptr) {
      throw Error::unavailable(std::string("cannot load OpenCV's imgcodecs (") +
                               WDS_IMGCODECS_SONAME + "): " + ::dlerror());
    }
    Imgcodecs f;
    f.imdecode = reinterpret_cast<ImdecodeFn>(::dlsym(lib, "_ZN2cv8imdecodeERKNS_11_InputArrayEi"));
    f.imencode = reinterpret_cast<ImencodeFn>(
        ::dlsym(lib,
                "_ZN2cv8imencodeERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERKNS_11_"
                "InputArrayERSt6vectorIhSaIhEERKSB_IiSaIiEE"));
    if (f.imdecode == nullptr || f.imencode == nullptr) {
      throw Error::unavailable(std::string(WDS_IMGCODECS_SONAME) +
                               " lacks cv::imdecode or cv::imencode as this build expects");
    }
    return f;
  }();
  return loaded;
}

// Named apart from cv::imdecode and cv::imencode, which argument-dependent lookup also finds.
cv::Mat imgcodecs_decode(cv::InputArray buf, int flags) {
  return imgcodecs().imdecode(buf, flags);
}
bool imgcodecs_encode(const cv::String& ext, cv::InputArray img, std::vector<uchar>& out,
                      const std::vector<int>& params) {
  return imgcodecs().imencode(ext, img, out, params);
}
#else
cv::Mat imgcodecs_decode(cv::InputArray buf, int flags) {
  return cv::imdecode(buf, flags);
}
bool imgcodecs_encode(const cv::String& ext, cv::InputArray img, std::vector<uchar>& out,
                      const std::vector<int>& params) {
  return cv::imencode(ext, img, out, params);
}
#endif

// The whole image, decoded by OpenCV: 8-bit, with the channels the spec builds on (grey, BGR,
// or BGR(A) for 4). cv::Exception for what OpenCV refuses.
cv::Mat decode_whole(std::span<const std::byte> data, const ImageSpec& spec, std::string_view url,
                     std::string_view member) {
  // JPEG has no alpha: rgba specs read colour and add it.
  int flags = spec.channels == 1 ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR;
  if (spec.channels == 4 && !has_jpeg_signature(data)) flags = cv::IMREAD_UNCHANGED;
  // As PIL's Image.open: the stored pixels, whatever the EXIF orientation says. (Without this
  // flag OpenCV may also rotate, so the size would differ from the declared one.)
  if (flags != cv::IMREAD_UNCHANGED) flags |= cv::IMREAD_IGNORE_ORIENTATION;
  const cv::Mat buf(1, static_cast<int>(data.size()), CV_8U, const_cast<std::byte*>(data.data()));
  // Always a fresh buffer: cv::imdecode(buf, flags, &dst) leaves dst untouched when it finds no
  // decoder or cannot read the header, which would pass off the last image as this one.
  cv::Mat img = imgcodecs_decode(buf, flags);
  if (img.empty()) {
    corrupt(data, url, member, "not an image in a format this OpenCV reads, or damaged");
  }
  to_8bit(img);
  normalize_channels(img, spec.channels);
  return img;
}

// Whether decode_image takes the transforming path (a resize, crop, flip, normalisation or a
// dtype only it writes) rather than handing over what the decoder made.
bool transforms(const ImageSpec& spec, const ImageDecodeOptions& o) {
  return o.resize > 0 || o.crop > 0 || o.random_resized_crop.size > 0 || o.flip > 0 ||
         !o.mean.empty() || spec.dtype == DType::float16;
}

void check_jpeg_end(std::span<const std::byte> data, std::string_view url,
                    std::string_view member) {
  const JpegHeader header = parse_jpeg(data, /*to_scan=*/true);
  if (header.scan && !has_eoi_after(data, header.scan)) {
    corrupt(data, url, member, "truncated JPEG (no end-of-image marker)");
  }
}

void check_allocated(const Tensor& out, const ImageSpec& spec, const Tensor::Shape& shape, int w,
                     int h) {
  if (out.dtype() != spec.dtype || out.shape() != shape) {
    throw invalid("image allocator gave a " + out.describe() + " tensor for a " +
                  std::string(to_string(spec.dtype)) + " image of " + std::to_string(w) + "x" +
                  std::to_string(h));
  }
}

// Where each output pixel comes from, in the full image's pixels.
struct Geometry {
  detail::ResizeAxis x, y;
  bool flip = false;
};

// More output pixels than this is an error, not an allocation (as OpenCV's own decode limit).
constexpr std::int64_t kMaxPixels = std::int64_t{1} << 30;

Geometry plan_geometry(ImageSize full, const ImageDecodeOptions& o, std::span<const std::byte> data,
                       std::string_view url, std::string_view member) {
  Geometry g;
  const int W = full.width, H = full.height;
  if (o.random_resized_crop.size > 0) {
    // RandomResizedCrop: the window, resized to size x size; the filter reads only the window.
    const int size = o.random_resized_crop.size;
    const CropBox b = random_resized_crop_box(full, o.random_resized_crop, o.seed);
    g.x = {double(b.x), double(b.width) / size, b.x, b.x + b.width, size};
    g.y = {double(b.y), double(b.height) / size, b.y, b.y + b.height, size};
  } else if (o.resize > 0 || o.crop > 0) {
    // Resize(r) of the whole image, then CenterCrop(crop) of that: only the output pixels the
    // crop keeps are computed, each exactly as in the whole resized image.
    const int r = o.resize > 0 ? o.resize : o.crop;
    const ImageSize t = resized_size(W, H, r);
    if (std::int64_t{t.width} * t.height > kMaxPixels) {
      corrupt(data, url, member,
              "resizing a " + std::to_string(W) + "x" + std::to_string(H) +
                  " image to shorter side " + std::to_string(r) + " gives more than 2^30 pixels");
    }
    const double sx = double(W) / t.width, sy = double(H) / t.height;
    if (o.crop > 0) {
      // torchvision's CenterCrop: int(round((size - crop) / 2)), Python's half to even.
      const int left = static_cast<int>(std::nearbyint((t.width - o.crop) / 2.0));
      const int top = static_cast<int>(std::nearbyint((t.height - o.crop) / 2.0));
      g.x = {left * sx, sx, 0, W, o.crop};
      g.y = {top * sy, sy, 0, H, o.crop};
    } else {
      g.x = {0, sx, 0, W, t.width};
      g.y = {0, sy, 0, H, t.height};
    }
  } else {
    g.x = {0, 1, 0, W, W};
    g.y = {0, 1, 0, H, H};
  }
  g.flip = o.flip > 0 && image_draw(o.seed, kFlipDraw) < o.flip;
  return g;
}

Tensor output_tensor(const ImageSpec& spec, int w, int h, const ImageAllocator& allocate) {
  Tensor::Shape shape = output_shape(spec, h, w);
  if (allocate) {
    Tensor out = allocate(spec.dtype, shape);
    if (out.defined()) {
      check_allocated(out, spec, shape, w, h);
      return out;
    }
  }
  return Tensor(spec.dtype, std::move(shape));
}

// The transforming path: JPEGs are decoded by libjpeg-turbo only as far as the output needs
// (scaled, cropped to the columns and rows the filter reads); other images (and CMYK JPEGs) by
// OpenCV in full. Then one resize of that region, written into the output with the flip,
// normalisation, layout and dtype.
Tensor decode_transformed(std::span<const std::byte> data, const ImageSpec& spec,
                          const ImageDecodeOptions& options, const ImageAllocator& allocate,
                          std::string_view url, std::string_view member) {
  const detail::OutputFormat format_base{spec, false, &options.mean, &options.std};
  if (has_jpeg_signature(data)) {
    check_jpeg_end(data, url, member);
    thread_local detail::JpegWindow jpeg;
    if (!jpeg.open(data)) corrupt(data, url, member, jpeg.error());
    if (jpeg.converts_to_rgb()) {
      const ImageSize full{jpeg.width(), jpeg.height()};
      if (std::int64_t{full.width} * full.height > kMaxPixels) {
        jpeg.close();
        corrupt(data, url, member,
                std::to_string(full.width) + "x" + std::to_string(full.height) +
                    " pixels: more than 2^30");
      }
      const Geometry g = plan_geometry(full, options, data, url, member);
      const int k = options.reduced_decode ? detail::dct_denominator(g.x, g.y) : 1;
      thread_local detail::AxisTaps tx, ty;
      detail::plan_axis(detail::scaled_axis(g.x, k, jpeg.scaled_width(k)), tx);
      detail::plan_axis(detail::scaled_axis(g.y, k, jpeg.scaled_height(k)), ty);
      // One pixel more each way than the filter reads: libjpeg's upsampling of chroma at a cut
      // edge differs from a full decode's, and stays outside what is used.
      detail::JpegWindow::Region r;
      const bool bgr = spec.order == ChannelOrder::bgr;
      if (!jpeg.decode(k, spec.channels, bgr, tx.lo - 1, tx.hi + 1, ty.lo - 1, ty.hi + 1, r)) {
        corrupt(data, url, member, jpeg.error());
      }
      // The resize reads exactly these rows and columns; never past what libjpeg wrote.
      if (r.x0 > tx.lo || r.x0 + r.cols < tx.hi || r.y0 > ty.lo || r.y0 + r.rows < ty.hi) {
        corrupt(data, url, member, "the JPEG decoder gave a smaller region than its size says");
      }
      const detail::PixelView view{r.data, r.stride, r.x0,          r.y0,
                                   r.cols, r.rows,   spec.channels, bgr};
      Tensor out = output_tensor(spec, tx.n, ty.n, allocate);
      detail::OutputFormat format = format_base;
      format.flip = g.flip;
      detail::resample_into(view, tx, ty, format, out);
      return out;
    }
    jpeg.close();
  }
  try {
    cv::Mat img = decode_whole(data, spec, url, member);
    if (img.channels() == 3 && spec.channels == 4) cv::cvtColor(img, img, cv::COLOR_BGR2BGRA);
    const Geometry g = plan_geometry({img.cols, img.rows}, options, data, url, member);
    thread_local detail::AxisTaps tx, ty;
    detail::plan_axis(g.x, tx);
    detail::plan_axis(g.y, ty);
    const detail::PixelView view{img.ptr<std::uint8_t>(),
                                 static_cast<std::ptrdiff_t>(img.step),
                                 0,
                                 0,
                                 img.cols,
                                 img.rows,
                                 spec.channels,
                                 true};
    Tensor out = output_tensor(spec, tx.n, ty.n, allocate);
    detail::OutputFormat format = format_base;
    format.flip = g.flip;
    detail::resample_into(view, tx, ty, format, out);
    return out;
  } catch (const cv::Exception& e) {
    corrupt(data, url, member, e.err.empty() ? std::string(e.what()) : e.err);
  }
}

#endif  // WDS_WITH_OPENCV

}  // namespace

ImageSpec parse_image_spec(std::string_view spec) {
  for (const NamedSpec& s : kSpecs) {
    if (s.name == spec) return s.spec;
  }
  std::string names;
  for (const NamedSpec& s : kSpecs) {
    if (!names.empty()) names += ", ";
    names += s.name;
  }
  throw invalid("unknown image spec '" + std::string(spec) + "' (use one of: " + names + ")");
}

bool is_image_extension(std::string_view ext) noexcept {
  return detail::is_format(ext, detail::Format::image);
}

std::optional<ImageSize> jpeg_size(std::span<const std::byte> data) noexcept {
  return parse_jpeg(data, /*to_scan=*/false).size;
}

#ifndef WDS_WITH_OPENCV

Tensor decode_image(std::span<const std::byte>, const ImageSpec&, const ImageDecodeOptions&,
                    std::string_view, std::string_view) {
  throw invalid("wds was built without OpenCV (WDS_WITH_OPENCV=OFF): cannot decode images");
}

Tensor decode_image(std::span<const std::byte>, const ImageSpec&, const ImageDecodeOptions&,
                    const ImageAllocator&, std::string_view, std::string_view) {
  throw invalid("wds was built without OpenCV (WDS_WITH_OPENCV=OFF): cannot decode images");
}

Bytes encode_image(const Tensor&, std::string_view, const ImageEncodeOptions&) {
  throw invalid("wds was built without OpenCV (WDS_WITH_OPENCV=OFF): cannot encode images");
}

#else

Tensor decode_image(std::span<const std::byte> data, const ImageSpec& spec,
                    const ImageDecodeOptions& options, std::string_view url,
                    std::string_view member) {
  return decode_image(data, spec, options, ImageAllocator(), url, member);
}

Tensor decode_image(std::span<const std::byte> data, const ImageSpec& given,
                    const ImageDecodeOptions& options, const ImageAllocator& allocate,
                    std::string_view url, std::string_view member) {
  check_spec(given);
  check_image_options(given, options);
  const ImageSpec spec = output_spec(given, options);
  if (data.empty()) corrupt(data, url, member, "no data");
  if (data.size() > static_cast<std::size_t>(INT_MAX)) corrupt(data, url, member, "too large");
  if (transforms(spec, options))
    return decode_transformed(data, spec, options, allocate, url, member);

  if (has_jpeg_signature(data)) check_jpeg_end(data, url, member);
  try {
    cv::Mat img = decode_whole(data, spec, url, member);
    if (allocate) {
      Tensor::Shape shape = output_shape(spec, img.rows, img.cols);
      Tensor out = allocate(spec.dtype, shape);
      if (out.defined()) {
        check_allocated(out, spec, shape, img.cols, img.rows);
        write_into(img, spec, out);
        return out;
      }
    }
    return to_tensor(std::move(img), spec);
  } catch (const cv::Exception& e) {
    corrupt(data, url, member, e.err.empty() ? std::string(e.what()) : e.err);
  }
}

Bytes encode_image(const Tensor& image, std::string_view ext, const ImageEncodeOptions& options) {
  std::string name = lowercase(ext);
  if (!name.empty() && name.front() == '.') name.erase(0, 1);
  const detail::FieldFormat* field = detail::format_of(name);
  if (!field || field->format != detail::Format::image) {
    throw invalid("cannot encode images as '" + std::string(ext) +
                  "' (use one of: " + detail::extensions_of(detail::Format::image) + ")");
  }
  const auto format = std::find_if(kEncodeFormats.begin(), kEncodeFormats.end(),
                                   [&](const EncodeFormat& f) { return f.codec == field->codec; });

  const DType dtype = image.dtype();
  if (dtype != DType::uint8 && dtype != DType::float32 && dtype != DType::float64) {
    throw invalid("cannot encode a " + image.describe() +
                  " tensor as an image (use uint8, or float32/float64 in [0, 1])");
  }
  const auto& shape = image.shape();
  const bool shape_ok =
      image.defined() &&
      (shape.size() == 2 ||
       (shape.size() == 3 && (shape[2] == 1 || shape[2] == 3 || shape[2] == 4))) &&
      shape[0] > 0 && shape[1] > 0 && shape[0] <= INT_MAX && shape[1] <= INT_MAX;
  if (!shape_ok) {
    throw invalid("cannot encode a " + image.describe() +
                  " tensor as an image (use HxW, HxWx1, HxWx3 RGB or HxWx4 RGBA)");
  }
  const int h = static_cast<int>(shape[0]), w = static_cast<int>(shape[1]);
  const int c = shape.size() == 2 ? 1 : static_cast<int>(shape[2]);
  if (c == 4 && !format->alpha) {
    throw invalid(name + " cannot store an alpha channel (image " + image.describe() +
                  "; use png, webp or tiff)");
  }
  int quality = format->default_quality;
  if (format->quality_param >= 0 && options.quality != -1) {
    if (options.quality < format->min_quality || options.quality > 100) {
      throw invalid(name + " quality " + std::to_string(options.quality) + " (use " +
                    std::to_string(format->min_quality) + " to 100, or -1)");
    }
    quality = options.quality;
  }

  std::vector<std::uint8_t> out;
  try {
    cv::Mat pixels;
    if (dtype == DType::uint8) {
      pixels = wrap(image, h, w, CV_8UC(c));
    } else {
      // WebDataset's writer: values in (-0.001, 1.001), clipped to [0, 1], times 255.
      auto check = [&](auto values) {
        for (auto v : values) {
          if (!(v > -0.001 && v < 1.001)) {
            throw invalid("cannot encode a " + image.describe() + " image with value " +
                          std::to_string(v) + " (float images must be in [0, 1])");
          }
        }
      };
      if (dtype == DType::float32) {
        check(image.values<float>());
      } else {
        check(image.values<double>());
      }
      const cv::Mat src =
          wrap(image, h, w, CV_MAKETYPE(dtype == DType::float32 ? CV_32F : CV_64F, c));
      src.convertTo(pixels, CV_8U, 255.0);  // rounds and saturates
    }
    if (c == 3 || c == 4) {
      cv::Mat bgr;
      cv::cvtColor(pixels, bgr, c == 3 ? cv::COLOR_RGB2BGR : cv::COLOR_RGBA2BGRA);
      pixels = std::move(bgr);
    }
    std::vector<int> params;
    if (format->quality_param >= 0) params = {format->quality_param, quality};
    if (!imgcodecs_encode(std::string(format->cv_ext), pixels, out, params)) {
      throw invalid("OpenCV could not encode a " + image.describe() + " image as " + name);
    }
  } catch (const cv::Exception& e) {
    throw invalid("cannot encode a " + image.describe() + " image as " + name + ": " + e.err);
  }
  return Bytes::copy_of(std::as_bytes(std::span(out)));
}

#endif  // WDS_WITH_OPENCV

}  // namespace wds
