// wds/filters.hpp: the stages that work on any items, shard URLs or samples (WebDataset's
// filters): shuffle, slice, select, repeat and split_samples.
//
//   auto ds = wds::ShardList(urls) | wds::shuffle(100)      // a buffer of 100 shard URLs
//           | wds::tar_samples() | wds::shuffle(1000)       // a buffer of 1000 samples
//           | wds::select([](const wds::Sample& s) { return s.has("jpg"); }) | wds::slice(0, 500);
//
// Each is also a Pipeline method returning the same: ds.shuffle(1000).slice(0, 500).
//
// shuffle(bufsize, initial)  WebDataset's shuffle buffer, seeded from (seed, epoch, rank,
//                            worker); restorable (samples by location, URLs as they are).
// slice(start, stop, step)   itertools.islice.
// select(pred)               the items for which pred(item) is true.
// repeat(passes)             runs the upstream `passes` times per pass, or forever.
// split_samples()            the split_samples policy's modulo split of items between consumers.
//
// Thread safety: stages are values; each running copy is used by one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "wds/error.hpp"
#include "wds/pipeline.hpp"
#include "wds/random.hpp"
#include "wds/sample.hpp"
#include "wds/state.hpp"

namespace wds {

namespace detail {

// Items pass through a stage of type T: URLs (shard stages) or samples.
template <class T>
constexpr std::uint64_t shuffle_purpose() {
  return std::is_same_v<T, std::string> ? seed_purpose::shard_shuffle
                                        : seed_purpose::sample_shuffle;
}

// An item a stage holds for long, such as a shuffle buffer's: a sample's fields lent by its
// source (ByteSource::lend) get bytes of their own, so that the buffer does not keep the source's
// chunks alive (the lending is for samples that pass straight through, where it saves a copy).
inline void hold_for_long(Sample& s) {
  for (Field& f : s.fields()) {
    if (bytes_shared(f.data)) f.data = Bytes::copy_of(f.data.span());
  }
}
template <class T>
void hold_for_long(T&) {}

// WebDataset's shuffle buffer (filters._shuffle), step for step: each input is added and, while
// the buffer is below `bufsize`, one more is read ahead; once it holds `initial` items, a random
// one is handed out (the last item moved into its slot). At the end the rest drains in random
// order. bufsize 0 passes items through unchanged.
template <class T>
class ShuffleStream final : public StreamWrapper<T> {
 public:
  ShuffleStream(StreamPtr<T> up, std::size_t bufsize, std::size_t initial)
      : StreamWrapper<T>(std::move(up), "shuffle"),
        bufsize_(bufsize),
        initial_(std::min(initial, bufsize)) {}
  void start(const PassContext& ctx) override {
    this->upstream().start(ctx);
    buf_.clear();
    done_ = false;
    rng_ = Rng(derive_seed(ctx.seed,
                           {shuffle_purpose<T>(), ctx.epoch, static_cast<std::uint64_t>(ctx.rank),
                            static_cast<std::uint64_t>(ctx.worker)}));
  }
  std::optional<T> next() override {
    while (!done_) {
      std::optional<T> item = this->upstream().next();
      if (!item) {
        done_ = true;
        break;
      }
      if (bufsize_ > 0) hold_for_long(*item);
      buf_.push_back(std::move(*item));
      if (buf_.size() < bufsize_) {
        if (std::optional<T> ahead = this->upstream().next()) {
          hold_for_long(*ahead);
          buf_.push_back(std::move(*ahead));
        } else {
          done_ = true;
        }
      }
      if (buf_.size() >= initial_) return pick();
    }
    if (buf_.empty()) return std::nullopt;
    return pick();
  }

