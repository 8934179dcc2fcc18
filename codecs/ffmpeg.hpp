// FFmpeg's functions, reached through a table filled on first use (private to codecs/).
//
//   const detail::Ffmpeg& av = detail::ffmpeg();   // loads FFmpeg's libraries once; throws
//   av.av_packet_alloc();
//
// libwds does not link FFmpeg: linked, its libraries and theirs (about 90 more shared objects)
// were loaded by every process that loads libwds, 20 ms and 16 MB on each `wds` run whether or
// not a field was audio (bench/README.md, "Before and after issue 27 and audio"). They are
// opened with dlopen when the first audio or video field is decoded. The headers still give
// every declaration, so each entry has exactly the type the installed FFmpeg declares.
//
// Thread safety: ffmpeg() may be called from any thread; the table never changes once filled.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/mathematics.h>
#include <libavutil/mem.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

namespace wds::detail {

// X(library, function) for every FFmpeg function codecs/ calls.
#define WDS_FFMPEG_FUNCTIONS(X)             \
  X(avutil, av_channel_layout_copy)         \
  X(avutil, av_channel_layout_default)      \
  X(avutil, av_channel_layout_uninit)       \
  X(avutil, av_frame_alloc)                 \
  X(avutil, av_frame_free)                  \
  X(avutil, av_frame_move_ref)              \
  X(avutil, av_frame_unref)                 \
  X(avutil, av_free)                        \
  X(avutil, av_freep)                       \
  X(avutil, av_get_bytes_per_sample)        \
  X(avutil, av_get_pix_fmt_name)            \
  X(avutil, av_log_set_level)               \
  X(avutil, av_malloc)                      \
  X(avutil, av_rescale)                     \
  X(avutil, av_rescale_q)                   \
  X(avutil, av_sample_fmt_is_planar)        \
  X(avutil, av_strdup)                      \
  X(avutil, av_strerror)                    \
  X(avcodec, av_packet_alloc)               \
  X(avcodec, av_packet_free)                \
  X(avcodec, av_packet_unref)               \
  X(avcodec, avcodec_alloc_context3)        \
  X(avcodec, avcodec_find_decoder)          \
  X(avcodec, avcodec_flush_buffers)         \
  X(avcodec, avcodec_free_context)          \
  X(avcodec, avcodec_get_name)              \
  X(avcodec, avcodec_open2)                 \
  X(avcodec, avcodec_parameters_to_context) \
  X(avcodec, avcodec_receive_frame)         \
  X(avcodec, avcodec_send_packet)           \
  X(avformat, av_find_best_stream)          \
  X(avformat, av_read_frame)                \
  X(avformat, av_seek_frame)                \
  X(avformat, avformat_alloc_context)       \
  X(avformat, avformat_close_input)         \
  X(avformat, avformat_find_stream_info)    \
  X(avformat, avformat_open_input)          \
  X(avformat, avio_alloc_context)           \
  X(avformat, avio_context_free)            \
  X(swresample, swr_alloc_set_opts2)        \
  X(swresample, swr_convert)                \
  X(swresample, swr_free)                   \
  X(swresample, swr_get_out_samples)        \
  X(swresample, swr_init)                   \
  X(swresample, swr_set_matrix)             \
  X(swscale, sws_freeContext)               \
  X(swscale, sws_getCachedContext)          \
  X(swscale, sws_getCoefficients)           \
  X(swscale, sws_getColorspaceDetails)      \
  X(swscale, sws_scale)                     \
  X(swscale, sws_setColorspaceDetails)

struct Ffmpeg {
#define WDS_FFMPEG_MEMBER(lib, fn) decltype(&::fn) fn = nullptr;
  WDS_FFMPEG_FUNCTIONS(WDS_FFMPEG_MEMBER)
#undef WDS_FFMPEG_MEMBER
};

// The table, FFmpeg's libraries loaded on the first call (never unloaded). Throws
// Error(unavailable) naming the library when one cannot be loaded or lacks a function; FFmpeg's
// own logging is set to fatal errors only, since decode errors come back as Errors.
const Ffmpeg& ffmpeg();

}  // namespace wds::detail
