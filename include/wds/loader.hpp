// wds/loader.hpp: Loader, runs a pipeline on worker threads and hands its items to the
// training loop (PyTorch's DataLoader, for WebDataset pipelines).
//
//   auto batches = wds::WebDataset(urls, {.shuffle_shards = true}) | wds::decode("rgb8")
//                | wds::to_tuple("jpg", "cls") | wds::batched(64);
//   wds::Loader loader(batches, {.workers = 4, .prefetch = 2});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (wds::Tuple& batch : loader) train(batch);
//   std::cerr << wds::format_metrics(loader.metrics());   // I/O-, decode- or consumer-bound?
//
// Each worker thread runs its own copy of the pipeline with with_worker(w, workers), so the
// shards split between workers as they do between DataLoader workers (split_by_worker). Each
// worker keeps at most `prefetch` finished items, so memory stays bounded however slow the
// consumer; a worker that makes items faster than the consumer wakes up for them (raw samples)
// keeps up to 64, about a millisecond of its output (detail::kHandOffDepth).
//
// ordered = true hands items out round-robin over the workers (item i from worker i % workers,
// skipping workers that have finished), the same order on every run; otherwise whichever is
// ready first.
//
// A range-for over the loader is one pass: every worker runs one pass of its pipeline. With
// with_epoch(n), a pass is exactly n items from all workers together (count batches per rank
// this way, so every rank steps the same number of times); workers then run their pipelines
// pass after pass, and what is prefetched carries over to the next epoch.
//
// Stopping early (break, or destroying the loader) stops and joins every worker, and the next
// pass starts fresh ones; with with_epoch(n), a break leaves the workers running where they are
// and the next pass (n items again) continues their streams. An exception in a worker stops the
// pass and is rethrown in the consumer's thread, after the items that worker produced before it.
//
// Resume: with resumable = true, state() says where every worker is, as of the items handed
// out; restore() on a loader of the same configuration continues from there, as Pipeline does:
// the interrupted pass (epoch) yields what it had not yet yielded (nothing, if the state was
// saved after its last item), and the next pass is a new one. A restored worker replays at most
// a few items to reach its place.
//
// Sizes: workers <= 4096, prefetch <= 65536 and workers * prefetch <= 2^20 (every worker's
// queues are allocated up front), else an invalid_argument error naming the argument. A worker
// thread the system will not start (ulimit -u, memory for stacks) is an unavailable error
// naming workers and how many started; those are stopped and joined.
//
// next_for(timeout) is next() giving up after `timeout` without taking anything, and
// stop_for(timeout) stops the workers but gives up while one is inside a stage (a stalled
// read): for a consumer that must stay responsive (the Python binding turns Ctrl-C into
// KeyboardInterrupt this way).
//
// Thread safety: one consumer thread at a time; the pipeline's stages run on the workers.
// metrics() may be called from any thread. fork(): a child must neither use nor destroy a
// Loader whose workers were started in the parent (their threads are not in the child, and
// destroying it joins them: std::system_error); it makes its own.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "wds/detail/loader.hpp"
#include "wds/error.hpp"
#include "wds/metrics.hpp"
#include "wds/pipeline.hpp"
#include "wds/state.hpp"

