#include "wds/decode.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "codecs/binary_json.hpp"
#include "codecs/formats.hpp"
#include "lib/tar/format.hpp"
#include "lib/text.hpp"
#include "wds/npy.hpp"
#include "wds/tenbin.hpp"
#include "wds/transforms.hpp"

namespace wds {

namespace {

using detail::compression_of;
using detail::FieldFormat;
using detail::Format;
using detail::format_of;
using detail::is_format;
using detail::last_extension;

std::int64_t parse_int(std::string_view text) {
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    std::string shown(text.substr(0, 40));
    throw Error::corrupt_data("not an integer: '" + shown + "'");
  }
  return v;
}

std::uint64_t load_le(const std::byte* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i > 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i - 1]);
  return v;
}

// The decompressed size a gzip or zstd field states, if it states one, bounded by the most its
// format can expand `data` to. Only a first size for the output buffer: gzip's ISIZE is the
// size modulo 2^32 of the last member only, and a hostile field may say anything.
std::optional<std::uint64_t> declared_size(const Bytes& data, int filter) {
  const std::byte* p = data.data();
  const std::size_t n = data.size();
  if (filter == ARCHIVE_FILTER_GZIP && n >= 18) {
    // Deflate expands at most 1032:1.
    return std::min<std::uint64_t>(load_le(p + n - 4, 4), std::uint64_t{1032} * n);
  }
  if (filter == ARCHIVE_FILTER_ZSTD && n >= 6) {
    // Frame header: magic, descriptor, [window], [dictionary id], [content size].
    const auto fhd = static_cast<unsigned>(p[4]);
    const bool single_segment = (fhd & 0x20) != 0;
    static constexpr std::size_t kDictIdSize[] = {0, 1, 2, 4};
    static constexpr std::size_t kSizeSize[] = {0, 2, 4, 8};
    const std::size_t at = 5 + (single_segment ? 0 : 1) + kDictIdSize[fhd & 3];
    const std::size_t len = (fhd >> 6) == 0 && single_segment ? 1 : kSizeSize[fhd >> 6];
    if (len == 0 || at + len > n) return std::nullopt;
    std::uint64_t size = load_le(p + at, len) + (len == 2 ? 256 : 0);
    // An RLE block of 128 KiB takes 4 bytes: 32768:1.
    return std::min<std::uint64_t>(size, std::uint64_t{32768} * n);
  }
  return std::nullopt;
}

// The buffers a field decompresses into: Bytes (uninitialised), or the std::string a text
// field's value is, so that the text needs no second buffer.
std::byte* bytes_of(Bytes& b) {
  return b.data();
}
std::byte* bytes_of(std::string& s) {
  return reinterpret_cast<std::byte*>(s.data());
}
template <class Buffer>
Buffer buffer_of_size(std::size_t n) {
  if constexpr (std::is_same_v<Buffer, Bytes>) {
    return Bytes(n);
  } else {
    return Buffer(n, '\0');
  }
}
void shrink_to(Bytes& b, std::size_t n) {
  b.shrink(n);
}
void shrink_to(std::string& s, std::size_t n) {
  s.resize(n);
}

