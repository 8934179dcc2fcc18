// wds/image.hpp: the image codec: decode image fields to tensors in WebDataset's layouts, encode
// tensors to jpg/png/webp/... for writing shards.
//
//   wds::ImageSpec spec = wds::parse_image_spec("torchrgb");    // float32 3xHxW in [0, 1]
//   wds::Tensor img = wds::decode_image(bytes.span(), spec, {.resize = 256});
//   wds::Bytes jpg = wds::encode_image(img8, "jpg");            // uint8 HxWx3, RGB
//
// Decoding accepts what the build's OpenCV reads (jpg, png, ppm/pgm/pbm, bmp, webp, tiff, ...),
// recognised by content, not by name. Output is always 8-bit per channel (as PIL-based WebDataset
// gives): 16-bit images are scaled down, EXIF orientation is ignored (as PIL's Image.open does).
//
// Transforms (ImageDecodeOptions): torchvision's Resize + CenterCrop (evaluation) or
// RandomResizedCrop (training), a horizontal flip, Normalize, and the output's dtype and layout.
// JPEGs are then decoded with libjpeg-turbo only as far as the output needs: at 1/2, 1/4 or 1/8
// scale when enough pixels remain, only the iMCU columns and rows the crop reads. One antialiased
// resize (PIL's triangle filter) follows, whose last pass writes the tensor. Without DCT scaling
// the pixels are those of a full decode; the resized values are within one 8-bit level of PIL's.
//
// Decoding into a given place (an ImageAllocator: decode() uses it to write each image into its
// row of a batch, wds/transforms.hpp): the output is written straight into the tensor the
// allocator gives; scratch rows are kept per thread. The values are exactly those decode_image
// returns without one.
//
// Without OpenCV (built with WDS_WITH_OPENCV=OFF) decode_image and encode_image throw an
// invalid_argument Error; parse_image_spec, jpeg_size and is_image_extension still work.
//
// Thread safety: all functions may be called from several threads at once. OpenCV may run its
// own worker threads inside one call (resizing, colour conversion); see cv::setNumThreads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "wds/bytes.hpp"
#include "wds/tensor.hpp"

namespace wds {

enum class ChannelOrder : std::uint8_t { rgb, bgr };

// What decode_image produces. parse_image_spec makes it from WebDataset's decoder names; names
// ending in 8 give uint8 values, the others float32 in [0, 1] (uint8 value times 1/255, within
// one ulp of value / 255):
//
//   uint8        float32           shape   channels
//   l8           l                 HxW     grey
//   rgb8         rgb               HxWx3   R, G, B
//   bgr8         bgr               HxWx3   B, G, R (OpenCV's native order: no swap)
//   rgba8        rgba              HxWx4   R, G, B, A (opaque alpha when the image has none)
//   torchl8      torchl            1xHxW   grey
//   torchrgb8    torchrgb, torch   3xHxW   R, G, B planes
//   torchrgba8   torchrgba         4xHxW   R, G, B, A planes
struct ImageSpec {
  int channels = 3;                        // 1 (grey), 3 (colour) or 4 (colour + alpha, last)
  ChannelOrder order = ChannelOrder::rgb;  // of the colour channels; ignored for grey
  DType dtype = DType::uint8;              // uint8, or float32 in [0, 1]
  bool chw = false;                        // CxHxW (torch), else HxW (grey) or HxWxC