namespace wds {

// What a loader has done so far, for progress displays.
struct LoaderProgress {
  std::uint64_t items = 0;   // handed to the consumer since the loader was made
  std::uint64_t bytes = 0;   // of those, by options.item_bytes (0 without it)
  double seconds = 0;        // since the first pass began
  std::size_t queued = 0;    // items waiting in the workers' queues now
  std::size_t capacity = 0;  // items the queues may hold now: workers * prefetch, or more
                             // where a worker's queue grew (kHandOffDepth)
};

template <class T>
struct LoaderOptions {
  int workers = 1;
  std::size_t prefetch = 2;  // finished items kept per worker
  bool ordered = false;
  bool resumable = false;  // workers record where they are, so that state() works
  // This loader is group `group` of `groups` loaders that split the data between them: its
  // workers are workers group * workers ... of groups * workers (a data service's producers).
  int group = 0;
  int groups = 1;
  // Items per pass (with_epoch); unset: one pass of every worker's pipeline.
  std::optional<std::uint64_t> epoch_length;
  // Called on the consumer's thread at most every progress_interval.
  std::function<void(const LoaderProgress&)> progress;
  std::chrono::milliseconds progress_interval{500};
  // The size of an item, for LoaderProgress::bytes.
  std::function<std::uint64_t(const T&)> item_bytes;
  // The stages count what they do (wds/metrics.hpp); off only to measure what that costs.
  bool metrics = true;
  // Where batched() allocates its batches (wds/tensor_pool.hpp): the heap by default; for
  // example pinned host memory for fast copies to a GPU, or a data service's shared memory.
  std::shared_ptr<BlockAllocator> memory;
};

template <class T>
class Loader {
 public:
  explicit Loader(const Pipeline<T>& pipeline, LoaderOptions<T> options = {})
      : options_(std::move(options)),
        hand_out_(static_cast<std::size_t>(std::max(options_.workers, 0)), options_.ordered) {
    detail::check_loader_size(options_.workers, options_.prefetch);
    if (options_.group < 0 || options_.group >= options_.groups) {
      throw Error::invalid_argument("Loader: group must be in [0, groups), groups >= 1");
    }
    hand_out_.set_epoch_length(options_.epoch_length);
    for (int w = 0; w < options_.workers; ++w) {
      auto& worker = workers_.emplace_back(std::make_unique<Worker>(options_.prefetch));
      worker->pipeline = pipeline
                             .with_worker(options_.group * options_.workers + w,
                                          options_.groups * options_.workers)
                             .with_metrics(options_.metrics)
                             .with_memory(options_.memory);
      worker->pipeline.set_continuous(options_.epoch_length.has_value());
      if (options_.resumable) worker->take_snapshot(false);
      hand_out_.position(static_cast<std::size_t>(w)).snapshot = worker->snapshot;
    }
  }
  ~Loader() { stop(); }
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  Loader& with_epoch(std::uint64_t items) {
    stop();
    for (auto& w : workers_) w->pipeline.set_continuous(true);  // canonical streams flow on
    options_.epoch_length = items;
    hand_out_.set_epoch_length(items);
    return *this;
  }
  // Sets the epoch of every worker's pipeline (restarting its data at that epoch).
  void set_epoch(std::uint64_t epoch) {
    stop();
    for (auto& w : workers_) w->pipeline.set_epoch(epoch);
  }

  // Progress so far, with the queues' fill as of now.
  LoaderProgress progress() const noexcept {
    LoaderProgress p = progress_;
    p.capacity = 0;
    p.queued = 0;
    for (const auto& w : workers_) {
      p.capacity += w->queue.limit();
      p.queued += w->queue.size();
    }
    return p;
  }

  // What the workers' stages and the hand-off have done so far (wds/metrics.hpp).
  Metrics metrics() const {
    Metrics m;
    for (const auto& w : workers_) {
      m += w->pipeline.metrics();
      m.worker_waits += w->waits.load(std::memory_order_relaxed);
      m.worker_blocked_seconds +=
          static_cast<double>(w->blocked_ns.load(std::memory_order_relaxed)) / 1e9;
    }
    m.items = items_.load(std::memory_order_relaxed);
    m.consumer_waits = consumer_waits_.load(std::memory_order_relaxed);
    m.consumer_wait_seconds =
        static_cast<double>(consumer_wait_ns_.load(std::memory_order_relaxed)) / 1e9;
    const std::int64_t t0 = clock_start_ns_.load(std::memory_order_relaxed);
    if (t0 != 0) {
      m.seconds = static_cast<double>(now_ns() - t0) / 1e9;
    }
    return m;
  }

