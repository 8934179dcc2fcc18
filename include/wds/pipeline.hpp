// wds/pipeline.hpp: Pipeline, a dataset built from stages, and the Stream each stage runs as.
//
// A Pipeline<T> is a recipe (how to build a chain of stages ending in items of type T) and the
// dataset you iterate: each range-for is one pass (epoch) over the data.
//
//   wds::Pipeline<wds::Sample> ds = wds::ShardList(urls)
//       | wds::split_by_node() | wds::split_by_worker()
//       | wds::shuffle(100)          // shard URLs
//       | wds::tar_samples()
//       | wds::shuffle(1000);        // samples
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (wds::Sample& s : ds) train(s);
//
// Every stage is also a method that returns the same (as Python's webdataset reads):
//   auto ds = wds::ShardList(urls).split_by_node().split_by_worker().shuffle(100)
//                 .tar_samples().shuffle(1000);
//   auto batches = wds::WebDataset(urls).shuffle(1000).decode("rgb8").to_tuple("jpg", "cls")
//                      .batched(64);
// (a method is defined with its stage: .shuffle() where wds/filters.hpp is included, .decode()
// where wds/decode.hpp is, and so on; wds/wds.hpp and wds/webdataset.hpp include them all).
//
// Epochs: a pass starts the whole chain with PassContext::epoch = epoch(), which then advances by
// one; set_epoch(e) sets it. Shard and sample shuffles are seeded from (seed, epoch, rank,
// worker), so every epoch has its own order, the same on every run.
//
// with_epoch(n) fixes a pass at exactly n items of the pipeline's output. Unlike WebDataset,
// which restarts the data on every pass (re-reading the same head each epoch), the next pass
// continues the underlying stream where the last stopped; when that runs out it restarts with
// the next epoch. So a finite dataset is walked through over successive passes, and a resampled
// (infinite) one never restarts. A restart that yields nothing ends the pass early rather than
// spinning. set_epoch(e) with with_epoch restarts the underlying stream at epoch e on the next
// pass. with_length(n) only declares size() for frameworks that ask.
//
// Copying a Pipeline copies the recipe and settings, not the running chain: a copy starts from
// scratch (how a loader gives each worker thread its own pipeline).
//
// Thread safety: one thread at a time per Pipeline object; copies are independent.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "wds/error.hpp"
#include "wds/metrics.hpp"
#include "wds/random.hpp"
#include "wds/state.hpp"

namespace wds {

class BlockAllocator;

// Where and when a pass runs. Stages derive their random seeds from it.
struct PassContext {
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  int worker = 0;
  int num_workers = 1;
  // Where stages count what they do (wds/metrics.hpp); owned by the Pipeline, null without one.
  MetricsCounters* metrics = nullptr;
  // Where batches are allocated (wds/tensor_pool.hpp); null: the heap.
  std::shared_ptr<BlockAllocator> memory;
  // The pass is a window onto data that goes on across epochs (with_epoch, or a Loader with an
  // epoch length): canonical streams (wds/streams.hpp) then flow from each epoch into the next
  // instead of ending.
  bool continuous = false;
  // Where canonical streams count the samples each of this consumer's streams has handed out
  // (owned by the Pipeline, null without one): a Loader reads it after each item, so that its
  // state can be resumed on other numbers of ranks and workers.
  std::vector<std::uint64_t>* stream_counts = nullptr;
};

namespace detail {
class BatchSlots;
}

// The types of the stage methods' parameters (Pipeline::decode, ...), defined with their stages.
struct Decoder;
struct DecodeOptions;
struct ToTupleOptions;
struct SplitOptions;
struct TarSamplesOptions;
class Value;
// map_dict's function of a field (wds/transforms.hpp) and split_with's splitter
// (wds/shardlists.hpp), declared here once because the methods name them.
using FieldFn = std::function<Value(Value&&)>;
using Splitter =
    std::function<std::vector<std::string>(std::vector<std::string>, const PassContext&)>;

// A running stage: pulls from its upstream (if any) and yields items.
template <class T>
class Stream {
 public:
  virtual ~Stream() = default;
  // Begins a pass: resets position and random state from ctx; a stage with an upstream starts
  // it too. Called before the first next() and before every later pass.
  virtual void start(const PassContext& ctx) = 0;
  // The next item, or nullopt at the end of the pass.
  virtual std::optional<T> next() = 0;
  // Resume (wds/state.hpp): save() writes what start() cannot recompute (positions, random
  // state, buffered items) and restore() reads it back, in the same order, right after a
  // start() with the same context. Stages that cannot resume keep these defaults, which refuse.
  virtual void save(StateWriter&) const { refuse_resume(); }
  virtual void restore(StateReader&) { refuse_resume(); }
  // A batching stage downstream offers the slots of the batch it is filling, so that decode()
  // can write each image straight into its row (wds/transforms.hpp). A stage that hands on each
  // upstream item as soon as it has it, in order, holding none between calls (map, select,
  // decode), passes the offer upstream (StreamWrapper's default); every other stage declines
  // (this default).
  virtual void offer_slots(detail::BatchSlots*) {}
  // What this stage was built with (wds/state.hpp): upstream's first, then its own (a stage
  // name and its values). A stage with an upstream must pass the call on (StreamWrapper does);
  // this default, for sources without settings, adds nothing.
  virtual void describe(Configuration&, const PassContext&) const {}

