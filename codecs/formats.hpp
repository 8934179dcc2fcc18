// The field formats (private to codecs/): which extension holds what, declared once, so that
// decode, encode and the image codec agree on every name.
//
//   is_format(last_extension("seg.cls"), Format::integer)     // true
//   compression_of("json.zst")->codec                         // Codec::zstd
//
// A field's format is chosen by the text after its last dot ("seg.cls" is an integer), except
// a compression, which wraps the format of the rest of the name ("txt.gz" is gzipped text). An
// extension not in the table is plain bytes, read and written unchanged. Lookups are exact: the
// table is lower case, and decode matches as given (tar members are lowercased when read) while
// encode lowercases first.
//
// Thread safety: constant data and pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace wds::detail {

enum class Format : std::uint8_t {
  text,        // UTF-8 text: std::string; numbers are written as decimal text
  integer,     // a decimal integer (a label, a count): std::int64_t
  json,        // a JSON document: wds::Json
  npy,         // a NumPy .npy array: wds::Tensor
  image,       // an image file: wds::Tensor, through an image spec (wds/image.hpp)
  compressed,  // the rest of the name, compressed ("txt.gz")
  msgpack,     // a MessagePack document: wds::Json
  cbor,        // a CBOR document: wds::Json
  tenbin,      // webdataset's tensor format: a wds::Tuple of wds::Tensor (wds/tenbin.hpp)
  npz,         // a NumPy .npz archive: a wds::Dict of wds::Tensor (wds/npy.hpp)
  audio,       // an audio file: wds::Tuple {Tensor, sample rate}, when asked for (wds/audio.hpp)
  video,       // a video file: a clip, Tensor uint8 [T, H, W, 3], when asked for (wds/video.hpp)
};

// Which file format within a Format, where there are several: the image encoder to use, or the
// compression.
enum class Codec : std::uint8_t { none, jpeg, png, webp, pnm, bmp, tiff, gzip, xz, bzip2, zstd };

struct FieldFormat {
  std::string_view ext;  // lower case, without a dot
  Format format;
  Codec codec = Codec::none;
  // Whether decode's defaults read it. Python webdataset's writer writes numbers under "class"
  // and "count", msgpack under "msgpack" and tenbin under "tenbin", but its decoder leaves those
  // fields as bytes; wds does the same, so that samples decode to the same values on both
  // (decode_as("cls"), decode_as("mp"), ... read them when asked).
  bool decoded = true;
};

// WebDataset's default decoders and writer (txt..id, json, npy, msgpack, cbor, tenbin, npz) and
// the images OpenCV reads and writes. PIL's other image names ("rgb", "im", "ps", ...) are left out
// on purpose: a field named like them is usually no image.
inline constexpr FieldFormat kFieldFormats[] = {
    {"txt", Format::text},
    {"text", Format::text},
    {"transcript", Format::text},
    {"cls", Format::integer},
    {"cls2", Format::integer},
    {"class", Format::integer, Codec::none, false},
    {"count", Format::integer, Codec::none, false},
    {"index", Format::integer},
    {"inx", Format::integer},
    {"id", Format::integer},
    {"json", Format::json},
    {"jsn", Format::json},
    {"npy", Format::npy},
    {"npz", Format::npz},
    {"mp", Format::msgpack},
    {"msg", Format::msgpack},
    {"msgpack", Format::msgpack, Codec::none, false},
    {"cbor", Format::cbor},
    {"ten", Format::tenbin},
    {"tb", Format::tenbin},
    {"tenbin", Format::tenbin, Codec::none, false},
    {"jpg", Format::image, Codec::jpeg},
    {"jpeg", Format::image, Codec::jpeg},
    {"png", Format::image, Codec::png},
    {"webp", Format::image, Codec::webp},
    {"ppm", Format::image, Codec::pnm},
    {"pgm", Format::image, Codec::pnm},
    {"pbm", Format::image, Codec::pnm},
    {"pnm", Format::image, Codec::pnm},
    {"bmp", Format::image, Codec::bmp},
    {"tif", Format::image, Codec::tiff},
    {"tiff", Format::image, Codec::tiff},
    {"flac", Format::audio},
    {"wav", Format::audio},
    {"mp3", Format::audio},
    {"ogg", Format::audio},
    {"opus", Format::audio},
    {"m4a", Format::audio},
    {"mp4", Format::video},
    {"webm", Format::video},
    {"mkv", Format::video},
    {"avi", Format::video},
    {"mov", Format::video},
    {"gz", Format::compressed, Codec::gzip},
    {"xz", Format::compressed, Codec::xz},
    {"bz2", Format::compressed, Codec::bzip2},
    {"zst", Format::compressed, Codec::zstd},
};

// The text after the last dot of a field name ("seg.png" -> "png"), or the whole name.
constexpr std::string_view last_extension(std::string_view name) noexcept {
  const std::size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

// The table's entry for one extension (no dot, matched exactly), or nullptr: plain bytes.
constexpr const FieldFormat* format_of(std::string_view ext) noexcept {
  for (const FieldFormat& f : kFieldFormats) {
    if (f.ext == ext) return &f;
  }
  return nullptr;
}

// Whether `ext` (one extension, exact) has this format.
constexpr bool is_format(std::string_view ext, Format format) noexcept {
  const FieldFormat* f = format_of(ext);
  return f && f->format == format;
}

// The compression a field name ends in ("txt.gz": gz), or nullptr. A name that is only "gz" has
// nothing inside: it is plain bytes.
constexpr const FieldFormat* compression_of(std::string_view name) noexcept {
  const std::string_view last = last_extension(name);
  const FieldFormat* f = format_of(last);
  return f && f->format == Format::compressed && name.size() > last.size() + 1 ? f : nullptr;
}

// The extensions of one format, for error messages: "jpg, jpeg, png, ...".
inline std::string extensions_of(Format format) {
  std::string names;
  for (const FieldFormat& f : kFieldFormats) {
    if (f.format != format) continue;
    if (!names.empty()) names += ", ";
    names += f.ext;
  }
  return names;
}

}  // namespace wds::detail
