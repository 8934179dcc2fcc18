#include "tools/pipeline_options.hpp"

#include "tools/cli_checks.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <utility>

#include "wds/brace.hpp"
#include "wds/decode.hpp"
#include "wds/error.hpp"
#include "wds/remote.hpp"
#include "wds/source.hpp"
#include "wds/split.hpp"
#include "wds/webdataset.hpp"
#include "wds/wids_index.hpp"

namespace wds::tool {

ErrorHandler handler_named(const std::string& name) {
  if (name == "raise") return reraise_exception;
  if (name == "warn") return warn_and_continue;
  return ignore_and_continue;  // "ignore"; CLI11 checks the choice
}

void add_pipeline_options(CLI::App& command, PipelineOptions& options, bool patterns_required) {
  CLI::App* cmd = &command;
  PipelineOptions* o = &options;
  cmd->add_option("URL-PATTERN", o->patterns,
                  "shard URL patterns, read in order; a name ending in .json is a wids shard "
                  "index (wds index --format wids), read for its shards")
      ->required(patterns_required);
  auto* rank = cmd->add_option("--rank", o->rank,
                               "this rank (with --world-size; default: from RANK/WORLD_SIZE, "
                               "Open MPI, PMI, SLURM or Paddle variables)")
                   ->check(at_least<int>(0));
  auto* world = cmd->add_option("--world-size", o->world_size, "number of ranks (with --rank)")
                    ->check(at_least<int>(1));
  // One from the command line and the other from the launcher's variables would mix two
  // sources of truth; the library refuses it too, but in its own terms.
  rank->needs(world);
  world->needs(rank);
  cmd->add_option("--worker", o->worker, "this worker of the rank (below --num-workers)")
      ->check(at_least<int>(0));
  cmd->add_option("--num-workers", o->num_workers, "workers per rank")
      ->check(at_least<int>(1))
      ->capture_default_str();
  cmd->add_option("--split-policy", o->split_policy,
                  "when shards do not divide among ranks: even (refuse), unbalanced, drop_last, "
                  "replicate, split_samples (default: WDS_SPLIT_POLICY, else Whale's WHALE_* "
                  "variables, else even)");
  cmd->add_flag("--allow-empty", o->allow_empty, "a rank or worker may get no shard");
  cmd->add_option("--seed", o->seed, "seed of every shuffle (default: WDS_SEED, else 0)")
      ->check(at_least<std::uint64_t>(0));
  cmd->add_flag("--shuffle-shards", o->shuffle_shards,
                "permute all shards with (seed, epoch) before the split: ranks never overlap");
  cmd->add_option("--shard-shuffle", o->shard_shuffle,
                  "a shuffle buffer of N over this worker's shard URLs (0: none)")
      ->check(at_least<std::size_t>(0));
  cmd->add_option("--interleave", o->interleave,
                  "read K shards at once, one sample from each in turn (1: one after another)")
      ->check(at_least<std::size_t>(1))
      ->capture_default_str();
  cmd->add_option("--shuffle", o->shuffle, "a shuffle buffer of N samples (0: none)")
      ->check(at_least<std::size_t>(0));
  cmd->add_flag("--resampled", o->resampled,
                "draw shards with replacement, forever (use with --epoch)");
  cmd->add_option("--streams", o->streams,
                  "canonical streams: deal the shards to C streams in an order that does not "
                  "depend on the world size, so a state resumes on any ranks x workers dividing C "
                  "(--shuffle N is then each stream's buffer)")
      ->check(at_least<std::uint64_t>(0));
  cmd->add_option("--epoch", o->epoch,
                  "exactly N samples per pass, continuing the stream across passes")
      ->check(at_least<std::uint64_t>(1));
  cmd->add_option("--passes", o->passes, "number of passes (epochs) to print")
      ->check(at_least<std::uint64_t>(1))
      ->capture_default_str();
  cmd->add_option("--retries", o->retries,
                  "retries of a failed network request before the error counts (default 8, "
                  "backing off from 0.2 s to 10 s); each is reported on stderr, at most one line "
                  "a second")
      ->check(at_least<int>(0));
  cmd->add_option("--read-ahead", o->read_ahead,
                  "remote shards opened ahead of their turn, to hide first-byte latency "
                  "(default 2, WDS_READ_AHEAD; 0: one at a time)")
      ->check(at_least<std::size_t>(0));
  cmd->add_option("--parallel-parts", o->parallel_parts,
                  "ranged GETs at once for a remote shard slower than one connection should be "
                  "(default 4, WDS_PARALLEL_PARTS; 1: one GET per shard)")
      ->check(at_least<std::size_t>(1));
  cmd->add_option("--cache-dir", o->cache_dir,
                  "keep remote shards in DIR as they stream, and read them from there later");
  cmd->add_option("--cache-size", o->cache_size,
                  "evict least recently used cached shards beyond this many bytes (0: no limit)")
      ->check(at_least<std::uint64_t>(0));
  cmd->add_option("--on-error", o->on_error,
                  "a shard that fails: raise (stop with an error), warn (report and go on to the "
                  "next shard), ignore (go on silently)")
      ->check(CLI::IsMember({"raise", "warn", "ignore"}))
      ->capture_default_str();
  cmd->add_option("--join", o->join,
                  "a shard set holding other fields of the same samples (same keys in the same "
                  "order, as many shards), read in lockstep with URL-PATTERN's; repeatable")
      ->expected(1)
      ->allow_extra_args(false)  // one pattern per --join: the URL-PATTERNs may follow
      ->take_all();
}

namespace {

// Network retries on stderr as they happen, so that an outage and a dead server do not look the
// same for half a minute: a line per retry, at most one a second (the ones between are counted
// into the next line). Called from the sources' transfer threads.
RetryHook retry_warnings() {
  struct State {
    std::mutex mutex;
    std::chrono::steady_clock::time_point last{};
    std::uint64_t quiet = 0;            // retries not reported since the last line
    std::uint64_t quiet_throttled = 0;  // of those, throttled by the server
  };
  auto state = std::make_shared<State>();
  return [state](const Error& cause, int attempt) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(state->mutex);
    if (attempt == 0) {  // not a retry: a cache warning (rare, each worth its line)
      std::fprintf(stderr, "wds: warning: %s\n", cause.what());
      return;
    }
    if (state->last != std::chrono::steady_clock::time_point{} &&
        now - state->last < std::chrono::seconds(1)) {
      ++state->quiet;
      if (is_throttled(cause)) ++state->quiet_throttled;
      return;
    }
    std::string more;
    if (state->quiet > 0) {
      more = " (and " + std::to_string(state->quiet) + " more retries";
      if (state->quiet_throttled > 0)
        more += ", " + std::to_string(state->quiet_throttled) + " throttled";
      more += ")";
    }
    std::fprintf(stderr, "wds: warning: retrying, attempt %d: %s%s\n", attempt, cause.what(),
                 more.c_str());
    state->last = now;
    state->quiet = 0;
    state->quiet_throttled = 0;
  };
}

}  // namespace

