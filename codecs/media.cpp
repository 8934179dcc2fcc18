#include "codecs/media.hpp"

#include <algorithm>
#include <cstring>

#include "wds/error.hpp"

namespace wds::detail {

namespace {

// What a container may read besides its own bytes: nothing.
int refuse_io_open(AVFormatContext*, AVIOContext**, const char* url, int, AVDictionary**) {
  (void)url;
  return AVERROR(EPERM);
}

// The AVIOContext's buffer: FFmpeg's usual 4 KiB was slower on big fields, and 64 KiB is still
// small beside one.
constexpr int kIoBufferSize = 64 * 1024;

}  // namespace

std::string av_error_text(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  detail::ffmpeg().av_strerror(code, buf, sizeof buf);
  return buf;
}

void throw_av_error(const char* what, int code) {
  throw Error::corrupt_data(std::string(what) + ": " + av_error_text(code));
}

PacketPtr make_packet() {
  PacketPtr p(detail::ffmpeg().av_packet_alloc());
  if (!p) throw std::bad_alloc();
  return p;
}

FramePtr make_frame() {
  FramePtr f(detail::ffmpeg().av_frame_alloc());
  if (!f) throw std::bad_alloc();
  return f;
}

int MediaInput::read(void* opaque, std::uint8_t* buf, int size) noexcept {
  auto* m = static_cast<Memory*>(opaque);
  const std::size_t left = m->data.size() - m->pos;
  if (left == 0) return AVERROR_EOF;
  const std::size_t n = std::min(left, static_cast<std::size_t>(std::max(size, 0)));
  std::memcpy(buf, m->data.data() + m->pos, n);
  m->pos += n;
  return static_cast<int>(n);
}

std::int64_t MediaInput::seek(void* opaque, std::int64_t offset, int whence) noexcept {
  auto* m = static_cast<Memory*>(opaque);
  const auto size = static_cast<std::int64_t>(m->data.size());
  whence &= ~AVSEEK_FORCE;
  if (whence == AVSEEK_SIZE) return size;
  std::int64_t base = 0;
  if (whence == SEEK_CUR)
    base = static_cast<std::int64_t>(m->pos);
  else if (whence == SEEK_END)
    base = size;
  else if (whence != SEEK_SET)
    return AVERROR(EINVAL);
  if (offset < -base || offset > size - base) return AVERROR(EINVAL);
  m->pos = static_cast<std::size_t>(base + offset);
  return base + offset;
}

MediaInput::MediaInput(std::span<const std::byte> data, const char* formats)
    : memory_(std::make_unique<Memory>(Memory{data, 0})) {
  auto* buffer = static_cast<unsigned char*>(detail::ffmpeg().av_malloc(kIoBufferSize));
  if (!buffer) throw std::bad_alloc();
  io_.reset(detail::ffmpeg().avio_alloc_context(buffer, kIoBufferSize, 0, memory_.get(),
                                                &MediaInput::read, nullptr, &MediaInput::seek));
  if (!io_) {
    detail::ffmpeg().av_free(buffer);
    throw std::bad_alloc();
  }
  AVFormatContext* f = detail::ffmpeg().avformat_alloc_context();
  if (!f) throw std::bad_alloc();
  f->pb = io_.get();
  f->flags |= AVFMT_FLAG_CUSTOM_IO;
  f->io_open = refuse_io_open;
  f->format_whitelist = detail::ffmpeg().av_strdup(formats);
  // avformat_open_input frees the context when it fails.
  const int r = detail::ffmpeg().avformat_open_input(&f, nullptr, nullptr, nullptr);
  if (r < 0) throw_av_error("not a media file wds reads", r);
  format_.reset(f);
  const int s = detail::ffmpeg().avformat_find_stream_info(f, nullptr);
  if (s < 0) throw_av_error("cannot read the streams", s);
}

int MediaInput::best_stream(AVMediaType type) const {
  const int s = detail::ffmpeg().av_find_best_stream(format_.get(), type, -1, -1, nullptr, 0);
  if (s < 0) throw_av_error("no stream to decode", s);
  return s;
}

CodecContextPtr MediaInput::open_decoder(int stream, int threads, std::int64_t max_pixels) const {
  const AVCodecParameters* par = format_->streams[stream]->codecpar;
  const AVCodec* codec = detail::ffmpeg().avcodec_find_decoder(par->codec_id);
  if (!codec) {
    throw Error::corrupt_data(std::string("no decoder for codec ") +
                              detail::ffmpeg().avcodec_get_name(par->codec_id));
  }
  CodecContextPtr c(detail::ffmpeg().avcodec_alloc_context3(codec));
  if (!c) throw std::bad_alloc();
  int r = detail::ffmpeg().avcodec_parameters_to_context(c.get(), par);
  if (r < 0) throw_av_error("bad codec parameters", r);
  c->thread_count = threads;
  if (max_pixels > 0) c->max_pixels = max_pixels;
  c->pkt_timebase = format_->streams[stream]->time_base;
  r = detail::ffmpeg().avcodec_open2(c.get(), codec, nullptr);
  if (r < 0) throw_av_error("cannot open the decoder", r);
  return c;
}

std::optional<double> MediaInput::stated_length(int stream) const {
  const AVStream* st = format_->streams[stream];
  if (st->duration != AV_NOPTS_VALUE && st->duration > 0) {
    return static_cast<double>(st->duration) * av_q2d(st->time_base);
  }
  if (format_->duration != AV_NOPTS_VALUE && format_->duration > 0) {
    return static_cast<double>(format_->duration) / AV_TIME_BASE;
  }
  return std::nullopt;
}

bool MediaInput::read_packet(int stream, AVPacket* packet) const {
  for (;;) {
    detail::ffmpeg().av_packet_unref(packet);
    const int r = detail::ffmpeg().av_read_frame(format_.get(), packet);
    if (r == AVERROR_EOF) return false;
    if (r < 0) throw_av_error("cannot read a packet", r);
    if (packet->stream_index == stream) return true;
  }
}

bool MediaInput::decode_frames(int stream, AVCodecContext* decoder, AVFrame* frame,
                               const char* what, const std::function<bool(AVFrame*)>& on_frame,
                               const std::function<void(const AVPacket*)>& before_send) const {
  PacketPtr packet = make_packet();
  auto send = [&](const AVPacket* p) {
    const int r = detail::ffmpeg().avcodec_send_packet(decoder, p);
    // AVERROR_EOF: already flushed; EAGAIN cannot happen as every frame is received first.
    if (r < 0 && r != AVERROR_EOF && r != AVERROR(EAGAIN)) throw_av_error(what, r);
  };
  for (bool more = true; more;) {
    if (read_packet(stream, packet.get())) {
      if (before_send) before_send(packet.get());
      send(packet.get());
    } else {
      send(nullptr);
      more = false;
    }
    for (;;) {
      const int r = detail::ffmpeg().avcodec_receive_frame(decoder, frame);
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) break;
      if (r < 0) throw_av_error(what, r);
      const bool go_on = on_frame(frame);
      detail::ffmpeg().av_frame_unref(frame);
      if (!go_on) return false;
    }
  }
  return true;
}

}  // namespace wds::detail
