#include "wds/metrics.hpp"

#include <algorithm>
#include <cstdio>

namespace wds {

namespace {

// The per-source slots; the last takes every other scheme.
constexpr std::string_view kSchemes[] = {"file", "http", "https",  "s3", "pipe",
                                         "az",   "gs",   "memory", "hf", "other"};

double seconds_of(const std::atomic<std::uint64_t>& ns) {
  return static_cast<double>(ns.load(std::memory_order_relaxed)) / 1e9;
}

std::uint64_t load(const std::atomic<std::uint64_t>& c) {
  return c.load(std::memory_order_relaxed);
}

}  // namespace

std::size_t MetricsCounters::source_slot(std::string_view scheme) noexcept {
  if (scheme.empty()) return 0;  // a plain path (or stdin) is a local read
  for (std::size_t i = 0; i + 1 < kSlots; ++i) {
    if (kSchemes[i] == scheme) return i;
  }
  return kSlots - 1;
}

Metrics MetricsCounters::snapshot() const {
  static_assert(std::size(kSchemes) == kSlots);
  Metrics m;
  for (std::size_t i = 0; i < kSlots; ++i) {
    const Source& s = sources_[i];
    SourceMetrics out{std::string(kSchemes[i]), load(s.shards),    load(s.bytes),
                      load(s.retries),          load(s.throttled), seconds_of(s.read_ns)};
    if (out.shards || out.bytes || out.retries) m.sources.push_back(std::move(out));
  }
  m.samples = load(samples_);
  m.dropped = load(dropped_);
  m.decoded = load(decoded_);
  m.decode_seconds = seconds_of(decode_ns_);
  m.pool_allocations = load(pool_allocations_);
  m.pool_reuses = load(pool_reuses_);
  return m;
}

std::optional<SourceMetrics> Metrics::source(std::string_view scheme) const {
  for (const SourceMetrics& s : sources) {
    if (s.scheme == scheme) return s;
  }
  return std::nullopt;
}

std::uint64_t Metrics::shards() const noexcept {
  std::uint64_t n = 0;
  for (const SourceMetrics& s : sources) n += s.shards;
  return n;
}
std::uint64_t Metrics::bytes() const noexcept {
  std::uint64_t n = 0;
  for (const SourceMetrics& s : sources) n += s.bytes;
  return n;
}
std::uint64_t Metrics::retries() const noexcept {
  std::uint64_t n = 0;
  for (const SourceMetrics& s : sources) n += s.retries;
  return n;
}
std::uint64_t Metrics::throttled() const noexcept {
  std::uint64_t n = 0;
  for (const SourceMetrics& s : sources) n += s.throttled;
  return n;
}
double Metrics::read_seconds() const noexcept {
  double n = 0;
  for (const SourceMetrics& s : sources) n += s.read_seconds;
  return n;
}

Metrics& Metrics::operator+=(const Metrics& o) {
  for (const SourceMetrics& s : o.sources) {
    SourceMetrics* mine = nullptr;
    for (SourceMetrics& t : sources) {
      if (t.scheme == s.scheme) mine = &t;
    }
    if (!mine) {
      sources.push_back(s);
      continue;
    }
    mine->shards += s.shards;
    mine->bytes += s.bytes;
    mine->retries += s.retries;
    mine->throttled += s.throttled;
    mine->read_seconds += s.read_seconds;
  }
  samples += o.samples;
  dropped += o.dropped;
  decoded += o.decoded;
  decode_seconds += o.decode_seconds;
  items += o.items;
  worker_waits += o.worker_waits;
  worker_blocked_seconds += o.worker_blocked_seconds;
  consumer_waits += o.consumer_waits;
  consumer_wait_seconds += o.consumer_wait_seconds;
  seconds = std::max(seconds, o.seconds);
  pool_allocations += o.pool_allocations;
  pool_reuses += o.pool_reuses;
  return *this;
}

std::string format_metrics(const Metrics& m) {
  std::string out;
  char line[256];
  auto row = [&](const char* name, const std::string& value, const char* gloss) {
    std::snprintf(line, sizeof line, "  %-24s %16s  %s\n", name, value.c_str(), gloss);
    out += line;
  };
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  auto secs = [](double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f s", s);
    return std::string(b);
  };
  for (const SourceMetrics& s : m.sources) {
    const std::string p = "source " + s.scheme;
    row((p + " shards").c_str(), num(s.shards), "shards opened");
    row((p + " bytes").c_str(), num(s.bytes), "bytes read");
    row((p + " retries").c_str(), num(s.retries), "requests retried");
    row((p + " throttled").c_str(), num(s.throttled), "of them throttled (429, 503 SlowDown)");
    row((p + " read").c_str(), secs(s.read_seconds), "waiting for bytes (summed over threads)");
  }
  row("samples", num(m.samples), "read from shards");
  row("dropped", num(m.dropped), "skipped by an error handler");
  row("decoded", num(m.decoded), "samples through decode()");
  row("decode time", secs(m.decode_seconds), "in decode() (summed over threads)");
  row("items", num(m.items), "handed to the consumer");
  row("worker waits", num(m.worker_waits), "a worker's queue was full");
  row("worker blocked", secs(m.worker_blocked_seconds), "waiting on full queues (summed)");
  row("consumer waits", num(m.consumer_waits), "nothing was ready for the consumer");
  row("consumer waited", secs(m.consumer_wait_seconds), "waiting on empty queues");
  row("batch buffers new", num(m.pool_allocations), "allocated");
  row("batch buffers reused", num(m.pool_reuses), "taken from the pool");
  row("elapsed", secs(m.seconds), "since the first pass began");
  return out;
}

}  // namespace wds