// Decompresses a whole field with libarchive's raw format and its built-in filters only (no
// external programs), into one buffer that becomes the result: sized from the size the format
// states, else grown by half while bytes keep coming, never beyond `limit` bytes. `layers`:
// how many compressions were removed (libarchive removes nested ones, "x.txt.gz.xz", at once).
template <class Buffer>
Buffer decompress(const Bytes& data, std::size_t limit, int& layers) {
  std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), archive_read_free);
  enable_builtin_filters(a.get());
  archive_read_support_format_raw(a.get());
  archive_read_support_format_empty(a.get());  // compressed empty content
  auto fail = [&](const char* what) -> Error {
    const char* msg = archive_error_string(a.get());
    return Error::corrupt_data(std::string(what) + (msg ? std::string(": ") + msg : std::string()));
  };
  if (archive_read_open_memory(a.get(), data.data(), data.size()) != ARCHIVE_OK) {
    throw fail("cannot decompress");
  }
  archive_entry* entry = nullptr;
  const int r = archive_read_next_header(a.get(), &entry);
  if (r != ARCHIVE_OK && r != ARCHIVE_EOF) throw fail("cannot decompress");
  // Only the "none" filter: the bytes are not compressed at all (or in a format we do not read).
  const int filters = archive_filter_count(a.get());
  if (filters < 2) {
    throw Error::corrupt_data(
        "cannot decompress: not compressed data (gzip, bzip2, xz, lzma, zstd or lz4)");
  }
  layers = filters - 1;
  if (r == ARCHIVE_EOF) return Buffer();
  auto too_big = [&] {
    return Error::corrupt_data("decompresses to more than " + std::to_string(limit) +
                               " bytes, the limit (DecodeOptions::max_decompressed_size)");
  };
  // A nested compression's stated size is not the final one.
  std::optional<std::uint64_t> hint;
  if (filters == 2) hint = declared_size(data, archive_filter_code(a.get(), 0));
  const std::uint64_t guess = hint ? *hint : std::uint64_t{4} * data.size();
  Buffer out = buffer_of_size<Buffer>(static_cast<std::size_t>(
      std::min<std::uint64_t>(limit, std::max<std::uint64_t>(guess, hint ? 0 : 16 * 1024))));
  std::size_t filled = 0;
  for (;;) {
    if (filled == out.size()) {
      // Full: a small read tells whether there is more, so that a right size costs nothing.
      std::array<std::byte, 4096> probe;
      la_ssize_t n = archive_read_data(a.get(), probe.data(), probe.size());
      if (n < 0) throw fail("cannot decompress");
      if (n == 0) break;
      const auto got = static_cast<std::size_t>(n);
      if (got > limit - filled) throw too_big();
      const std::size_t grown = filled + std::max(filled / 2, std::size_t{16} * 1024);
      Buffer bigger = buffer_of_size<Buffer>(std::max(filled + got, std::min(grown, limit)));
      if (filled) std::memcpy(bytes_of(bigger), bytes_of(out), filled);
      std::memcpy(bytes_of(bigger) + filled, probe.data(), got);
      out = std::move(bigger);
      filled += got;
      continue;
    }
    la_ssize_t n = archive_read_data(a.get(), bytes_of(out) + filled, out.size() - filled);
    if (n < 0) throw fail("cannot decompress");
    if (n == 0) break;
    filled += static_cast<std::size_t>(n);
  }
  // A stated size far above the real one (or the first guess for a small field) would keep
  // mostly unused memory alive with the field: copy those few bytes instead.
  if (filled < out.size() / 2) {
    Buffer fit = buffer_of_size<Buffer>(filled);
    if (filled) std::memcpy(bytes_of(fit), bytes_of(out), filled);
    return fit;
  }
  shrink_to(out, filled);
  return out;
}

// What decode_basic does, by a table entry, whether or not the defaults decode it.
Value decode_format(const FieldFormat& f, Bytes& data, std::size_t max_decompressed_size) {
  switch (f.format) {
    case Format::text:
      if (!valid_utf8(data.str())) {
        throw Error::corrupt_data("text is not UTF-8");
      }
      return Value(std::string(data.str()));
    case Format::integer:
      return Value(parse_int(data.str()));
    case Format::json:
      try {
        return Value(Json::parse(data.str()));
      } catch (const Json::exception& e) {
        throw Error::corrupt_data(std::string("bad JSON: ") + e.what());
      }
    case Format::npy:
      return Value(parse_npy(std::move(data)));
    case Format::msgpack:
      return Value(detail::parse_binary_json(data.span(), detail::BinaryJson::msgpack));
    case Format::cbor:
      return Value(detail::parse_binary_json(data.span(), detail::BinaryJson::cbor));
    case Format::tenbin:
      return Value(parse_tenbin(std::move(data)));
    case Format::npz:
      return Value(parse_npz(data.span(), max_decompressed_size));
    case Format::image:       // only given an image spec
    case Format::audio:       // only given "audio"
    case Format::video:       // only given "video"
    case Format::compressed:  // decode_field decompresses first: a bare "gz" stays bytes
      break;
  }
  throw Error::invalid_argument("no basic decoder for ." + std::string(f.ext));
}