  // --- resume ---
  std::string state() const {
    if (!options_.resumable) {
      throw Error::invalid_argument("Loader: state() needs LoaderOptions::resumable = true");
    }
    return hand_out_.state(in_pass_).encode();
  }
  void restore(std::string_view state) {
    if (!options_.resumable) {
      throw Error::invalid_argument("Loader: restore() needs LoaderOptions::resumable = true");
    }
    stop();
    if (!detail::is_loader_state(state)) {
      restore_pipelines(state);
      return;
    }
    // Verified once here: the workers' states inside are covered by this checksum.
    restored_in_pass_ = hand_out_.restore(detail::LoaderState::decode(state, workers_.size()));
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = *workers_[i];
      const detail::WorkerPosition& p = hand_out_.position(i);
      // A worker's end is handed out with no item after its snapshot.
      if (p.finished && p.skip != 0) {
        throw Error::invalid_argument(
            "Loader: worker " + std::to_string(i) + " has finished, yet its position is " +
            std::to_string(p.skip) + " items after its snapshot: malformed state");
      }
      auto [pipeline_state, yielded] = detail::decode_snapshot(*p.snapshot);
      w.pipeline.restore(pipeline_state, StateCheck::verified);
      check_stream_counts(i, p, w.pipeline.stream_counts());
      w.yielded = yielded;
      w.snapshot = p.snapshot;
      w.pending_skip = p.skip;
    }
    restored_ = true;  // the next pass continues the interrupted one
  }

  // --- iteration: one pass per begin() ---
  using iterator = detail::PassIterator<Loader, T>;
  friend iterator;

  iterator begin() {
    begin_pass();
    return advance() ? iterator(this) : iterator();
  }
  iterator end() { return iterator(); }

  // Pull interface: begin_pass(), then next() until nullopt.
  void begin_pass() {
    const bool restoring = std::exchange(restored_, false);
    const bool resume = restoring && restored_in_pass_;
    if (!options_.epoch_length) {
      // A pass of every worker: one broken off leaves the workers mid-pass; start afresh.
      if (!restoring) stop();
    } else if (!resume) {
      hand_out_.new_epoch();  // a new epoch of n items; the workers keep their place in the stream
    }
    if (threads_.empty()) start(restoring);
    in_pass_ = true;
    if (clock_start_ns_.load(std::memory_order_relaxed) == 0) {
      clock_start_ns_.store(now_ns(), std::memory_order_relaxed);
    }
  }
  std::optional<T> next() {
    if (!advance()) return std::nullopt;
    return std::exchange(current_, std::nullopt);
  }
  // next(), waiting at most `timeout` for an item: false if the time ran out first (nothing
  // was taken; call again), else true with `item` the next item, or nullopt at the end of the
  // pass. For a caller that must stay responsive while the workers are slow (the Python
  // binding checks for Ctrl-C between calls).
  bool next_for(std::chrono::nanoseconds timeout, std::optional<T>& item) {
    const Advanced a = advance_until(std::chrono::steady_clock::now() + timeout);
    if (a == Advanced::timeout) return false;
    item = a == Advanced::item ? std::exchange(current_, std::nullopt) : std::nullopt;
    return true;
  }
  // Stops the workers as destroying the loader does, waiting at most `timeout` for them: false
  // if one is still inside a stage (a read that has not returned); it stops when it leaves, and
  // stop_for() again (or the destructor) finishes. For a caller that must stay responsive while
  // it closes the loader.
  bool stop_for(std::chrono::nanoseconds timeout) {
    stop_.store(true, std::memory_order_release);
    for (auto& w : workers_) w->space.wake_always();
    const auto waited =
        exited_.wait_until([&] { return running_.load(std::memory_order_acquire) == 0; },
                           std::chrono::steady_clock::now() + timeout);
    if (waited == detail::Parker::Waited::timeout) return false;
    stop();  // joins threads that have left run()
    return true;
  }

 private:
  // What crosses from a worker to the consumer: an item, the worker's end, or its error.
  struct Entry {
    std::optional<T> item;  // empty: the worker's pass ended (or it failed: error is set)
    std::exception_ptr error;
    std::shared_ptr<const std::string> snapshot;  // taken right after this item (resumable)
    std::uint64_t skip = 0;                    // items produced after the worker's latest snapshot
    std::vector<std::uint64_t> stream_counts;  // canonical streams, after this item
  };

  // Workers do not serialise their state per item: each takes a snapshot now and then (when the
  // time since the last one is 64 times what that one cost) and an item records only how many
  // items follow the snapshot, which a restored worker replays.
  struct Worker {
    explicit Worker(std::size_t prefetch)
        : queue(std::max(prefetch, detail::kHandOffDepth), prefetch),
          returns(queue.capacity() + 2) {}
    Pipeline<T> pipeline{[]() -> StreamPtr<T> { return nullptr; }};
    detail::SpscQueue<Entry> queue;
    // Items the consumer is done with, handed back to be freed on this worker's thread, where
    // their memory was allocated: the allocator then reuses it at once instead of taking frees
    // from another thread (a queue of its own, the consumer filling it).
    detail::SpscQueue<T> returns;
    detail::Parker space;  // the worker waits here for room in its queue
    // When this worker last made the system call that wakes the consumer (its own).
    std::chrono::steady_clock::time_point woke_consumer_at{};