 protected:
  // For a stage that holds what it cannot save (unbatched's batch): its save and restore call it.
  [[noreturn]] static void refuse_resume() {
    throw Error::invalid_argument(
        "a stage of this pipeline cannot save or restore its position (a custom stage "
        "without save/restore)");
  }
};

template <class T>
using StreamPtr = std::unique_ptr<Stream<T>>;

// The base of a one-to-one stage, one that pulls from a single upstream stream. Like leveldb's
// EnvWrapper it forwards every call but next() to the upstream, so a stage overrides only what
// it changes: a stage with state saves and restores it around upstream's (the order is the
// state's format); a stage that holds items between calls (a buffer) overrides offer_slots with
// an empty body, declining. describe() is the base's and final: upstream's configuration, the
// name given to the constructor, then settings(), which is pure so that no stage can forget it:
// the values a run must share with another to resume it or to run beside it on another rank.
//
//   class Prefix final : public wds::StreamWrapper<std::string> {  // "a.tar" -> "/data/a.tar"
//    public:
//     Prefix(wds::StreamPtr<std::string> up, std::string p)
//         : StreamWrapper(std::move(up), "prefix"), p_(std::move(p)) {}
//     std::optional<std::string> next() override {
//       std::optional<std::string> s = upstream().next();
//       return s ? std::optional(p_ + *s) : std::nullopt;
//     }
//     void settings(wds::Configuration& c) const override { c.add("prefix", p_); }
//
//    private:
//     std::string p_;
//   };
template <class In, class Out = In>
class StreamWrapper : public Stream<Out> {
 public:
  void start(const PassContext& ctx) override { up_->start(ctx); }
  void save(StateWriter& out) const override { up_->save(out); }
  void restore(StateReader& in) override { up_->restore(in); }
  void offer_slots(detail::BatchSlots* slots) override { up_->offer_slots(slots); }
  void describe(Configuration& c, const PassContext& ctx) const final {
    up_->describe(c, ctx);
    c.stage(name_);
    settings(c);
  }

 protected:
  // `name`: the stage's name in the configuration ("shuffle").
  StreamWrapper(StreamPtr<In> up, std::string name) : up_(std::move(up)), name_(std::move(name)) {}
  // This stage's values (c.add(key, value)); a stage without any says so with an empty body.
  virtual void settings(Configuration& c) const = 0;
  Stream<In>& upstream() noexcept { return *up_; }
  const Stream<In>& upstream() const noexcept { return *up_; }
  const std::string& name() const noexcept { return name_; }

 private:
  StreamPtr<In> up_;
  std::string name_;
};

template <class T>
class Pipeline {
 public:
  using value_type = T;
  using Factory = std::function<StreamPtr<T>()>;