std::optional<Value> decode_default(std::string_view ext, Bytes& data,
                                    std::size_t max_decompressed_size) {
  const FieldFormat* f = format_of(last_extension(ext));
  if (!f || !f->decoded || f->format == Format::image || f->format == Format::audio ||
      f->format == Format::video || f->format == Format::compressed) {
    return std::nullopt;
  }
  return decode_format(*f, data, max_decompressed_size);
}

bool only_allows(const DecodeOptions& options, std::string_view ext) {
  return options.only.empty() ||
         std::find(options.only.begin(), options.only.end(), ext) != options.only.end();
}

// Claims the field's row of the batch being filled (column: the field's name). Two pointers,
// so that the std::function made of it per image stays in its small buffer.
struct SlotClaim {
  detail::BatchSlots* slots;
  const std::string* column;
  Tensor operator()(DType dtype, const Tensor::Shape& shape) const {
    return slots->claim(*column, dtype, shape);
  }
};

// How one sample's fields are decoded. With slots (decode() followed by batched()), image
// spec decoders decode into the batch's rows.
struct FieldDecoding {
  const std::vector<Decoder>& decoders;
  const std::vector<std::optional<ImageSpec>>& specs;  // per decoder: a spec string's
  // Per decoder: its image options, with this sample's seed (image_seed).
  const std::vector<ImageDecodeOptions>& image_options;
  detail::BatchSlots* slots = nullptr;
  std::size_t max_decompressed_size = DecodeOptions().max_decompressed_size;
  // For "audio" decoders: the stage's audio options, with this sample's seed.
  const AudioDecodeOptions* audio = nullptr;
  // For "video" decoders: the stage's video options, with this sample's seed.
  const VideoDecodeOptions* video = nullptr;
};

Value audio_value(Audio a) {
  return Value(Tuple{Value(std::move(a.samples)), Value(a.sample_rate)});
}

std::vector<std::optional<ImageSpec>> specs_of(const std::vector<Decoder>& decoders) {
  std::vector<std::optional<ImageSpec>> specs;
  for (const Decoder& d : decoders) {
    specs.push_back(d.image_spec.empty() ? std::nullopt
                                         : std::optional(parse_image_spec(d.image_spec)));
  }
  return specs;
}

std::vector<ImageDecodeOptions> image_options_of(const std::vector<Decoder>& decoders) {
  std::vector<ImageDecodeOptions> options;
  for (const Decoder& d : decoders) options.push_back(d.image_options);
  return options;
}

// Every decoder draws this sample's random choices from one seed (image_seed, computed once per
// sample): an image and its mask ("jpg" and "seg.png") of the same size get the same window and
// flip, and the audio window and the video clip come from the same seed.
void seed_sample(std::vector<ImageDecodeOptions>& images, AudioDecodeOptions& audio,
                 VideoDecodeOptions& video, std::uint64_t seed) {
  for (ImageDecodeOptions& o : images) o.seed = seed;
  audio.seed = seed;
  video.seed = seed;
}