Pipeline<Sample> make_pipeline(const PipelineOptions& o) {
  if (o.worker >= o.num_workers) {
    throw Error::invalid_argument("--worker " + std::to_string(o.worker) +
                                  " must be below --num-workers " + std::to_string(o.num_workers) +
                                  " (workers are numbered from 0)");
  }
  WebDatasetOptions options;
  options.open.on_retry = retry_warnings();
  options.read_ahead = o.read_ahead;
  if (o.parallel_parts) options.open.parallel_parts = *o.parallel_parts;
  if (o.retries) {
    HttpOptions http;
    http.max_retries = *o.retries;  // HTTP, S3 and Azure alike
    options.open.backend_options.set(std::move(http));
  }
  if (!o.cache_dir.empty()) {
    options.open.backend_options.set(CacheOptions{o.cache_dir, o.cache_size});
  }
  std::vector<std::string> urls;
  for (const std::string& p : o.patterns) {
    // No shard is named *.json: such a name is an index listing the shards.
    std::vector<std::string> expanded = p.ends_with(".json")
                                            ? read_wids_index(p, options.open).urls()
                                            : resolve_urls(p, options.open);
    urls.insert(urls.end(), expanded.begin(), expanded.end());
  }
  options.seed = o.seed;
  options.distributed.rank = o.rank;  // unset: from the launcher's environment
  options.distributed.world_size = o.world_size;
  if (!o.split_policy.empty()) options.split_policy = parse_split_policy(o.split_policy);
  options.allow_empty = o.allow_empty;
  options.shuffle_shards = o.shuffle_shards;
  options.shard_shuffle = o.shard_shuffle;
  options.interleave_shards = o.interleave;
  options.resampled = o.resampled;
  options.handler = handler_named(o.on_error);
  options.streams = o.streams;
  options.join = o.join;
  // Canonical streams shuffle inside each stream, so that the buffer moves with it.
  if (o.streams > 0) options.stream_shuffle = o.shuffle;
  Pipeline<Sample> samples =
      WebDataset(std::move(urls), options).with_worker(o.worker, o.num_workers);
  if (o.shuffle > 0 && o.streams == 0) samples = samples.shuffle(o.shuffle);
  if (o.epoch) samples = samples.with_epoch(*o.epoch);
  return samples;
}

