// The video codec (wds/video.hpp): clips made at run time by `ffmpeg` (testsrc2, whose frames all
// differ: a moving pattern and a frame counter) in mp4 webm mkv avi mov, decoded frames against
// ffmpeg's own decode of the same file scaled the same way, clip positions (offset, fps, stride,
// random start, past the end), decode_video_into, the limits, and bad media as corrupt_data.
#include "wds/video.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "tests/support/ffmpeg.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/streams.hpp"
#include "wds/decode.hpp"
#include "wds/error.hpp"
#include "wds/image.hpp"
#include "wds/transforms.hpp"

namespace wds {
namespace {

using test::run_command;

bool have_encoder(const std::string& name) {
  static const std::string encoders =
      run_command("ffmpeg -hide_banner -encoders 2>/dev/null").output;
  return encoders.find(" " + name + " ") != std::string::npos;
}

// One container and codec: the file's extension and ffmpeg's encoder arguments.
struct Clip {
  std::string ext;
  std::string codec;
};

// Every container, each with a codec of its own: H.264 with B-frames (mp4), VP9 (webm), lossless
// FFV1 (mkv), full-range MJPEG (avi), MPEG-4 part 2 (mov). Key frames every 12 frames, so that
// seeks land between them.
std::vector<Clip> clips() {
  const std::string mpeg4 = "-c:v mpeg4 -q:v 3 -g 12";
  return {
      {"mp4", have_encoder("libx264") ? "-c:v libx264 -pix_fmt yuv420p -g 12" : mpeg4},
      {"webm", std::string("-c:v ") + (have_encoder("libvpx-vp9") ? "libvpx-vp9" : "libvpx") +
                   " -deadline realtime -cpu-used 8 -g 12"},
      {"mkv", "-c:v ffv1"},
      {"avi", "-c:v mjpeg -q:v 3"},
      {"mov", mpeg4},
  };
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

// A frame of a clip as bytes.
std::string frame(const Tensor& clip, std::int64_t i) {
  const Tensor f = clip[i];
  return std::string(reinterpret_cast<const char*>(f.data()), f.nbytes());
}

// The largest difference between two frames' values.
int max_diff(const std::string& a, const std::string& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return 256;
  int worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(int(std::uint8_t(a[i])) - int(std::uint8_t(b[i]))));
  }
  return worst;
}

// How far our frames may be from ffmpeg's: both convert and scale with libswscale, bilinear, from
// the same decoded pictures, so they should be equal (see WholeVideoEqualsFfmpegsDecode).
constexpr int kTolerance = 0;

class VideoFfmpeg : public test::FfmpegTest {
 protected:
  // testsrc2 at 64x48, `rate` frames per second for `seconds`.
  std::string make(const Clip& c, int rate = 10, double seconds = 4,
                   const std::string& size = "64x48") {
    const std::string path = dir_.file("clip-" + std::to_string(rate) + "-" +
                                       std::to_string(seconds) + "-" + size + "." + c.ext);
    const std::string cmd =
        "ffmpeg -nostdin -hide_banner -loglevel error -y -f lavfi -i testsrc2=size=" + size +
        ":rate=" + std::to_string(rate) + " -t " + std::to_string(seconds) + " " + c.codec + " " +
        path;
    EXPECT_EQ(run_command(cmd).status, 0) << cmd;
    return path;
  }

  // ffmpeg's decode of every frame of a file, scaled to width x height (0: the video's size)
  // with libswscale's bilinear filter, as RGB24.
  std::vector<std::string> reference(const std::string& path, int width = 0, int height = 0) {
    const std::string size =
        width ? std::to_string(width) + ":" + std::to_string(height) : std::string("iw:ih");
    const std::string cmd = "ffmpeg -nostdin -hide_banner -loglevel error -i " + path +
                            " -vf scale=" + size +
                            ":flags=bilinear -vsync passthrough -f rawvideo -pix_fmt rgb24 -";
    const test::ProcessResult out = run_command(cmd);
    EXPECT_EQ(out.status, 0) << cmd;
    const std::size_t bytes = std::size_t(width ? width : 64) * (height ? height : 48) * 3;
    std::vector<std::string> frames;
    for (std::size_t at = 0; at + bytes <= out.output.size(); at += bytes) {
      frames.push_back(out.output.substr(at, bytes));
    }
    return frames;
  }