// Runs the decoders on one field: the value, or the bytes back if none took them.
Value decode_field(std::string_view ext, Bytes& data, const FieldDecoding& how,
                   const std::string& column) {
  auto compressed_suffix = [](std::string_view name) -> std::size_t {
    const FieldFormat* c = compression_of(name);
    return c ? c->ext.size() + 1 : 0;
  };
  if (compressed_suffix(ext)) {
    // One name dropped per compression removed; a name left over is decompressed again.
    auto drop = [&](int layers) {
      std::string_view inner = ext;
      for (int i = 0; i < layers; ++i) {
        const std::size_t n = compressed_suffix(inner);
        if (n == 0) break;
        inner.remove_suffix(n);
      }
      return inner;
    };
    int layers = 0;
    // Text the basic decoder would take (no decoder of the caller's may claim it first): the
    // string the text decompresses into is the value. Through Bytes, the text was copied once
    // more into its string (a 200 MB .txt.gz field peaked at twice its size, plus the input).
    const std::string_view bare = drop(std::numeric_limits<int>::max());
    const bool own_decoders = std::any_of(how.decoders.begin(), how.decoders.end(),
                                          [](const Decoder& d) { return d.image_spec.empty(); });
    if (!own_decoders && is_format(last_extension(bare), Format::text)) {
      std::string text = decompress<std::string>(data, how.max_decompressed_size, layers);
      const std::string_view inner = drop(layers);
      if (inner.size() == bare.size()) {
        if (!valid_utf8(text)) throw Error::corrupt_data("text is not UTF-8");
        return Value(std::move(text));
      }
      Bytes plain = Bytes::copy_of(text);  // more compression by name than was found: rare
      return decode_field(inner, plain, how, column);
    }
    Bytes plain = decompress<Bytes>(data, how.max_decompressed_size, layers);
    return decode_field(drop(layers), plain, how, column);
  }
  for (std::size_t k = 0; k < how.decoders.size(); ++k) {
    const Decoder& d = how.decoders[k];
    if (how.specs[k]) {
      // What d.fn does (image_decoder), with the sample's seed, and into the row with slots.
      if (!is_image_extension(last_extension(ext))) continue;
      const ImageAllocator claim =
          how.slots ? ImageAllocator(SlotClaim{how.slots, &column}) : ImageAllocator();
      return Value(decode_image(data.span(), *how.specs[k], how.image_options[k], claim));
    }
    if (d.audio && how.audio) {
      if (!is_audio_extension(last_extension(ext))) continue;
      return audio_value(decode_audio(data.span(), *how.audio));
    }
    if (d.video && how.video) {
      if (!is_video_extension(last_extension(ext))) continue;
      const VideoDecodeOptions& o = *how.video;
      // Clips of one size are decoded into their row of the batch.
      if (how.slots && o.frames > 0 && o.width > 0) {
        Tensor row = how.slots->claim(column, DType::uint8, {o.frames, o.height, o.width, 3});
        if (row.defined()) {
          decode_video_into(data.span(), o, row);
          return Value(std::move(row));
        }
      }
      return Value(decode_video(data.span(), o));
    }
    if (std::optional<Value> v = d.fn(ext, data)) return std::move(*v);
  }
  if (std::optional<Value> v = decode_default(ext, data, how.max_decompressed_size)) {
    return std::move(*v);
  }
  return Value(std::move(data));
}

void decode_fields(DecodedSample& sample, const FieldDecoding& how, const DecodeOptions& options) {
  for (DecodedSample::Field& f : sample.fields()) {
    if (!only_allows(options, f.ext)) continue;
    Bytes* bytes = f.value.get_if<Bytes>();
    if (!bytes) {
      if (options.partial) continue;
      throw Error::invalid_argument(sample.url(), sample.key() + "." + f.ext,
                                    "field is already decoded (" +
                                        std::string(f.value.type_name()) +
                                        "); decode it once, or pass partial = true");
    }
    try {
      f.value = decode_field(f.ext, *bytes, how, f.ext);
    } catch (const Error& e) {
      throw Error(e.code(), sample.url(), sample.key() + "." + f.ext, e.cause());
    } catch (const std::exception& e) {
      throw Error::corrupt_data(sample.url(), sample.key() + "." + f.ext, e.what());
    }
  }
}

// A spec decoder's settings, for the pipeline's configuration.
std::string describe_image(const Decoder& d) {
  const ImageDecodeOptions& o = d.image_options;
  std::string s = d.image_spec;
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  if (o.resize) s += " resize=" + std::to_string(o.resize);
  if (o.crop) s += " crop=" + std::to_string(o.crop);
  if (!o.reduced_decode) s += " full_decode";
  const RandomResizedCrop& r = o.random_resized_crop;
  if (r.size) {
    s += " random_resized_crop=" + std::to_string(r.size) + "," + num(r.scale_min) + "-" +
         num(r.scale_max) + "," + num(r.ratio_min) + "-" + num(r.ratio_max);
  }
  if (o.flip > 0) s += " flip=" + num(o.flip);
  for (std::size_t c = 0; c < o.mean.size(); ++c) {
    s += (c ? "," : " normalize=") + num(o.mean[c]) + "/" + num(o.std[c]);
  }
  if (o.dtype) s += " dtype=" + std::string(to_string(*o.dtype));
  if (o.chw) s += *o.chw ? " chw" : " hwc";
  return s;
}