void add_stage_options(CLI::App& command, StageOptions& options) {
  CLI::App* cmd = &command;
  StageOptions* o = &options;
  cmd->add_option("--decode", o->decode,
                  "decode fields: an image spec (rgb8, bgr8, l8, rgb, torchrgb, ...: images and "
                  "the basic types), or basic (txt, cls, json, npy only)");
  cmd->add_option("--resize", o->resize,
                  "resize decoded images so the shorter side is N (reduced-size JPEG decoding)")
      ->check(at_least<int>(0));
  cmd->add_option("--crop", o->crop,
                  "then cut the central NxN pixels (alone: resize the shorter side to N first)")
      ->check(at_least<int>(0));
  cmd->add_flag("--full-decode", o->full_decode,
                "with --resize or --random-resized-crop: decode JPEGs at full size (to compare)");
  cmd->add_option("--random-resized-crop", o->random_resized_crop,
                  "training: torchvision's RandomResizedCrop(N), decoding only the window")
      ->check(at_least<int>(0));
  cmd->add_option("--scale", o->scale, "the random crop's area range, MIN,MAX of the image's")
      ->capture_default_str();
  cmd->add_option("--ratio", o->ratio, "the random crop's aspect ratio range, MIN,MAX")
      ->capture_default_str();
  cmd->add_option("--flip", o->flip, "mirror images horizontally with probability P");
  cmd->add_option("--normalize", o->normalize,
                  "(value/255 - mean) / std per channel: imagenet, or M1,M2,M3/S1,S2,S3");
  cmd->add_option("--layout", o->layout, "image layout instead of the spec's: chw or hwc")
      ->check(CLI::IsMember({"chw", "hwc"}));
  cmd->add_option("--dtype", o->dtype, "image dtype instead of the spec's")
      ->check(CLI::IsMember({"uint8", "float16", "float32"}));
  cmd->add_option("--tuple", o->tuple,
                  "to_tuple fields, e.g. 'jpg;png cls' (';' = first present alternative)");
  cmd->add_option("--batch", o->batch, "batch N items (collated into contiguous tensors)")
      ->check(at_least<std::size_t>(1));
  cmd->add_flag("--drop-partial", o->drop_partial, "drop the last, short batch of a pass");
  cmd->add_flag("--decode-audio", o->decode_audio,
                "decode flac wav mp3 ogg opus m4a fields (FFmpeg) to (float32 [channels, frames], "
                "sample rate)");
  cmd->add_option("--audio-rate", o->audio.sample_rate, "resample audio to N Hz (0: keep)");
  cmd->add_option("--audio-channels", o->audio.channels, "1: mono (the mean), 2: stereo, 0: keep")
      ->check(CLI::Range(0, 2));
  cmd->add_option("--audio-duration", o->audio.duration,
                  "decode a window of S seconds of each audio field (0: all)");
  cmd->add_option("--audio-offset", o->audio.offset, "the window's start in seconds");
  cmd->add_flag("--audio-random", o->audio.random_offset,
                "start each window at a random time (the sample's seed)");
  cmd->add_flag("--audio-pad", o->audio.pad,
                "pad windows the audio ends within with zeros to --audio-duration (so they batch)");
  cmd->add_option("--audio-max-duration", o->audio.max_duration,
                  "longer audio (or window) is an error")
      ->capture_default_str();
  cmd->add_flag("--decode-video", o->decode_video,
                "decode mp4 webm mkv avi mov fields (FFmpeg) to clips, uint8 [T, H, W, 3]");
  cmd->add_option("--video-frames", o->video.frames,
                  "frames per clip (0: the whole video, up to --video-max-frames)")
      ->capture_default_str();
  cmd->add_option("--video-fps", o->video.fps,
                  "sample the clip at N frames per second of video time (0: use --video-stride)");
  cmd->add_option("--video-stride", o->video.stride, "take every Nth frame (without --video-fps)")
      ->capture_default_str();
  cmd->add_option("--video-size", o->video_size,
                  "scale frames to WxH (or N: NxN) on decode; default: the video's own size");
  cmd->add_option("--video-offset", o->video.offset, "the clip's start in seconds");
  cmd->add_flag("--video-random", o->video.random_offset,
                "start each clip at a random time (the sample's seed)");
  cmd->add_option("--video-threads", o->video.threads, "FFmpeg decoder threads per video")
      ->capture_default_str();
  cmd->add_option("--video-max-duration", o->video.max_duration,
                  "a clip spanning longer is an error")
      ->capture_default_str();
  cmd->add_option("--video-max-frames", o->video.max_frames, "a clip of more frames is an error")
      ->capture_default_str();
}

