// wds/loader.hpp: Loader, runs a pipeline on worker threads and hands its items to the
// training loop (PyTorch's DataLoader, for WebDataset pipelines).
//
//   auto batches = wds::WebDataset(urls, {.shuffle_shards = true}) | wds::decode("rgb8")
//                | wds::to_tuple("jpg", "cls") | wds::batched(64);
//   wds::Loader loader(batches, {.workers = 4, .prefetch = 2});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (wds::Tuple& batch : loader) train(batch);
//
// Each worker thread runs its own copy of the pipeline with with_worker(w, workers), so the
// shards split between workers as they do between DataLoader workers (split_by_worker). Each
// worker keeps at most `prefetch` finished items, so memory stays bounded however slow the
// consumer. ordered = true hands items out round-robin over the workers (item i from worker
// i % workers, skipping workers that have finished), the same order on every run; otherwise
// whichever is ready first.
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
// out; restore() on a loader of the same configuration continues from there.
//
// Thread safety: one consumer thread at a time; the pipeline's stages run on the workers.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "wds/error.hpp"
#include "wds/pipeline.hpp"
#include "wds/state.hpp"

namespace wds {

// What a loader has done so far, for progress displays.
struct LoaderProgress {
  std::uint64_t items = 0;   // handed to the consumer since the loader was made
  std::uint64_t bytes = 0;   // of those, by options.item_bytes (0 without it)
  double seconds = 0;        // since the first pass began
  std::size_t queued = 0;    // items waiting in the workers' queues now
  std::size_t capacity = 0;  // workers * prefetch
};

template <class T>
struct LoaderOptions {
  int workers = 1;
  std::size_t prefetch = 2;  // finished items kept per worker
  bool ordered = false;
  bool resumable = false;  // workers record their pipeline state with each item
  // Items per pass (with_epoch); unset: one pass of every worker's pipeline.
  std::optional<std::uint64_t> epoch_length;
  // Called on the consumer's thread at most every progress_interval.
  std::function<void(const LoaderProgress&)> progress;
  std::chrono::milliseconds progress_interval{500};
  // The size of an item, for LoaderProgress::bytes.
  std::function<std::uint64_t(const T&)> item_bytes;
};

template <class T>
class Loader {
 public:
  explicit Loader(const Pipeline<T>& pipeline, LoaderOptions<T> options = {})
      : options_(std::move(options)) {
    if (options_.workers < 1) {
      throw Error(ErrorCode::invalid_argument, "", "", "Loader: workers must be >= 1");
    }
    if (options_.prefetch < 1) {
      throw Error(ErrorCode::invalid_argument, "", "", "Loader: prefetch must be >= 1");
    }
    for (int w = 0; w < options_.workers; ++w) {
      auto& worker = workers_.emplace_back(std::make_unique<Worker>());
      worker->pipeline = pipeline.with_worker(w, options_.workers);
      worker->state = worker->pipeline.state();
    }
  }
  ~Loader() { stop(); }
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  Loader& with_epoch(std::uint64_t items) {
    stop();
    options_.epoch_length = items;
    return *this;
  }
  // Sets the epoch of every worker's pipeline (restarting its data at that epoch).
  void set_epoch(std::uint64_t epoch) {
    stop();
    for (auto& w : workers_) w->pipeline.set_epoch(epoch);
  }

  const LoaderProgress& progress() const noexcept { return progress_; }

  // --- resume ---
  std::string state() const {
    if (!options_.resumable) {
      throw Error(ErrorCode::invalid_argument, "", "",
                  "Loader: state() needs LoaderOptions::resumable = true");
    }
    StateWriter out;
    out.put(static_cast<std::uint64_t>(workers_.size()));
    out.put(static_cast<std::uint64_t>(turn_));
    out.put(epoch_yielded_);
    for (const auto& w : workers_) out.put(std::string_view(w->state));
    return out.str();
  }
  void restore(std::string_view state) {
    stop();
    StateReader in(state);
    if (in.get_u64() != workers_.size()) {
      throw Error(ErrorCode::invalid_argument, "", "",
                  "Loader: the state was saved by a loader with another number of workers");
    }
    turn_ = static_cast<std::size_t>(in.get_u64());
    epoch_yielded_ = in.get_u64();
    for (auto& w : workers_) {
      w->state = in.get_string();
      w->pipeline.restore(w->state);
    }
    restored_ = true;  // the next pass continues the interrupted epoch
  }

  // --- iteration: one pass per begin() ---
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    T& operator*() const { return *owner_->current_; }
    T* operator->() const { return &*owner_->current_; }
    iterator& operator++() {
      if (!owner_->advance()) owner_ = nullptr;
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& a, const iterator& b) { return a.owner_ == b.owner_; }

   private:
    friend class Loader;
    explicit iterator(Loader* owner) : owner_(owner) {}
    Loader* owner_ = nullptr;
  };

  iterator begin() {
    begin_pass();
    return advance() ? iterator(this) : iterator();
  }
  iterator end() { return iterator(); }

  // Pull interface: begin_pass(), then next() until nullopt.
  void begin_pass() {
    if (!options_.epoch_length) {
      // A pass of every worker: a pass broken off leaves workers mid-pass; start afresh.
      stop();
    } else if (!restored_ || epoch_yielded_ >= *options_.epoch_length) {
      // A new epoch of n items; the workers keep their place in the stream.
      epoch_yielded_ = 0;
    }
    restored_ = false;
    if (threads_.empty()) start();
    in_pass_ = true;
    if (clock_start_ == std::chrono::steady_clock::time_point{}) {
      clock_start_ = std::chrono::steady_clock::now();
    }
  }
  std::optional<T> next() {
    if (!advance()) return std::nullopt;
    return std::exchange(current_, std::nullopt);
  }