  // Checks that clip frame i is reference frame want[i], for each i.
  static void expect_frames(const Tensor& clip, const std::vector<std::string>& ref,
                            const std::vector<int>& want) {
    ASSERT_EQ(clip.dim(0), std::ssize(want));
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_LT(want[i], std::ssize(ref));
      EXPECT_LE(max_diff(frame(clip, i), ref[want[i]]), kTolerance)
          << "clip frame " << i << " should be frame " << want[i];
    }
  }

  test::TempDir dir_;
};

Tensor decode_file(const std::string& path, const VideoDecodeOptions& o) {
  const std::string bytes = test::read_file(path);
  return decode_video(as_bytes(bytes), o);
}

TEST_F(VideoFfmpeg, WholeVideoEqualsFfmpegsDecode) {
  for (const Clip& c : clips()) {
    SCOPED_TRACE(c.ext);
    const std::string path = make(c, 10, 2);
    for (const auto& [w, h] : {std::pair{0, 0}, std::pair{32, 24}, std::pair{80, 40}}) {
      SCOPED_TRACE(w);
      const std::vector<std::string> ref = reference(path, w, h);
      ASSERT_EQ(ref.size(), 20u);
      const Tensor clip = decode_file(path, {.frames = 0, .width = w, .height = h});
      EXPECT_EQ(clip.dtype(), DType::uint8);
      EXPECT_EQ(clip.shape(), (Tensor::Shape{20, h ? h : 48, w ? w : 64, 3}));
      std::vector<int> all(20);
      for (int i = 0; i < 20; ++i) all[i] = i;
      expect_frames(clip, ref, all);
      // The frames differ from one another, so that matching the right one means something
      // (ffmpeg's encoder may repeat the last one to fill the avi's constant rate).
      int distinct = 0;
      for (int i = 1; i < 20; ++i) distinct += ref[i - 1] != ref[i];
      EXPECT_GE(distinct, 18);
    }
  }
}

TEST_F(VideoFfmpeg, FixedOffsetWithFpsTakesTheFrameShowingAtEachInstant) {
  for (const Clip& c : clips()) {
    SCOPED_TRACE(c.ext);
    const std::string path = make(c);
    const std::vector<std::string> ref = reference(path, 32, 24);
    // Instants 1.3 1.55 1.8 2.05 2.3 s at 10 frames a second: frames 13 15 18 20 23.
    const Tensor clip =
        decode_file(path, {.frames = 5, .fps = 4, .width = 32, .height = 24, .offset = 1.3});
    EXPECT_EQ(clip.shape(), (Tensor::Shape{5, 24, 32, 3}));
    expect_frames(clip, ref, {13, 15, 18, 20, 23});
    // The whole video from 1 s at 4 fps: instants 1, 1.25, ... up to the last frame's, 3.9 s.
    expect_frames(
        decode_file(path, {.frames = 0, .fps = 4, .width = 32, .height = 24, .offset = 1}), ref,
        {10, 12, 15, 17, 20, 22, 25, 27, 30, 32, 35, 37});
    // From the start, at the video's own rate: consecutive frames.
    expect_frames(decode_file(path, {.frames = 3, .fps = 10, .width = 32, .height = 24}), ref,
                  {0, 1, 2});
  }
}

TEST_F(VideoFfmpeg, StrideTakesEveryNthFrameFromTheFirstAtOrAfterTheStart) {
  for (const Clip& c : clips()) {
    SCOPED_TRACE(c.ext);
    const std::string path = make(c);
    const std::vector<std::string> ref = reference(path);
    // 1.05 s falls between frames 10 and 11.
    const Tensor clip = decode_file(path, {.frames = 4, .stride = 3, .offset = 1.05});
    EXPECT_EQ(clip.shape(), (Tensor::Shape{4, 48, 64, 3}));
    expect_frames(clip, ref, {11, 14, 17, 20});
    expect_frames(decode_file(path, {.frames = 3, .offset = 2}), ref, {20, 21, 22});
    // The whole video by stride: from the offset to the end.
    expect_frames(decode_file(path, {.frames = 0, .stride = 7, .offset = 1}), ref,
                  {10, 17, 24, 31, 38});
  }
}