    // The producing side: the worker thread's while it runs, the consumer's otherwise.
    bool yielded = false;  // the pass in progress has yielded an item (or was resumed)
    std::shared_ptr<const std::string> snapshot;  // the latest
    std::uint64_t since = 0;                      // items produced after it
    std::uint64_t pending_skip = 0;               // after restore(): items to replay first
    std::chrono::steady_clock::time_point snapshot_at{};
    std::chrono::nanoseconds snapshot_cost{0};

    std::atomic<std::uint64_t> waits{0}, blocked_ns{0};

    void take_snapshot(bool in_pass_yielded) {
      const auto t0 = std::chrono::steady_clock::now();
      snapshot = std::make_shared<const std::string>(
          detail::encode_snapshot(pipeline.state(), in_pass_yielded));
      snapshot_at = std::chrono::steady_clock::now();
      snapshot_cost = snapshot_at - t0;
      since = 0;
    }

    // The next item of the worker's stream: one pass, or (with epoch_length) pass after pass;
    // nullopt when it ends. A fresh pass that yields nothing ends the stream (no spinning on
    // empty data); the rest of a restored pass may be empty.
    std::optional<T> produce(bool passes) {
      for (;;) {
        if (std::optional<T> item = pipeline.next()) {
          yielded = true;
          return item;
        }
        const bool empty = !yielded;
        yielded = false;
        if (!passes || empty) return std::nullopt;
        pipeline.begin_pass();
      }
    }
  };

  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Starts the worker threads. Each pipeline's pass begins here, on the consumer's thread, so
  // that a position taken now already means "this pass, from its start".
  void start(bool restoring) {
    stop_.store(false, std::memory_order_relaxed);
    if (!restoring) hand_out_.unfinish_all();
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = *workers_[i];
      w.queue.clear();
      if (!restoring) {
        w.yielded = false;
        w.pending_skip = 0;
      }
      if (hand_out_.finished(i)) continue;
      w.pipeline.begin_pass();
      if (!restoring && options_.resumable) {
        w.take_snapshot(false);
        hand_out_.position(i) = {w.snapshot, 0, false, w.pipeline.stream_counts()};
      }
    }
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      if (hand_out_.finished(i)) continue;
      try {
        running_.fetch_add(1, std::memory_order_relaxed);
        threads_.emplace_back([this, w = workers_[i].get()] {
          run(*w);
          // The last thing the thread does with the loader (stop_for() waits for it).
          running_.fetch_sub(1, std::memory_order_release);
          exited_.wake();
        });
      } catch (const std::system_error& e) {
        running_.fetch_sub(1, std::memory_order_relaxed);
        // Out of threads (ulimit -u, memory for stacks): those running stop, and the error
        // says how many could start.
        const std::size_t started = threads_.size();
        stop();
        throw detail::thread_start_error(started, workers_.size(), e);
      }
    }
  }

  // Stops and joins the workers, dropping what they had queued: like breaking out of a
  // Pipeline's loop, the next pass starts the next pass of every worker's pipeline.
  void stop() {
    stop_.store(true, std::memory_order_release);
    for (auto& w : workers_) w->space.wake_always();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    current_.reset();
    for (auto& w : workers_) {
      w->queue.clear();
      w->returns.clear();
    }
    in_pass_ = false;
  }

  // Waits for room in the worker's queue and queues `e`; false if the loader is stopping.
  bool push(Worker& w, Entry&& e) {
    while (!w.returns.empty()) w.returns.pop();
    if (w.queue.full() && w.queue.limit() < w.queue.capacity() && consumer_.sleeping() &&
        std::chrono::steady_clock::now() - w.woke_consumer_at < detail::kHandOffCover) {
      // Filled while the consumer wakes up for its first item: room for twice as many
      // (detail::kHandOffDepth).
      w.queue.set_limit(2 * w.queue.limit());
    }
    if (w.queue.full()) {
      const auto t0 = std::chrono::steady_clock::now();
      w.space.wait([&] { return stop_.load(std::memory_order_acquire) || !w.queue.full(); });
      w.waits.fetch_add(1, std::memory_order_relaxed);
      w.blocked_ns.fetch_add(
          static_cast<std::uint64_t>((std::chrono::steady_clock::now() - t0).count()),
          std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_acquire)) return false;
    w.queue.push(std::move(e));
    if (consumer_.wake()) w.woke_consumer_at = std::chrono::steady_clock::now();
    return true;
  }

  void run(Worker& w) {
    const bool passes = options_.epoch_length.has_value();
    try {
      // A restored worker replays the items between its snapshot and its position.
      for (; w.pending_skip > 0; --w.pending_skip) {
        if (!w.produce(passes)) break;
        ++w.since;
      }
      while (std::optional<T> item = w.produce(passes)) {
        Entry e{std::move(item), nullptr, nullptr, 0, {}};
        if (options_.resumable) {
          e.stream_counts = w.pipeline.stream_counts();
          ++w.since;
          // A snapshot when the time since the last one is 64 times what it cost: at most
          // ~1.5% of the worker's time, and a restore replays at most that much work.
          if (std::chrono::steady_clock::now() - w.snapshot_at >= 64 * w.snapshot_cost) {
            w.take_snapshot(true);
            e.snapshot = w.snapshot;
          }
          e.skip = w.since;
        }
        if (!push(w, std::move(e))) return;
      }
      Entry end{std::nullopt, nullptr, nullptr, 0, {}};
      if (options_.resumable) {
        w.take_snapshot(false);
        end.snapshot = w.snapshot;
        end.stream_counts = w.pipeline.stream_counts();
      }
      push(w, std::move(end));
    } catch (...) {
      push(w, Entry{std::nullopt, std::current_exception(), nullptr, 0, {}});
    }
  }

  // With canonical streams, a worker's position says how many samples each of its streams had
  // handed out as of its last item; the snapshot, how many as of `skip` items before. Each item
  // is one stream's sample, so the counts must exceed the snapshot's by `skip` in all (else the
  // state is malformed: a replay would lose or repeat samples).
  static void check_stream_counts(std::size_t worker, const detail::WorkerPosition& p,
                                  const std::vector<std::uint64_t>& at_snapshot) {
    // Not canonical streams, or a snapshot between passes: nothing to compare.
    if (p.stream_counts.empty() || at_snapshot.empty()) return;
    std::uint64_t after = 0;
    bool fits = p.stream_counts.size() == at_snapshot.size();
    for (std::size_t k = 0; fits && k < at_snapshot.size(); ++k) {
      fits = p.stream_counts[k] >= at_snapshot[k];
      after += p.stream_counts[k] - at_snapshot[k];
    }
    if (!fits || after != p.skip) {
      throw Error::invalid_argument(
          "Loader: worker " + std::to_string(worker) + "'s position (" + std::to_string(p.skip) +
          " items after its snapshot, its " + std::to_string(p.stream_counts.size()) +
          " streams' counts) does not fit its snapshot's " + std::to_string(at_snapshot.size()) +
          " streams: malformed state");
    }
  }

  // A pipeline's state (merge_states' canonical-streams checkpoint, or one consumer's): every
  // worker's pipeline restores from it, each taking its own streams, and the hand-out starts
  // again at worker 0.
  void restore_pipelines(std::string_view state) {
    const detail::PassPosition pass = detail::pass_position(state);  // verifies the checksum
    detail::LoaderState s;
    s.epoch_yielded = pass.yielded;
    s.in_pass = pass.in_pass;
    for (auto& worker : workers_) {
      Worker& w = *worker;
      w.pipeline.restore(state, StateCheck::verified);
      w.yielded = pass.in_pass;
      w.pending_skip = 0;
      w.take_snapshot(w.yielded);
      s.workers.push_back({w.snapshot, 0, false, w.pipeline.stream_counts()});
    }
    restored_in_pass_ = hand_out_.restore(std::move(s));
    restored_ = true;
  }

  // Takes the next item into current_; false at the end of the pass.
  bool advance() { return advance_until(std::nullopt) == Advanced::item; }

  // The same, giving up at `deadline` (if set) while no item is ready: nothing is lost then,
  // and the next call continues.
  enum class Advanced { item, end, timeout };
  Advanced advance_until(std::optional<std::chrono::steady_clock::time_point> deadline) {
    give_back();
    if (!in_pass_) return Advanced::end;
    if (hand_out_.epoch_complete()) {
      in_pass_ = false;
      return Advanced::end;
    }
    for (;;) {
      const auto choice =
          hand_out_.choose([this](std::size_t i) { return !workers_[i]->queue.empty(); });
      if (choice.kind == detail::HandOut::Choice::done) {
        // Every worker ended its pass.
        stop();
        return Advanced::end;
      }
      if (choice.kind == detail::HandOut::Choice::wait) {
        if (!wait_for_item(choice.source, deadline)) return Advanced::timeout;
        continue;
      }
      const std::size_t from = choice.source;
      Worker& w = *workers_[from];
      Entry e = std::move(w.queue.front());
      w.queue.pop();
      w.space.wake();
      if (e.error) {
        stop();
        std::rethrow_exception(e.error);
      }
      detail::WorkerPosition& position = hand_out_.position(from);
      if (e.snapshot) position.snapshot = std::move(e.snapshot);
      position.skip = e.skip;
      position.stream_counts = std::move(e.stream_counts);
      if (!e.item) {
        hand_out_.finish(from);
        continue;
      }
      hand_out_.handed_out(from);
      current_ = std::move(e.item);
      current_from_ = from;
      report();
      return Advanced::item;
    }
  }

  // Done with the current item: back to its worker to be freed there, or freed here if the
  // worker has stopped or is behind on its returns.
  void give_back() {
    if (!current_) return;
    Worker& w = *workers_[current_from_];
    if (!threads_.empty() && !hand_out_.finished(current_from_) && !w.returns.full()) {
      w.returns.push(std::move(*current_));
    }
    current_.reset();
  }

  // Sleeps until worker `first` has an entry (ordered) or any live worker has one; false if
  // `deadline` came first.
  bool wait_for_item(std::size_t first,
                     std::optional<std::chrono::steady_clock::time_point> deadline) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto waited = consumer_.wait_until(
        [&] {
          if (hand_out_.ordered()) return !workers_[first]->queue.empty();
          for (std::size_t i = 0; i < workers_.size(); ++i) {
            if (!hand_out_.finished(i) && !workers_[i]->queue.empty()) return true;
          }
          return false;
        },
        deadline);
    if (waited != detail::Parker::Waited::no) {
      consumer_waits_.fetch_add(1, std::memory_order_relaxed);
      consumer_wait_ns_.fetch_add(
          static_cast<std::uint64_t>((std::chrono::steady_clock::now() - t0).count()),
          std::memory_order_relaxed);
    }
    return waited != detail::Parker::Waited::timeout;
  }

  void report() {
    items_.fetch_add(1, std::memory_order_relaxed);
    ++progress_.items;
    if (options_.item_bytes) progress_.bytes += options_.item_bytes(*current_);
    if (!options_.progress) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_report_ < options_.progress_interval) return;
    last_report_ = now;
    progress_.seconds =
        static_cast<double>(now_ns() - clock_start_ns_.load(std::memory_order_relaxed)) / 1e9;
    options_.progress(progress());
  }

  LoaderOptions<T> options_;
  detail::HandOut hand_out_;  // which worker hands out next, the epoch's count, positions
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  detail::Parker consumer_;              // the consumer waits here for an entry
  std::atomic<std::size_t> running_{0};  // worker threads that have not left run()
  detail::Parker exited_;                // stop_for() waits here for running_ to reach 0
  std::optional<T> current_;
  std::size_t current_from_ = 0;  // the worker current_ came from
  bool in_pass_ = false;
  bool restored_ = false;          // restore() set up the workers; the next pass starts them
  bool restored_in_pass_ = false;  // ... and the state was saved inside a pass
  LoaderProgress progress_;
  std::atomic<std::uint64_t> items_{0}, consumer_waits_{0}, consumer_wait_ns_{0};
  std::atomic<std::int64_t> clock_start_ns_{0};
  std::chrono::steady_clock::time_point last_report_{};
};

}  // namespace wds
