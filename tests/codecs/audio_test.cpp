// The audio codec (wds/audio.hpp) and "audio" in decode(): clips made at run time by `ffmpeg`
// in several containers and codecs, decoded values against ffmpeg's own decode of the same file,
// windows, resampling, mix-down, and bad media as corrupt_data.
#include "wds/audio.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/ffmpeg.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/streams.hpp"
#include "wds/decode.hpp"
#include "wds/image.hpp"

namespace wds {
namespace {

using test::run_command;

// One container and codec: the file name's extension and ffmpeg's encoder arguments.
struct Clip {
  const char* ext;
  const char* codec;
  bool lossless;
};
constexpr Clip kClips[] = {
    {"wav", "-c:a pcm_s16le", true},
    {"flac", "-c:a flac", true},
    {"mp3", "-c:a libmp3lame -b:a 128k", false},
    {"ogg", "-c:a libvorbis", false},
    {"opus", "-c:a libopus -b:a 96k", false},
    {"m4a", "-c:a aac -b:a 128k", false},
};

class AudioFfmpeg : public test::FfmpegTest {
 protected:
  // A stereo clip of `seconds` at `rate`: a 440 Hz tone left, a quieter 660 Hz one right.
  std::string make(const Clip& c, double seconds = 3, int rate = 44100) {
    const std::string path = dir_.file(std::string("clip-") + std::to_string(seconds) + "-" +
                                       std::to_string(rate) + "." + c.ext);
    const std::string cmd =
        "ffmpeg -nostdin -hide_banner -loglevel error -y -f lavfi -i "
        "'aevalsrc=0.5*sin(2*PI*440*t)|0.25*sin(2*PI*660*t):s=" +
        std::to_string(rate) + ":d=" + std::to_string(seconds) + "' " + c.codec + " " + path;
    EXPECT_EQ(run_command(cmd).status, 0) << cmd;
    return path;
  }

  // ffmpeg's decode of a file: float32 [channels, frames] (from its interleaved f32le output).
  // Mono: the mean of the two channels (pan), as wds mixes down.
  Tensor reference(const std::string& path, int channels, int rate = 0) {
    std::string cmd = "ffmpeg -nostdin -hide_banner -loglevel error -i " + path +
                      (channels == 1 ? " -af 'pan=mono|c0=0.5*c0+0.5*c1'" : "") + " -f f32le -ac " +
                      std::to_string(channels);
    if (rate) cmd += " -ar " + std::to_string(rate);
    const test::ProcessResult out = run_command(cmd + " -");
    EXPECT_EQ(out.status, 0) << cmd;
    const std::int64_t frames =
        static_cast<std::int64_t>(out.output.size() / sizeof(float)) / channels;
    Tensor t(DType::float32, {channels, frames});
    float* dst = t.values<float>().data();
    for (std::int64_t i = 0; i < frames; ++i) {
      for (int c = 0; c < channels; ++c) {
        std::memcpy(&dst[c * frames + i], out.output.data() + (i * channels + c) * sizeof(float),
                    sizeof(float));
      }
    }
    return t;
  }