namespace {

// "0.1,2.5,3": the numbers of a comma-separated list; `what` names the option in errors.
std::vector<double> number_list(const std::string& text, const std::string& what) {
  std::vector<double> out;
  std::size_t i = 0;
  while (i <= text.size()) {
    std::size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size()) {
      throw Error::invalid_argument(what + " '" + text + "': '" + item + "' is not a number");
    }
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

std::pair<double, double> number_pair(const std::string& text, const std::string& what) {
  const std::vector<double> v = number_list(text, what);
  if (v.size() != 2) {
    throw Error::invalid_argument(what + " '" + text + "': use MIN,MAX");
  }
  return {v[0], v[1]};
}

}  // namespace

void check_stage_options(const StageOptions& o) {
  const bool image_spec = !o.decode.empty() && o.decode != "basic";
  if (!image_spec && (o.random_resized_crop || o.flip > 0 || !o.normalize.empty() ||
                      !o.layout.empty() || !o.dtype.empty() || o.resize || o.crop)) {
    throw Error::invalid_argument(
        "image options need --decode with an image spec (rgb8, torchrgb, ...)");
  }
  const AudioDecodeOptions defaults;
  const AudioDecodeOptions& a = o.audio;
  if (!o.decode_audio &&
      (a.sample_rate != defaults.sample_rate || a.channels != defaults.channels ||
       a.duration != defaults.duration || a.offset != defaults.offset || a.random_offset || a.pad ||
       a.max_duration != defaults.max_duration)) {
    throw Error::invalid_argument("--audio-* options need --decode-audio");
  }
  if (o.decode_audio) check_audio_options(a);
  const VideoDecodeOptions video_defaults;
  const VideoDecodeOptions& v = o.video;
  if (!o.decode_video &&
      (v.frames != video_defaults.frames || v.fps != video_defaults.fps ||
       v.stride != video_defaults.stride || !o.video_size.empty() ||
       v.offset != video_defaults.offset || v.random_offset ||
       v.threads != video_defaults.threads || v.max_duration != video_defaults.max_duration ||
       v.max_frames != video_defaults.max_frames)) {
    throw Error::invalid_argument("--video-* options need --decode-video");
  }
  if (o.decode_video) check_video_options(video_options(o));
}

VideoDecodeOptions video_options(const StageOptions& o) {
  VideoDecodeOptions v = o.video;
  if (!o.video_size.empty()) {
    const std::size_t x = o.video_size.find('x');
    auto dim = [&](const std::string& text) {
      char* end = nullptr;
      const long n = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || end != text.c_str() + text.size() || n < 1 || n > 16384) {
        throw Error::invalid_argument("--video-size " + o.video_size +
                                      ": use WxH or N, sizes in [1, 16384]");
      }
      return static_cast<int>(n);
    };
    v.width = dim(o.video_size.substr(0, x));
    v.height = x == std::string::npos ? v.width : dim(o.video_size.substr(x + 1));
  }
  return v;
}

