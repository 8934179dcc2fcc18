// wds/metrics.hpp: what a pipeline or a loader has done so far, readable while it runs, so a
// user sees whether a job is bound by I/O, by decoding or by its own training step.
//
//   wds::Loader loader(batches, {.workers = 4});
//   for (wds::Tuple& b : loader) {
//     train(b);
//     if (++step % 1000 == 0) std::cerr << wds::format_metrics(loader.metrics());
//   }
//
// The counters are relaxed atomics bumped where the work happens (once per shard, per chunk read,
// per sample, per wait), never under a lock, so they can stay on. metrics() adds them up into a
// Metrics value: a snapshot, not a live view. Counters start at zero when a pipeline object is
// made (copies start at zero too) and are never reset.
//
// Thread safety: Pipeline::metrics() and Loader::metrics() may be called from any thread while
// the pipeline runs; a MetricsCounters object may be bumped from several threads at once.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wds {

// Per storage scheme ("file", "http", "https", "s3", "pipe", "az", "gs", "hf", ...).
struct SourceMetrics {
  std::string scheme;
  std::uint64_t shards = 0;     // shards opened
  std::uint64_t bytes = 0;      // bytes read from them (as stored: compressed shards count as read)
  std::uint64_t retries = 0;    // network requests retried after a transient failure
  std::uint64_t throttled = 0;  // of those, the ones the server throttled (429, 503 SlowDown)
  double read_seconds = 0;      // time the reading thread waited for bytes from the source
};

struct Metrics {
  std::vector<SourceMetrics> sources;  // only the schemes that were read
  std::uint64_t samples = 0;           // samples read from shards
  std::uint64_t dropped = 0;           // items an error handler skipped, in any stage
  std::uint64_t decoded = 0;           // samples through decode()
  double decode_seconds = 0;           // time spent in decode(), summed over threads

  // A Loader's hand-off (zero for a bare pipeline).
  std::uint64_t items = 0;             // items handed to the consumer
  std::uint64_t worker_waits = 0;      // times a worker found its queue full and waited
  double worker_blocked_seconds = 0;   // their total, summed over workers
  std::uint64_t consumer_waits = 0;    // times the consumer found nothing ready and waited
  double consumer_wait_seconds = 0;    // their total
  double seconds = 0;                  // since the loader's first pass began
  std::uint64_t pool_allocations = 0;  // batch buffers allocated (the rest were recycled)
  std::uint64_t pool_reuses = 0;       // batch buffers taken from the pool

  // The counters of one scheme ("file", "http", ...), if it was read.
  std::optional<SourceMetrics> source(std::string_view scheme) const;
  // Totals over the sources.
  std::uint64_t shards() const noexcept;
  std::uint64_t bytes() const noexcept;
  std::uint64_t retries() const noexcept;
  std::uint64_t throttled() const noexcept;
  double read_seconds() const noexcept;

  Metrics& operator+=(const Metrics& other);
};

// A table for logs and `wds bench --stats`: one line per counter, with a short gloss.
std::string format_metrics(const Metrics& m);

// The live counters behind Metrics. A Pipeline owns one and hands its stages a pointer through
// PassContext::metrics (null when a chain runs without a Pipeline: every add is then skipped).
class MetricsCounters {
 public:
  // The slot of a URL scheme (url_scheme(url): "" for a plain path), for the per-source
  // counters; schemes without a slot of their own share "other".
  static std::size_t source_slot(std::string_view scheme) noexcept;

  void add_shard(std::size_t slot) noexcept { bump(sources_[slot].shards, 1); }
  void add_read(std::size_t slot, std::uint64_t bytes, std::chrono::nanoseconds waited) noexcept {
    bump(sources_[slot].bytes, bytes);
    bump(sources_[slot].read_ns, static_cast<std::uint64_t>(waited.count()));
  }
  void add_retry(std::size_t slot, bool throttled = false) noexcept {
    bump(sources_[slot].retries, 1);
    if (throttled) bump(sources_[slot].throttled, 1);
  }
  void add_samples(std::uint64_t n) noexcept { bump(samples_, n); }
  void add_dropped() noexcept { bump(dropped_, 1); }
  void add_decode(std::chrono::nanoseconds spent) noexcept {
    bump(decoded_, 1);
    bump(decode_ns_, static_cast<std::uint64_t>(spent.count()));
  }
  void add_pool(bool reused) noexcept { bump(reused ? pool_reuses_ : pool_allocations_, 1); }

  Metrics snapshot() const;

 private:
  // One writer per counter in the common case (a worker's own pipeline): a relaxed load and
  // store would do, but fetch_add keeps counts exact when a user shares a pipeline's counters.
  static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n) noexcept {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  struct Source {
    std::atomic<std::uint64_t> shards{0}, bytes{0}, retries{0}, read_ns{0};
    std::atomic<std::uint64_t> throttled{0};
  };
  static constexpr std::size_t kSlots = 10;
  std::array<Source, kSlots> sources_;
  std::atomic<std::uint64_t> samples_{0}, dropped_{0}, decoded_{0}, decode_ns_{0};
  std::atomic<std::uint64_t> pool_allocations_{0}, pool_reuses_{0};
};

namespace detail {
// For stages: count an item their handler skipped (metrics may be null).
inline void count_dropped(MetricsCounters* metrics) noexcept {
  if (metrics) metrics->add_dropped();
}
}  // namespace detail

}  // namespace wds
