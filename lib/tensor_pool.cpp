#include "wds/tensor_pool.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "wds/metrics.hpp"

namespace wds {
namespace {

// A block and where it goes back to: its allocator, or the heap (allocator null).
class Block {
 public:
  Block() = default;
  Block(std::byte* data, std::size_t capacity, std::shared_ptr<BlockAllocator> allocator) noexcept
      : data_(data), capacity_(capacity), allocator_(std::move(allocator)) {}
  Block(Block&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        capacity_(o.capacity_),
        allocator_(std::move(o.allocator_)) {}
  Block& operator=(Block&& o) noexcept {
    if (this != &o) {
      free();
      data_ = std::exchange(o.data_, nullptr);
      capacity_ = o.capacity_;
      allocator_ = std::move(o.allocator_);
    }
    return *this;
  }
  ~Block() { free(); }

  // A fresh block of at least `nbytes` from `allocator` (null: the heap).
  static Block allocate(std::size_t nbytes, std::shared_ptr<BlockAllocator> allocator) {
    if (allocator) {
      std::byte* p = allocator->allocate(nbytes);
      return Block(p, nbytes, std::move(allocator));
    }
    return Block(detail::allocate_aligned(nbytes).release(), nbytes, nullptr);
  }

  std::byte* data() const noexcept { return data_; }
  std::size_t capacity() const noexcept { return capacity_; }
  const std::shared_ptr<BlockAllocator>& allocator() const noexcept { return allocator_; }
  std::byte* release() noexcept { return std::exchange(data_, nullptr); }

 private:
  void free() noexcept {
    if (!data_) return;
    if (allocator_) {
      allocator_->deallocate(data_, capacity_);
    } else {
      detail::AlignedFree()(data_);
    }
    data_ = nullptr;
  }
  std::byte* data_ = nullptr;
  std::size_t capacity_ = 0;
  std::shared_ptr<BlockAllocator> allocator_;
};

}  // namespace

struct TensorPool::State {
  explicit State(std::size_t max_free) : max_free(max_free) {
    // Reserved up front, so that giving a block back (in a deleter, noexcept) never allocates.
    idle.reserve(max_free);
  }

  // Keeps the block unless max_free are idle already; then the oldest idle one goes, since the
  // newest is likelier to fit what is taken next. A block of another allocator than the pool's
  // current one goes back to its allocator.
  void give_back(Block block) noexcept {
    Block evicted;  // freed after the lock is released
    std::lock_guard lock(mutex);
    if (max_free == 0 || block.allocator() != allocator) {
      evicted = std::move(block);
      return;
    }
    if (idle.size() >= max_free) {
      evicted = std::move(idle.front());
      idle.erase(idle.begin());
    }
    idle.push_back(std::move(block));
  }

  const std::size_t max_free;
  mutable std::mutex mutex;
  std::vector<Block> idle;
  std::shared_ptr<BlockAllocator> allocator;  // where new blocks come from (null: the heap)
};

// The deleter of a block handed out: back to the pool if it still exists, else freed.
struct TensorPool::GiveBack {
  std::weak_ptr<State> pool;
  std::size_t capacity;
  std::shared_ptr<BlockAllocator> allocator;
  void operator()(std::byte* p) const noexcept {
    Block block(p, capacity, allocator);
    if (std::shared_ptr<State> state = pool.lock()) state->give_back(std::move(block));
  }
};

TensorPool::TensorPool(TensorPoolOptions options)
    : state_(std::make_shared<State>(options.max_free)), metrics_(options.metrics) {
  set_allocator(std::move(options.allocator));
}

TensorPool::~TensorPool() = default;

void TensorPool::set_metrics(MetricsCounters* metrics) noexcept {
  metrics_ = metrics;
}

void TensorPool::set_allocator(std::shared_ptr<BlockAllocator> allocator) {
  std::vector<Block> other;  // freed after the lock is released
  std::lock_guard lock(state_->mutex);
  if (allocator == state_->allocator) return;
  state_->allocator = std::move(allocator);
  other.swap(state_->idle);
  state_->idle.reserve(state_->max_free);
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

  Block block;
  std::shared_ptr<BlockAllocator> allocator;  // where a new block comes from
  {
    std::lock_guard lock(state_->mutex);
    allocator = state_->allocator;
    auto& idle = state_->idle;
    // The smallest idle block that fits without wasting more than half of itself.
    std::size_t best = idle.size();
    for (std::size_t i = 0; i < idle.size(); ++i) {
      const std::size_t c = idle[i].capacity();
      if (c >= need && c / 2 <= need && (best == idle.size() || c < idle[best].capacity()))
        best = i;
    }
    if (best != idle.size()) {
      block = std::move(idle[best]);
      idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(best));
    }
  }
  const bool reused = block.data() != nullptr;
  if (!reused) block = Block::allocate(need, std::move(allocator));
  if (metrics_) metrics_->add_pool(reused);

  // Released first: if making the shared_ptr throws, it calls the deleter, which gives it back.
  const std::size_t capacity = block.capacity();
  std::shared_ptr<BlockAllocator> from = block.allocator();
  std::byte* data = block.release();
  std::shared_ptr<std::byte> owner(data, GiveBack{state_, capacity, std::move(from)});
  return Tensor(dtype, std::move(shape), std::move(owner), data);
}

}  // namespace wds