  void save(StateWriter& out) const override {
    this->upstream().save(out);
    save_item(out, rng_);
    out.put(done_);
    out.put(static_cast<std::uint64_t>(buf_.size()));
    if constexpr (requires(const T& item) { save_item(out, item); }) {
      for (const T& item : buf_) save_item(out, item);
    } else {
      if (!buf_.empty()) refuse_items();
    }
  }
  // Checked: the generator's increment (load_item), the count against the buffer's size, each
  // item (a URL in the list; a sample found again at its location). The generator's state
  // word and the done flag (whether the upstream has ended): only the checksum.
  void restore(StateReader& in) override {
    this->upstream().restore(in);
    load_item(in, rng_);
    done_ = in.get_bool();
    // The count comes from the state, which may be hostile: checked against what this buffer
    // can hold, and the items read one by one, before it sizes anything.
    const std::uint64_t n = in.get_u64();
    if (n > bufsize_) {
      throw Error::invalid_argument("pipeline state holds " + std::to_string(n) +
                                    " items in a shuffle buffer of " + std::to_string(bufsize_) +
                                    ": it was saved by a pipeline of another configuration");
    }
    buf_.clear();
    if constexpr (requires(T & item) { load_item(in, item); }) {
      for (std::uint64_t k = 0; k < n; ++k) {
        T item{};
        load_item(in, item);
        buf_.push_back(std::move(item));
      }
    } else {
      if (n > 0) refuse_items();
    }
  }

  // Declines: buffered items would still use rows of a batch being filled, which a later item
  // could then be decoded into.
  void offer_slots(detail::BatchSlots*) override {}

  void settings(Configuration& c) const override {
    c.add("bufsize", bufsize_);
    c.add("initial", initial_);
  }

 private:
  // Decoded samples and batches are not saved (they would be megabytes of state): shuffle
  // samples before decode(), where the buffer holds raw samples saved by location.
  [[noreturn]] static void refuse_items() {
    throw Error::invalid_argument(
        "a shuffle buffer of decoded items cannot be saved; to resume, shuffle samples "
        "before decode() (the buffer then holds raw samples, saved by their location)");
  }

  T pick() {
    std::size_t k = static_cast<std::size_t>(rng_.below(buf_.size()));
    T out = std::move(buf_[k]);
    if (k + 1 != buf_.size()) buf_[k] = std::move(buf_.back());
    buf_.pop_back();
    return out;
  }

  std::size_t bufsize_;
  std::size_t initial_;
  std::vector<T> buf_;
  bool done_ = false;
  Rng rng_;
};

// itertools.islice(start, stop, step).
template <class T>
class SliceStream final : public StreamWrapper<T> {
 public:
  SliceStream(StreamPtr<T> up, std::uint64_t start, std::optional<std::uint64_t> stop,
              std::uint64_t step)
      : StreamWrapper<T>(std::move(up), "slice"), start_(start), stop_(stop), step_(step) {}
  void start(const PassContext& ctx) override {
    this->upstream().start(ctx);
    index_ = 0;
  }
  std::optional<T> next() override {
    while (!stop_ || index_ < *stop_) {
      std::optional<T> item = this->upstream().next();
      if (!item) return std::nullopt;
      std::uint64_t i = index_++;
      if (i >= start_ && (i - start_) % step_ == 0) return item;
    }
    return std::nullopt;  // past stop: nothing more is read from upstream
  }
  void save(StateWriter& out) const override {
    this->upstream().save(out);
    out.put(index_);
  }
  // The index is at most `stop`; below it, any count of upstream items is possible: only the
  // checksum protects it.
  void restore(StateReader& in) override {
    this->upstream().restore(in);
    index_ = in.get_u64();
    if (stop_ && index_ > *stop_) {
      throw Error::invalid_argument("pipeline state: slice at item " + std::to_string(index_) +
                                    ", past its stop " + std::to_string(*stop_) +
                                    ": malformed state");
    }
  }
  // offer_slots: hands each item on at once, in order, holding none; slots pass through.
  void settings(Configuration& c) const override {
    c.add("start", start_);
    c.add("stop", stop_ ? std::to_string(*stop_) : std::string("none"));
    c.add("step", step_);
  }

 private:
  std::uint64_t start_;
  std::optional<std::uint64_t> stop_;
  std::uint64_t step_;
  std::uint64_t index_ = 0;
};

template <class T, class Pred>
class SelectStream final : public StreamWrapper<T> {
 public:
  SelectStream(StreamPtr<T> up, Pred pred)
      : StreamWrapper<T>(std::move(up), "select"), pred_(std::move(pred)) {}
  std::optional<T> next() override {
    while (std::optional<T> item = this->upstream().next()) {
      if (pred_(std::as_const(*item))) return item;
    }
    return std::nullopt;
  }
  // A predicate is code: nothing to describe.
  void settings(Configuration&) const override {}

