// wds/transforms.hpp: the sample stages after decode: to_tuple, map, map_dict, rename, batched,
// unbatched, and the default collation.
//
//   auto batches = wds::WebDataset(urls) | wds::decode("rgb8")
//                | wds::to_tuple("jpg;png", "cls")      // Tuple{Tensor image, int64 label}
//                | wds::batched(64);                    // Tuple{Tensor [64,H,W,3], Tensor [64]}
//   for (wds::Tuple& b : batches) train(b[0].get<wds::Tensor>(), b[1].get<wds::Tensor>());
//
// The same as methods: wds::WebDataset(urls).decode("rgb8").to_tuple("jpg;png", "cls").batched(64).
//
// Default collation (collate()), per column: tensors of one dtype and shape -> one tensor
// [N, ...] in one allocation; integers -> an int64 tensor [N]; numbers -> float64 [N];
// anything else (strings, JSON, bytes, mixed) -> a list (Tuple). Tensors of different shapes
// are an error naming the shapes: resize them, or pass your own collate function.
// batched() of DecodedSamples collates field by field and adds "__key__", the list of keys.
//
// Batch slots: batched() offers the rows of the batch it is filling upstream, through the
// stages that hand on each item at once (map, to_tuple, map_dict, rename, select, slice,
// decode, and your own StreamWrapper stages; not shuffle or unbatched). decode() then writes each
// image straight into its row of one pooled [N, ...] buffer per field, and collation sees the rows
// of that buffer in order and returns a view of it: no copy, and, as the buffers are recycled
// (wds/tensor_pool.hpp) once no tensor uses them, no allocation per batch. Images of another
// shape than the batch's first fall back to a buffer of their own, and batches are then copied
// (or an error, as above); the values are the same either way.
//
// Errors in a stage (a missing field, your function throwing) go through its handler as in
// WebDataset: the default rethrows; a continuing handler drops the item. Exceptions other than
// wds::Error reach the handler as invalid_argument Errors naming the item.
//
// Resume: map, to_tuple, rename, map_dict and batched keep nothing between items, so a
// pipeline through them saves and restores; unbatched holds a batch and refuses.
//
// Thread safety: stages are values; each running copy is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "wds/error.hpp"
#include "wds/pipeline.hpp"
#include "wds/sample.hpp"
#include "wds/tensor_pool.hpp"
#include "wds/value.hpp"

namespace wds {

struct DefaultCollate;

namespace detail {

template <class X>
struct unwrap_optional {
  using type = X;
};
template <class X>
struct unwrap_optional<std::optional<X>> {
  using type = X;
};

// Runs fn on each item under the handler. fn may move from the item, so a sample's origin (URL
// and key) is noted first, for the error message: a shared pointer and a string assignment that
// reuses its capacity, so nothing is allocated per item.
template <class T, class U, class F>
class MapStream final : public StreamWrapper<T, U> {
 public:
  MapStream(StreamPtr<T> up, F fn, ErrorHandler handler)
      : StreamWrapper<T, U>(std::move(up), "map"),
        fn_(std::move(fn)),
        handler_(std::move(handler)) {}
  void start(const PassContext& ctx) override {
    metrics_ = ctx.metrics;
    this->upstream().start(ctx);
  }
  std::optional<U> next() override {
    while (std::optional<T> item = this->upstream().next()) {
      if constexpr (kNamed) {
        shard_ = item->shard();
        key_ = item->key();
      }
      try {
        // fn returning nullopt drops the item (WebDataset's map returning None).
        if (std::optional<U> out = fn_(std::move(*item))) return out;
        continue;
      } catch (const Error& e) {
        const bool bare = e.url().empty() && e.member().empty();
        if (!handler_(bare ? Error(e.code(), url(), key_, e.cause()) : e)) return std::nullopt;
      } catch (const std::exception& e) {
        if (!handler_(Error::invalid_argument(url(), key_, e.what()))) {
          return std::nullopt;
        }
      }
      count_dropped(metrics_);
    }
    return std::nullopt;
  }
  // A function is code: nothing to describe (to_tuple, map_dict and rename run as a map too).
  void settings(Configuration&) const override {}

 private:
  static constexpr bool kNamed = std::is_same_v<T, Sample> || std::is_same_v<T, DecodedSample>;
  std::string url() const { return shard_ ? shard_->url : std::string(); }

