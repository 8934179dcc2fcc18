// Tensor, Value and the DLPack bridge.
#include "wds/tensor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "tests/support/fixtures.hpp"
#include "wds/dlpack.hpp"
#include "wds/metrics.hpp"
#include "wds/tensor_pool.hpp"
#include "wds/value.hpp"

namespace wds {
namespace {

Tensor counting(Tensor::Shape shape) {
  Tensor t(DType::int32, std::move(shape));
  std::int32_t i = 0;
  for (auto& v : t.values<std::int32_t>()) v = i++;
  return t;
}

TEST(Tensor, ShapeViewsAndCopies) {
  Tensor t = counting({2, 3, 4});
  EXPECT_EQ(t.numel(), 24u);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
  Tensor row = t[1];
  EXPECT_EQ(row.shape(), (Tensor::Shape{3, 4}));
  EXPECT_EQ(row.values<std::int32_t>()[0], 12);
  row.values<std::int32_t>()[0] = -1;  // a view: writes through
  EXPECT_EQ(t.values<std::int32_t>()[12], -1);
  Tensor deep = t.clone();
  deep.values<std::int32_t>()[0] = 99;
  EXPECT_EQ(t.values<std::int32_t>()[0], 0);
  EXPECT_EQ(t.reshape({6, 4})[5].values<std::int32_t>()[3], 23);
  EXPECT_EQ(t.describe(), "int32[2, 3, 4]");
  std::string what;
  EXPECT_EQ(test::error_code([&] { t.values<float>(); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("int32[2, 3, 4]"), std::string::npos) << what;
  EXPECT_EQ(test::error_code([&] { t.reshape({5, 5}); }), ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([&] { t[2]; }), ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([] { Tensor(DType::uint8, {2, -1}); }), ErrorCode::invalid_argument);
  // A view outlives its parent.
  Tensor kept = counting({4, 2})[3];
  EXPECT_EQ(kept.values<std::int32_t>()[1], 7);
}

TEST(Tensor, RowsAreAViewAlongTheFirstDimension) {
  Tensor t = counting({4, 3});
  Tensor mid = t.rows(1, 3);
  EXPECT_EQ(mid.shape(), (Tensor::Shape{2, 3}));
  EXPECT_EQ(mid.data(), t[1].data());
  EXPECT_EQ(mid.values<std::int32_t>()[0], 3);
  EXPECT_EQ(mid.values<std::int32_t>()[5], 8);
  EXPECT_EQ(t.rows(4, 4).shape(), (Tensor::Shape{0, 3}));
  EXPECT_EQ(t.rows(0, 4), t);
  EXPECT_EQ(counting({5}).rows(2, 5).values<std::int32_t>()[0], 2);
  for (auto [b, e] : {std::pair{-1, 2}, std::pair{3, 2}, std::pair{0, 5}}) {
    EXPECT_EQ(test::error_code([&, b = b, e = e] { t.rows(b, e); }), ErrorCode::invalid_argument);
  }
  EXPECT_EQ(test::error_code([] { Tensor(DType::int32, {}).rows(0, 0); }),
            ErrorCode::invalid_argument);
  Tensor kept = counting({4, 3}).rows(2, 4);  // keeps the storage alive
  EXPECT_EQ(kept.values<std::int32_t>()[5], 11);
}

TEST(TensorPool, ReusesABlockOnlyWhenNothingUsesIt) {
  MetricsCounters counters;
  TensorPool pool({.metrics = &counters});
  Tensor a = pool.take(DType::float32, {8, 16});
  EXPECT_EQ(a.shape(), (Tensor::Shape{8, 16}));
  EXPECT_EQ(a.dtype(), DType::float32);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 64, 0u);
  const std::byte* first = a.data();
  Tensor row = a[3];  // a view keeps the block in use
  a = Tensor();
  EXPECT_EQ(pool.free_blocks(), 0u);
  Tensor b = pool.take(DType::float32, {8, 16});
  EXPECT_NE(b.data(), first);
  b = Tensor();
  row = Tensor();
  EXPECT_EQ(pool.free_blocks(), 2u);
  // Another shape of no more bytes, and not less than half: an idle block is reused.
  Tensor c = pool.take(DType::uint8, {300});
  EXPECT_EQ(pool.free_blocks(), 1u);
  // Far smaller: a block of its own rather than half a kilobyte wasted.
  Tensor d = pool.take(DType::uint8, {10});
  EXPECT_EQ(pool.free_blocks(), 1u);
  const Metrics m = counters.snapshot();
  EXPECT_EQ(m.pool_allocations, 3u);
  EXPECT_EQ(m.pool_reuses, 1u);
  // An exported DLPack view keeps the block too.
  DLManagedTensor* exported = to_dlpack(c);
  c = Tensor();
  EXPECT_EQ(pool.free_blocks(), 1u);
  exported->deleter(exported);
  EXPECT_EQ(pool.free_blocks(), 2u);
  EXPECT_EQ(test::error_code([&] {
              pool.take(DType::uint8, {2, -1});
            }),
            ErrorCode::invalid_argument);
}

TEST(TensorPool, KeepsAtMostMaxFreeIdleBlocks) {
  TensorPool pool({.max_free = 2});
  std::vector<Tensor> held;
  for (int i = 0; i < 5; ++i) held.push_back(pool.take(DType::int64, {100}));
  held.clear();
  EXPECT_EQ(pool.free_blocks(), 2u);
  TensorPool none({.max_free = 0});
  none.take(DType::uint8, {4});
  EXPECT_EQ(none.free_blocks(), 0u);
}

TEST(TensorPool, ABlockOutlivingItsPoolIsFreed) {
  Tensor t;
  {
    TensorPool pool;
    t = pool.take(DType::int32, {64});
    pool.take(DType::int32, {64});  // idle when the pool goes
  }
  for (std::int32_t i = 0; auto& v : t.values<std::int32_t>()) v = i++;
  EXPECT_EQ(t.values<std::int32_t>()[63], 63);
  t = Tensor();  // freed, not given back (ASan checks)
}

// An allocator that counts what it hands out and gets back (for LoaderOptions::memory).
class CountingAllocator final : public BlockAllocator {
 public:
  std::byte* allocate(std::size_t nbytes) override {
    ++allocated;
    return detail::allocate_aligned(nbytes).release();
  }
  void deallocate(std::byte* block, std::size_t) noexcept override {
    ++freed;
    detail::AlignedFree()(block);
  }
  std::atomic<int> allocated{0}, freed{0};
};

TEST(TensorPool, BlocksComeFromItsAllocatorAndGoBackToIt) {
  auto first = std::make_shared<CountingAllocator>();
  auto second = std::make_shared<CountingAllocator>();
  {
    TensorPool pool({.max_free = 4, .allocator = first});
    std::vector<Tensor> held;
    for (int i = 0; i < 3; ++i) held.push_back(pool.take(DType::float32, {64}));
    EXPECT_EQ(first->allocated, 3);
    held.pop_back();
    EXPECT_EQ(pool.free_blocks(), 1u);
    pool.take(DType::float32, {64});  // the idle block again
    EXPECT_EQ(first->allocated, 3);

    // Switching: the idle block goes back to the first allocator, new ones come from the second,
    // and a block of the first returned later goes back to it, not into the pool.
    pool.set_allocator(second);
    EXPECT_EQ(first->freed, 1);
    Tensor t = pool.take(DType::float32, {64});
    EXPECT_EQ(second->allocated, 1);
    held.clear();
    EXPECT_EQ(first->freed, 3);
    EXPECT_EQ(pool.free_blocks(), 0u);
    t = Tensor();
    EXPECT_EQ(pool.free_blocks(), 1u);
  }
  EXPECT_EQ(first->freed, first->allocated);
  EXPECT_EQ(second->freed, second->allocated);
}

TEST(TensorPool, TakenOnOneThreadReturnedOnAnother) {
  // The loader's pattern: a worker takes and fills buffers, the consumer reads and drops them.
  // A block handed out while the consumer still held it would change under its check.
  MetricsCounters counters;
  TensorPool pool({.max_free = 3, .metrics = &counters});
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::pair<int, Tensor>> queue;
  constexpr int kItems = 2000;
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      Tensor t = pool.take(DType::int32, {256});
      for (auto& v : t.values<std::int32_t>()) v = i;
      std::unique_lock lock(mutex);
      ready.wait(lock, [&] { return queue.size() < 4; });
      queue.emplace_back(i, std::move(t));
      ready.notify_all();
    }
  });
  int bad = 0;
  std::deque<std::pair<int, Tensor>> held;  // a few kept a while, as a training step would
  for (int got = 0; got < kItems; ++got) {
    std::pair<int, Tensor> item;
    {
      std::unique_lock lock(mutex);
      ready.wait(lock, [&] { return !queue.empty(); });
      item = std::move(queue.front());
      queue.pop_front();
      ready.notify_all();
    }
    held.push_back(std::move(item));
    if (held.size() > 2) {
      for (const auto& [id, t] : held) {
        for (std::int32_t v : t.values<std::int32_t>()) bad += v != id;
      }
      held.pop_front();  // dropped on this thread
    }
  }
  producer.join();
  EXPECT_EQ(bad, 0);
  const Metrics m = counters.snapshot();
  EXPECT_EQ(m.pool_allocations + m.pool_reuses, static_cast<std::uint64_t>(kItems));
  EXPECT_GT(m.pool_reuses, 0u);
  EXPECT_LE(pool.free_blocks(), 3u);
}