  friend bool operator==(const ImageSpec&, const ImageSpec&) = default;
};

// The spec named `spec` (table above); an invalid_argument Error naming the valid ones otherwise.
ImageSpec parse_image_spec(std::string_view spec);

// True for the extensions of the formats decode_image is meant for: jpg jpeg png ppm pgm pbm pnm
// bmp webp tif tiff (lower case, no dot). decode_image itself goes by content.
bool is_image_extension(std::string_view ext) noexcept;

struct ImageSize {
  int width = 0;
  int height = 0;
  friend bool operator==(const ImageSize&, const ImageSize&) = default;
};

// The dimensions a JPEG declares in its frame header (SOFn), read without decoding; nullopt if
// `data` is not a JPEG or its header is malformed or cut short. Never reads outside `data`.
std::optional<ImageSize> jpeg_size(std::span<const std::byte> data) noexcept;

// torchvision's RandomResizedCrop(size, scale, ratio): a window of a random area (a share in
// [scale_min, scale_max] of the image's) and aspect ratio (log-uniform in [ratio_min, ratio_max]),
// at a random place, resized to size x size. The parameters are drawn exactly as torchvision's
// get_params: up to 10 tries, then the central window clamped to the ratio range.
struct RandomResizedCrop {
  int size = 0;  // 0: off
  double scale_min = 0.08;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
};

// A window of an image, in its pixels: columns [x, x + width), rows [y, y + height).
struct CropBox {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  friend bool operator==(const CropBox&, const CropBox&) = default;
};

// The random draws of one image: a uniform double in [0, 1), a pure function of (seed, counter)
// (SplitMix64 over both), so that an image's crop and flip depend on its seed alone, never on
// which thread drew before it. decode() gives each sample the seed
// image_seed(pipeline seed, epoch, shard name, key).
double image_draw(std::uint64_t seed, std::uint32_t counter) noexcept;
// Draws 0-39 are the crop's (4 per try), draw 40 the flip's.
inline constexpr std::uint32_t kFlipDraw = 40;

// RandomResizedCrop's window for an image of `size`, from the draws of `seed` (torchvision's
// algorithm; Python's round-half-to-even; randint(0, n + 1) as floor(draw * (n + 1))).
CropBox random_resized_crop_box(ImageSize size, const RandomResizedCrop& crop, std::uint64_t seed);

// The seed of a sample's image draws: mixes the pipeline's seed, the epoch, the shard's file name
// (the URL after its last '/', so a copy of the data elsewhere draws the same) and the key.
std::uint64_t image_seed(std::uint64_t seed, std::uint64_t epoch, std::string_view url,
                         std::string_view key) noexcept;

struct ImageDecodeOptions {
  // When > 0, scale the image so that its shorter side is `resize` pixels and the aspect ratio is
  // kept: the longer side becomes floor(resize * longer / shorter), exactly as torchvision's
  // Resize(int), antialiased as PIL's BILINEAR (a triangle filter widened by the shrink factor).
  int resize = 0;
  // With resize, crop or random_resized_crop, decode JPEGs at 1/2, 1/4 or 1/8 scale (the
  // smallest that still leaves a source pixel per output pixel each way) and resize the rest.
  // Off: decode at full size, then resize (for comparisons).
  bool reduced_decode = true;
  // When > 0, then cut the central crop x crop pixels (torchvision's CenterCrop), so that images
  // of any aspect ratio batch together. Alone it resizes the shorter side to `crop` first; with
  // resize it must not exceed it. The window is torchvision's: top-left at
  // round((resized - crop) / 2), half to even.
  int crop = 0;
  // Training: torchvision's RandomResizedCrop (instead of resize and crop, which must be 0). A
  // JPEG is decoded only as far as the window needs: at 1/2, 1/4 or 1/8 scale when the window
  // stays at least `size` pixels each way, only the iMCU columns and rows it covers.
  RandomResizedCrop random_resized_crop;
  // RandomHorizontalFlip(p): mirror the output with probability `flip` (draw kFlipDraw < flip).
  double flip = 0;
  // Normalize(mean, std) after ToTensor: (value / 255 - mean[c]) / std[c] per channel, computed
  // in float32 as torch does. Float dtypes only; one value per channel of the spec. Empty: none.
  std::vector<float> mean;
  std::vector<float> std;
  // The output's dtype (uint8, float16, float32) and layout (CHW if true, else HWC) instead of
  // the spec's: "rgb8" with dtype float32 and chw is torchvision's ToTensor() layout.
  std::optional<DType> dtype;
  std::optional<bool> chw;
  // The seed of this image's draws (image_draw); decode() sets it per sample (image_seed).
  std::uint64_t seed = 0;
};

// The spec with the options' dtype and layout, what decode_image produces.
ImageSpec output_spec(ImageSpec spec, const ImageDecodeOptions& options) noexcept;

// torchvision's ImageNet normalisation: mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225).
void set_imagenet_normalization(ImageDecodeOptions& options);

// Checks options against a spec as decode_image and decode() do: invalid_argument naming the
// parameter (a negative size, scale outside (0, 1] or min > max, ratio <= 0 or min > max,
// resize or crop with a random crop, flip outside [0, 1], mean/std of the wrong length, std 0,
// normalisation with uint8 output).
void check_image_options(const ImageSpec& spec, const ImageDecodeOptions& options);

// Decodes `data` (a whole image file) to a tensor shaped and typed as `spec` says. url and member
// only name the data in errors. Errors: corrupt_data for data that is empty, truncated (a JPEG
// without its end-of-image marker counts as truncated, as PIL finds), not an image or not
// decodable ("cannot decode image (N bytes): ..."); invalid_argument for an invalid spec or
// options. Damage that libjpeg or libpng can decode past (with a warning on stderr) is not an
// error.
Tensor decode_image(std::span<const std::byte> data, const ImageSpec& spec,
                    const ImageDecodeOptions& options = {}, std::string_view url = {},
                    std::string_view member = {});

// Where decode_image may put its output: called once per image, after decoding, with the dtype
// and shape of the result; it returns a tensor of exactly that dtype and shape to write into (a
// view into a larger buffer is fine), or an empty Tensor to decline. Another dtype or shape is
// an invalid_argument Error.
using ImageAllocator = std::function<Tensor(DType dtype, const Tensor::Shape& shape)>;

// The same, written into the tensor `allocate` gives (and returned); if it declines, or is
// empty, a tensor of its own as above.
Tensor decode_image(std::span<const std::byte> data, const ImageSpec& spec,
                    const ImageDecodeOptions& options, const ImageAllocator& allocate,
                    std::string_view url = {}, std::string_view member = {});

struct ImageEncodeOptions {
  // jpg: 0-100 (default 100, as WebDataset's writer); webp: 1-100, lossy (default 80, as PIL).
  // Ignored by the lossless formats.
  int quality = -1;
};

// Encodes an image tensor as WebDataset's writer does. `ext` (case-insensitive, leading dot
// optional): jpg jpeg png webp ppm pgm pbm pnm bmp tif tiff. The tensor is uint8 HxW, HxWx1
// (grey), HxWx3 (RGB) or HxWx4 (RGBA); or float32/float64 of these shapes with values in [0, 1]
// (a tolerance of 0.001 is clipped), scaled by 255 and rounded. jpg and the Netpbm formats store
// no alpha: RGBA is an error there. ppm/pgm/pbm/pnm all write a binary graymap (P5) for grey
// and a pixmap (P6) for colour, as PIL does. Errors: invalid_argument naming the problem
// (extension, dtype, shape, out-of-range values, quality).
Bytes encode_image(const Tensor& image, std::string_view ext,
                   const ImageEncodeOptions& options = {});

}  // namespace wds
