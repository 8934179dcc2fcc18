// The video codec (wds::decode_video: FFmpeg's demuxers and decoders reading from memory, the
// seek to the clip, the frame choice, libswscale into the output) on malformed containers.
//
// Input: one control byte, then the field's bytes. The control byte picks the clip (bits 0-1:
// the whole video; 4 frames, stride 2, from 0.1 s; 3 frames at 5 fps from a random start; 2
// frames from 1000 s, past the end), the size (bit 2: scaled to 8x6, else the video's own) and
// the decoder threads (bit 3: 2, else 1). The limits are small (64x64 pixels, 64 frames, 30 s) so
// that a small file claiming huge frames or hours of video ends quickly in an error. Checks: no
// crash, UB or leak, no allocation beyond -malloc_limit_mb, errors are wds::Error, and a clip is
// uint8 [T, H, W, 3] with the frames and size asked for, within the limits.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "wds/tensor.hpp"
#include "wds/video.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const unsigned control = data[0];
  wds::VideoDecodeOptions o;
  o.max_pixels = 64 * 64;
  o.max_frames = 64;
  o.max_duration = 30;
  switch (control & 3) {
    case 0:
      o.frames = 0;
      break;
    case 1:
      o.frames = 4;
      o.stride = 2;
      o.offset = 0.1;
      break;
    case 2:
      o.frames = 3;
      o.fps = 5;
      o.random_offset = true;
      o.seed = control;
      break;
    default:
      o.frames = 2;
      o.offset = 1000;
      break;
  }
  if (control & 4) {
    o.width = 8;
    o.height = 6;
  }
  o.threads = (control & 8) ? 2 : 1;
  wds::Tensor clip;
  try {
    clip = wds::decode_video(wds_fuzz::as_bytes(data + 1, size - 1), o);
  } catch (const wds::Error&) {
    return 0;
  }
  wds_fuzz::check(clip.dtype() == wds::DType::uint8 && clip.ndim() == 4 && clip.dim(3) == 3,
                  "uint8 [T, H, W, 3]");
  if (o.frames > 0) {
    wds_fuzz::check(clip.dim(0) == o.frames, "the frames asked for");
  } else {
    wds_fuzz::check(clip.dim(0) >= 1 && clip.dim(0) <= o.max_frames, "1 to max_frames frames");
  }
  if (o.width > 0) {
    wds_fuzz::check(clip.dim(1) == o.height && clip.dim(2) == o.width, "the size asked for");
  } else {
    wds_fuzz::check(
        clip.dim(1) >= 1 && clip.dim(2) >= 1 && clip.dim(1) * clip.dim(2) <= o.max_pixels,
        "a frame within max_pixels");
  }
  return 0;
}