 private:
  Pred pred_;
};

// Runs the upstream `passes` times per pass (forever if unset); repetition k of pass e sees
// epoch e * passes + k, so every repetition has its own order. A repetition that yields nothing
// ends the pass (no spinning on empty data).
template <class T>
class RepeatStream final : public StreamWrapper<T> {
 public:
  RepeatStream(StreamPtr<T> up, std::optional<std::uint64_t> passes)
      : StreamWrapper<T>(std::move(up), "repeat"), passes_(passes) {}
  void start(const PassContext& ctx) override {
    ctx_ = ctx;
    done_ = 0;
    start_upstream();
  }
  std::optional<T> next() override {
    for (;;) {
      if (std::optional<T> item = this->upstream().next()) {
        yielded_ = true;
        return item;
      }
      if (!yielded_ || (passes_ && ++done_ >= *passes_)) return std::nullopt;
      start_upstream();
    }
  }
  // Its own fields first: restore must restart the upstream at the saved repetition before
  // the upstream restores its position.
  void save(StateWriter& out) const override {
    out.put(done_);
    out.put(yielded_);
    this->upstream().save(out);
  }
  // The repetitions done: at most `passes` (at `passes`, the pass ended); forever, at least 1
  // (start() counts the first), and any number above (only the checksum protects it).
  void restore(StateReader& in) override {
    std::uint64_t done = in.get_u64();
    bool yielded = in.get_bool();
    if (passes_ ? done > *passes_ : done == 0) {
      throw Error::invalid_argument(
          "pipeline state: repeat has done " + std::to_string(done) + " repetitions of " +
          (passes_ ? std::to_string(*passes_) : std::string("forever")) + ": malformed state");
    }
    // start() began repetition 0 (infinite: and counted it); begin the saved one instead.
    done_ = passes_ ? done : done - 1;
    start_upstream();
    yielded_ = yielded;
    this->upstream().restore(in);
    // Shards read ahead downstream may be the previous repetition's.
    if constexpr (std::is_same_v<T, std::string>) in.forget_handed_out();
  }
  // offer_slots: hands each item on at once, in order, holding none; slots pass through.
  void settings(Configuration& c) const override {
    c.add("passes", passes_ ? std::to_string(*passes_) : std::string("forever"));
  }

 private:
  void start_upstream() {
    PassContext c = ctx_;
    c.epoch = passes_ ? ctx_.epoch * *passes_ + done_ : ctx_.epoch + done_;
    if (!passes_) ++done_;
    this->upstream().start(c);
    yielded_ = false;
  }

  std::optional<std::uint64_t> passes_;
  PassContext ctx_;
  std::uint64_t done_ = 0;
  bool yielded_ = false;
};

// Keeps items whose index in the pass, modulo the number of consumers (ranks x workers), is
// this consumer's id (rank * num_workers + worker): the split_samples policy.
template <class T>
class SampleSplitStream final : public StreamWrapper<T> {
 public:
  explicit SampleSplitStream(StreamPtr<T> up) : StreamWrapper<T>(std::move(up), "split_samples") {}
  void start(const PassContext& ctx) override {
    this->upstream().start(ctx);
    consumers_ =
        static_cast<std::uint64_t>(ctx.world_size) * static_cast<std::uint64_t>(ctx.num_workers);
    id_ = static_cast<std::uint64_t>(ctx.rank) * static_cast<std::uint64_t>(ctx.num_workers) +
          static_cast<std::uint64_t>(ctx.worker);
    index_ = 0;
  }
  std::optional<T> next() override {
    while (std::optional<T> item = this->upstream().next()) {
      if (index_++ % consumers_ == id_) return item;
    }
    return std::nullopt;
  }
  void save(StateWriter& out) const override {
    this->upstream().save(out);
    out.put(index_);
  }
  // The count of upstream items seen: any number is possible; only the checksum protects it.
  void restore(StateReader& in) override {
    this->upstream().restore(in);
    index_ = in.get_u64();
  }
  // offer_slots: hands each item on at once, in order, holding none; slots pass through.
  // The split comes from the pass's rank and workers, which the pipeline describes.
  void settings(Configuration&) const override {}