TEST(Value, HoldsEachKindAndNamesWrongGets) {
  Value i = 7;
  EXPECT_TRUE(i.is<std::int64_t>());
  EXPECT_EQ(i.get<std::int64_t>(), 7);
  Value s = "text";
  EXPECT_EQ(s.get<std::string>(), "text");
  Value j = Json{{"a", 1}};
  EXPECT_EQ(j.get<Json>()["a"], 1);
  Value t = counting({2});
  std::string what;
  EXPECT_EQ(test::error_code([&] { t.get<std::string>(); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("tensor int32[2]"), std::string::npos) << what;
  EXPECT_NE(what.find("not string"), std::string::npos) << what;
  Value moved = std::move(t);
  EXPECT_EQ(moved.get<Tensor>().numel(), 2u);
  EXPECT_TRUE(Value().is_none());
}

TEST(DecodedSample, FieldsByName) {
  Sample raw("k", std::make_shared<ShardInfo>(ShardInfo{"a.tar", ""}), 1536);
  raw.add("cls", Bytes::copy_of("3"));
  DecodedSample s(std::move(raw));
  EXPECT_EQ(s.key(), "k");
  EXPECT_EQ(s.url(), "a.tar");
  EXPECT_EQ(s.offset(), 1536u);
  EXPECT_EQ(s.get<Bytes>("cls").str(), "3");
  s.set("cls", 3);
  EXPECT_EQ(s.get<std::int64_t>("cls"), 3);
  std::string what;
  EXPECT_EQ(test::error_code([&] { s.at("jpg"); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("a.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("cls"), std::string::npos) << what;
  EXPECT_TRUE(s.erase("cls"));
  EXPECT_FALSE(s.erase("cls"));
}

TEST(DLPack, ExportsWithoutCopyAndKeepsStorageAlive) {
  DLManagedTensor* m = nullptr;
  const std::byte* data = nullptr;
  {
    Tensor t = counting({2, 3});
    data = t.data();
    m = to_dlpack(t);
  }  // the tensor is gone; the DLPack view keeps the storage
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->dl_tensor.data, data);
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(m->dl_tensor.shape[0], 2);
  EXPECT_EQ(m->dl_tensor.shape[1], 3);
  EXPECT_EQ(m->dl_tensor.strides[0], 3);
  EXPECT_EQ(m->dl_tensor.strides[1], 1);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLInt);
  EXPECT_EQ(m->dl_tensor.dtype.bits, 32);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(static_cast<const std::int32_t*>(m->dl_tensor.data)[5], 5);
  // Back again: the same memory, released through the deleter once.
  Tensor back = from_dlpack(m);
  EXPECT_EQ(back.data(), data);
  EXPECT_EQ(back, counting({2, 3}));
  DLManagedTensor* f = to_dlpack(Tensor(DType::float16, {4}));
  EXPECT_EQ(f->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(f->dl_tensor.dtype.bits, 16);
  f->deleter(f);
}

}  // namespace
}  // namespace wds