  explicit Pipeline(Factory factory, PassContext context = {})
      : factory_(std::move(factory)), context_(context) {
    context_.metrics = nullptr;  // set per pass from this object's own counters
  }

  Pipeline(const Pipeline& other)
      : factory_(other.factory_),
        context_(other.context_),
        epoch_length_(other.epoch_length_),
        length_(other.length_),
        epoch_(other.epoch_),
        metrics_on_(other.metrics_on_) {}
  Pipeline& operator=(const Pipeline& other) {
    if (this != &other) *this = Pipeline(other);
    return *this;
  }
  Pipeline(Pipeline&&) noexcept = default;
  Pipeline& operator=(Pipeline&&) noexcept = default;

  template <class>
  friend class Pipeline;

  // --- stages and settings, fluently (each returns a new pipeline, as WebDataset's do) ---

  // This pipeline followed by `stage` (the same as `*this | stage`).
  template <class Stage>
  requires std::invocable<const Stage&, StreamPtr<T>>
  auto then(Stage stage) const {
    using Out = typename std::invoke_result_t<const Stage&, StreamPtr<T>>::element_type;
    using U = typename decltype(std::declval<Out&>().next())::value_type;
    Pipeline<U> out([factory = factory_, stage = std::move(stage)] { return stage(factory()); },
                    context_);
    out.epoch_length_ = epoch_length_;
    out.length_ = length_;
    out.metrics_on_ = metrics_on_;
    return out;
  }

  // The stages of the other headers, as methods, so that a C++ pipeline reads like Python's:
  // each returns exactly what `*this | wds::stage(args)` does. They are declared here and
  // defined next to their stages, at the end of the header named before each group, because
  // those headers include this one: this header (included everywhere) stays free of them, and
  // calling a method without its stage's header is a compile error ("use of ... before
  // deduction of 'auto'"). Options are overloads rather than default arguments, which would
  // need the options' types complete here.
  // A new stage goes with its items: any items in wds/filters.hpp, shard URLs in
  // wds/shardlists.hpp, samples in wds/transforms.hpp (decode() has wds/decode.hpp); its
  // StreamWrapper in that header's detail namespace if it is a template, else in the .cpp; its
  // method declared here (C++ declares a class's members only in the class).

  // wds/filters.hpp: on any items
  auto shuffle(std::size_t bufsize, std::size_t initial = 100) const;
  auto slice(std::uint64_t start, std::optional<std::uint64_t> stop = std::nullopt,
             std::uint64_t step = 1) const;
  template <class Pred>
  auto select(Pred pred) const;
  auto repeat(std::optional<std::uint64_t> passes = std::nullopt) const;
  auto split_samples() const;

  // wds/decode.hpp
  auto decode() const;
  auto decode(std::vector<Decoder> decoders) const;
  auto decode(std::vector<Decoder> decoders, DecodeOptions options) const;
  auto decode(Decoder decoder) const;
  auto decode(Decoder decoder, DecodeOptions options) const;

  // wds/transforms.hpp
  template <class... S>
  requires(std::is_convertible_v<S, std::string_view>&&...) auto to_tuple(S&&... fields) const;
  auto to_tuple(std::vector<std::string> fields) const;
  auto to_tuple(std::vector<std::string> fields, ToTupleOptions options) const;
  template <class F>
  auto map(F fn, ErrorHandler handler = reraise_exception) const;
  auto map_dict(std::vector<std::pair<std::string, FieldFn>> fns,
                ErrorHandler handler = reraise_exception) const;
  auto rename(std::vector<std::pair<std::string, std::string>> renames, bool keep = true,
              ErrorHandler handler = reraise_exception) const;
  auto batched(std::size_t n, bool partial = true) const;
  template <class Collate>
  auto batched(std::size_t n, Collate collate, bool partial = true) const;
  auto unbatched() const;

