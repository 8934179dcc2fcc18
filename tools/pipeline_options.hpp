// The pipeline options that wds ls, bench and serve share, and the pipeline they describe.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "wds/audio.hpp"
#include "wds/error.hpp"
#include "wds/pipeline.hpp"
#include "wds/sample.hpp"
#include "wds/transforms.hpp"
#include "wds/value.hpp"
#include "wds/video.hpp"

namespace wds::tool {

struct PipelineOptions {
  std::vector<std::string> patterns;
  std::optional<int> rank;
  std::optional<int> world_size;
  int worker = 0;
  int num_workers = 1;
  std::optional<std::uint64_t> seed;
  bool shuffle_shards = false;
  std::size_t shard_shuffle = 0;
  std::size_t interleave = 1;  // shards read at once, round-robin
  std::size_t shuffle = 0;
  bool resampled = false;
  std::uint64_t streams = 0;  // canonical streams (0: off); --shuffle is then each stream's
  std::optional<std::uint64_t> epoch;
  std::uint64_t passes = 1;
  std::string split_policy;
  bool allow_empty = false;
  std::string on_error = "raise";
  std::optional<int> retries;
  std::optional<std::size_t> read_ahead;
  std::optional<std::size_t>
      parallel_parts;  // network retries per request (HttpOptions::max_retries)
  std::string cache_dir;
  std::uint64_t cache_size = 0;
  std::vector<std::string> join;  // shard sets joined by key (WebDatasetOptions::join)
};

// Adds URL-PATTERN... and every pipeline option to `cmd`. Commands that can also run without
// patterns (as a data service's trainer) say so and check for them themselves.
void add_pipeline_options(CLI::App& cmd, PipelineOptions& o, bool patterns_required = true);

// What comes after reading, for wds bench and wds serve: decode, to_tuple, batched.
struct StageOptions {
  std::string decode;  // an image spec, "basic" (no images), or empty: no decoding (bench)
  int resize = 0;
  int crop = 0;
  bool full_decode = false;
  int random_resized_crop = 0;
  std::string scale = "0.08,1";
  std::string ratio = "0.75,1.3333333333333333";
  double flip = 0;
  std::string normalize;  // "imagenet" or "M1,M2,M3/S1,S2,S3"
  std::string layout;     // "chw", "hwc" or empty: the spec's
  std::string dtype;      // "uint8", "float16", "float32" or empty: the spec's
  std::string tuple;
  std::size_t batch = 0;
  bool drop_partial = false;
  bool decode_audio = false;  // "audio" in decode()'s list, with the --audio-* options
  AudioDecodeOptions audio;
  bool decode_video = false;  // "video" in decode()'s list, with the --video-* options
  std::string video_size;     // "WxH" or "N" (square); empty: the video's own size
  VideoDecodeOptions video;
};

// Adds --decode, --resize, --crop, --full-decode, --random-resized-crop, --scale, --ratio,
// --flip, --normalize, --layout, --dtype, --tuple, --batch, --drop-partial, --decode-audio and
// --audio-rate, --audio-channels, --audio-duration, --audio-offset, --audio-random, --audio-pad,
// --audio-max-duration, --decode-video and --video-frames, --video-fps, --video-stride,
// --video-size, --video-offset, --video-random, --video-threads, --video-max-duration,
// --video-max-frames.
void add_stage_options(CLI::App& cmd, StageOptions& o);

// Refuses image options without an image spec to --decode (decoded() checks too).
void check_stage_options(const StageOptions& o);

// The video options with --video-size applied.
VideoDecodeOptions video_options(const StageOptions& o);

// The samples decoded as --decode says (the basic decoders alone without it), errors through
// the handler `on_error` names.
Pipeline<DecodedSample> decoded(const Pipeline<Sample>& samples, const StageOptions& o,
                                const std::string& on_error);

// to_tuple(--tuple and then `extra` fields), then batched by --batch (if given).
Pipeline<Tuple> tuples(const Pipeline<DecodedSample>& samples, const StageOptions& o,
                       const std::vector<std::string>& extra = {});

// Batched by --batch (if given): DecodedSamples or Tuples, which batch into their own type.
template <class T>
Pipeline<T> batches(const Pipeline<T>& items, const StageOptions& o) {
  if (!o.batch) return items;
  return items | batched(o.batch, !o.drop_partial);
}

// The field names of a --tuple spec ("jpg;png cls" -> {"jpg;png", "cls"}).
std::vector<std::string> tuple_fields(const std::string& spec);

// The handler an --on-error choice names: raise, warn or ignore.
ErrorHandler handler_named(const std::string& name);

// WebDataset over the expanded patterns, configured by `o`.
Pipeline<Sample> make_pipeline(const PipelineOptions& o);

}  // namespace wds::tool
