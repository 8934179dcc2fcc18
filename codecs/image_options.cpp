// The image codec's options that need no decoder: their checks, the per-image random draws and
// torchvision's RandomResizedCrop parameters (wds/image.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "wds/error.hpp"
#include "wds/image.hpp"
#include "wds/random.hpp"

namespace wds {

namespace {

Error invalid(const std::string& what) {
  return Error::invalid_argument(what);
}

std::string str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// FNV-1a: the name and key as a number for the seed.
std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ULL) {
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

double image_draw(std::uint64_t seed, std::uint32_t counter) noexcept {
  // 53 random bits of a counter-based SplitMix64: any draw of any image in O(1), in any order.
  const std::uint64_t bits = mix64(mix64(seed) ^ (0x632be59bd9b4e019ULL * (counter + 1)));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

std::uint64_t image_seed(std::uint64_t seed, std::uint64_t epoch, std::string_view url,
                         std::string_view key) noexcept {
  const std::size_t slash = url.find_last_of('/');
  const std::string_view name = slash == std::string_view::npos ? url : url.substr(slash + 1);
  // The name and key hashed apart, so ("ab", "c") and ("a", "bc") differ.
  return derive_seed(seed, {seed_purpose::image, epoch, fnv1a(name), fnv1a(key)});
}

CropBox random_resized_crop_box(ImageSize size, const RandomResizedCrop& crop, std::uint64_t seed) {
  const int width = size.width, height = size.height;
  const double area = static_cast<double>(width) * height;
  const double log_min = std::log(crop.ratio_min), log_max = std::log(crop.ratio_max);
  auto uniform = [&](std::uint32_t counter, double lo, double hi) {
    return lo + image_draw(seed, counter) * (hi - lo);
  };
  for (std::uint32_t attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform(4 * attempt, crop.scale_min, crop.scale_max);
    const double aspect = std::exp(uniform(4 * attempt + 1, log_min, log_max));
    // Python's round(): half to even, which nearbyint gives in the default rounding mode.
    const double w = std::nearbyint(std::sqrt(target_area * aspect));
    const double h = std::nearbyint(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int iw = static_cast<int>(w), ih = static_cast<int>(h);
      // torch.randint(0, n + 1): uniform over 0..n.
      const int top = static_cast<int>(image_draw(seed, 4 * attempt + 2) * (height - ih + 1));
      const int left = static_cast<int>(image_draw(seed, 4 * attempt + 3) * (width - iw + 1));
      return {left, top, iw, ih};
    }
  }
  // The fallback: the central window, clamped to the ratio range.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < crop.ratio_min) {
    h = static_cast<int>(std::nearbyint(w / crop.ratio_min));
  } else if (in_ratio > crop.ratio_max) {
    w = static_cast<int>(std::nearbyint(h * crop.ratio_max));
  }
  w = std::clamp(w, 1, width);
  h = std::clamp(h, 1, height);
  return {(width - w) / 2, (height - h) / 2, w, h};
}

void set_imagenet_normalization(ImageDecodeOptions& options) {
  options.mean = {0.485f, 0.456f, 0.406f};
  options.std = {0.229f, 0.224f, 0.225f};
}

ImageSpec output_spec(ImageSpec spec, const ImageDecodeOptions& options) noexcept {
  if (options.dtype) spec.dtype = *options.dtype;
  if (options.chw) spec.chw = *options.chw;
  return spec;
}

void check_image_options(const ImageSpec& given, const ImageDecodeOptions& o) {
  const ImageSpec spec = output_spec(given, o);
  if (spec.dtype != DType::uint8 && spec.dtype != DType::float16 && spec.dtype != DType::float32) {
    throw invalid("image dtype " + std::string(to_string(spec.dtype)) +
                  " (use uint8, float16 or float32)");
  }
  if (o.resize < 0 || o.crop < 0) {
    throw invalid("image resize " + std::to_string(o.resize) + ", crop " + std::to_string(o.crop) +
                  " (use 0 for none or > 0)");
  }
  // A crop alone resizes the shorter side to the crop first (Resize(n) then CenterCrop(n)).
  const int resize = o.resize > 0 ? o.resize : o.crop;
  if (o.crop > resize) {
    throw invalid("image crop " + std::to_string(o.crop) + " is larger than the resize " +
                  std::to_string(resize) + " before it");
  }
  const RandomResizedCrop& r = o.random_resized_crop;
  if (r.size < 0) {
    throw invalid("random_resized_crop size " + std::to_string(r.size) +
                  " (use > 0, or 0 for none)");
  }
  if (r.size > 0) {
    if (o.resize > 0 || o.crop > 0) {
      throw invalid("random_resized_crop with resize or crop: use one (the random crop resizes)");
    }
    if (!(r.scale_min > 0 && r.scale_max <= 1 && r.scale_min <= r.scale_max)) {
      throw invalid("random_resized_crop scale (" + str(r.scale_min) + ", " + str(r.scale_max) +
                    "): use 0 < min <= max <= 1");
    }
    if (!(r.ratio_min > 0 && r.ratio_max > 0 && r.ratio_min <= r.ratio_max) ||
        !std::isfinite(r.ratio_max)) {
      throw invalid("random_resized_crop ratio (" + str(r.ratio_min) + ", " + str(r.ratio_max) +
                    "): use 0 < min <= max");
    }
  }
  if (!(o.flip >= 0 && o.flip <= 1)) {
    throw invalid("image flip probability " + str(o.flip) + " (use 0 to 1)");
  }
  if (!o.mean.empty() || !o.std.empty()) {
    const auto n = static_cast<std::size_t>(spec.channels);
    if (o.mean.size() != n || o.std.size() != n) {
      throw invalid("image normalize: mean has " + std::to_string(o.mean.size()) + " values, std " +
                    std::to_string(o.std.size()) + "; the spec has " + std::to_string(n) +
                    " channels (give one of each per channel)");
    }
    for (std::size_t c = 0; c < n; ++c) {
      if (!(o.std[c] != 0) || !std::isfinite(o.std[c]) || !std::isfinite(o.mean[c])) {
        throw invalid("image normalize: std " + str(o.std[c]) + ", mean " + str(o.mean[c]) +
                      " for channel " + std::to_string(c) + " (std must be finite and not 0)");
      }
    }
    if (spec.dtype == DType::uint8) {
      throw invalid("image normalize with uint8 output: normalised values need float16 or float32");
    }
  }
}

}  // namespace wds