TEST_F(VideoFfmpeg, PastTheEndTheLastFrameRepeats) {
  for (const Clip& c : clips()) {
    SCOPED_TRACE(c.ext);
    const std::string path = make(c);
    const std::vector<std::string> ref = reference(path);
    expect_frames(decode_file(path, {.frames = 8, .offset = 3.5}), ref,
                  {35, 36, 37, 38, 39, 39, 39, 39});
    expect_frames(decode_file(path, {.frames = 4, .stride = 2, .offset = 3.5}), ref,
                  {35, 37, 39, 39});
    expect_frames(decode_file(path, {.frames = 4, .fps = 2, .offset = 3.5}), ref, {35, 39, 39, 39});
    // A start past the end: the video's last frame, T times.
    expect_frames(decode_file(path, {.frames = 3, .offset = 30}), ref, {39, 39, 39});
    expect_frames(decode_file(path, {.frames = 3, .fps = 5, .offset = 30}), ref, {39, 39, 39});
    // Asked for whole from past the end, there is nothing to give.
    std::string what;
    EXPECT_EQ(test::error_code([&] { decode_file(path, {.frames = 0, .offset = 30}); }, &what),
              ErrorCode::corrupt_data);
    EXPECT_NE(what.find("no frame"), std::string::npos) << what;
  }
}

TEST_F(VideoFfmpeg, RandomOffsetIsDeterministicPerSeedAndInsideTheVideo) {
  for (const Clip& c : {clips()[0], clips()[2]}) {  // mp4 and mkv state a length of exactly 4 s
    SCOPED_TRACE(c.ext);
    const std::string path = make(c);
    const std::vector<std::string> ref = reference(path);
    std::set<int> firsts;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE(seed);
      const VideoDecodeOptions o{.frames = 8, .random_offset = true, .seed = seed};
      const Tensor clip = decode_file(path, o);
      EXPECT_EQ(clip, decode_file(path, o));
      // 8 frames at 10 frames a second span 0.8 s: the start is drawn from [0, 3.2].
      const double start = image_draw(seed, kVideoOffsetDraw) * 3.2;
      const int first = static_cast<int>(std::ceil(start * 10 - 1e-6));
      std::vector<int> want(8);
      for (int i = 0; i < 8; ++i) want[i] = first + i;
      ASSERT_LE(want.back(), 39);
      expect_frames(clip, ref, want);
      firsts.insert(first);
      // With fps, the span is (T - 1) / fps: 7 / 5 s, the start drawn from [0, 2.6].
      const Tensor at_fps =
          decode_file(path, {.frames = 8, .fps = 5, .random_offset = true, .seed = seed});
      const double s2 = image_draw(seed, kVideoOffsetDraw) * 2.6;
      for (int i = 0; i < 8; ++i) {
        want[i] = static_cast<int>(std::floor((s2 + i / 5.0) * 10 + 1e-6));
      }
      ASSERT_LE(want.back(), 39);
      expect_frames(at_fps, ref, want);
    }
    EXPECT_GE(firsts.size(), 3u);
    // A video shorter than the clip starts at 0.
    const std::string short_clip = make(c, 10, 0.5);
    expect_frames(decode_file(short_clip, {.frames = 8, .random_offset = true, .seed = 3}),
                  reference(short_clip), {0, 1, 2, 3, 4, 4, 4, 4});
  }
}

TEST_F(VideoFfmpeg, DecodeIntoWritesTheGivenTensor) {
  const std::string path = make(clips()[0]);
  const std::string bytes = test::read_file(path);
  const VideoDecodeOptions o{.frames = 4, .stride = 2, .width = 32, .height = 24, .offset = 1};
  Tensor batch(DType::uint8, {2, 4, 24, 32, 3});
  std::memset(batch.data(), 0x5a, batch.nbytes());
  Tensor row = batch[1];
  decode_video_into(as_bytes(bytes), o, row);
  EXPECT_EQ(batch[1], decode_video(as_bytes(bytes), o));
  // Row 0 is untouched.
  const auto untouched = batch[0].values<std::uint8_t>();
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](auto v) { return v == 0x5a; }));
  // A tensor of another shape or type, or options without a size, are refused.
  Tensor wrong(DType::uint8, {4, 24, 31, 3});
  EXPECT_EQ(test::error_code([&] { decode_video_into(as_bytes(bytes), o, wrong); }),
            ErrorCode::invalid_argument);
  Tensor floats(DType::float32, {4, 24, 32, 3});
  EXPECT_EQ(test::error_code([&] { decode_video_into(as_bytes(bytes), o, floats); }),
            ErrorCode::invalid_argument);
  Tensor native(DType::uint8, {4, 48, 64, 3});
  EXPECT_EQ(test::error_code([&] { decode_video_into(as_bytes(bytes), {.frames = 4}, native); }),
            ErrorCode::invalid_argument);
}