  // wds/shardlists.hpp: on shard URLs
  auto split_by_node() const;
  auto split_by_node(SplitOptions options) const;
  auto split_by_worker() const;
  auto split_by_worker(SplitOptions options) const;
  auto single_node_only() const;
  auto split_with(Splitter splitter) const;
  auto tar_samples() const;
  auto tar_samples(TarSamplesOptions options) const;

  Pipeline with_epoch(std::uint64_t items) const {
    Pipeline p(*this);
    p.epoch_length_ = items;
    return p;
  }
  Pipeline with_length(std::uint64_t items) const {
    Pipeline p(*this);
    p.length_ = items;
    return p;
  }
  // Stages count what they do unless this is off (to measure what the counting costs).
  Pipeline with_metrics(bool on) const {
    Pipeline p(*this);
    p.metrics_on_ = on;
    return p;
  }
  // Where this copy runs: set by a loader for each worker thread.
  Pipeline with_worker(int worker, int num_workers) const {
    if (num_workers < 1 || worker < 0 || worker >= num_workers) {
      throw Error::invalid_argument("worker " + std::to_string(worker) + " is not in [0, " +
                                    std::to_string(num_workers) + ")");
    }
    Pipeline p(*this);
    p.context_.worker = worker;
    p.context_.num_workers = num_workers;
    return p;
  }

  // Passes are windows onto data that goes on across epochs, as with with_epoch, but without a
  // length (from the next pass started): what a Loader with an epoch length sets on its workers'
  // pipelines, whose passes it cuts itself.
  void set_continuous(bool on) noexcept { context_.continuous = on; }

  // Where this copy's batches are allocated (LoaderOptions::memory); null: the heap.
  Pipeline with_memory(std::shared_ptr<BlockAllocator> memory) const {
    Pipeline p(*this);
    p.context_.memory = std::move(memory);
    return p;
  }

  const PassContext& context() const noexcept { return context_; }
  // With canonical streams (wds/streams.hpp): the samples each of this consumer's streams has
  // handed out so far, in stream order; empty otherwise.
  const std::vector<std::uint64_t>& stream_counts() const noexcept { return *stream_counts_; }
  // What this pipeline object's stages have done so far (wds/metrics.hpp); a copy starts at zero.
  // May be called from any thread while another iterates.
  Metrics metrics() const { return counters_->snapshot(); }
  std::optional<std::uint64_t> epoch_length() const noexcept { return epoch_length_; }
  // The declared length (with_length), else the epoch length (with_epoch); throws if neither.
  std::uint64_t size() const {
    if (length_) return *length_;
    if (epoch_length_) return *epoch_length_;
    throw Error::invalid_argument(
        "this pipeline has no length: declare one with with_length(n) or with_epoch(n)");
  }

  // The epoch the next pass starts (or, with with_epoch, the epoch of the underlying data).
  std::uint64_t epoch() const noexcept { return epoch_; }
  void set_epoch(std::uint64_t epoch) {
    epoch_ = epoch;
    restart_ = true;
  }

  // --- configuration (wds/state.hpp) ---
  // What this pipeline was built with: its seed, rank, world size and workers, then each
  // stage's settings in chain order.
  Configuration configuration() const {
    Configuration c;
    c.add("seed", context_.seed);
    c.add("world_size", static_cast<std::uint64_t>(context_.world_size), Configuration::Kind::size);
    c.add("num_workers", static_cast<std::uint64_t>(context_.num_workers),
          Configuration::Kind::size);
    c.add("rank", static_cast<std::uint64_t>(context_.rank), Configuration::Kind::consumer);
    c.add("worker", static_cast<std::uint64_t>(context_.worker), Configuration::Kind::consumer);
    // Items per rank per pass: another world size may need another (elastic pipelines).
    c.add("with_epoch", epoch_length_ ? std::to_string(*epoch_length_) : std::string("none"),
          Configuration::Kind::size);
    if (stream_) {
      stream_->describe(c, context_);
    } else if (StreamPtr<T> chain = factory_()) {
      chain->describe(c, context_);
    }
    return c;
  }
  // A hash of configuration(), leaving out the rank and worker: equal on every rank of a job
  // started the same way (compare it with one collective before training).
  std::uint64_t fingerprint() const { return configuration().fingerprint(); }