  test::TempDir dir_;
};

Audio decode_file(const std::string& path, const AudioDecodeOptions& o = {}) {
  const std::string bytes = test::read_file(path);
  return decode_audio(std::as_bytes(std::span(bytes.data(), bytes.size())), o);
}

// The largest difference between a and frames [from, from + b's frames) of `whole`, channel by
// channel; fails when the shapes do not fit.
double max_diff(const Tensor& whole, std::int64_t from, const Tensor& part) {
  EXPECT_EQ(whole.dim(0), part.dim(0));
  EXPECT_LE(from + part.dim(1), whole.dim(1));
  if (whole.dim(0) != part.dim(0) || from + part.dim(1) > whole.dim(1)) return 1e9;
  const float* w = whole.values<float>().data();
  const float* p = part.values<float>().data();
  double worst = 0;
  for (std::int64_t c = 0; c < part.dim(0); ++c) {
    for (std::int64_t i = 0; i < part.dim(1); ++i) {
      worst = std::max<double>(worst,
                               std::abs(w[c * whole.dim(1) + from + i] - p[c * part.dim(1) + i]));
    }
  }
  return worst;
}

TEST_F(AudioFfmpeg, WholeClipEqualsFfmpegsDecode) {
  for (const Clip& c : kClips) {
    SCOPED_TRACE(c.ext);
    const std::string path = make(c);
    const Audio a = decode_file(path);
    const int rate = std::string(c.ext) == "opus" ? 48000 : 44100;  // opus decodes at 48 kHz
    EXPECT_EQ(a.sample_rate, rate);
    const Tensor want = reference(path, 2);
    ASSERT_EQ(a.samples.ndim(), 2u);
    EXPECT_EQ(a.samples.dim(0), 2);
    EXPECT_EQ(a.samples.dim(1), want.dim(1));
    EXPECT_LT(max_diff(want, 0, a.samples), 1e-6);
    // The tone is there: not a clip of zeros matching zeros.
    const auto v = a.samples.values<float>();
    EXPECT_GT(*std::max_element(v.begin(), v.end()), 0.4f);
  }
}

TEST_F(AudioFfmpeg, ResampledAndMixedDownAsFfmpegDoes) {
  for (const Clip& c : kClips) {
    SCOPED_TRACE(c.ext);
    const std::string path = make(c);
    const Audio a = decode_file(path, {.sample_rate = 16000, .channels = 1});
    EXPECT_EQ(a.sample_rate, 16000);
    const Tensor want = reference(path, 1, 16000);
    ASSERT_EQ(a.samples.dim(0), 1);
    EXPECT_NEAR(a.samples.dim(1), want.dim(1), 2);
    const std::int64_t n = std::min(a.samples.dim(1), want.dim(1));
    double worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      worst =
          std::max<double>(worst, std::abs(a.samples.values<float>()[i] - want.values<float>()[i]));
    }
    EXPECT_LT(worst, 1e-4);
  }
}

TEST_F(AudioFfmpeg, MonoIsTheMeanOfTheChannels) {
  const std::string path = make(kClips[0]);
  const Audio stereo = decode_file(path);
  const Audio mono = decode_file(path, {.channels = 1});
  ASSERT_EQ(mono.samples.dim(1), stereo.samples.dim(1));
  const auto s = stereo.samples.values<float>();
  const auto m = mono.samples.values<float>();
  const std::int64_t n = stereo.samples.dim(1);
  for (std::int64_t i = 0; i < n; i += 97) {
    ASSERT_NEAR(m[i], (s[i] + s[n + i]) / 2, 1e-6) << i;
  }
}

TEST_F(AudioFfmpeg, FixedWindowIsTheSliceOfTheWholeDecode) {
  for (const Clip& c : kClips) {
    SCOPED_TRACE(c.ext);
    const std::string path = make(c, 6);
    for (const int rate : {0, 22050}) {
      SCOPED_TRACE(rate);
      const Audio whole = decode_file(path, {.sample_rate = rate});
      const Audio win = decode_file(path, {.sample_rate = rate, .duration = 1.5, .offset = 2.25});
      const std::int64_t r = whole.sample_rate;
      ASSERT_EQ(win.samples.dim(1), std::llround(1.5 * r));
      // Lossless codecs decode the same samples after a seek; lossy ones nearly.
      EXPECT_LT(max_diff(whole.samples, std::llround(2.25 * r), win.samples),
                c.lossless && rate == 0 ? 1e-7 : 2e-3);
    }
    // A window past the end is cut short; one beyond it is empty.
    const Audio tail = decode_file(path, {.duration = 2, .offset = 5});
    const Audio whole = decode_file(path);
    EXPECT_EQ(tail.samples.dim(1), whole.samples.dim(1) - 5 * whole.sample_rate);
    EXPECT_EQ(decode_file(path, {.duration = 1, .offset = 30}).samples.dim(1), 0);
  }
}

TEST_F(AudioFfmpeg, PaddedWindowsHaveTheWindowsLengthWithZerosAfterTheEnd) {
  const std::string path = make(kClips[1], 3);  // flac, 3 s at 44.1 kHz
  const Audio tail = decode_file(path, {.duration = 2, .offset = 2});
  const Audio padded = decode_file(path, {.duration = 2, .offset = 2, .pad = true});
  ASSERT_EQ(padded.samples.dim(0), 2);
  ASSERT_EQ(padded.samples.dim(1), 2 * 44100);
  const std::int64_t n = tail.samples.dim(1);
  ASSERT_GT(n, 0);
  ASSERT_LT(n, padded.samples.dim(1));
  const auto p = padded.samples.values<float>();
  const auto t = tail.samples.values<float>();
  for (std::int64_t c = 0; c < 2; ++c) {
    for (std::int64_t i = 0; i < padded.samples.dim(1); ++i) {
      const float want = i < n ? t[c * n + i] : 0.0f;
      ASSERT_EQ(p[c * padded.samples.dim(1) + i], want) << "channel " << c << " sample " << i;
    }
  }
  // A window inside the clip is not changed; one past the end is all zeros; a clip shorter than
  // a random window gets the window's length.
  EXPECT_EQ(decode_file(path, {.duration = 1, .offset = 1, .pad = true}).samples,
            decode_file(path, {.duration = 1, .offset = 1}).samples);
  const Audio beyond =
      decode_file(path, {.sample_rate = 16000, .duration = 1, .offset = 30, .pad = true});
  ASSERT_EQ(beyond.samples.dim(1), 16000);
  for (float v : beyond.samples.values<float>()) ASSERT_EQ(v, 0.0f);
  const Audio longer = decode_file(
      path, {.channels = 1, .duration = 5, .random_offset = true, .seed = 9, .pad = true});
  EXPECT_EQ(longer.samples.shape(), (Tensor::Shape{1, 5 * 44100}));
}

TEST_F(AudioFfmpeg, RandomWindowIsDeterministicAndInsideTheClip) {
  const Clip& wav = kClips[0];
  const std::string path = make(wav, 5);
  const Audio whole = decode_file(path);
  std::vector<std::int64_t> starts;
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    const AudioDecodeOptions o{.duration = 1, .random_offset = true, .seed = seed};
    const Audio a = decode_file(path, o);
    EXPECT_EQ(a.samples, decode_file(path, o).samples);  // the same seed, the same window
    ASSERT_EQ(a.samples.dim(1), 44100);
    const std::int64_t start = std::llround(image_draw(seed, kAudioOffsetDraw) * 4.0 * 44100);
    EXPECT_EQ(max_diff(whole.samples, start, a.samples), 0.0);
    starts.push_back(start);
  }
  std::sort(starts.begin(), starts.end());
  EXPECT_NE(starts.front(), starts.back());
  // A clip shorter than the window: from its start, whole.
  const std::string short_clip = make(wav, 0.5);
  const Audio a = decode_file(short_clip, {.duration = 1, .random_offset = true, .seed = 9});
  EXPECT_EQ(a.samples, decode_file(short_clip).samples);
}