  F fn_;
  ErrorHandler handler_;
  MetricsCounters* metrics_ = nullptr;
  std::shared_ptr<const ShardInfo> shard_;
  std::string key_;
};

// The rows of the batch a BatchStream is filling, offered upstream (Stream::offer_slots) so
// that decode() writes each image into its row instead of a buffer of its own that collation
// would copy. Per column (a field name), one pooled tensor [n, ...] per batch, the slab, taken
// at the batch's first claim; its dtype and row shape are the batch's, and a claim of another
// declines. collate() finds the rows of one slab in order and returns a view of it.
//
// Why this is safe: a slab is written only through the row claimed for the item being pulled,
// and each row at most once: if the item that claimed row r was dropped on the way (select, a
// map returning nullopt, a continuing handler), the next item's claim of row r declines, so a
// tensor a user's map kept is never overwritten (that batch is then copied). Only stages that
// keep no item between calls pass the offer on. After collation the slots let go of the slabs, and
// the pool hands a block out again only when no tensor (batch, view, DLPack export) uses it.
//
// Used by one thread (the one running the chain); blocks may be released from any.
class BatchSlots {
 public:
  explicit BatchSlots(std::size_t rows) : rows_(rows) {}
  // Which row the next item pulled upstream fills.
  void set_row(std::size_t row) noexcept { row_ = row; }
  // Row `row` of `column`'s slab, a tensor of exactly this dtype and shape to write the item's
  // value into; an empty Tensor (decline) if the slab has another dtype or row shape, or if the
  // row was handed out before (the item that took it was dropped upstream, and a user's stage
  // may still hold its tensor: a row is never written twice).
  Tensor claim(std::string_view column, DType dtype, const Tensor::Shape& shape);
  // Lets go of the slabs: the next claim takes a fresh block for its batch.
  void release() noexcept;
  // Where batches are allocated too, when their rows are not one slab's.
  TensorPool& pool() noexcept { return pool_; }

 private:
  struct Column {
    std::string name;  // kept across batches: no allocation per batch
    Tensor slab;
    std::size_t claimed = 0;  // rows handed out in this batch, in order
  };
  std::size_t rows_;
  std::size_t row_ = 0;
  std::vector<Column> columns_;
  TensorPool pool_;
};

// collate() with the batch tensors taken from `pool` (what batched() with the default
// collation uses).
Tuple collate(std::vector<Tuple>&& rows, TensorPool& pool);
DecodedSample collate(std::vector<DecodedSample>&& rows, TensorPool& pool);

template <class T, class U, class Collate>
class BatchStream final : public StreamWrapper<T, U> {
 public:
  BatchStream(StreamPtr<T> up, std::size_t n, bool partial, Collate collate)
      : StreamWrapper<T, U>(std::move(up), "batched"),
        n_(n),
        partial_(partial),
        collate_(std::move(collate)),
        slots_(n) {
    this->upstream().offer_slots(&slots_);
  }
  void start(const PassContext& ctx) override {
    slots_.release();
    slots_.pool().set_metrics(ctx.metrics);
    slots_.pool().set_allocator(ctx.memory);
    this->upstream().start(ctx);
  }
  std::optional<U> next() override {
    slots_.release();  // in case the last batch failed half way
    std::vector<T> rows;
    rows.reserve(n_);
    while (rows.size() < n_) {
      slots_.set_row(rows.size());
      std::optional<T> item = this->upstream().next();
      if (!item) break;
      rows.push_back(std::move(*item));
    }
    if (rows.empty() || (rows.size() < n_ && !partial_)) return std::nullopt;
    std::optional<U> out = run_collate(std::move(rows));
    slots_.release();
    return out;
  }
  // save, restore: a batch is made within one next(), so nothing is held between calls.
  // Declines: its own slots are what it offers upstream, not a later batch's.
  void offer_slots(BatchSlots*) override {}
  void settings(Configuration& c) const override {
    c.add("batchsize", n_);
    c.add("partial", partial_ ? 1 : 0);
  }

 private:
  static constexpr bool kPooled = std::is_same_v<Collate, DefaultCollate> &&
                                  (std::is_same_v<T, Tuple> || std::is_same_v<T, DecodedSample>);
  U run_collate(std::vector<T>&& rows) {
    if constexpr (kPooled) {
      return collate(std::move(rows), slots_.pool());
    } else {
      return collate_(std::move(rows));
    }
  }

