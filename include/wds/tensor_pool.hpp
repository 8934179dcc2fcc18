// wds/tensor_pool.hpp: TensorPool, a recycler of tensor storage for buffers made again and again
// at the same size (the batches of batched()).
//
//   wds::TensorPool pool({.max_free = 4});
//   for (...) {
//     wds::Tensor batch = pool.take(wds::DType::uint8, {64, 224, 224, 3});  // uninitialised
//     fill(batch);
//     queue.push(std::move(batch));  // used anywhere; when its last view (or DLPack export)
//   }                                // dies, the block goes back to the pool for the next take
//
// Why: a loader makes batches on worker threads and frees them on the consumer's thread. glibc's
// allocator keeps such memory in per-thread arenas and returns little of it: a run can hold 1-2
// GB it does not use. Recycling the same few blocks keeps memory flat and skips the page faults
// of fresh allocations.
//
// A block goes back to the pool only when no tensor uses it any more (its shared_ptr count is
// zero), so take() never hands out memory that something still reads. The pool keeps at most
// max_free idle blocks and frees the rest; a block that outlives its pool is simply freed.
// Blocks are 64-byte aligned, as Tensor's own storage. take() reuses an idle block when it is
// large enough and at most twice the size asked for, else allocates one.
//
// Blocks come from the heap unless the pool is given a BlockAllocator (LoaderOptions::memory
// passes one to batched()): pinned host memory for fast copies to a GPU, or the shared memory a
// data service lends its trainers. A block goes back to the allocator it came from.
//
// Thread safety: take() and the return of blocks (from any thread, when tensors die) lock one
// mutex for a few instructions: meant for buffers per batch, not per item.
#pragma once

#include <cstddef>
#include <memory>

#include "wds/tensor.hpp"

namespace wds {

class MetricsCounters;

// Where a TensorPool's blocks come from. allocate() and deallocate() may be called from any
// thread (blocks come back when their last tensor dies, wherever that is).
class BlockAllocator {
 public:
  virtual ~BlockAllocator() = default;
  // A block of at least nbytes (> 0), 64-byte aligned; throws (std::bad_alloc or wds::Error)
  // when there is none.
  virtual std::byte* allocate(std::size_t nbytes) = 0;
  // Takes back a block allocate(nbytes) returned.
  virtual void deallocate(std::byte* block, std::size_t nbytes) noexcept = 0;
};

struct TensorPoolOptions {
  // Idle blocks kept for reuse; more are freed as they come back.
  std::size_t max_free = 4;
  // Where take() counts allocations and reuses (MetricsCounters::add_pool); may be null.
  MetricsCounters* metrics = nullptr;
  // Where blocks come from; null: the heap.
  std::shared_ptr<BlockAllocator> allocator;
};

class TensorPool {
 public:
  explicit TensorPool(TensorPoolOptions options = {});
  ~TensorPool();
  TensorPool(const TensorPool&) = delete;
  TensorPool& operator=(const TensorPool&) = delete;

  // An uninitialised tensor of this dtype and shape in a recycled or fresh block; throws
  // invalid_argument for a negative dimension.
  Tensor take(DType dtype, Tensor::Shape shape);
  // Counts into `metrics` from now on (null: not at all). Call it from the thread that calls
  // take().
  void set_metrics(MetricsCounters* metrics) noexcept;
  // Takes new blocks from `allocator` (null: the heap) from now on; idle blocks of another
  // allocator are given back to it. Call it from the thread that calls take().
  void set_allocator(std::shared_ptr<BlockAllocator> allocator);
  // Idle blocks held now (for tests and diagnostics).
  std::size_t free_blocks() const;

 private:
  struct State;
  struct GiveBack;
  std::shared_ptr<State> state_;  // shared with the blocks out, which hold it weakly
  MetricsCounters* metrics_;
};

}  // namespace wds
