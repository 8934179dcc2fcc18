// wds/video.hpp: the video codec: decode a clip of T frames from a video field (mp4 webm mkv avi
// mov) held in memory with FFmpeg's libraries, frames scaled on decode, into uint8 [T, H, W, 3]
// RGB.
//
//   wds::VideoDecodeOptions o{.frames = 16, .fps = 8, .width = 224, .height = 224,
//                             .random_offset = true, .seed = 42};
//   wds::Tensor clip = wds::decode_video(bytes.span(), o);   // uint8 [16, 224, 224, 3]
//
// Which frames: the clip starts at `offset` seconds, or, with random_offset, at a start drawn
// uniformly from [0, length - span] by the draws of `seed` (wds/image.hpp's image_draw; decode()
// gives each sample image_seed(pipeline seed, epoch, shard name, key), so a sample gets the same
// clip whatever the workers, ranks or resumes). length is the video stream's stated duration,
// else the container's (none stated: the start is 0); span is the clip's length in time: with
// fps > 0, (T - 1) / fps, from its first frame's instant to its last's; with fps == 0,
// T * stride frames at the stream's average frame rate (else its base rate, else 25). Its frames
// are, with fps > 0, the frames showing at start + i / fps (the last frame whose time stamp is at
// or before that time; before the first frame, the first), and with fps == 0 every `stride`-th
// frame from the first at or after the start. A clip reaching past the end of the video repeats
// its last frame, so that every clip has T frames and clips batch; a start past the end gives
// the video's last frame T times. frames == 0 asks for the whole video from the start (every
// stride-th frame, or with fps > 0 the frames showing at start + i / fps up to the last frame's
// time stamp), up to max_frames; nothing there is a corrupt_data Error. Frames without time
// stamps are placed at n / rate.
//
// Only what the clip needs is decoded: the demuxer seeks to the key frame before the start
// (av_seek_frame), frames no other frame refers to (most B-frames) are skipped while they show
// more than 0.25 s before the start (not near the stated end, where the last frame may be
// repeated; with fps, a frame of a variable-rate video shown longer than that may be replaced by
// the reference frame before it), decoding stops after the clip's last frame, and only the
// clip's frames are converted and scaled (libswscale, bilinear, as `ffmpeg -vf
// scale=W:H:flags=bilinear` gives them) straight into the output tensor. A container that
// cannot seek, or whose frames after the seek cannot be placed (no time stamps, or past the
// start), is decoded from its start.
//
// Limits, checked before anything is sized by them: a frame larger than max_pixels (as the
// stream states it, and each decoded frame, which the decoder refuses before allocating it), a
// clip of more than max_frames frames, a clip spanning more than max_duration seconds (with
// frames == 0: the stated length from the start, and any frame beyond start + max_duration),
// or an output of more than 2^30 bytes is a corrupt_data Error (a too-long video asked for whole
// is refused, not cut: ask for a clip).
//
// Errors: bytes that are no video of these formats, a truncated or corrupt stream (a packet the
// decoder rejects), a stream with no frame, are corrupt_data Errors with FFmpeg's message;
// decode() adds the shard URL and member.
//
// Thread safety: all functions may be called from several threads at once. A call decodes on
// the calling thread, plus `threads` - 1 FFmpeg threads of its own when threads > 1.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "wds/tensor.hpp"

namespace wds {

struct VideoDecodeOptions {
  // T, the clip's frame count; 0: the whole video (every stride-th frame), up to max_frames.
  int frames = 16;
  // Sample the clip at this many frames per second of the video's time; 0: use `stride`.
  double fps = 0;
  // With fps == 0: take every stride-th decoded frame (1: consecutive frames).
  int stride = 1;
  // Scale every frame to width x height; both 0: the video's own size (then clips of videos of
  // different sizes do not batch). One alone is refused.
  int width = 0;
  int height = 0;
  // The clip's start in seconds, when not random_offset.
  double offset = 0;
  // Draw the clip's start from `seed` instead (needs frames > 0).
  bool random_offset = false;
  // The seed of the random start; decode() sets it per sample (image_seed).
  std::uint64_t seed = 0;
  // FFmpeg decoder threads per video (1: the calling thread only; loaders already decode one
  // sample per worker). At most 16.
  int threads = 1;
  // Limits (see above).
  double max_duration = 600;
  int max_frames = 1024;
  std::int64_t max_pixels = std::int64_t{8192} * 4320;
};

// The draw (wds/image.hpp's image_draw counter) a random clip's start comes from.
inline constexpr std::uint32_t kVideoOffsetDraw = 65;

// Decodes a clip of one video file held in memory: uint8 [T, H, W, 3], RGB. Throws corrupt_data
// for bad media, invalid_argument for bad options.
Tensor decode_video(std::span<const std::byte> data, const VideoDecodeOptions& options = {});

// The same into `out`, which must be uint8 [options.frames, options.height, options.width, 3]
// (frames, width and height all set): a batch row, written in place.
void decode_video_into(std::span<const std::byte> data, const VideoDecodeOptions& options,
                       Tensor& out);

// Throws invalid_argument for options decode_video refuses (negative values, one of width and
// height alone, threads > 16, ...).
void check_video_options(const VideoDecodeOptions& options);

// Whether an extension (one, no dot, lower case) is a video format: mp4 webm mkv avi mov.
bool is_video_extension(std::string_view ext) noexcept;

}  // namespace wds