 private:
  struct Entry {
    std::variant<T, std::exception_ptr> item;  // an item, or the error that ended the worker
    std::string state;                         // the worker's state after it (resumable)
  };
  struct Worker {
    Pipeline<T> pipeline{[]() -> StreamPtr<T> { return nullptr; }};
    std::deque<Entry> queue;
    bool finished = false;  // ended its pass (or failed): nothing more will be queued
    std::string state;      // as of the last item handed out
    std::string end_state;  // after its pass ended (resumable)
    bool waiting = false;   // blocked on a full queue
  };

  void start() {
    stop_requested_ = false;
    for (auto& w : workers_) {
      w->finished = false;
      w->queue.clear();
      w->end_state.clear();
    }
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      threads_.emplace_back([this, i] { run(*workers_[i]); });
    }
  }

  // Stops and joins the workers, dropping what they had queued: like breaking out of a
  // Pipeline's loop, the next pass starts the next pass of every worker's pipeline.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_requested_ = true;
    }
    space_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    for (auto& w : workers_) w->queue.clear();
    in_pass_ = false;
    current_.reset();
  }

  void run(Worker& w) {
    try {
      for (;;) {
        // One pass; with epoch_length, pass after pass until stopped.
        w.pipeline.begin_pass();
        bool any = false;
        while (std::optional<T> item = w.pipeline.next()) {
          any = true;
          std::string state = options_.resumable ? w.pipeline.state() : std::string();
          std::unique_lock lock(mutex_);
          if (!stop_requested_ && w.queue.size() >= options_.prefetch) {
            w.waiting = true;
            space_.wait(lock,
                        [&] { return stop_requested_ || w.queue.size() < options_.prefetch; });
            w.waiting = false;
          }
          if (stop_requested_) return;
          w.queue.push_back(Entry{std::move(*item), std::move(state)});
          // Wake the consumer only if it sleeps: a handoff per item must not cost a syscall.
          if (consumer_waiting_) ready_.notify_one();
        }
        // A pass that yields nothing ends the worker (no spinning on empty data).
        if (!options_.epoch_length || !any) break;
      }
      if (options_.resumable) {
        std::string state = w.pipeline.state();
        std::lock_guard lock(mutex_);
        w.end_state = std::move(state);
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      w.queue.push_back(Entry{std::current_exception(), {}});
    }
    std::lock_guard lock(mutex_);
    w.finished = true;
    ready_.notify_all();
  }

  // Takes the next item into current_; false at the end of the pass.
  bool advance() {
    current_.reset();
    if (!in_pass_) return false;
    if (options_.epoch_length && epoch_yielded_ >= *options_.epoch_length) {
      in_pass_ = false;
      return false;
    }
    std::optional<Entry> entry;
    std::size_t from = 0;
    {
      std::unique_lock lock(mutex_);
      for (;;) {
        bool all_done = true;
        const std::size_t n = workers_.size();
        for (std::size_t k = 0; k < n && !entry; ++k) {
          std::size_t i = (turn_ + k) % n;
          Worker& w = *workers_[i];
          if (!w.queue.empty()) {
            entry = std::move(w.queue.front());
            w.queue.pop_front();
            from = i;
          } else if (!w.finished) {
            all_done = false;
            // Ordered: wait for this worker's item rather than take a later worker's.
            if (options_.ordered) break;
          }
        }
        if (entry || all_done) break;
        consumer_waiting_ = true;
        ready_.wait(lock);
        consumer_waiting_ = false;
      }
      progress_.queued = 0;
      for (auto& w : workers_) progress_.queued += w->queue.size();
      if (entry && workers_[from]->waiting) space_.notify_all();
    }
    if (!entry) {
      // Every worker ended its pass: resume state is now "after the pass".
      for (auto& w : workers_) {
        if (!w->end_state.empty()) w->state = std::move(w->end_state);
      }
      stop();
      return false;
    }
    turn_ = (from + 1) % workers_.size();
    if (auto* error = std::get_if<std::exception_ptr>(&entry->item)) {
      stop();
      std::rethrow_exception(*error);
    }
    workers_[from]->state = std::move(entry->state);
    current_ = std::move(std::get<T>(entry->item));
    ++epoch_yielded_;
    report();
    return true;
  }

  void report() {
    ++progress_.items;
    if (options_.item_bytes) progress_.bytes += options_.item_bytes(*current_);
    if (!options_.progress) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_report_ < options_.progress_interval) return;
    last_report_ = now;
    progress_.seconds = std::chrono::duration<double>(now - clock_start_).count();
    progress_.capacity = workers_.size() * options_.prefetch;
    options_.progress(progress_);
  }

  LoaderOptions<T> options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable ready_;  // an item was queued or a worker finished
  std::condition_variable space_;  // an item was taken, or stop was requested
  bool stop_requested_ = false;
  bool consumer_waiting_ = false;
  std::optional<T> current_;
  std::size_t turn_ = 0;
  std::uint64_t epoch_yielded_ = 0;
  bool in_pass_ = false;
  bool restored_ = false;
  LoaderProgress progress_;
  std::chrono::steady_clock::time_point clock_start_{};
  std::chrono::steady_clock::time_point last_report_{};
};

}  // namespace wds
