// wds/decode.hpp: decode(), the stage that turns a sample's bytes into values.
//
//   auto ds = wds::WebDataset(urls) | wds::decode("rgb8");      // images as uint8 HxWx3 RGB
//   for (wds::DecodedSample& s : ds) {
//     const wds::Tensor& img = s.get<wds::Tensor>("jpg");
//     std::int64_t label = s.get<std::int64_t>("cls");
//   }
//
// Each field is decoded by the first decoder that accepts it, in the order given, then by the
// basic decoders, WebDataset's defaults chosen by the text after the field's last dot:
//   txt text transcript                 std::string (must be valid UTF-8)
//   cls cls2 index inx id               std::int64_t (white space around it allowed: " 7\n")
//   json jsn                            wds::Json (nlohmann::json)
//   mp msg                              wds::Json, from MessagePack (maps with string keys)
//   cbor                                wds::Json, from CBOR (no tags)
//   npy                                 wds::Tensor (wds/npy.hpp: numeric dtypes, C or Fortran)
//   npz                                 wds::Dict of wds::Tensor, by name (wds/npy.hpp)
//   ten tb                              wds::Tuple of wds::Tensor (tenbin: wds/tenbin.hpp)
//   anything else                       wds::Bytes, unchanged
// The writers (wds/encode.hpp) go by the same extensions, so an integer written as a label reads
// back as that integer. The writers also write numbers under class and count, MessagePack under
// msgpack and tenbin under tenbin, which decode leaves as bytes, as WebDataset's decoder does
// (its table lacks them, whatever its docstring says); decode_as reads them when asked:
//   wds::decode({wds::handle_extension("class count", wds::decode_as("cls")),
//                wds::handle_extension("msgpack", wds::decode_as("mp")),
//                wds::handle_extension("tenbin", wds::decode_as("ten"))})
// Binary values in MessagePack and CBOR become JSON binary values (Json::binary_t); maps with
// keys other than strings, strings that are not UTF-8, nesting deeper than 512 levels and
// trailing bytes are corrupt_data errors.
// A field ending in ".gz" (also .xz, .bz2, .zst) is decompressed and decoded by the rest of its
// name ("txt.gz" decodes as txt and keeps the name "txt.gz"), by libarchive's built-in
// decompressors only (never an external program), up to DecodeOptions::max_decompressed_size.
//
// Images: a spec string ("rgb8", "l", "torchrgb", ...: wds/image.hpp) decodes the fields whose
// last extension is jpg jpeg png ppm pgm pbm pnm bmp webp tif or tiff. Unlike
// WebDataset, fields named like PIL's other formats ("rgb", "im", "ps", ...) are left alone.
// DecodeOptions::image holds the transforms (wds/image.hpp): resize and centre crop, or
// RandomResizedCrop, flip, normalisation, dtype and layout. Each sample's random draws come from
// image_seed(pipeline seed, epoch, shard file name, key), the same for every image field of the
// sample: a sample gets the same crop and flip whatever the workers, ranks or resumes.
//
// Audio: "audio" in the list decodes the fields whose last extension is flac wav mp3 ogg opus
// or m4a with FFmpeg (wds/audio.hpp) into a wds::Tuple {Tensor float32 [channels, frames],
// std::int64_t sample rate}, as WebDataset's torch_audio gives (waveform, sample_rate). Without
// it they stay bytes, as in WebDataset without torch_audio. DecodeOptions::audio holds the
// sample rate, channels, window (a random start draws from the sample's image_seed) and limits:
//   wds::decode({"rgb8", "audio"}, {.audio = {.sample_rate = 16000, .channels = 1,
//                                             .duration = 5, .random_offset = true}})
//
// Video: "video" in the list decodes the fields whose last extension is mp4 webm mkv avi or mov
// with FFmpeg (wds/video.hpp) into a clip, a Tensor uint8 [T, H, W, 3] (RGB), as the first
// element of what WebDataset's torch_video gives (torchvision.io.read_video's frames), but only
// the clip's frames, scaled on decode. DecodeOptions::video holds the frame count, the sampling
// (fps or stride), the size, the start (a random start draws from the sample's image_seed), the
// decoder threads and the limits; clips of a fixed size followed by batched() are decoded
// straight into their row of the batch [B, T, H, W, 3]:
//   wds::decode("video", {.video = {.frames = 16, .fps = 8, .width = 224, .height = 224,
//                                   .random_offset = true}})
//
// Your own decoder: a function (ext, bytes) -> optional<Value>, nullopt to let the next try;
// handle_extension("seg.png", fn) makes one for fields ending in an extension.
//
// Batches: followed by batched() (through map, to_tuple, select and the like, not shuffle),
// spec-string decoders write each image straight into its row of the batch (wds/transforms.hpp):
// the same values, without a buffer per image or a copy into the batch.
//
// Metrics (Pipeline::metrics()): each sample decoded counts in `decoded`, with its time in
// `decode_seconds`; each sample the handler drops counts in `dropped`.
//
// Errors: a field that cannot be decoded (corrupt JPEG, bad JSON, bad UTF-8, a truncated tenbin)
// is a corrupt_data Error naming the shard URL and member "key.ext"; it goes through
// options.handler, which by default throws. A handler that continues drops the whole sample.
//
// Thread safety: stages are values; each running copy is used by one thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wds/audio.hpp"
#include "wds/error.hpp"
#include "wds/image.hpp"
#include "wds/pipeline.hpp"
#include "wds/sample.hpp"
#include "wds/value.hpp"
#include "wds/video.hpp"

