// wds/audio.hpp: the audio codec: decode audio fields (flac wav mp3 ogg opus m4a) from bytes in
// memory with FFmpeg's libraries into float32 tensors [channels, frames], resampled, mixed down
// and cut to a window of time on request.
//
//   wds::Audio a = wds::decode_audio(bytes.span(), {.sample_rate = 16000, .channels = 1,
//                                                   .duration = 10, .random_offset = true,
//                                                   .seed = 42});
//   // a.samples: float32 [1, 160000], a.sample_rate: 16000
//
// Values are FFmpeg's own decode, as `ffmpeg -i x -f f32le -ar R -` gives them: samples in
// [-1, 1] (integer PCM scaled), resampled by libswresample's default filter; one channel up to
// two by libswresample's default matrix, and to mono as the mean of the channels (libswresample's
// default would scale two channels by 1/sqrt(2) and leave [-1, 1]).
//
// A window of `duration` seconds starts at `offset` seconds, or, with random_offset, at a start
// drawn uniformly from [0, length - duration] by the draws of `seed` (wds/image.hpp's image_draw;
// decode() gives each sample image_seed(pipeline seed, epoch, shard name, key), so a sample gets
// the same window whatever the workers, ranks or resumes). The decoder seeks to just before the
// window (av_seek_frame) and drops the samples before its first one, so only about the window is
// decoded. A window reaching past the end of the audio is shorter, or with `pad` padded with
// zeros to the window's length; one starting past the end is empty ([channels, 0]) or, with pad,
// all zeros. A container that cannot seek is decoded from its start.
//
// Limits, checked before anything is sized by them: more than 64 channels, a sample rate above
// 768 kHz, or more than `max_duration` seconds of output (the whole clip, or the window) is a
// corrupt_data Error: a long recording is refused rather than cut, so that training never gets a
// silently truncated clip (ask for a window to read a part of it).
//
// Errors: bytes that are no audio of these formats, a truncated or corrupt stream, are
// corrupt_data Errors with FFmpeg's message; decode() adds the shard URL and member.
//
// Thread safety: all functions may be called from several threads at once; each call decodes on
// the calling thread only.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "wds/tensor.hpp"

namespace wds {

struct AudioDecodeOptions {
  // Resample to this many samples per second (libswresample); 0: keep the file's rate.
  int sample_rate = 0;
  // 1: mix down to mono, 2: stereo; 0: keep the file's channels.
  int channels = 0;
  // The window's length in seconds; 0: the whole clip (from offset when not random).
  double duration = 0;
  // The window's start in seconds, when not random_offset.
  double offset = 0;
  // Draw the window's start from `seed` instead (needs duration > 0).
  bool random_offset = false;
  // The seed of the random start; decode() sets it per sample (image_seed).
  std::uint64_t seed = 0;
  // Output longer than this many seconds is a corrupt_data Error (see above).
  double max_duration = 600;
  // With duration > 0: a window the audio ends within (or a clip shorter than the window) is
  // padded with zeros to `duration` seconds, so that every window has the same length and
  // windows batch. Off: such a window is shorter.
  bool pad = false;
};

// A decoded clip: float32 [channels, frames] at sample_rate.
struct Audio {
  Tensor samples;
  std::int64_t sample_rate = 0;
};

// The draw (wds/image.hpp's image_draw counter) a random window's start comes from.
inline constexpr std::uint32_t kAudioOffsetDraw = 64;

// Decodes one audio file held in memory. Throws corrupt_data for bad media, invalid_argument for
// bad options.
Audio decode_audio(std::span<const std::byte> data, const AudioDecodeOptions& options = {});

// Throws invalid_argument for options decode_audio refuses (negative values, channels > 2, ...).
void check_audio_options(const AudioDecodeOptions& options);

// Whether an extension (one, no dot, lower case) is an audio format: flac wav mp3 ogg opus m4a.
bool is_audio_extension(std::string_view ext) noexcept;

}  // namespace wds