TEST_F(AudioFfmpeg, LimitsAndBadOptions) {
  const std::string path = make(kClips[1], 3);
  EXPECT_EQ(test::error_code([&] { decode_file(path, {.max_duration = 2}); }),
            ErrorCode::corrupt_data);
  EXPECT_EQ(decode_file(path, {.duration = 1, .offset = 1, .max_duration = 2}).samples.dim(1),
            44100);
  EXPECT_EQ(test::error_code([&] { decode_file(path, {.channels = 3}); }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([&] { decode_file(path, {.random_offset = true}); }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([&] { decode_file(path, {.sample_rate = 10}); }),
            ErrorCode::invalid_argument);
}

TEST_F(AudioFfmpeg, BadMediaIsCorruptData) {
  for (const Clip& c : kClips) {
    SCOPED_TRACE(c.ext);
    const std::string bytes = test::read_file(make(c, 1));
    for (const std::string& bad : {bytes.substr(0, 16), std::string(), std::string(3000, 'x'),
                                   std::string("RIFF\xff\xff\xff\x7fWAVEfmt ", 16)}) {
      EXPECT_EQ(
          test::error_code([&] { decode_audio(std::as_bytes(std::span(bad.data(), bad.size()))); }),
          ErrorCode::corrupt_data);
    }
  }
}

TEST_F(AudioFfmpeg, DecodeStageGivesWaveformAndRateWhenAsked) {
  const std::string bytes = test::read_file(make(kClips[1], 2));
  auto sample = [&](const std::string& flac) {
    Sample s("k", std::make_shared<ShardInfo>(ShardInfo{"http://h/shard-0.tar", ""}));
    s.add("flac", Bytes::copy_of(flac));
    s.add("cls", Bytes::copy_of(std::string("3")));
    return s;
  };
  // By default audio stays bytes, as in WebDataset without torch_audio.
  {
    DecodedSample d(sample(bytes));
    decode_sample(d, {});
    EXPECT_EQ(d.get<Bytes>("flac").str(), bytes);
  }
  auto stage = decode(Decoder("audio"), {.audio = {.sample_rate = 8000, .channels = 1}});
  std::vector<DecodedSample> out;
  for (DecodedSample& s : test::from_vector(std::vector<Sample>{sample(bytes)}) | stage) {
    out.push_back(std::move(s));
  }
  ASSERT_EQ(out.size(), 1u);
  const Tuple& t = out[0].get<Tuple>("flac");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].get<Tensor>().shape(), (Tensor::Shape{1, 16000}));
  EXPECT_EQ(t[1].get<std::int64_t>(), 8000);
  EXPECT_EQ(out[0].get<std::int64_t>("cls"), 3);
  // Bad media names the member.
  std::string what;
  EXPECT_EQ(test::error_code(
                [&] {
                  for (DecodedSample& s :
                       test::from_vector(std::vector<Sample>{sample("not audio")}) | stage) {
                    (void)s;
                  }
                },
                &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("k.flac"), std::string::npos) << what;
  EXPECT_NE(what.find("shard-0.tar"), std::string::npos) << what;
  // Bad options fail when the stage is made.
  EXPECT_EQ(test::error_code([] { decode(Decoder("audio"), {.audio = {.channels = 5}}); }),
            ErrorCode::invalid_argument);
}

// A PCM s16 WAV with an empty data chunk: a header and no frame to decode.
std::string wav_without_frames(std::uint16_t channels, std::uint32_t rate) {
  std::string w;
  auto put = [&](std::uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) w.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  w += "RIFF";
  put(36, 4);
  w += "WAVEfmt ";
  put(16, 4);
  put(1, 2);  // PCM
  put(channels, 2);
  put(rate, 4);
  put(rate * channels * 2u, 4);  // bytes per second
  put(channels * 2u, 2);         // block align
  put(16, 2);                    // bits per sample
  w += "data";
  put(0, 4);
  return w;
}

Audio decode_string(const std::string& bytes, const AudioDecodeOptions& o = {}) {
  return decode_audio(std::as_bytes(std::span(bytes.data(), bytes.size())), o);
}

// Without frames the shape comes from the header, checked as a frame's format is (the fuzzer
// found a header of 122 channels giving a [122, 0] tensor).
TEST(AudioHeader, AClipWithoutFramesHasTheHeadersShapeWhenTheHeaderIsSound) {
  const Audio stereo = decode_string(wav_without_frames(2, 44100));
  EXPECT_EQ(stereo.samples.shape(), (Tensor::Shape{2, 0}));
  EXPECT_EQ(stereo.sample_rate, 44100);
  const Audio mono =
      decode_string(wav_without_frames(2, 44100), {.sample_rate = 16000, .channels = 1});
  EXPECT_EQ(mono.samples.shape(), (Tensor::Shape{1, 0}));
  EXPECT_EQ(mono.sample_rate, 16000);
  const Audio padded = decode_string(wav_without_frames(2, 8000), {.duration = 0.5, .pad = true});
  ASSERT_EQ(padded.samples.shape(), (Tensor::Shape{2, 4000}));
  const auto v = padded.samples.values<float>();
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));

  std::string what;
  EXPECT_EQ(test::error_code([] { decode_string(wav_without_frames(122, 44100)); }, &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("channel count 122"), std::string::npos) << what;
  EXPECT_EQ(
      test::error_code([] { decode_string(wav_without_frames(122, 44100), {.channels = 1}); }),
      ErrorCode::corrupt_data);
  EXPECT_EQ(test::error_code([] { decode_string(wav_without_frames(2, 500)); }, &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("sample rate 500"), std::string::npos) << what;
}

}  // namespace
}  // namespace wds