namespace wds {

// A field decoder: `ext` is the whole field name after the key ("seg.png"); it may take the
// bytes (move from them) only when it returns a value.
using DecodeFn = std::function<std::optional<Value>(std::string_view ext, Bytes& data)>;

// One entry of decode()'s list: an image spec string, "audio", "video", or a function.
struct Decoder {
  Decoder(DecodeFn fn) : fn(std::move(fn)) {}
  // An image_decoder(spec); decode() remakes it with its options.image. "audio": an
  // audio_decoder(), remade with options.audio; "video": a video_decoder(), with options.video.
  Decoder(std::string_view image_spec);
  Decoder(const char* image_spec) : Decoder(std::string_view(image_spec ? image_spec : "")) {}
  DecodeFn fn;
  std::string image_spec;
  // The options fn decodes images with (a spec string's); the stage decodes into batch rows with
  // the same.
  ImageDecodeOptions image_options;
  // Made of "audio": decodes audio fields with the stage's options.audio.
  bool audio = false;
  // Made of "video": decodes video fields with the stage's options.video.
  bool video = false;
};

// Decodes fields whose name ends in one of `patterns` (space-separated extensions, such as
// "seg.png" or "jpg jpeg"), matched whole dot-separated parts, case-insensitively.
DecodeFn handle_extension(std::string_view patterns, std::function<Value(Bytes&)> fn);
// The image decoder behind a spec string, with options (resize, reduced decoding).
DecodeFn image_decoder(std::string_view spec, ImageDecodeOptions options = {});
// The audio decoder behind "audio": fields whose last extension is flac wav mp3 ogg opus or m4a
// become a wds::Tuple {Tensor float32 [channels, frames], std::int64_t sample rate}
// (wds/audio.hpp).
DecodeFn audio_decoder(AudioDecodeOptions options = {});
// The video decoder behind "video": fields whose last extension is mp4 webm mkv avi or mov become
// a clip, Tensor uint8 [T, H, W, 3] (wds/video.hpp).
DecodeFn video_decoder(VideoDecodeOptions options = {});
// The basic decoders of the table above (decode() always runs them last).
std::optional<Value> decode_basic(std::string_view ext, Bytes& data);
// The basic decoder of one extension of the table ("cls", "mp", "ten", ...), for fields of any
// name: handle_extension("class", decode_as("cls")). npz fields decompress to at most
// max_decompressed_size bytes. Throws invalid_argument for an extension not in the table.
std::function<Value(Bytes&)> decode_as(std::string_view ext,
                                       std::size_t max_decompressed_size = std::size_t{1} << 30);

struct DecodeOptions {
  // Decode only these fields (whole names); others stay bytes. Empty: all.
  std::vector<std::string> only;
  // On a DecodedSample input: keep fields that are already decoded instead of failing.
  bool partial = false;
  // For spec strings: resize target and reduced decoding.
  ImageDecodeOptions image;
  // For "audio": resampling, mix-down, window and limits (wds/audio.hpp); `seed` is set per
  // sample.
  AudioDecodeOptions audio;
  // For "video": clip length and sampling, size, start, threads and limits (wds/video.hpp);
  // `seed` is set per sample.
  VideoDecodeOptions video;
  // A compressed field (".gz", ...) or an npz that decompresses to more bytes than this is a
  // corrupt_data Error: a small field must not expand into all of memory (gzip reaches 1032:1,
  // zstd more).
  std::size_t max_decompressed_size = std::size_t{1} << 30;
  ErrorHandler handler = reraise_exception;
};

// Decodes one sample in place; throws the Error the stage would hand to its handler.
void decode_sample(DecodedSample& sample, const std::vector<Decoder>& decoders,
                   const DecodeOptions& options = {});

struct DecodeStage {
  std::vector<Decoder> decoders;
  DecodeOptions options;
  StreamPtr<DecodedSample> operator()(StreamPtr<Sample> up) const;
  StreamPtr<DecodedSample> operator()(StreamPtr<DecodedSample> up) const;
};

// decode("rgb8"), decode({"rgb8", my_decoder}, options), decode({}, options).
DecodeStage decode(std::vector<Decoder> decoders = {}, DecodeOptions options = {});
DecodeStage decode(Decoder decoder, DecodeOptions options = {});

// Pipeline's methods for this stage (declared in wds/pipeline.hpp).
template <class T>
auto Pipeline<T>::decode() const {
  return then(wds::decode());
}
template <class T>
auto Pipeline<T>::decode(std::vector<Decoder> decoders) const {
  return then(wds::decode(std::move(decoders)));
}
template <class T>
auto Pipeline<T>::decode(std::vector<Decoder> decoders, DecodeOptions options) const {
  return then(wds::decode(std::move(decoders), std::move(options)));
}
template <class T>
auto Pipeline<T>::decode(Decoder decoder) const {
  return then(wds::decode(std::move(decoder)));
}
template <class T>
auto Pipeline<T>::decode(Decoder decoder, DecodeOptions options) const {
  return then(wds::decode(std::move(decoder), std::move(options)));
}

}  // namespace wds
