#include "wds/video.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "codecs/formats.hpp"
#include "codecs/media.hpp"
#include "wds/error.hpp"
#include "wds/image.hpp"

namespace wds {

namespace {

// FFmpeg's demuxers for the table's video extensions: "mov" reads mp4 and mov, "matroska" mkv
// and webm.
constexpr const char* kVideoDemuxers = "mov,matroska,avi";

constexpr std::int64_t kMaxOutputBytes = std::int64_t{1} << 30;
constexpr int kMaxThreads = 16;
// The frame rate assumed for a stream that states none (FFmpeg's own default).
constexpr double kDefaultFrameRate = 25;
// How long before the clip's start frames that no other frame refers to may be left undecoded:
// more than a frame interval at any usual rate, so that the frame showing at the start (fps > 0)
// is always decoded; a frame shown longer than this (a variable-rate video) may be replaced by
// the reference frame before it.
constexpr double kSkipMargin = 0.25;

struct SwsFreer {
  void operator()(SwsContext* s) const noexcept { detail::ffmpeg().sws_freeContext(s); }
};
using SwsPtr = std::unique_ptr<SwsContext, SwsFreer>;

// The stream's frame rate: its average, else its base rate, else 0.
double stated_rate(const AVStream* st) {
  for (const AVRational r : {st->avg_frame_rate, st->r_frame_rate}) {
    if (r.num > 0 && r.den > 0) return av_q2d(r);
  }
  return 0;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// One decode of a clip, from a seek to its start or from the video's start.
class VideoDecoding {
 public:
  // `into`: the tensor to write (decode_video_into), else one is made.
  VideoDecoding(std::span<const std::byte> data, const VideoDecodeOptions& o, Tensor* into)
      : in_(data, kVideoDemuxers), o_(o), into_(into) {
    stream_ = in_.best_stream(AVMEDIA_TYPE_VIDEO);
    const AVStream* st = in_.stream(stream_);
    if (st->codecpar->width > 0 && st->codecpar->height > 0) {
      check_pixels(st->codecpar->width, st->codecpar->height);
    }
    if (st->time_base.num <= 0 || st->time_base.den <= 0) {
      throw Error::corrupt_data("the video stream has no time base");
    }
    tick_ = av_q2d(st->time_base);
    origin_ = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
    rate_ = stated_rate(st);
    const std::optional<double> length = in_.stated_length(stream_);
    // The clip's span: from its first frame's instant to its last's with fps; T * stride frame
    // durations at the stated rate with stride.
    double span = 0;
    if (o.frames > 0) {
      if (o.frames > o.max_frames) {
        throw Error::corrupt_data("a clip of " + std::to_string(o.frames) +
                                  " frames exceeds max_frames " + std::to_string(o.max_frames));
      }
      span = o.fps > 0 ? (o.frames - 1) / o.fps
                       : double(o.frames) * o.stride / (rate_ > 0 ? rate_ : kDefaultFrameRate);
      if (span > o.max_duration) throw too_long("a clip spanning " + seconds_text(span));
    }
    start_ = o.offset;
    if (o.random_offset) {
      start_ = image_draw(o.seed, kVideoOffsetDraw) * std::max(0.0, length.value_or(0) - span);
    }
    if (o.frames == 0 && length && *length - start_ > o.max_duration) {
      throw too_long("a video of " + seconds_text(*length) + " asked for whole");
    }
    // The first tick at or after the start.
    start_tick_ =
        origin_ + static_cast<std::int64_t>(std::ceil(std::min(start_ / tick_, 4e18) - 1e-4));
    // Frames no other frame refers to (most B-frames) are not decoded at all while their packets
    // show more than kSkipMargin before the start: no clip frame can be one of them. Not near
    // the stated end (or with none): a clip starting past the end repeats the video's last
    // frame, which may be such a frame.
    if (length && start_ + kSkipMargin < *length - kSkipMargin) {
      skip_before_ = start_tick_ - static_cast<std::int64_t>(std::ceil(kSkipMargin / tick_));
    }
    decoder_ = in_.open_decoder(stream_, o.threads, o.max_pixels);
  }

  // Decodes the clip, seeking first when `seek`. False: the frames cannot be placed after the
  // seek (no timestamps, or the seek went past the start); decode again without.
  bool run(bool seek) {
    if (seek && start_ > 0) {
      seeked_ = detail::ffmpeg().av_seek_frame(in_.format(), stream_, start_tick_,
                                               AVSEEK_FLAG_BACKWARD) >= 0;
      if (seeked_) detail::ffmpeg().avcodec_flush_buffers(decoder_.get());
    }
    frame_ = detail::make_frame();
    held_ = detail::make_frame();
    bool placed = true;
    auto before_send = [&](const AVPacket* p) {
      const bool skip = skip_before_ && p->pts != AV_NOPTS_VALUE && p->pts < *skip_before_;
      decoder_->skip_frame = skip ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
    };
    in_.decode_frames(
        stream_, decoder_.get(), frame_.get(), "cannot decode the video",
        [&](AVFrame* f) {
          std::int64_t t = f->best_effort_timestamp;
          if (seeked_ && (t == AV_NOPTS_VALUE || (decoded_ == 0 && t > start_tick_))) {
            return placed = false;
          }
          if (t == AV_NOPTS_VALUE) {
            // Without timestamps, frame n shows at n / rate.
            t = origin_ +
                std::llround(double(decoded_) / (rate_ > 0 ? rate_ : kDefaultFrameRate) / tick_);
          }
          ++decoded_;
          take(t);
          return !done();
        },
        before_send);
    if (!placed) return false;
    finish();
    return true;
  }

  Tensor result() {
    if (into_) return *into_;
    return o_.frames > 0 ? out_ : out_.rows(0, next_);
  }

 private:
  void check_pixels(std::int64_t w, std::int64_t h) const {
    if (w <= 0 || h <= 0) throw Error::corrupt_data("a video frame without a size");
    if (w * h > o_.max_pixels) {
      throw Error::corrupt_data("a video frame of " + std::to_string(w) + "x" + std::to_string(h) +
                                " pixels exceeds max_pixels " + std::to_string(o_.max_pixels));
    }
  }

  Error too_long(const std::string& what) const {
    return Error::corrupt_data(what + " exceeds max_duration " + seconds_text(o_.max_duration) +
                               (o_.frames == 0 ? "; ask for a clip" : ""));
  }

  // The timestamp of the frame showing `seconds` from the video's start: the last tick at or
  // before it (up to a rounding error of the division), clamped far from overflow.
  std::int64_t ticks(double seconds) const {
    return origin_ + static_cast<std::int64_t>(std::floor(std::min(seconds / tick_, 4e18) + 1e-4));
  }

  // The timestamp of the clip's i-th instant (fps > 0).
  std::int64_t instant(std::int64_t i) const { return ticks(start_ + double(i) / o_.fps); }

  bool done() const { return o_.frames > 0 && next_ >= o_.frames; }

  // One decoded frame (frame_) at timestamp t.
  void take(std::int64_t t) {
    check_pixels(frame_->width, frame_->height);
    if (o_.frames == 0 && t > start_tick_ && double(t - start_tick_) * tick_ > o_.max_duration) {
      throw too_long("a video asked for whole, with frames past " + seconds_text(start_) +
                     " + max_duration,");
    }
    if (o_.fps > 0) {
      // The held frame shows at every instant before t.
      if (held_tick_) {
        while (!done() && instant(next_) < t) emit_held();
      }
      if (!done()) hold(t);
    } else if (t < start_tick_) {
      hold(t);  // the last frame before the start, for a start past the end
    } else if (seen_++ % o_.stride == 0) {
      convert(frame_.get(), slot(next_, frame_.get()));
      ++next_;
    }
  }

  // Keeps frame_ as the held frame.
  void hold(std::int64_t t) {
    detail::ffmpeg().av_frame_unref(held_.get());
    detail::ffmpeg().av_frame_move_ref(held_.get(), frame_.get());
    held_tick_ = t;
    held_slot_ = -1;
  }

  // The held frame at the next instant: converted once, then copied.
  void emit_held() {
    std::uint8_t* dst = slot(next_, held_.get());
    if (held_slot_ >= 0) {
      std::memcpy(dst, slot(held_slot_, held_.get()), frame_bytes_);
    } else {
      convert(held_.get(), dst);
      held_slot_ = next_;
    }
    ++next_;
  }

  void finish() {
    if (next_ == 0 && !held_tick_) throw Error::corrupt_data("the video has no frame");
    if (o_.fps > 0) {
      if (o_.frames > 0) {
        while (!done()) emit_held();
      } else {
        while (instant(next_) <= *held_tick_) emit_held();
      }
    } else if (next_ == 0 && o_.frames > 0) {
      held_slot_ = -1;
      emit_held();  // a start past the end: the video's last frame
    }
    if (next_ == 0) {
      throw Error::corrupt_data("the video has no frame at or after " + seconds_text(start_));
    }
    for (; next_ < o_.frames; ++next_) {  // past the end, the clip's last frame repeats
      std::memcpy(slot(next_, nullptr), slot(next_ - 1, nullptr), frame_bytes_);
    }
  }

  // Where frame i of the clip goes; the output is sized from `f` (the first frame) when the
  // options do not give the size.
  std::uint8_t* slot(std::int64_t i, const AVFrame* f) {
    if (frame_bytes_ == 0) allocate(f);
    if (o_.frames == 0 && i >= capacity_) grow(i + 1);
    return reinterpret_cast<std::uint8_t*>(out_.data()) + i * frame_bytes_;
  }

  void allocate(const AVFrame* f) {
    width_ = o_.width ? o_.width : f->width;
    height_ = o_.height ? o_.height : f->height;
    frame_bytes_ = std::int64_t{width_} * height_ * 3;
    if (into_) {
      out_ = *into_;
      return;
    }
    if (o_.frames > 0) {
      check_bytes(o_.frames);
      out_ = Tensor(DType::uint8, {o_.frames, height_, width_, 3});
      return;
    }
    // The whole video: room for the frames its stated length promises, grown when it lies.
    const std::optional<double> length = in_.stated_length(stream_);
    const double rate = rate_ > 0 ? rate_ : kDefaultFrameRate;
    const double promised = length ? (*length - start_) * rate / o_.stride + 2 : 16;
    grow(static_cast<std::int64_t>(std::clamp(promised, 1.0, double(o_.max_frames))));
  }

  void check_bytes(std::int64_t frames) const {
    if (frames * frame_bytes_ > kMaxOutputBytes) {
      throw Error::corrupt_data("a video clip of " + std::to_string(frames) + " frames of " +
                                std::to_string(width_) + "x" + std::to_string(height_) +
                                " exceeds 2^30 bytes");
    }
  }

  // Room for at least `frames` frames (frames == 0), doubling.
  void grow(std::int64_t frames) {
    if (frames > o_.max_frames) {
      throw Error::corrupt_data("a video asked for whole has more than max_frames " +
                                std::to_string(o_.max_frames) + " frames; ask for a clip");
    }
    std::int64_t cap = std::max(frames, std::min<std::int64_t>(capacity_ * 2, o_.max_frames));
    cap = std::max(frames, std::min(cap, kMaxOutputBytes / frame_bytes_));
    check_bytes(cap);
    Tensor bigger(DType::uint8, {cap, height_, width_, 3});
    if (next_ > 0) std::memcpy(bigger.data(), out_.data(), next_ * frame_bytes_);
    out_ = std::move(bigger);
    capacity_ = cap;
  }

  // Converts and scales one frame into `dst` (RGB24, rows of width * 3 bytes).
  void convert(const AVFrame* f, std::uint8_t* dst) {
    const auto format = static_cast<AVPixelFormat>(f->format);
    SwsContext* c = detail::ffmpeg().sws_getCachedContext(sws_.release(), f->width, f->height,
                                                          format, width_, height_, AV_PIX_FMT_RGB24,
                                                          SWS_BILINEAR, nullptr, nullptr, nullptr);
    sws_.reset(c);
    if (!c) {
      const char* name = detail::ffmpeg().av_get_pix_fmt_name(format);
      throw Error::corrupt_data(std::string("cannot convert video frames of pixel format ") +
                                (name ? name : std::to_string(f->format).c_str()));
    }
    if (c != colors_for_ || f->colorspace != colorspace_ || f->color_range != range_) {
      // As `ffmpeg -vf scale` does: the frame's matrix (BT.601 when unstated) and range.
      int *inv = nullptr, *table = nullptr;
      int in_full = 0, out_full = 0, brightness = 0, contrast = 0, saturation = 0;
      if (detail::ffmpeg().sws_getColorspaceDetails(c, &inv, &in_full, &table, &out_full,
                                                    &brightness, &contrast, &saturation) >= 0) {
        const int* coefficients = detail::ffmpeg().sws_getCoefficients(f->colorspace);
        if (f->color_range != AVCOL_RANGE_UNSPECIFIED) {
          in_full = f->color_range == AVCOL_RANGE_JPEG;
        }
        detail::ffmpeg().sws_setColorspaceDetails(c, coefficients, in_full, coefficients, out_full,
                                                  brightness, contrast, saturation);
      }
      colors_for_ = c;
      colorspace_ = f->colorspace;
      range_ = f->color_range;
    }
    std::uint8_t* const planes[4] = {dst, nullptr, nullptr, nullptr};
    const int strides[4] = {width_ * 3, 0, 0, 0};
    const int r =
        detail::ffmpeg().sws_scale(c, f->data, f->linesize, 0, f->height, planes, strides);
    if (r < 0) detail::throw_av_error("cannot convert a video frame", r);
  }

  detail::MediaInput in_;
  const VideoDecodeOptions& o_;
  Tensor* into_;
  int stream_ = -1;
  detail::CodecContextPtr decoder_;
  detail::FramePtr frame_;
  detail::FramePtr held_;
  SwsPtr sws_;
  const SwsContext* colors_for_ = nullptr;  // the context the color details were set on
  AVColorSpace colorspace_ = AVCOL_SPC_UNSPECIFIED;
  AVColorRange range_ = AVCOL_RANGE_UNSPECIFIED;
  double tick_ = 0;  // seconds per timestamp unit
  double rate_ = 0;
  std::int64_t origin_ = 0;
  double start_ = 0;
  std::int64_t start_tick_ = 0;
  bool seeked_ = false;
  std::optional<std::int64_t> skip_before_;  // packets showing before this tick: refs only
  std::int64_t decoded_ = 0;                 // frames out of the decoder
  std::int64_t seen_ = 0;                    // frames at or after the start (stride)
  std::optional<std::int64_t> held_tick_;    // the held frame's timestamp, when one is held
  std::int64_t held_slot_ = -1;              // the slot the held frame was converted into
  std::int64_t next_ = 0;                    // the clip's next frame
  Tensor out_;
  std::int64_t capacity_ = 0;  // frames out_ holds (frames == 0)
  int width_ = 0;
  int height_ = 0;
  std::int64_t frame_bytes_ = 0;
};

Tensor decode_clip(std::span<const std::byte> data, const VideoDecodeOptions& o, Tensor* into) {
  check_video_options(o);
  {
    VideoDecoding d(data, o, into);
    if (d.run(true)) return d.result();
  }
  VideoDecoding d(data, o, into);
  d.run(false);
  return d.result();
}

}  // namespace

void check_video_options(const VideoDecodeOptions& o) {
  auto bad = [](const std::string& what) { throw Error::invalid_argument("video: " + what); };
  if (o.frames < 0) bad("frames must be >= 0");
  if (!(o.fps >= 0) || !std::isfinite(o.fps)) bad("fps must be finite and >= 0");
  if (o.stride < 1) bad("stride must be >= 1");
  if (o.width < 0 || o.height < 0) bad("width and height must be >= 0");
  if ((o.width == 0) != (o.height == 0)) bad("width and height go together (both 0: native)");
  if (!(o.offset >= 0) || !std::isfinite(o.offset)) bad("offset must be finite and >= 0");
  if (o.random_offset && o.frames == 0) bad("random_offset needs frames > 0");
  if (o.threads < 1 || o.threads > kMaxThreads) bad("threads must be in [1, 16]");
  if (!(o.max_duration > 0)) bad("max_duration must be > 0");
  if (o.max_frames < 1) bad("max_frames must be >= 1");
  if (o.max_pixels < 1) bad("max_pixels must be >= 1");
}

Tensor decode_video(std::span<const std::byte> data, const VideoDecodeOptions& options) {
  return decode_clip(data, options, nullptr);
}

void decode_video_into(std::span<const std::byte> data, const VideoDecodeOptions& options,
                       Tensor& out) {
  check_video_options(options);
  const Tensor::Shape want{options.frames, options.height, options.width, 3};
  if (options.frames == 0 || options.width == 0 || out.dtype() != DType::uint8 ||
      out.shape() != want) {
    throw Error::invalid_argument(
        "video: decode_video_into needs frames, width and height set and "
        "a uint8 [frames, height, width, 3] tensor, not " +
        out.describe());
  }
  decode_clip(data, options, &out);
}

bool is_video_extension(std::string_view ext) noexcept {
  return detail::is_format(ext, detail::Format::video);
}

}  // namespace wds
