// The audio codec (wds::decode_audio, FFmpeg's demuxers and decoders reading from memory, the
// window seek, libswresample) through decode_sample with "audio", as decode() runs it on a field.
//
// Input: one control byte, then the field's bytes. The control byte picks the field's extension
// (bits 0-2: flac wav mp3 ogg opus m4a), the output rate (bit 3: 16 kHz or the file's), the
// channels (bits 4-5: keep, mono, stereo) and the window (bits 6-7: whole, 0.1 s at 0.05 s, 0.2 s
// at a random start, 0.05 s past the end). max_duration is 30 s so that a small file expanding
// to hours of samples ends quickly in an error. Checks: no crash, UB or leak, no allocation
// beyond -malloc_limit_mb, errors are wds::Error, and a decoded field is a Tuple {float32
// [channels, frames], rate} with the channels and rate asked for and no more frames than the
// window holds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "wds/decode.hpp"
#include "wds/sample.hpp"
#include "wds/value.hpp"

namespace {

constexpr std::string_view kExts[] = {"flac", "wav", "mp3", "ogg", "opus", "m4a", "wav", "flac"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const unsigned control = data[0];
  const std::string ext(kExts[control & 7]);
  wds::DecodeOptions options;
  wds::AudioDecodeOptions& a = options.audio;
  a.sample_rate = (control & 8) ? 16000 : 0;
  a.channels = static_cast<int>((control >> 4) & 3) % 3;
  a.max_duration = 30;
  switch (control >> 6) {
    case 1:
      a.duration = 0.1;
      a.offset = 0.05;
      break;
    case 2:
      a.duration = 0.2;
      a.random_offset = true;
      break;
    case 3:
      a.duration = 0.05;
      a.offset = 1000;
      break;
    default:
      break;
  }
  wds::Sample sample("key");
  sample.add(ext, wds::Bytes::copy_of(wds_fuzz::as_bytes(data + 1, size - 1)));
  wds::DecodedSample decoded(std::move(sample));
  try {
    wds::decode_sample(decoded, {"audio"}, options);
  } catch (const wds::Error&) {
    return 0;
  }
  const wds::Tuple& t = decoded.get<wds::Tuple>(ext);
  wds_fuzz::check(t.size() == 2, "a Tuple of two");
  const wds::Tensor& samples = t[0].get<wds::Tensor>();
  const std::int64_t rate = t[1].get<std::int64_t>();
  wds_fuzz::check(samples.dtype() == wds::DType::float32 && samples.ndim() == 2, "float32 2-D");
  wds_fuzz::check(a.channels == 0 || samples.dim(0) == a.channels, "the channels asked for");
  wds_fuzz::check(samples.dim(0) >= 1 && samples.dim(0) <= 64, "1 to 64 channels");
  wds_fuzz::check(a.sample_rate == 0 || rate == a.sample_rate, "the rate asked for");
  const double seconds = a.duration > 0 ? a.duration : a.max_duration;
  wds_fuzz::check(static_cast<double>(samples.dim(1)) <= seconds * static_cast<double>(rate) + 1,
                  "no more frames than the window or max_duration");
  return 0;
}
