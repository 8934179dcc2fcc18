// FFmpeg plumbing shared by the audio and video codecs (private to codecs/): a container read
// from bytes in memory through a custom AVIOContext, RAII holders for FFmpeg's objects, and
// AVERROR codes turned into wds::Error.
//
//   detail::MediaInput in(bytes, "wav,flac,mp3,ogg,mov");   // throws corrupt_data
//   int stream = in.best_stream(AVMEDIA_TYPE_AUDIO);
//   detail::CodecContextPtr dec = in.open_decoder(stream);
//
// Only the demuxers named in the whitelist are probed, and the container may never open another
// file or URL (HLS playlists, concat lists): every io_open is refused, so a field's bytes are all
// that is ever read.
//
// Thread safety: a MediaInput is used by one thread at a time; distinct ones are independent.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "codecs/ffmpeg.hpp"

namespace wds::detail {

struct FormatContextCloser {
  void operator()(AVFormatContext* f) const noexcept { detail::ffmpeg().avformat_close_input(&f); }
};
struct AvioContextFreer {
  void operator()(AVIOContext* io) const noexcept {
    if (io)
      detail::ffmpeg().av_freep(&io->buffer);  // libavformat may have replaced the buffer we gave
    detail::ffmpeg().avio_context_free(&io);
  }
};
struct CodecContextFreer {
  void operator()(AVCodecContext* c) const noexcept { detail::ffmpeg().avcodec_free_context(&c); }
};
struct PacketFreer {
  void operator()(AVPacket* p) const noexcept { detail::ffmpeg().av_packet_free(&p); }
};
struct FrameFreer {
  void operator()(AVFrame* f) const noexcept { detail::ffmpeg().av_frame_free(&f); }
};
struct SwrFreer {
  void operator()(SwrContext* s) const noexcept { detail::ffmpeg().swr_free(&s); }
};
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextFreer>;
using PacketPtr = std::unique_ptr<AVPacket, PacketFreer>;
using FramePtr = std::unique_ptr<AVFrame, FrameFreer>;
using SwrPtr = std::unique_ptr<SwrContext, SwrFreer>;

// FFmpeg's message for an AVERROR code.
std::string av_error_text(int code);
// A corrupt_data Error "what: FFmpeg's message"; decode() adds the URL and member.
[[noreturn]] void throw_av_error(const char* what, int code);

PacketPtr make_packet();
FramePtr make_frame();

// A container opened over borrowed bytes (they must outlive it), its streams' info read.
class MediaInput {
 public:
  // `formats`: the demuxers allowed, comma separated (FFmpeg's names, "mov" for mp4/m4a).
  MediaInput(std::span<const std::byte> data, const char* formats);
  MediaInput(const MediaInput&) = delete;
  MediaInput& operator=(const MediaInput&) = delete;

  AVFormatContext* format() const noexcept { return format_.get(); }
  AVStream* stream(int index) const noexcept { return format_->streams[index]; }
  // The best stream of a type (corrupt_data when there is none).
  int best_stream(AVMediaType type) const;
  // A decoder for a stream, opened with `threads` threads (0: FFmpeg's choice). max_pixels > 0:
  // the decoder refuses larger frames before allocating them (AVCodecContext::max_pixels).
  CodecContextPtr open_decoder(int stream, int threads = 1, std::int64_t max_pixels = 0) const;
  // A stream's length in seconds as the container states it (the stream's duration, else the
  // container's), or nullopt.
  std::optional<double> stated_length(int stream) const;
  // Reads the next packet of `stream` into `packet`; false at the end. Other streams' packets
  // are skipped.
  bool read_packet(int stream, AVPacket* packet) const;
  // Feeds `stream`'s packets to `decoder` and calls on_frame with each frame it gives, in
  // `frame` (unreferenced after the call), until on_frame returns false or the stream ends and
  // the decoder is drained. False: on_frame stopped it. A packet or frame the decoder rejects is
  // a corrupt_data Error "what: FFmpeg's message". before_send, when given, sees each packet
  // before the decoder does (to set the decoder's skip_frame for it).
  bool decode_frames(int stream, AVCodecContext* decoder, AVFrame* frame, const char* what,
                     const std::function<bool(AVFrame*)>& on_frame,
                     const std::function<void(const AVPacket*)>& before_send = {}) const;

 private:
  struct Memory {
    std::span<const std::byte> data;
    std::size_t pos = 0;
  };
  static int read(void* opaque, std::uint8_t* buf, int size) noexcept;
  static std::int64_t seek(void* opaque, std::int64_t offset, int whence) noexcept;

  std::unique_ptr<Memory> memory_;  // a fixed address for the callbacks
  std::unique_ptr<AVIOContext, AvioContextFreer> io_;
  std::unique_ptr<AVFormatContext, FormatContextCloser> format_;
};

}  // namespace wds::detail
