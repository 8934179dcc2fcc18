#include "codecs/ffmpeg.hpp"

#include <dlfcn.h>

#include <string>

#include "wds/error.hpp"

extern "C" {
#include <libavcodec/version.h>
#include <libavformat/version.h>
#include <libavutil/version.h>
#include <libswresample/version.h>
#include <libswscale/version.h>
}

namespace wds::detail {

namespace {

// FFmpeg's shared libraries are named lib<name>.so.<major>, the major of the headers built
// against: a library of another major has another ABI and must not be loaded.
#define WDS_SONAME(name, major) "lib" #name ".so." AV_STRINGIFY(major)
struct Library {
  const char* soname;
  void* handle = nullptr;
};

void* open_library(const char* soname) {
  void* h = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);  // never closed
  if (h == nullptr) {
    throw Error::unavailable(std::string("audio and video need FFmpeg: cannot load ") + soname +
                             ": " + ::dlerror());
  }
  return h;
}

Ffmpeg load() {
  // In dependency order, so that each finds the ones it needs already loaded.
  void* const avutil = open_library(WDS_SONAME(avutil, LIBAVUTIL_VERSION_MAJOR));
  void* const swresample = open_library(WDS_SONAME(swresample, LIBSWRESAMPLE_VERSION_MAJOR));
  void* const swscale = open_library(WDS_SONAME(swscale, LIBSWSCALE_VERSION_MAJOR));
  void* const avcodec = open_library(WDS_SONAME(avcodec, LIBAVCODEC_VERSION_MAJOR));
  void* const avformat = open_library(WDS_SONAME(avformat, LIBAVFORMAT_VERSION_MAJOR));
  Ffmpeg f;
#define WDS_FFMPEG_LOOKUP(lib, fn)                                                  \
  f.fn = reinterpret_cast<decltype(f.fn)>(::dlsym(lib, #fn));                       \
  if (f.fn == nullptr) {                                                            \
    throw Error::unavailable("FFmpeg's lib" #lib " lacks " #fn " (built against " + \
                             std::string(LIBAVCODEC_IDENT ")"));                    \
  }
  WDS_FFMPEG_FUNCTIONS(WDS_FFMPEG_LOOKUP)
#undef WDS_FFMPEG_LOOKUP
  f.av_log_set_level(AV_LOG_FATAL);
  return f;
}

}  // namespace

const Ffmpeg& ffmpeg() {
  static const Ffmpeg table = load();
  return table;
}

}  // namespace wds::detail