  // --- resume (wds/state.hpp) ---
  // Where this pipeline is: its configuration, the epoch, the position in the pass, and each
  // stage's state. Save it with a checkpoint; restore() on a pipeline of the same configuration
  // continues exactly there: the interrupted pass yields the items it had not yet yielded, in
  // the same order. A state of another configuration (another seed, shuffle size, shard list,
  // rank or world size; with canonical streams, the world size and workers may differ) is
  // refused, naming each value that differs.
  std::string state() const {
    StateWriter out;
    if (!config_text_) config_text_ = std::make_shared<const std::string>(config_record());
    out.put(*config_text_);
    out.put(epoch_);
    out.put(yielded_);
    out.put(in_pass_);
    const bool chain = stream_ && (epoch_length_ ? live_ : in_pass_);
    out.put(chain);
    if (chain) {
      out.put(stream_epoch_);
      stream_->save(out);
    }
    return out.str();
  }
  // A damaged state (its checksum does not match) is refused; so is one whose numbers this
  // pipeline cannot hold (each stage checks its own). `check`: StateCheck::verified when the
  // caller has verified a state that holds this one (a Loader's).
  void restore(std::string_view state, StateCheck check = StateCheck::verify) {
    StateReader in(state, check);
    check_configuration(in);
    // The epoch: any number is one a pipeline can be at (set_epoch() sets any); only the
    // checksum protects it. The items yielded in the pass: at most an epoch's, with with_epoch;
    // without, only counted (harmless).
    const std::uint64_t epoch = in.get_u64();
    const std::uint64_t yielded = in.get_u64();
    if (epoch_length_ && yielded > *epoch_length_) {
      throw Error::invalid_argument("pipeline state: " + std::to_string(yielded) +
                                    " items yielded in a pass of with_epoch(" +
                                    std::to_string(*epoch_length_) + "): malformed state");
    }
    // In a pass or between passes: both are states a pipeline can be in, and the stages may be
    // saved either way (a merged canonical-streams state of loaders between passes has them
    // without a pass); only the checksum protects the flags.
    const bool in_pass = in.get_bool();
    const bool chain = in.get_bool();
    epoch_ = epoch;
    yielded_ = yielded;
    stream_ = factory_();
    current_.reset();
    restart_ = false;
    live_ = false;
    if (chain) {
      // The epoch the stages run: usually `epoch` - 1 (without with_epoch) or `epoch` (with),
      // but set_epoch() and states merged from loaders' workers (whose pipelines run without
      // with_epoch) make any pair possible: only the checksum protects it.
      start_stream(in.get_u64());
      stream_->restore(in);
    } else {
      stream_counts_->clear();  // no stream runs: none has handed anything out
    }
    in_pass_ = resumed_ = in_pass && chain;
    if (!in.at_end()) {
      throw Error::invalid_argument(
          "pipeline state has more values than this pipeline's stages read: it was saved "
          "by a pipeline of another configuration");
    }
  }

  // Builds a fresh, unstarted chain (what a worker runs).
  StreamPtr<T> build() const { return factory_(); }
  const Factory& factory() const noexcept { return factory_; }

  // --- iteration: one pass per begin() ---
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = T*;
    using reference = T&;

    iterator() = default;
    T& operator*() const { return *owner_->current_; }
    T* operator->() const { return &*owner_->current_; }
    iterator& operator++() {
      owner_->advance();
      if (!owner_->current_) owner_ = nullptr;
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& a, const iterator& b) { return a.owner_ == b.owner_; }

   private:
    friend class Pipeline;
    explicit iterator(Pipeline* owner) : owner_(owner) {}
    Pipeline* owner_ = nullptr;
  };

  // Starts a pass. Only one pass of an object runs at a time: begin() again starts the next.
  iterator begin() {
    begin_pass();
    advance();
    return current_ ? iterator(this) : iterator();
  }
  iterator end() { return iterator(); }

