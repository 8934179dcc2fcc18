#include "wds/audio.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "codecs/formats.hpp"
#include "codecs/media.hpp"
#include "wds/error.hpp"
#include "wds/image.hpp"

namespace wds {

namespace {

// FFmpeg's demuxers for the table's audio extensions ("mov" reads m4a; "ogg" also opus).
constexpr const char* kAudioDemuxers = "wav,flac,mp3,ogg,mov,aac";

constexpr int kMaxChannels = 64;
constexpr int kMaxSampleRate = 768000;
constexpr int kMinSampleRate = 1000;
// Output samples (all channels) of one call: 2^28 floats, 1 GiB.
constexpr std::int64_t kMaxOutputSamples = std::int64_t{1} << 28;
// Decoded before a window's start after a seek, so that lossy codecs (MDCT overlap, MP3's bit
// reservoir) and the resampler's filter have their history when the window begins.
constexpr double kPrerollSeconds = 0.2;
// The most output frames one swr_convert call is asked for, so that its scratch stays small
// whatever the rates.
constexpr int kChunkFrames = 8192;

// One decode of a clip, from its start or from a seek.
class AudioDecoding {
 public:
  AudioDecoding(std::span<const std::byte> data, const AudioDecodeOptions& o)
      : in_(data, kAudioDemuxers), o_(o) {
    stream_ = in_.best_stream(AVMEDIA_TYPE_AUDIO);
    decoder_ = in_.open_decoder(stream_, 1);
    const AVStream* st = in_.stream(stream_);
    origin_ = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
    const std::optional<double> length = in_.stated_length(stream_);
    start_seconds_ = o.offset;
    if (o.random_offset) {
      const double room = length ? std::max(0.0, *length - o.duration) : 0.0;
      start_seconds_ = image_draw(o.seed, kAudioOffsetDraw) * room;
    }
  }

  // Decodes, seeking when `seek` and the window starts late enough. nullopt: the decoder cannot
  // place the frames after the seek (no timestamps); decode again without.
  std::optional<Audio> run(bool seek) {
    bool seeked = false;
    // Room before the window for the resampler's phase (see start()): a period of the rates.
    const int rate = decoder_->sample_rate;
    const double preroll =
        kPrerollSeconds +
        (rate > 0 && o_.sample_rate ? period(rate, o_.sample_rate) / double(rate) : 0.0);
    if (seek && start_seconds_ > preroll) {
      const AVStream* st = in_.stream(stream_);
      const std::int64_t ts =
          origin_ + detail::ffmpeg().av_rescale_q(std::llround((start_seconds_ - preroll) * 1e6),
                                                  AVRational{1, 1000000}, st->time_base);
      seeked = detail::ffmpeg().av_seek_frame(in_.format(), stream_, ts, AVSEEK_FLAG_BACKWARD) >= 0;
      if (seeked) detail::ffmpeg().avcodec_flush_buffers(decoder_.get());
    }
    detail::FramePtr frame = detail::make_frame();
    bool placed = true;
    in_.decode_frames(
        stream_, decoder_.get(), frame.get(), "cannot decode the audio", [&](AVFrame* f) {
          if (!swr_) {
            std::int64_t first = 0;  // the first frame's position, in its samples
            if (seeked) {
              const std::int64_t pts = f->best_effort_timestamp;
              if (pts == AV_NOPTS_VALUE) return placed = false;
              first = detail::ffmpeg().av_rescale_q(pts - origin_, in_.stream(stream_)->time_base,
                                                    AVRational{1, std::max(f->sample_rate, 1)});
            }
            start(f, first);
          }
          convert(f);
          return !done();
        });
    if (!placed) return std::nullopt;
    if (swr_ && !done()) convert(nullptr);  // the resampler's last samples
    return finish();
  }

 private:
  // The fewest input samples that make a whole number of output samples.
  static std::int64_t period(int in_rate, int out_rate) {
    return in_rate / std::gcd(in_rate, out_rate);
  }

  static void check_format(int rate, int channels) {
    if (rate < kMinSampleRate || rate > kMaxSampleRate) {
      throw Error::corrupt_data("unsupported sample rate " + std::to_string(rate));
    }
    if (channels < 1 || channels > kMaxChannels) {
      throw Error::corrupt_data("unsupported channel count " + std::to_string(channels));
    }
  }

  bool done() const { return swr_ && collected() >= want_; }
  std::int64_t collected() const { return out_.empty() ? 0 : std::ssize(out_[0]); }

