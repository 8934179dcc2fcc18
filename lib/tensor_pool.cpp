#include "wds/tensor_pool.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "wds/metrics.hpp"

namespace wds {

struct TensorPool::State {
  struct Idle {
    detail::AlignedBlock block;
    std::size_t capacity;
  };

  explicit State(std::size_t max_free) : max_free(max_free) {
    // Reserved up front, so that giving a block back (in a deleter, noexcept) never allocates.
    idle.reserve(max_free);
  }

  // Keeps the block unless max_free are idle already; then the oldest idle one goes, since the
  // newest is likelier to fit what is taken next.
  void give_back(detail::AlignedBlock block, std::size_t capacity) noexcept {
    detail::AlignedBlock evicted;  // freed after the lock is released
    std::lock_guard lock(mutex);
    if (max_free == 0) {
      evicted = std::move(block);
      return;
    }
    if (idle.size() >= max_free) {
      evicted = std::move(idle.front().block);
      idle.erase(idle.begin());
    }
    idle.push_back({std::move(block), capacity});
  }

  const std::size_t max_free;
  mutable std::mutex mutex;
  std::vector<Idle> idle;
};

// The deleter of a block handed out: back to the pool if it still exists, else freed.
struct TensorPool::GiveBack {
  std::weak_ptr<State> pool;
  std::size_t capacity;
  void operator()(std::byte* p) const noexcept {
    detail::AlignedBlock block(p);
    if (std::shared_ptr<State> state = pool.lock()) state->give_back(std::move(block), capacity);
  }
};

TensorPool::TensorPool(TensorPoolOptions options)
    : state_(std::make_shared<State>(options.max_free)), metrics_(options.metrics) {}

TensorPool::~TensorPool() = default;

void TensorPool::set_metrics(MetricsCounters* metrics) noexcept {
  metrics_ = metrics;
}

std::size_t TensorPool::free_blocks() const {
  std::lock_guard lock(state_->mutex);
  return state_->idle.size();
}

Tensor TensorPool::take(DType dtype, Tensor::Shape shape) {
  std::size_t count = 1;
  for (std::int64_t d : shape) {
    // Tensor's constructor throws the error before it allocates anything.
    if (d < 0) return Tensor(dtype, std::move(shape));
    count *= static_cast<std::size_t>(d);
  }
  const std::size_t need = std::max<std::size_t>(count * dtype_size(dtype), 1);

  detail::AlignedBlock block;
  std::size_t capacity = need;
  {
    std::lock_guard lock(state_->mutex);
    auto& idle = state_->idle;
    // The smallest idle block that fits without wasting more than half of itself.
    std::size_t best = idle.size();
    for (std::size_t i = 0; i < idle.size(); ++i) {
      const std::size_t c = idle[i].capacity;
      if (c >= need && c / 2 <= need && (best == idle.size() || c < idle[best].capacity)) best = i;
    }
    if (best != idle.size()) {
      block = std::move(idle[best].block);
      capacity = idle[best].capacity;
      idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(best));
    }
  }
  const bool reused = block != nullptr;
  if (!reused) block = detail::allocate_aligned(need);
  if (metrics_) metrics_->add_pool(reused);

  // Released first: if making the shared_ptr throws, it calls the deleter, which gives it back.
  std::byte* data = block.release();
  std::shared_ptr<std::byte> owner(data, GiveBack{state_, capacity});
  return Tensor(dtype, std::move(shape), std::move(owner), data);
}

}  // namespace wds