  std::size_t n_;
  bool partial_;
  Collate collate_;
  BatchSlots slots_;
};

// Splits each batch with split(B&&) -> std::vector<T> and hands out the rows.
template <class B, class T, class Split>
class UnbatchStream final : public StreamWrapper<B, T> {
 public:
  UnbatchStream(StreamPtr<B> up, Split split)
      : StreamWrapper<B, T>(std::move(up), "unbatched"), split_(std::move(split)) {}
  void start(const PassContext& ctx) override {
    this->upstream().start(ctx);
    rows_.clear();
    pos_ = 0;
  }
  std::optional<T> next() override {
    while (pos_ >= rows_.size()) {
      std::optional<B> batch = this->upstream().next();
      if (!batch) return std::nullopt;
      rows_ = split_(std::move(*batch));
      pos_ = 0;
    }
    return std::move(rows_[pos_++]);
  }
  // Holds a batch between calls: refuses to save or restore, and declines slots.
  void save(StateWriter&) const override { this->refuse_resume(); }
  void restore(StateReader&) override { this->refuse_resume(); }
  void offer_slots(BatchSlots*) override {}
  void settings(Configuration&) const override {}

 private:
  Split split_;
  std::vector<T> rows_;
  std::size_t pos_ = 0;
};

}  // namespace detail

// --- collation ---

// One column of values -> a tensor [N, ...] (tensors, integers, numbers) or a list.
Value collate_column(std::vector<Value>&& column);
// Tuples of equal length -> one tuple of collated columns.
Tuple collate(std::vector<Tuple>&& rows);
// Samples with the same fields -> one sample of collated fields plus "__key__" (list of keys).
DecodedSample collate(std::vector<DecodedSample>&& rows);
// The inverse: element i of each column (a view for tensors).
std::vector<Tuple> uncollate(Tuple&& batch);
std::vector<DecodedSample> uncollate(DecodedSample&& batch);

struct DefaultCollate {
  Tuple operator()(std::vector<Tuple>&& rows) const { return collate(std::move(rows)); }
  DecodedSample operator()(std::vector<DecodedSample>&& rows) const {
    return collate(std::move(rows));
  }
  // Other items are batched as plain vectors (WebDataset's collation_fn=None).
  template <class T>
  std::vector<T> operator()(std::vector<T>&& rows) const {
    return std::move(rows);
  }
};

// --- stages ---

template <class F>
struct MapStage {
  F fn;
  ErrorHandler handler;
  template <class T>
  requires std::invocable<const F&, T&&>
  auto operator()(StreamPtr<T> up) const {
    using U = typename detail::unwrap_optional<std::invoke_result_t<const F&, T&&>>::type;
    return StreamPtr<U>(std::make_unique<detail::MapStream<T, U, F>>(std::move(up), fn, handler));
  }
};
// fn(item) -> new item, or std::optional: nullopt drops the item (WebDataset's None).
template <class F>
MapStage<F> map(F fn, ErrorHandler handler = reraise_exception) {
  return {std::move(fn), std::move(handler)};
}

template <class Collate>
struct BatchStage {
  std::size_t n;
  bool partial;
  Collate collate;
  template <class T>
  requires std::invocable<const Collate&, std::vector<T> &&> auto operator()(
      StreamPtr<T> up) const {
    using U = std::invoke_result_t<const Collate&, std::vector<T>&&>;
    return StreamPtr<U>(
        std::make_unique<detail::BatchStream<T, U, Collate>>(std::move(up), n, partial, collate));
  }
};
// Groups n items (the last, shorter batch only if partial) and collates them.
inline BatchStage<DefaultCollate> batched(std::size_t n, bool partial = true) {
  if (n < 1) throw Error::invalid_argument("batched: size must be >= 1");
  return {n, partial, DefaultCollate{}};
}
template <class Collate>
BatchStage<Collate> batched(std::size_t n, Collate collate, bool partial = true) {
  if (n < 1) throw Error::invalid_argument("batched: size must be >= 1");
  return {n, partial, std::move(collate)};
}

struct UnbatchStage {
  StreamPtr<Tuple> operator()(StreamPtr<Tuple> up) const;
  StreamPtr<DecodedSample> operator()(StreamPtr<DecodedSample> up) const;
  template <class T>
  StreamPtr<T> operator()(StreamPtr<std::vector<T>> up) const {
    auto same = [](std::vector<T>&& rows) { return std::move(rows); };
    return std::make_unique<detail::UnbatchStream<std::vector<T>, T, decltype(same)>>(std::move(up),
                                                                                      same);
  }
};
// Splits batches back into items (tuples: along each column; samples: along each field).
inline UnbatchStage unbatched() {
  return {};
}

struct ToTupleOptions {
  bool missing_is_error = true;  // false: a missing field becomes a none Value
  ErrorHandler handler = reraise_exception;
};
struct ToTupleStage {
  std::vector<std::vector<std::string>> fields;  // per position, the alternatives
  ToTupleOptions options;
  StreamPtr<Tuple> operator()(StreamPtr<DecodedSample> up) const;
  StreamPtr<Tuple> operator()(StreamPtr<Sample> up) const;
};
// to_tuple("jpg;png", "cls"): per argument, the first present of its ';' alternatives ("__key__"
// and "__url__" give the key and URL). One argument with spaces is split: to_tuple("jpg cls").
ToTupleStage to_tuple(std::vector<std::string> fields, ToTupleOptions options = {});
template <class... S>
requires(std::is_convertible_v<S, std::string_view>&&...) ToTupleStage to_tuple(S&&... fields) {
  return to_tuple(std::vector<std::string>{std::string(std::string_view(fields))...});
}
// The tuple one sample gives (what the stage does per item); throws on a missing field.
Tuple make_tuple(DecodedSample&& sample, const std::vector<std::vector<std::string>>& fields,
                 bool missing_is_error = true);

// FieldFn (wds/pipeline.hpp): a field's value to its new value.
struct MapDictStage {
  std::vector<std::pair<std::string, FieldFn>> fns;
  ErrorHandler handler;
  StreamPtr<DecodedSample> operator()(StreamPtr<DecodedSample> up) const;
};
// Replaces the named fields by fn(value); a missing field is an error (to the handler).
MapDictStage map_dict(std::vector<std::pair<std::string, FieldFn>> fns,
                      ErrorHandler handler = reraise_exception);

struct RenameStage {
  std::vector<std::pair<std::string, std::string>> renames;  // new name, "old1;old2"
  bool keep;
  ErrorHandler handler;
  StreamPtr<DecodedSample> operator()(StreamPtr<DecodedSample> up) const;
};
// rename({{"image", "jpg;png"}, {"label", "cls"}}): each new field takes the first present
// alternative, which is removed. keep = false drops every other field.
RenameStage rename(std::vector<std::pair<std::string, std::string>> renames, bool keep = true,
                   ErrorHandler handler = reraise_exception);

// --- Pipeline's methods for these stages (declared in wds/pipeline.hpp) ---

template <class T>
template <class... S>
requires(std::is_convertible_v<S, std::string_view>&&...) auto Pipeline<T>::to_tuple(
    S&&... fields) const {
  return then(wds::to_tuple(std::forward<S>(fields)...));
}
template <class T>
auto Pipeline<T>::to_tuple(std::vector<std::string> fields) const {
  return then(wds::to_tuple(std::move(fields)));
}
template <class T>
auto Pipeline<T>::to_tuple(std::vector<std::string> fields, ToTupleOptions options) const {
  return then(wds::to_tuple(std::move(fields), std::move(options)));
}
template <class T>
template <class F>
auto Pipeline<T>::map(F fn, ErrorHandler handler) const {
  return then(wds::map(std::move(fn), std::move(handler)));
}
template <class T>
auto Pipeline<T>::map_dict(std::vector<std::pair<std::string, FieldFn>> fns,
                           ErrorHandler handler) const {
  return then(wds::map_dict(std::move(fns), std::move(handler)));
}
template <class T>
auto Pipeline<T>::rename(std::vector<std::pair<std::string, std::string>> renames, bool keep,
                         ErrorHandler handler) const {
  return then(wds::rename(std::move(renames), keep, std::move(handler)));
}
template <class T>
auto Pipeline<T>::batched(std::size_t n, bool partial) const {
  return then(wds::batched(n, partial));
}
template <class T>
template <class Collate>
auto Pipeline<T>::batched(std::size_t n, Collate collate, bool partial) const {
  return then(wds::batched(n, std::move(collate), partial));
}
template <class T>
auto Pipeline<T>::unbatched() const {
  return then(wds::unbatched());
}

}  // namespace wds