// The video options, for the pipeline's configuration (they shape the clips a resume must
// reproduce).
std::string describe_video(const VideoDecodeOptions& o) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "frames=%d fps=%.9g stride=%d size=%dx%d offset=%.9g%s max=%.9g,%d,%lld", o.frames,
                o.fps, o.stride, o.width, o.height, o.offset, o.random_offset ? " random" : "",
                o.max_duration, o.max_frames, static_cast<long long>(o.max_pixels));
  return buf;
}

// The audio options, for the pipeline's configuration (they shape the tensors a resume must
// reproduce).
std::string describe_audio(const AudioDecodeOptions& o) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "rate=%d channels=%d duration=%.9g offset=%.9g%s%s max=%.9g",
                o.sample_rate, o.channels, o.duration, o.offset, o.random_offset ? " random" : "",
                o.pad ? " pad" : "", o.max_duration);
  return buf;
}

template <class In>
class DecodeStream final : public StreamWrapper<In, DecodedSample> {
 public:
  DecodeStream(StreamPtr<In> up, std::vector<Decoder> decoders, DecodeOptions options)
      : StreamWrapper<In, DecodedSample>(std::move(up), "decode"),
        decoders_(std::move(decoders)),
        specs_(specs_of(decoders_)),
        image_options_(image_options_of(decoders_)),
        options_(std::move(options)),
        audio_options_(options_.audio),
        video_options_(options_.video) {}
  void start(const PassContext& ctx) override {
    metrics_ = ctx.metrics;
    seed_ = ctx.seed;
    epoch_ = ctx.epoch;
    this->upstream().start(ctx);
  }
  std::optional<DecodedSample> next() override {
    const FieldDecoding how{
        decoders_,       specs_,         image_options_, slots_, options_.max_decompressed_size,
        &audio_options_, &video_options_};
    while (std::optional<In> item = this->upstream().next()) {
      DecodedSample sample(std::move(*item));
      seed_sample(image_options_, audio_options_, video_options_,
                  image_seed(seed_, epoch_, sample.url(), sample.key()));
      try {
        const auto began = metrics_ ? Clock::now() : Clock::time_point();
        decode_fields(sample, how, options_);
        if (metrics_) metrics_->add_decode(Clock::now() - began);
        return sample;
      } catch (const Error& e) {
        if (!options_.handler(e)) return std::nullopt;
        detail::count_dropped(metrics_);
      }
    }
    return std::nullopt;
  }
  // save, restore: decoding keeps no state between samples.
  void settings(Configuration& c) const override {
    // The image transforms shape the tensors a resumed run must reproduce.
    for (std::size_t k = 0; k < decoders_.size(); ++k) {
      if (specs_[k]) c.add("image" + std::to_string(k), describe_image(decoders_[k]));
      if (decoders_[k].audio) c.add("audio", describe_audio(options_.audio));
      if (decoders_[k].video) c.add("video", describe_video(options_.video));
    }
  }
  // Hands each sample on at once: decodes into the slots, and passes them on (an earlier
  // decode() may decode other fields into them).
  void offer_slots(detail::BatchSlots* slots) override {
    slots_ = slots;
    this->upstream().offer_slots(slots);
  }

 private:
  using Clock = std::chrono::steady_clock;

  std::vector<Decoder> decoders_;
  std::vector<std::optional<ImageSpec>> specs_;
  std::vector<ImageDecodeOptions> image_options_;
  DecodeOptions options_;
  AudioDecodeOptions audio_options_;
  VideoDecodeOptions video_options_;
  std::uint64_t seed_ = 0;
  std::uint64_t epoch_ = 0;
  detail::BatchSlots* slots_ = nullptr;
  MetricsCounters* metrics_ = nullptr;
};

}  // namespace

std::optional<Value> decode_basic(std::string_view ext, Bytes& data) {
  return decode_default(ext, data, DecodeOptions().max_decompressed_size);
}

std::function<Value(Bytes&)> decode_as(std::string_view ext, std::size_t max_decompressed_size) {
  const FieldFormat* f = format_of(ext);
  if (!f || f->format == Format::image || f->format == Format::audio ||
      f->format == Format::video || f->format == Format::compressed) {
    throw Error::invalid_argument("decode_as(\"" + std::string(ext) +
                                  "\"): not an extension of the basic decoders");
  }
  return [f, max_decompressed_size](Bytes& data) {
    return decode_format(*f, data, max_decompressed_size);
  };
}