 private:
  std::uint64_t consumers_ = 1;
  std::uint64_t id_ = 0;
  std::uint64_t index_ = 0;
};

}  // namespace detail

// --- stages that work on any item type (URLs or samples) ---

struct ShuffleStage {
  std::size_t bufsize;
  std::size_t initial;
  template <class T>
  StreamPtr<T> operator()(StreamPtr<T> up) const {
    return std::make_unique<detail::ShuffleStream<T>>(std::move(up), bufsize, initial);
  }
};
// WebDataset's shuffle(bufsize, initial): a buffer of `bufsize` items, handing out random ones
// once `initial` are in. Seeded from (seed, epoch, rank, worker).
inline ShuffleStage shuffle(std::size_t bufsize, std::size_t initial = 100) {
  return {bufsize, initial};
}

struct SliceStage {
  std::uint64_t start;
  std::optional<std::uint64_t> stop;
  std::uint64_t step;
  template <class T>
  StreamPtr<T> operator()(StreamPtr<T> up) const {
    return std::make_unique<detail::SliceStream<T>>(std::move(up), start, stop, step);
  }
};
// Items start, start + step, ... before stop (itertools.islice); step must be >= 1.
inline SliceStage slice(std::uint64_t start, std::optional<std::uint64_t> stop = std::nullopt,
                        std::uint64_t step = 1) {
  if (step < 1) throw Error::invalid_argument("slice: step must be >= 1");
  return {start, stop, step};
}

template <class Pred>
struct SelectStage {
  Pred pred;
  template <class T>
  StreamPtr<T> operator()(StreamPtr<T> up) const {
    return std::make_unique<detail::SelectStream<T, Pred>>(std::move(up), pred);
  }
};
// Keeps the items for which pred(item) is true.
template <class Pred>
SelectStage<Pred> select(Pred pred) {
  return {std::move(pred)};
}

struct RepeatStage {
  std::optional<std::uint64_t> passes;
  template <class T>
  StreamPtr<T> operator()(StreamPtr<T> up) const {
    return std::make_unique<detail::RepeatStream<T>>(std::move(up), passes);
  }
};
// Runs the upstream `passes` times per pass, or forever.
inline RepeatStage repeat(std::optional<std::uint64_t> passes = std::nullopt) {
  if (passes && *passes == 0) {
    throw Error::invalid_argument("repeat: passes must be >= 1");
  }
  return {passes};
}

struct SampleSplitStage {
  template <class T>
  StreamPtr<T> operator()(StreamPtr<T> up) const {
    return std::make_unique<detail::SampleSplitStream<T>>(std::move(up));
  }
};
// The split_samples policy's sample-level split: of the items every consumer reads, consumer
// rank * num_workers + worker keeps those whose index modulo (world_size * num_workers) is its id.
// Every consumer must see the items in the same order: shuffle shards before it only with
// ShardList's shuffle (one permutation for all), never with a shuffle() buffer.
inline SampleSplitStage split_samples() {
  return {};
}

// Pipeline's methods for these stages (declared in wds/pipeline.hpp).
template <class T>
auto Pipeline<T>::shuffle(std::size_t bufsize, std::size_t initial) const {
  return then(wds::shuffle(bufsize, initial));
}
template <class T>
auto Pipeline<T>::slice(std::uint64_t start, std::optional<std::uint64_t> stop,
                        std::uint64_t step) const {
  return then(wds::slice(start, stop, step));
}
template <class T>
template <class Pred>
auto Pipeline<T>::select(Pred pred) const {
  return then(wds::select(std::move(pred)));
}
template <class T>
auto Pipeline<T>::repeat(std::optional<std::uint64_t> passes) const {
  return then(wds::repeat(passes));
}
template <class T>
auto Pipeline<T>::split_samples() const {
  return then(wds::split_samples());
}

}  // namespace wds