TEST_F(VideoFfmpeg, LimitsAreCorruptDataBeforeAllocating) {
  const std::string path = make(clips()[0]);  // 40 frames of 64x48, 4 s
  auto refused = [&](const VideoDecodeOptions& o, const char* word) {
    std::string what;
    EXPECT_EQ(test::error_code([&] { decode_file(path, o); }, &what), ErrorCode::corrupt_data);
    EXPECT_NE(what.find(word), std::string::npos) << what;
  };
  refused({.max_pixels = 64 * 48 - 1}, "max_pixels");
  EXPECT_EQ(decode_file(path, {.frames = 2, .max_pixels = 64 * 48}).dim(0), 2);
  refused({.frames = 0, .max_frames = 39}, "max_frames");
  EXPECT_EQ(decode_file(path, {.frames = 0, .max_frames = 40}).dim(0), 40);
  refused({.frames = 20, .max_frames = 19}, "max_frames");
  refused({.frames = 0, .max_duration = 3}, "max_duration");
  refused({.frames = 16, .fps = 1, .max_duration = 10}, "max_duration");      // spans 15 s
  refused({.frames = 16, .stride = 10, .max_duration = 10}, "max_duration");  // 160 frames
  EXPECT_EQ(decode_file(path, {.frames = 16, .stride = 5, .max_duration = 10}).dim(0), 16);
  // 2 x 16384 x 16384 x 3 bytes: refused, not allocated.
  refused({.frames = 2, .width = 16384, .height = 16384}, "2^30");
  // Bad options are invalid_argument.
  for (const VideoDecodeOptions& o :
       {VideoDecodeOptions{.frames = -1}, VideoDecodeOptions{.fps = -1},
        VideoDecodeOptions{.stride = 0}, VideoDecodeOptions{.width = 32},
        VideoDecodeOptions{.offset = -1}, VideoDecodeOptions{.frames = 0, .random_offset = true},
        VideoDecodeOptions{.threads = 17}, VideoDecodeOptions{.threads = 0},
        VideoDecodeOptions{.max_duration = 0}}) {
    EXPECT_EQ(test::error_code([&] { decode_file(path, o); }), ErrorCode::invalid_argument);
    EXPECT_EQ(test::error_code([&] { check_video_options(o); }), ErrorCode::invalid_argument);
  }
}

TEST_F(VideoFfmpeg, BadMediaIsCorruptDataNamingTheProblem) {
  auto refused = [&](const std::string& bytes, const char* word) {
    std::string what;
    EXPECT_EQ(test::error_code([&] { decode_video(as_bytes(bytes)); }, &what),
              ErrorCode::corrupt_data);
    EXPECT_NE(what.find(word), std::string::npos) << what;
  };
  refused(std::string(), "not a media file");
  refused(std::string(5000, 'x'), "not a media file");
  for (const Clip& c : clips()) {
    SCOPED_TRACE(c.ext);
    const std::string bytes = test::read_file(make(c, 10, 2));
    refused(bytes.substr(0, 16), "");
    // Cut in the middle: refused, or the frames before the cut (the clip's shape either way).
    const std::string half = bytes.substr(0, bytes.size() / 2);
    for (const VideoDecodeOptions& o :
         {VideoDecodeOptions{.frames = 0}, VideoDecodeOptions{.frames = 4, .offset = 1.5}}) {
      try {
        const Tensor t = decode_video(as_bytes(half), o);
        EXPECT_GE(t.dim(0), 1);
        EXPECT_EQ(t.dim(1), 48);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::corrupt_data) << e.what();
      }
    }
    // Garbage in the middle of the stream.
    std::string damaged = bytes;
    for (std::size_t i = bytes.size() / 3; i < bytes.size() / 3 + 200 && i < bytes.size(); ++i) {
      damaged[i] = static_cast<char>(i * 7);
    }
    try {
      EXPECT_GE(decode_video(as_bytes(damaged), {.frames = 0}).dim(0), 1);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt_data) << e.what();
    }
  }
  // An mp4 with sound and no picture.
  const std::string audio_only = dir_.file("tone.mp4");
  ASSERT_EQ(run_command("ffmpeg -nostdin -hide_banner -loglevel error -y -f lavfi -i "
                        "sine=d=1 -c:a aac " +
                        audio_only)
                .status,
            0);
  refused(test::read_file(audio_only), "no stream");
  // A truncated mp4 (its index at the end) cannot be opened.
  const std::string mp4 = test::read_file(make(clips()[0], 10, 2));
  refused(mp4.substr(0, mp4.size() / 2), "");
}