  // Pull interface: begin_pass(), then next() until nullopt.
  void begin_pass() {
    if (!stream_) stream_ = factory_();
    current_.reset();
    if (resumed_) {
      // Continue the pass that was interrupted: its remaining items (none, if the loop broke
      // right after the last one).
      resumed_ = false;
      return;
    }
    yielded_ = 0;
    in_pass_ = true;
    if (!epoch_length_) {
      start_stream(epoch_++);
    } else if (!live_ || restart_) {
      start_stream(epoch_);
    }
    restart_ = false;
  }
  std::optional<T> next() {
    advance();
    return std::exchange(current_, std::nullopt);
  }

 private:
  std::string config_record() const { return std::string(kConfigTag) + configuration().text(); }

  // The state's first value is the configuration it was saved with: it must fit this one.
  void check_configuration(StateReader& in) const {
    std::string saved;
    try {
      saved = in.get_string();
    } catch (const Error&) {
      saved.clear();
    }
    if (saved.rfind(kConfigTag, 0) != 0) {
      throw Error::invalid_argument(
          "not a pipeline state of this version of wds (it holds no configuration "
          "record): save it again with Pipeline::state()");
    }
    std::vector<std::string> diff =
        configuration().differences(std::string_view(saved).substr(kConfigTag.size()));
    if (!diff.empty()) {
      std::string what;
      for (const std::string& d : diff) what += (what.empty() ? "" : "; ") + d;
      throw Error::invalid_argument(
          "the pipeline state was saved by a pipeline of another configuration: " + what);
    }
  }

  void start_stream(std::uint64_t epoch) {
    PassContext ctx = context_;
    ctx.epoch = epoch;
    ctx.metrics = metrics_on_ ? counters_.get() : nullptr;
    ctx.continuous = context_.continuous || epoch_length_.has_value();
    ctx.stream_counts = stream_counts_.get();
    stream_epoch_ = epoch;
    stream_->start(ctx);
    live_ = true;
  }

  void advance() {
    current_.reset();
    if (!epoch_length_) {
      current_ = stream_->next();
      if (!current_) in_pass_ = false;
      return;
    }
    if (yielded_ >= *epoch_length_) {
      in_pass_ = false;
      return;
    }
    current_ = stream_->next();
    if (!current_) {
      // The underlying data ran out: continue with its next epoch, unless that is empty too.
      live_ = false;
      start_stream(++epoch_);
      current_ = stream_->next();
      if (!current_) {
        live_ = in_pass_ = false;
        return;
      }
    }
    ++yielded_;
  }

  static constexpr std::string_view kConfigTag = "config-1\n";

  Factory factory_;
  PassContext context_;
  std::optional<std::uint64_t> epoch_length_;
  std::optional<std::uint64_t> length_;
  std::uint64_t epoch_ = 0;
  bool metrics_on_ = true;
  // Running state, not copied.
  std::shared_ptr<MetricsCounters> counters_ = std::make_shared<MetricsCounters>();
  std::shared_ptr<std::vector<std::uint64_t>> stream_counts_ =
      std::make_shared<std::vector<std::uint64_t>>();
  mutable std::shared_ptr<const std::string> config_text_;  // state()'s record, made once
  StreamPtr<T> stream_;
  std::optional<T> current_;
  std::uint64_t yielded_ = 0;
  std::uint64_t stream_epoch_ = 0;  // the epoch the running chain was started with
  bool live_ = false;               // with_epoch: the stream has been started and has not run out
  bool in_pass_ = false;            // a pass has begun and not yet ended
  bool restart_ = false;            // set_epoch was called
  bool resumed_ = false;            // restore() set up a pass in progress; begin_pass continues it
};

// pipeline | stage: a stage is any object with `StreamPtr<Out> operator()(StreamPtr<In>) const`.
template <class T, class Stage>
requires std::invocable<const Stage&, StreamPtr<T>>
auto operator|(const Pipeline<T>& upstream, Stage stage) {
  return upstream.then(std::move(stage));
}

}  // namespace wds
