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
#include "wds/decode.hpp"
#include "wds/loader.hpp"
#include "wds/transforms.hpp"

namespace wds::tool {
namespace {

// Each worker is a thread with its own pipeline and queue: more than this is a typo, not a
// machine (the loader would fail halfway through starting them, or crawl).
constexpr int kMaxWorkers = 1024;

struct BenchOptions {
  PipelineOptions pipeline;
  std::string decode;  // an image spec, "basic" (no images), or empty: no decoding
  int resize = 0;
  int crop = 0;
  bool full_decode = false;
  std::string tuple;
  std::size_t batch = 0;
  bool drop_partial = false;
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

// Runs the passes over `items` (a Loader, or with --workers 0 the pipeline itself on this
// thread) and reports. `metrics()` reads the counters; `queue()` describes the queues.
template <class Source, class Rows, class ReadMetrics, class Queue>
void run_passes(Source& items, const BenchOptions& o, Rows count_rows, ReadMetrics metrics,
                Queue queue) {
  Progress progress("bench", o.batch ? "batches" : "samples");
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
                   o.batch ? (", " + std::to_string(pass_items) + " batches").c_str() : "", secs);
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
                           {"batches", o.batch ? items_seen : 0},
                           {"bytes", bytes},
                           {"wall_s", secs},
                           {"samples_per_s", sps},
                           {"MB_per_s", mbps},
                           {"peak_rss_mb", peak_rss_mb()},
                           {"workers", o.workers},
                           {"batch", o.batch},
                           {"decode", o.decode}};
    if (o.stats) line["metrics"] = metrics_json(m);
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf("%llu samples%s, %.1f MB in %.3f s: %.0f samples/s, %.1f MB/s, peak RSS %.0f MB\n",
                static_cast<unsigned long long>(samples),
                o.batch ? (" in " + std::to_string(items_seen) + " batches").c_str() : "",
                static_cast<double>(bytes) / 1e6, secs, sps, mbps, peak_rss_mb());
    if (o.stats) std::printf("stages and hand-off:\n%s", format_metrics(m).c_str());
  }
}

template <class T, class Rows>
void run_loader(const Pipeline<T>& pipeline, const BenchOptions& o, Rows count_rows) {
  if (o.workers == 0) {
    // DataLoader's num_workers=0: the pipeline on this thread, the ceiling for a loader.
    Pipeline<T> p = o.pipeline.epoch ? pipeline.with_epoch(*o.pipeline.epoch) : pipeline;
    run_passes(
        p, o, count_rows, [&] { return p.metrics(); }, [] { return std::string(); });
    return;
  }
  LoaderOptions<T> lo;
  lo.workers = o.workers;
  lo.prefetch = o.prefetch;
  lo.ordered = o.ordered;
  lo.epoch_length = o.pipeline.epoch;
  Loader<T> loader(pipeline, lo);
  run_passes(
      loader, o, count_rows, [&] { return loader.metrics(); },
      [&] {
        const LoaderProgress lp = loader.progress();
        return "queue " + std::to_string(lp.queued) + "/" + std::to_string(lp.capacity);
      });
}

void run_bench(const BenchOptions& o) {
  PipelineOptions po = o.pipeline;
  po.epoch.reset();  // the loader counts the epoch: items (batches) of all workers together
  Pipeline<Sample> samples = make_pipeline(po);
  if (o.decode.empty() && o.tuple.empty()) {
    if (o.batch) {
      run_loader(samples | batched(o.batch, !o.drop_partial), o,
                 [](const std::vector<Sample>& b) { return std::uint64_t(b.size()); });
    } else {
      run_loader(samples, o, [](const Sample& s) { return rows(s); });
    }
    return;
  }
  std::vector<Decoder> decoders;
  if (!o.decode.empty() && o.decode != "basic") decoders.emplace_back(o.decode);
  DecodeOptions dopts;
  dopts.image.resize = o.resize;
  dopts.image.crop = o.crop;
  dopts.image.reduced_decode = !o.full_decode;
  dopts.handler = handler_named(o.pipeline.on_error);
  Pipeline<DecodedSample> decoded = samples | decode(decoders, dopts);
  if (!o.tuple.empty()) {
    Pipeline<Tuple> tuples = decoded | to_tuple({o.tuple});
    const bool b = o.batch > 0;
    if (b) tuples = tuples | batched(o.batch, !o.drop_partial);
    run_loader(tuples, o, [b](const Tuple& t) { return rows(t, b); });
  } else {
    if (o.batch) decoded = decoded | batched(o.batch, !o.drop_partial);
    run_loader(decoded, o, [](const DecodedSample& s) { return rows(s); });
  }
}

}  // namespace

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench",
      "Run the reading pipeline (split, shuffles, epochs, decode, batch) on worker threads and "
      "report samples/s and MB/s.");
  auto o = std::make_shared<BenchOptions>();
  add_pipeline_options(*cmd, o->pipeline);
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
                "with --resize: decode at full size, then resize (to compare)");
  cmd->add_option("--tuple", o->tuple,
                  "to_tuple fields, e.g. 'jpg;png cls' (';' = first present alternative)");
  cmd->add_option("--batch", o->batch, "batch N items (collated into contiguous tensors)")
      ->check(at_least<std::size_t>(1));
  cmd->add_flag("--drop-partial", o->drop_partial, "drop the last, short batch of a pass");
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
      "'data/train-{000..099}.tar'");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace wds::tool
