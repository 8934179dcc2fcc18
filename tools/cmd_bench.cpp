// wds bench URL-PATTERN...: run the reading pipeline, optionally with decoding, batching and
// worker threads, and report its throughput.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "tools/cli_checks.hpp"
#include "tools/commands.hpp"
#include "tools/pipeline_options.hpp"
#include "tools/progress.hpp"
#include "tools/service_options.hpp"
#include "wds/decode.hpp"
#include "wds/loader.hpp"
#include "wds/transforms.hpp"
#if WDS_TOOL_SERVICE
#include "wds/service.hpp"
#endif

namespace wds::tool {
namespace {

// Each worker is a thread with its own pipeline and queue: more than this is a typo, not a
// machine (the loader would fail halfway through starting them, or crawl).
constexpr int kMaxWorkers = 1024;

struct BenchOptions {
  PipelineOptions pipeline;
  TrainerOptions trainer;
  StageOptions stages;
  int workers = 1;
  std::size_t prefetch = 2;
  bool ordered = false;
  bool json = false;
  bool stats = false;
};

double peak_rss_mb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // kilobytes on Linux
}

// Samples in one item: 1, or a batch's rows.
std::uint64_t rows(const Sample&) {
  return 1;
}
std::uint64_t rows(const DecodedSample& s) {
  const Value* keys = s.find("__key__");
  return keys && keys->is<Tuple>() ? keys->get<Tuple>().size() : 1;
}
std::uint64_t rows(const Tuple& t, bool batched) {
  if (!batched || t.empty()) return 1;
  if (const Tensor* x = t.front().get_if<Tensor>()) return x->ndim() ? x->dim(0) : 1;
  if (const Tuple* l = t.front().get_if<Tuple>()) return l->size();
  return 1;
}

nlohmann::json metrics_json(const Metrics& m) {
  nlohmann::json sources = nlohmann::json::array();
  for (const SourceMetrics& s : m.sources) {
    sources.push_back({{"scheme", s.scheme},
                       {"shards", s.shards},
                       {"bytes", s.bytes},
                       {"retries", s.retries},
                       {"throttled", s.throttled},
                       {"read_s", s.read_seconds}});
  }
  return {{"sources", sources},
          {"samples", m.samples},
          {"dropped", m.dropped},
          {"decoded", m.decoded},
          {"decode_s", m.decode_seconds},
          {"items", m.items},
          {"worker_waits", m.worker_waits},
          {"worker_blocked_s", m.worker_blocked_seconds},
          {"consumer_waits", m.consumer_waits},
          {"consumer_wait_s", m.consumer_wait_seconds},
          {"pool_allocations", m.pool_allocations},
          {"pool_reuses", m.pool_reuses}};
}

// Runs the passes over `items` (a Loader, a ServiceLoader, or with --workers 0 the pipeline
// itself on this thread) and reports; `setup` describes the run in the JSON line. `metrics()`
// reads the counters; `queue()` describes the queues.
template <class Source, class Rows, class ReadMetrics, class Queue>
void run_passes(Source& items, const BenchOptions& o, bool batches, const nlohmann::json& setup,
                Rows count_rows, ReadMetrics metrics, Queue queue) {
  Progress progress("bench", batches ? "batches" : "samples");
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t items_seen = 0, samples = 0;
  for (std::uint64_t pass = 0; pass < o.pipeline.passes; ++pass) {
    std::uint64_t pass_items = 0, pass_samples = 0, shown = 0;
    const auto pass_start = std::chrono::steady_clock::now();
    for (auto& item : items) {
      ++pass_items;
      pass_samples += count_rows(item);
      // The display is refreshed now and then, not per item: a fast loop must not spend its
      // time formatting text or adding up counters.
      if ((pass_items & 255) == 0) {
        progress.note(queue());
        const std::uint64_t bytes = metrics().bytes();
        progress.add(pass_items - shown, bytes - std::min(bytes, progress.bytes()));
        shown = pass_items;
      }
    }
    progress.done();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count();
    if (!o.json) {
      std::fprintf(stderr, "pass %llu: %llu samples%s in %.3f s\n",
                   static_cast<unsigned long long>(pass),
                   static_cast<unsigned long long>(pass_samples),
                   batches ? (", " + std::to_string(pass_items) + " batches").c_str() : "", secs);
    }
    items_seen += pass_items;
    samples += pass_samples;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Metrics m = metrics();
  const std::uint64_t bytes = m.bytes();
  const double sps = secs > 0 ? static_cast<double>(samples) / secs : 0.0;
  const double mbps = secs > 0 ? static_cast<double>(bytes) / 1e6 / secs : 0.0;
  if (o.json) {
    nlohmann::json line = {{"samples", samples},
                           {"batches", batches ? items_seen : 0},
                           {"bytes", bytes},
                           {"wall_s", secs},
                           {"samples_per_s", sps},
                           {"MB_per_s", mbps},
                           {"peak_rss_mb", peak_rss_mb()}};
    line.update(setup);
    if (o.stats) line["metrics"] = metrics_json(m);
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf("%llu samples%s, %.1f MB in %.3f s: %.0f samples/s, %.1f MB/s, peak RSS %.0f MB\n",
                static_cast<unsigned long long>(samples),
                batches ? (" in " + std::to_string(items_seen) + " batches").c_str() : "",
                static_cast<double>(bytes) / 1e6, secs, sps, mbps, peak_rss_mb());
    if (o.stats) std::printf("stages and hand-off:\n%s", format_metrics(m).c_str());
  }
}

template <class T, class Rows>
void run_loader(const Pipeline<T>& pipeline, const BenchOptions& o, Rows count_rows) {
  const nlohmann::json setup = {{"workers", o.workers},
                                {"batch", o.stages.batch},
                                {"decode", o.stages.decode},
                                {"decode_audio", o.stages.decode_audio},
                                {"decode_video", o.stages.decode_video}};
  if (o.workers == 0) {
    // DataLoader's num_workers=0: the pipeline on this thread, the ceiling for a loader.
    Pipeline<T> p = o.pipeline.epoch ? pipeline.with_epoch(*o.pipeline.epoch) : pipeline;
    run_passes(
        p, o, o.stages.batch > 0, setup, count_rows, [&] { return p.metrics(); },
        [] { return std::string(); });
    return;
  }
  LoaderOptions<T> lo;
  lo.workers = o.workers;
  lo.prefetch = o.prefetch;
  lo.ordered = o.ordered;
  lo.epoch_length = o.pipeline.epoch;
  Loader<T> loader(pipeline, lo);
  run_passes(
      loader, o, o.stages.batch > 0, setup, count_rows, [&] { return loader.metrics(); },
      [&] {
        const LoaderProgress lp = loader.progress();
        return "queue " + std::to_string(lp.queued) + "/" + std::to_string(lp.capacity);
      });
}

#if WDS_TOOL_SERVICE
// As a trainer: what arrives from the producers, batches of named fields (wds serve's), each
// counted by its keys. Consumer waits are the time spent waiting for producers.
void run_bench_service(const BenchOptions& o) {
  ServiceLoader<DecodedSample> loader(trainer_options(o.pipeline, o.trainer));
  if (o.pipeline.epoch) loader.with_epoch(*o.pipeline.epoch);
  const nlohmann::json setup = {{"service", o.trainer.service},
                                {"rank", loader.rank()},
                                {"world_size", loader.world_size()},
                                {"credits", o.trainer.credits}};
  run_passes(
      loader, o, true, setup, [](const DecodedSample& s) { return rows(s); },
      [&] { return loader.metrics(); }, [] { return std::string(); });
}
#endif

void run_bench(const CLI::App& cmd, const BenchOptions& o) {
  check_trainer_use(cmd, o.pipeline, o.trainer, {"--json", "--stats"});
  if (!o.trainer.service.empty()) {
#if WDS_TOOL_SERVICE
    run_bench_service(o);
    return;
#else
    throw Error::invalid_argument(
        "--service: this wds was built without the data service (WDS_BUILD_SERVICE=OFF)");
#endif
  }
  PipelineOptions po = o.pipeline;
  po.epoch.reset();  // the loader counts the epoch: items (batches) of all workers together
  Pipeline<Sample> samples = make_pipeline(po);
  const StageOptions& so = o.stages;
  check_stage_options(so);
  if (so.decode.empty() && so.tuple.empty() && !so.decode_audio && !so.decode_video) {
    if (so.batch) {
      run_loader(samples | batched(so.batch, !so.drop_partial), o,
                 [](const std::vector<Sample>& b) { return std::uint64_t(b.size()); });
    } else {
      run_loader(samples, o, [](const Sample& s) { return rows(s); });
    }
    return;
  }
  Pipeline<DecodedSample> fields = decoded(samples, so, o.pipeline.on_error);
  if (!so.tuple.empty()) {
    const bool b = so.batch > 0;
    run_loader(tuples(fields, so), o, [b](const Tuple& t) { return rows(t, b); });
  } else {
    run_loader(batches(fields, so), o, [](const DecodedSample& s) { return rows(s); });
  }
}

}  // namespace

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench",
      "Run the reading pipeline (split, shuffles, epochs, decode, batch) on worker threads and "
      "report samples/s and MB/s.");
  auto o = std::make_shared<BenchOptions>();
  add_pipeline_options(*cmd, o->pipeline, false);
  add_trainer_options(*cmd, o->trainer);
  add_stage_options(*cmd, o->stages);
  cmd->add_option("--workers", o->workers,
                  "worker threads, each on its own share of the shards; 0: the pipeline on the "
                  "calling thread, without a loader (the ceiling a loader is measured against)")
      ->check(in_range(0, kMaxWorkers))
      ->capture_default_str();
  cmd->add_option("--prefetch", o->prefetch, "finished items kept per worker")
      ->check(at_least<std::size_t>(1))
      ->capture_default_str();
  cmd->add_flag("--ordered", o->ordered, "hand out items round-robin over the workers");
  cmd->add_flag("--stats", o->stats,
                "print the stage and hand-off metrics at the end (shards and bytes per source, "
                "retries, dropped samples, decode time, time workers were blocked and the "
                "consumer waited); with --json, as \"metrics\"");
  cmd->add_flag("--json", o->json,
                "print one JSON line: samples, batches, bytes, wall_s, samples_per_s, MB_per_s, "
                "peak_rss_mb");
  cmd->footer(
      "--epoch N counts what the loop receives: batches with --batch, over all workers.\n"
      "Examples:\n  wds bench 'data/train-{000000..000099}.tar'\n"
      "  wds bench --decode rgb8 --tuple 'jpg cls' --batch 64 --workers 2 --shuffle 1000 "
      "'data/train-{000..099}.tar'\n"
      "  wds bench --resampled --epoch 100 --passes 3 --batch 32 --decode rgb8 --json "
      "'data/train-{000..099}.tar'\n"
      "  wds bench --decode-audio --audio-rate 16000 --audio-channels 1 --audio-duration 10 "
      "--audio-random 'speech-{000..009}.tar'\n"
      "  wds bench --decode-video --video-frames 16 --video-fps 8 --video-size 224 --video-random "
      "--tuple 'mp4 cls' --batch 8 --workers 2 'clips-{000..009}.tar'\n"
      "As a trainer of the data service (wds serve), per rank: --epoch N batches per pass; "
      "--stats: consumer waits\nare the time spent waiting for the producers:\n"
      "  wds bench --service tcp://127.0.0.1:5555 --rank 0 --world-size 2 --epoch 100 --json\n"
      "  mpirun -np 1 wds serve --bind tcp://127.0.0.1:5555 --exit-when-done --decode rgb8 "
      "--batch 64 'data/train-{000..099}.tar' \\\n"
      "      : -np 3 wds bench --service tcp://127.0.0.1:5555 --epoch 100");
  cmd->callback([cmd, o] { run_bench(*cmd, *o); });
}

}  // namespace wds::tool