  // Sets the resampler up from the first frame, which sits at input sample `first`.
  void start(const AVFrame* f, std::int64_t first) {
    in_rate_ = f->sample_rate;
    const int in_channels = f->ch_layout.nb_channels;
    check_format(in_rate_, in_channels);
    in_format_ = f->format;
    in_channels_ = in_channels;
    out_rate_ = o_.sample_rate ? o_.sample_rate : in_rate_;
    const int channels = o_.channels ? o_.channels : in_channels;
    AVChannelLayout out_layout;
    detail::ffmpeg().av_channel_layout_default(&out_layout, channels);
    AVChannelLayout in_layout{};
    int r = detail::ffmpeg().av_channel_layout_copy(&in_layout, &f->ch_layout);
    if (r < 0) detail::throw_av_error("bad channel layout", r);
    // A layout without channel names (AV_CHANNEL_ORDER_UNSPEC) cannot be remixed: take the
    // default one for its count.
    if (in_layout.order == AV_CHANNEL_ORDER_UNSPEC) {
      detail::ffmpeg().av_channel_layout_uninit(&in_layout);
      detail::ffmpeg().av_channel_layout_default(&in_layout, in_channels);
    }
    SwrContext* s = nullptr;
    r = detail::ffmpeg().swr_alloc_set_opts2(&s, &out_layout, AV_SAMPLE_FMT_FLTP, out_rate_,
                                             &in_layout, static_cast<AVSampleFormat>(f->format),
                                             in_rate_, 0, nullptr);
    detail::ffmpeg().av_channel_layout_uninit(&out_layout);
    detail::ffmpeg().av_channel_layout_uninit(&in_layout);
    swr_.reset(s);
    if (r < 0) detail::throw_av_error("cannot convert the audio", r);
    if (channels == 1 && in_channels > 1) {
      // Mono is the mean of the channels (libswresample's default keeps the power instead:
      // (L + R) / sqrt(2), which leaves [-1, 1]).
      std::vector<double> mean(static_cast<std::size_t>(in_channels), 1.0 / in_channels);
      r = detail::ffmpeg().swr_set_matrix(swr_.get(), mean.data(), in_channels);
      if (r < 0) detail::throw_av_error("cannot mix the audio down", r);
    }
    if ((r = detail::ffmpeg().swr_init(swr_.get())) < 0)
      detail::throw_av_error("cannot convert the audio", r);
    out_.resize(static_cast<std::size_t>(channels));
    // After a seek, resampling starts at an input sample that falls on an output sample, so
    // that the output has the phase of a decode from the start.
    const std::int64_t p = period(in_rate_, out_rate_);
    skip_ = (p - first % p) % p;
    next_ = (first + skip_) / p * (out_rate_ / std::gcd(in_rate_, out_rate_));
    begin_ = std::llround(start_seconds_ * out_rate_);
    const double limit = std::floor(o_.max_duration * out_rate_);
    const std::int64_t cap = std::min<std::int64_t>(
        static_cast<std::int64_t>(std::min(limit, 9e18)), kMaxOutputSamples / channels);
    if (o_.duration > 0) {
      want_ = std::llround(o_.duration * out_rate_);
      if (want_ > cap) throw too_long();
    } else {
      want_ = std::numeric_limits<std::int64_t>::max();
    }
    cap_ = cap;
  }

  Error too_long() const {
    return Error::corrupt_data(
        "audio longer than " + std::to_string(o_.max_duration) +
        " s (AudioDecodeOptions::max_duration) or than 2^28 samples; ask for a window");
  }

  // Resamples one frame (nullptr: the resampler's remaining samples), keeping the output
  // samples inside the window. Fed in slices so that no call makes more than kChunkFrames.
  void convert(const AVFrame* f) {
    if (f && (f->sample_rate != in_rate_ || f->format != in_format_ ||
              f->ch_layout.nb_channels != in_channels_)) {
      throw Error::corrupt_data("the audio's format changes within the stream");
    }
    const int total = f ? f->nb_samples : 0;
    const int slice = std::max<int>(
        1, static_cast<int>(std::min<std::int64_t>(
               total, detail::ffmpeg().av_rescale(kChunkFrames, in_rate_, out_rate_))));
    const bool planar =
        detail::ffmpeg().av_sample_fmt_is_planar(static_cast<AVSampleFormat>(in_format_));
    const int bytes =
        detail::ffmpeg().av_get_bytes_per_sample(static_cast<AVSampleFormat>(in_format_));
    int fed = static_cast<int>(std::min<std::int64_t>(skip_, total));
    skip_ -= fed;
    if (f && fed == total) return;
    do {
      const int n = f ? std::min(slice, total - fed) : 0;
      const int room = detail::ffmpeg().swr_get_out_samples(swr_.get(), n);
      if (room < 0) detail::throw_av_error("cannot convert the audio", room);
      if (std::ssize(scratch_) < static_cast<std::int64_t>(room) * std::ssize(out_)) {
        scratch_.resize(static_cast<std::size_t>(room) * out_.size());
      }
      std::vector<std::uint8_t*> outs(out_.size());
      for (std::size_t c = 0; c < out_.size(); ++c) {
        outs[c] = reinterpret_cast<std::uint8_t*>(scratch_.data() + c * room);
      }
      std::vector<const std::uint8_t*> ins(planar ? in_channels_ : 1);
      if (f) {
        for (std::size_t c = 0; c < ins.size(); ++c) {
          const int step = planar ? bytes : bytes * in_channels_;
          ins[c] = f->extended_data[c] + static_cast<std::ptrdiff_t>(fed) * step;
        }
      }
      const int got =
          detail::ffmpeg().swr_convert(swr_.get(), outs.data(), room, f ? ins.data() : nullptr, n);
      if (got < 0) detail::throw_av_error("cannot convert the audio", got);
      keep(got, room);
      fed += n;
    } while (f && fed < total && !done());
  }