DecodeFn handle_extension(std::string_view patterns, std::function<Value(Bytes&)> fn) {
  std::vector<std::string> pats;
  for (std::size_t i = 0; i < patterns.size();) {
    std::size_t j = patterns.find(' ', i);
    if (j == std::string_view::npos) j = patterns.size();
    if (j > i) pats.emplace_back(patterns.substr(i, j - i));
    i = j + 1;
  }
  return [pats = std::move(pats), fn = std::move(fn)](std::string_view ext,
                                                      Bytes& data) -> std::optional<Value> {
    for (const std::string& p : pats) {
      // Whole dot-separated parts: "seg.png" matches "x.seg.png" and "seg.png", not "xseg.png".
      if (ext.size() >= p.size() && equals_ignoring_case(ext.substr(ext.size() - p.size()), p) &&
          (ext.size() == p.size() || ext[ext.size() - p.size() - 1] == '.')) {
        return fn(data);
      }
    }
    return std::nullopt;
  };
}

DecodeFn image_decoder(std::string_view spec, ImageDecodeOptions options) {
  ImageSpec parsed = parse_image_spec(spec);
  return [parsed, options](std::string_view ext, Bytes& data) -> std::optional<Value> {
    if (!is_image_extension(last_extension(ext))) return std::nullopt;
    return Value(decode_image(data.span(), parsed, options));
  };
}

DecodeFn audio_decoder(AudioDecodeOptions options) {
  check_audio_options(options);
  return [options](std::string_view ext, Bytes& data) -> std::optional<Value> {
    if (!is_audio_extension(last_extension(ext))) return std::nullopt;
    return audio_value(decode_audio(data.span(), options));
  };
}

DecodeFn video_decoder(VideoDecodeOptions options) {
  check_video_options(options);
  return [options](std::string_view ext, Bytes& data) -> std::optional<Value> {
    if (!is_video_extension(last_extension(ext))) return std::nullopt;
    return Value(decode_video(data.span(), options));
  };
}

Decoder::Decoder(std::string_view image_spec) {
  if (image_spec == "audio") {
    fn = audio_decoder();
    audio = true;
    return;
  }
  if (image_spec == "video") {
    fn = video_decoder();
    video = true;
    return;
  }
  fn = image_decoder(image_spec);
  this->image_spec = image_spec;
}

void decode_sample(DecodedSample& sample, const std::vector<Decoder>& decoders,
                   const DecodeOptions& options) {
  const auto specs = specs_of(decoders);
  auto image_options = image_options_of(decoders);
  AudioDecodeOptions audio = options.audio;
  VideoDecodeOptions video = options.video;
  seed_sample(image_options, audio, video, image_seed(0, 0, sample.url(), sample.key()));
  decode_fields(sample,
                FieldDecoding{decoders, specs, image_options, nullptr,
                              options.max_decompressed_size, &audio, &video},
                options);
}

StreamPtr<DecodedSample> DecodeStage::operator()(StreamPtr<Sample> up) const {
  return std::make_unique<DecodeStream<Sample>>(std::move(up), decoders, options);
}
StreamPtr<DecodedSample> DecodeStage::operator()(StreamPtr<DecodedSample> up) const {
  return std::make_unique<DecodeStream<DecodedSample>>(std::move(up), decoders, options);
}

DecodeStage decode(std::vector<Decoder> decoders, DecodeOptions options) {
  // Spec strings take the stage's image options.
  for (Decoder& d : decoders) {
    if (d.audio) {
      d.fn = audio_decoder(options.audio);  // checks the options here, when the stage is made
      continue;
    }
    if (d.video) {
      d.fn = video_decoder(options.video);
      continue;
    }
    if (!d.image_spec.empty()) {
      // Bad parameters fail here, when the stage is made, not at the first image.
      check_image_options(parse_image_spec(d.image_spec), options.image);
      d.fn = image_decoder(d.image_spec, options.image);
      d.image_options = options.image;
    }
  }
  return DecodeStage{std::move(decoders), std::move(options)};
}

DecodeStage decode(Decoder decoder, DecodeOptions options) {
  return decode(std::vector<Decoder>{std::move(decoder)}, std::move(options));
}

}  // namespace wds