Pipeline<DecodedSample> decoded(const Pipeline<Sample>& samples, const StageOptions& o,
                                const std::string& on_error) {
  check_stage_options(o);
  std::vector<Decoder> decoders;
  if (!o.decode.empty() && o.decode != "basic") decoders.emplace_back(o.decode);
  if (o.decode_audio) decoders.emplace_back("audio");
  if (o.decode_video) decoders.emplace_back("video");
  DecodeOptions options;
  options.audio = o.audio;
  options.video = video_options(o);
  options.image.resize = o.resize;
  options.image.crop = o.crop;
  options.image.reduced_decode = !o.full_decode;
  options.image.random_resized_crop.size = o.random_resized_crop;
  std::tie(options.image.random_resized_crop.scale_min,
           options.image.random_resized_crop.scale_max) = number_pair(o.scale, "--scale");
  std::tie(options.image.random_resized_crop.ratio_min,
           options.image.random_resized_crop.ratio_max) = number_pair(o.ratio, "--ratio");
  options.image.flip = o.flip;
  if (o.normalize == "imagenet") {
    set_imagenet_normalization(options.image);
  } else if (!o.normalize.empty()) {
    const std::size_t slash = o.normalize.find('/');
    if (slash == std::string::npos) {
      throw Error::invalid_argument("--normalize " + o.normalize +
                                    ": use imagenet or M1,M2,M3/S1,S2,S3");
    }
    for (double v : number_list(o.normalize.substr(0, slash), "--normalize mean")) {
      options.image.mean.push_back(static_cast<float>(v));
    }
    for (double v : number_list(o.normalize.substr(slash + 1), "--normalize std")) {
      options.image.std.push_back(static_cast<float>(v));
    }
  }
  if (!o.layout.empty()) options.image.chw = o.layout == "chw";
  if (o.dtype == "uint8") options.image.dtype = DType::uint8;
  if (o.dtype == "float16") options.image.dtype = DType::float16;
  if (o.dtype == "float32") options.image.dtype = DType::float32;
  options.handler = handler_named(on_error);
  return samples | decode(decoders, options);
}

std::vector<std::string> tuple_fields(const std::string& spec) {
  std::vector<std::string> out;
  std::istringstream in(spec);
  for (std::string field; in >> field;) out.push_back(field);
  return out;
}

Pipeline<Tuple> tuples(const Pipeline<DecodedSample>& samples, const StageOptions& o,
                       const std::vector<std::string>& extra) {
  std::vector<std::string> fields = tuple_fields(o.tuple);
  fields.insert(fields.end(), extra.begin(), extra.end());
  return batches(samples | to_tuple(fields), o);
}

}  // namespace wds::tool