  // Keeps the part of `got` new output samples (at positions next_..) inside the window.
  void keep(int got, int room) {
    const std::int64_t at = next_;
    next_ += got;
    const std::int64_t window_end =
        want_ == std::numeric_limits<std::int64_t>::max() ? want_ : begin_ + want_;
    const std::int64_t from = std::max(at, begin_);
    const std::int64_t to = std::min(next_, window_end);
    if (to <= from) return;
    if (collected() + (to - from) > cap_) throw too_long();
    for (std::size_t c = 0; c < out_.size(); ++c) {
      const float* src = scratch_.data() + c * room + (from - at);
      out_[c].insert(out_[c].end(), src, src + (to - from));
    }
  }

  Audio finish() {
    // No frame decoded (an empty data chunk, a window past the end): the shape comes from the
    // stream's header, which gets the checks a frame's format gets in start().
    if (!swr_) check_format(decoder_->sample_rate, decoder_->ch_layout.nb_channels);
    const std::int64_t frames = collected();
    const auto channels = static_cast<std::int64_t>(
        out_.empty() ? (o_.channels ? o_.channels : decoder_->ch_layout.nb_channels) : out_.size());
    Audio a;
    a.sample_rate = swr_ ? out_rate_ : (o_.sample_rate ? o_.sample_rate : decoder_->sample_rate);
    // With pad, every window has the window's length (zeros after the audio's end).
    const std::int64_t length =
        o_.pad && o_.duration > 0
            ? std::max(frames, static_cast<std::int64_t>(std::llround(o_.duration * a.sample_rate)))
            : frames;
    if (length > kMaxOutputSamples / channels) throw too_long();  // a padded window, unchecked
    a.samples = Tensor(DType::float32, {channels, length});
    float* dst = a.samples.values<float>().data();
    if (length > frames) std::fill(dst, dst + a.samples.numel(), 0.0f);
    for (std::size_t c = 0; c < out_.size(); ++c) {
      if (frames) std::memcpy(dst + c * length, out_[c].data(), frames * sizeof(float));
    }
    return a;
  }

  detail::MediaInput in_;
  const AudioDecodeOptions& o_;
  int stream_ = -1;
  detail::CodecContextPtr decoder_;
  detail::SwrPtr swr_;
  std::int64_t origin_ = 0;
  double start_seconds_ = 0;
  int in_rate_ = 0;
  int in_format_ = -1;
  int in_channels_ = 0;
  int out_rate_ = 0;
  std::int64_t skip_ = 0;   // input samples still to drop before resampling begins
  std::int64_t next_ = 0;   // the output position of the resampler's next sample
  std::int64_t begin_ = 0;  // the window's first output position
  std::int64_t want_ = 0;   // the window's length in output samples
  std::int64_t cap_ = 0;    // the most output samples per channel allowed
  std::vector<float> scratch_;
  std::vector<std::vector<float>> out_;
};

}  // namespace

void check_audio_options(const AudioDecodeOptions& o) {
  auto bad = [](const std::string& what) { throw Error::invalid_argument("audio: " + what); };
  if (o.sample_rate != 0 && (o.sample_rate < kMinSampleRate || o.sample_rate > kMaxSampleRate)) {
    bad("sample_rate must be 0 or in [1000, 768000], not " + std::to_string(o.sample_rate));
  }
  if (o.channels < 0 || o.channels > 2) bad("channels must be 0, 1 or 2");
  if (!(o.duration >= 0) || !(o.offset >= 0) || !std::isfinite(o.duration) ||
      !std::isfinite(o.offset)) {
    bad("duration and offset must be finite and >= 0");
  }
  if (!(o.max_duration > 0)) bad("max_duration must be > 0");
  if (o.duration > o.max_duration) bad("duration exceeds max_duration");
  if (o.random_offset && o.duration <= 0) bad("random_offset needs a duration");
}

Audio decode_audio(std::span<const std::byte> data, const AudioDecodeOptions& options) {
  check_audio_options(options);
  {
    AudioDecoding d(data, options);
    if (std::optional<Audio> a = d.run(true)) return std::move(*a);
  }
  AudioDecoding d(data, options);
  return *d.run(false);
}

bool is_audio_extension(std::string_view ext) noexcept {
  return detail::is_format(ext, detail::Format::audio);
}

}  // namespace wds
