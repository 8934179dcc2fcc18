// Bytes and the recycling of its storage (lib/bytes.cpp): a freed block of 4 KiB or more serves
// the next Bytes of its size class, from any thread, within the bound of idle bytes.
#include "wds/bytes.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

namespace wds {
namespace {

TEST(Bytes, HoldsItsBytesThroughMovesAndCopies) {
  Bytes a = Bytes::copy_of(std::string_view("hello"));
  Bytes b = std::move(a);
  EXPECT_EQ(b.str(), "hello");
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  Bytes c = b;
  EXPECT_EQ(c, b);
  EXPECT_NE(c.data(), b.data());
  c.shrink(2);
  EXPECT_EQ(c.str(), "he");
  EXPECT_EQ(Bytes(0).data(), nullptr);
}

// Every size is writable whole and keeps its bytes; sizes around the classes' edges included
// (under AddressSanitizer a class smaller than its size is an overflow of the heap block).
TEST(Bytes, EverySizeIsWritableWhole) {
  std::vector<std::size_t> sizes = {1,     15,    16,      4095,          4096,   4097,
                                    5120,  5121,  6000,    8192,          8193,   10240,
                                    10241, 25000, 1 << 20, (1 << 20) + 1, 3 << 20};
  for (std::size_t s = 4096; s <= (std::size_t{1} << 26); s *= 2) {
    sizes.insert(sizes.end(), {s - 1, s, s + 1, s + s / 8, s + s / 8 + 1, s + s / 4 + 1});
  }
  for (std::size_t size : sizes) {
    SCOPED_TRACE(size);
    Bytes b(size);
    ASSERT_EQ(b.size(), size);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 16, 0u);
    std::memset(b.data(), 0xab, size);
    EXPECT_EQ(static_cast<unsigned char>(b.data()[size - 1]), 0xab);
  }
}

TEST(Bytes, AFreedBlockServesTheNextBytesOfItsClass) {
  const std::byte* first = nullptr;
  {
    Bytes b(25000);
    first = b.data();
    const std::size_t idle = detail::idle_bytes();
    b = Bytes();
    EXPECT_GT(detail::idle_bytes(), idle);
  }
  Bytes again(26000);  // the same class (24-26 KiB)
  EXPECT_EQ(again.data(), first);
  Bytes other(40000);  // another class: not that block
  EXPECT_NE(other.data(), first);
}

TEST(Bytes, SmallAndHugeBlocksAreNotKept) {
  const std::size_t idle = detail::idle_bytes();
  { Bytes small(4095); }
  { Bytes huge((std::size_t{64} << 20) + 1); }
  EXPECT_EQ(detail::idle_bytes(), idle);
}

TEST(Bytes, IdleBlocksStayUnderTheBound) {
  const std::size_t block = std::size_t{1} << 20;
  std::vector<Bytes> held;
  for (std::size_t i = 0; i < 2 * detail::max_idle_bytes() / block; ++i) held.emplace_back(block);
  held.clear();
  EXPECT_LE(detail::idle_bytes(), detail::max_idle_bytes());
  EXPECT_GT(detail::idle_bytes(), detail::max_idle_bytes() - 2 * block);
}

// A loader's worker makes the sample and the consumer frees it: the block comes back to the
// worker.
TEST(Bytes, ABlockFreedOnAnotherThreadIsTakenAgain) {
  Bytes made(100000);
  const std::byte* where = made.data();
  const std::size_t idle = detail::idle_bytes();
  std::thread consumer([b = std::move(made)]() mutable { b = Bytes(); });
  consumer.join();
  EXPECT_GT(detail::idle_bytes(), idle);
  Bytes next(100000);
  EXPECT_EQ(next.data(), where);
}

// Threads taking and freeing blocks of several classes at once (ThreadSanitizer's run checks
// the locking); every Bytes keeps the bytes written into it.
TEST(Bytes, ThreadsTakeAndFreeAtOnce) {
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &bad] {
      std::vector<Bytes> live;
      for (int i = 0; i < 2000; ++i) {
        const std::size_t size = 4096 + static_cast<std::size_t>((i * 7919 + t * 104729) % 200000);
        Bytes b(size);
        std::memset(b.data(), t + 1, size);
        live.push_back(std::move(b));
        if (live.size() > 8) {
          const Bytes& old = live.front();
          if (static_cast<int>(old.data()[old.size() - 1]) != t + 1) ++bad;
          live.erase(live.begin());
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(detail::idle_bytes(), detail::max_idle_bytes());
}

// Recycling must not hide from AddressSanitizer a read of freed Bytes (the block idle) or past
// their end (inside the block's rounding up to its class).
TEST(BytesDeathTest, AddressSanitizerStillSeesFreedBytesAndTheirEnd) {
#ifndef __SANITIZE_ADDRESS__  // GCC builds the ASan tests (scripts/test.sh), as loader_test
  GTEST_SKIP() << "needs AddressSanitizer (the ASan build of scripts/test.sh runs it)";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Bytes b(20000);
        const volatile std::byte* p = b.data();
        b = Bytes();
        (void)p[100];
      },
      "use-after-poison");
  EXPECT_DEATH(
      {
        Bytes b(20000);  // in a 20,480-byte class
        const volatile std::byte* p = b.data();
        (void)p[20100];
      },
      "use-after-poison");
#endif
}

}  // namespace
}  // namespace wds