TEST_F(VideoFfmpeg, DecoderThreadsGiveTheSamePixels) {
  for (const Clip& c : {clips()[0], clips()[1]}) {
    SCOPED_TRACE(c.ext);
    const std::string path = make(c);
    for (VideoDecodeOptions o : {VideoDecodeOptions{.frames = 0},
                                 VideoDecodeOptions{.frames = 6, .fps = 3, .offset = 1.7}}) {
      const Tensor one = decode_file(path, o);
      o.threads = 4;
      EXPECT_EQ(decode_file(path, o), one);
    }
  }
}

TEST(VideoExtensions, AreTheTablesVideoFormats) {
  for (const char* e : {"mp4", "webm", "mkv", "avi", "mov"}) EXPECT_TRUE(is_video_extension(e));
  for (const char* e : {"jpg", "flac", "MP4", "", "mp4.gz"}) EXPECT_FALSE(is_video_extension(e));
}

}  // namespace
}  // namespace wds

namespace wds {
namespace {

// decode({"video"}) followed by batched(): clips of a fixed size are decoded into their rows of
// one pooled block, the batch a view of it, with the values decode_video gives each clip alone.
TEST_F(VideoFfmpeg, DecodeStageWritesFixedSizeClipsIntoTheirBatchRows) {
  std::vector<Sample> samples;
  const std::string a = test::read_file(make(clips()[0], 10, 3));
  const std::string b = test::read_file(make(clips()[0], 15, 2, "80x60"));
  for (int i = 0; i < 5; ++i) {
    samples.push_back(
        test::make_sample("v" + std::to_string(i), {{"mp4", i % 2 ? a : b}, {"cls", "1"}}));
  }
  DecodeOptions o;
  o.video = {.frames = 3, .fps = 4, .width = 32, .height = 24, .random_offset = true};
  std::vector<const std::byte*> rows;
  auto p = test::from_vector(samples) | decode(Decoder("video"), o) | to_tuple("__key__", "mp4") |
           test::note_rows(rows, 1) | batched(2);
  std::size_t seen = 0;
  for (Tuple& batch : p) {
    const Tensor& clips = batch[1].get<Tensor>();
    const Tuple& keys = batch[0].get<Tuple>();
    ASSERT_EQ(clips.shape(), (Tensor::Shape{std::ssize(keys), 3, 24, 32, 3}));
    EXPECT_EQ(clips.data(), clips.storage().get());  // one block, rows written in place
    for (std::size_t r = 0; r < keys.size(); ++r) {
      EXPECT_EQ(rows.at(seen + r), clips.data() + r * clips[0].nbytes()) << r;
      // The clip alone, with the sample's seed as decode() draws it (pipeline seed 0, epoch 0).
      VideoDecodeOptions alone = o.video;
      alone.seed = image_seed(0, 0, "", keys[r].get<std::string>());
      EXPECT_EQ(clips[static_cast<std::int64_t>(r)],
                decode_video(samples[seen + r].at("mp4").span(), alone))
          << r;
    }
    seen += keys.size();
  }
  EXPECT_EQ(seen, 5u);
  EXPECT_EQ(p.metrics().decoded, 5u);
  EXPECT_EQ(p.metrics().pool_allocations + p.metrics().pool_reuses, 3u);  // a block a batch
}

}  // namespace
}  // namespace wds
