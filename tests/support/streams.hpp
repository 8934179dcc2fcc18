// Pipelines over items held in memory, for stage tests: each worker of a loader reads the
// items whose index modulo num_workers is its worker id (as split_by_worker does with shards).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "wds/pipeline.hpp"
#include "wds/transforms.hpp"

namespace wds::test {

template <class T>
class VectorStream final : public Stream<T> {
 public:
  VectorStream(std::shared_ptr<const std::vector<T>> items, std::function<void(std::size_t)> hook)
      : items_(std::move(items)), hook_(std::move(hook)) {}
  void start(const PassContext& ctx) override {
    worker_ = static_cast<std::size_t>(ctx.worker);
    workers_ = static_cast<std::size_t>(ctx.num_workers);
    pos_ = worker_;
  }
  std::optional<T> next() override {
    if (pos_ >= items_->size()) return std::nullopt;
    std::size_t i = pos_;
    pos_ += workers_;
    if (hook_) hook_(i);  // may throw, to model a failing stage
    return (*items_)[i];
  }
  void save(StateWriter& out) const override { out.put(static_cast<std::uint64_t>(pos_)); }
  void restore(StateReader& in) override { pos_ = static_cast<std::size_t>(in.get_u64()); }

 private:
  std::shared_ptr<const std::vector<T>> items_;
  std::function<void(std::size_t)> hook_;
  std::size_t worker_ = 0, workers_ = 1, pos_ = 0;
};

// A pipeline yielding `items` (a worker's share under a loader); hook(i) runs before item i.
template <class T>
Pipeline<T> from_vector(std::vector<T> items, std::function<void(std::size_t)> hook = {}) {
  auto shared = std::make_shared<const std::vector<T>>(std::move(items));
  return Pipeline<T>(
      [shared, hook] { return StreamPtr<T>(std::make_unique<VectorStream<T>>(shared, hook)); });
}

// Records where the tensor in column `column` of each tuple is as batched() receives it (a
// decode into the batch's rows hands on views of its rows).
inline auto note_rows(std::vector<const std::byte*>& rows, std::size_t column = 0) {
  return map([&rows, column](Tuple&& t) {
    rows.push_back(t[column].get<Tensor>().data());
    return std::move(t);
  });
}

inline std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

}  // namespace wds::test
