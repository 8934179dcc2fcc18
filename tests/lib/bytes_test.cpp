// Bytes and the recycling of its storage (lib/bytes.cpp): a freed block of 4 KiB or more serves
// the next Bytes of its size class, from any thread, within the bound of idle bytes.
#include "wds/bytes.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/support/child.hpp"

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

// A process forked while another thread takes and frees Bytes (a Loader's worker, as torch's
// DataLoader forks its workers) can take and free Bytes of the same class: the fork does not
// catch a class's lock held by a thread the child does not have.
TEST(Bytes, AChildForkedWhileAnotherThreadTakesBytesTakesThemToo) {
#ifdef __SANITIZE_THREAD__  // GCC builds the TSan tests (scripts/test.sh)
  GTEST_SKIP() << "not under ThreadSanitizer (lib/fork.hpp: no lock is held across fork)";
#endif
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load(std::memory_order_relaxed)) Bytes b(64 * 1024);
  });
  int stuck = 0, failed = 0;
  for (int i = 0; i < 100; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      for (int k = 0; k < 10; ++k) Bytes b(64 * 1024);
      _exit(0);
    }
    // 2 s for 10 allocations: past them, it waits for a lock for good.
    const std::optional<int> code = test::wait_child(pid, std::chrono::seconds(2));
    if (!code) {
      ++stuck;
    } else if (*code != 0) {
      ++failed;
    }
  }
  stop = true;
  busy.join();
  EXPECT_EQ(stuck, 0) << "children stuck of 100";
  EXPECT_EQ(failed, 0);
}

// A source lends a part of its buffer (ByteSource::lend): the sharer views the owner's bytes,
// and the block is taken back, once, when the last of them is freed, whichever goes first.
TEST(BytesShared, APartOutlivesItsOwnerAndTheBlockIsTakenBackOnce) {
  detail::release_idle_bytes();  // room for the block, whatever tests ran before in this process
  EXPECT_EQ(detail::idle_bytes(), 0u);
  for (bool owner_first : {true, false}) {
    Bytes owner(200000);
    for (std::size_t i = 0; i < owner.size(); ++i) owner.data()[i] = std::byte(i % 251);
    const std::byte* block = owner.data();
    EXPECT_FALSE(detail::bytes_shared(owner));
    Bytes part = detail::share_bytes(owner, owner.span().subspan(1000, 50000));
    EXPECT_EQ(part.data(), block + 1000) << "no copy";
    EXPECT_EQ(part.size(), 50000u);
    EXPECT_TRUE(detail::bytes_shared(owner));
    EXPECT_TRUE(detail::bytes_shared(part));
    // A part of a part shares the same block.
    Bytes inner = detail::share_bytes(part, part.span().subspan(10, 10));
    EXPECT_EQ(inner.data(), block + 1010);
    inner = Bytes();
    const std::size_t idle = detail::idle_bytes();
    if (owner_first) {
      owner = Bytes();
      EXPECT_EQ(detail::idle_bytes(), idle) << "the part still holds the block";
      for (std::size_t i = 0; i < part.size(); ++i) {
        ASSERT_EQ(part.data()[i], std::byte((i + 1000) % 251)) << i;
      }
      part = Bytes();
    } else {
      part = Bytes();
      EXPECT_FALSE(detail::bytes_shared(owner)) << "the owner alone again";
      EXPECT_EQ(detail::idle_bytes(), idle);
      owner = Bytes();
    }
    EXPECT_GT(detail::idle_bytes(), idle) << "taken back when the last one went";
    Bytes next(200000);
    EXPECT_EQ(next.data(), block) << "and only once: served again";
    Bytes other(200000);
    EXPECT_NE(other.data(), block);
  }
}

// Sources lend with lend_bytes: shared while the storage Bytes share process-wide stays under
// its bound, copied beyond it, shared again once parts are freed.
TEST(BytesShared, LendingStopsAtTheProcessBoundAndResumes) {
  const std::size_t base = detail::shared_bytes();
  const std::size_t block = std::size_t{1} << 20;
  std::vector<Bytes> owners, parts;
  std::size_t lent = 0, copied = 0;
  for (std::size_t i = 0; i < detail::max_shared_bytes() / block + 8; ++i) {
    owners.emplace_back(block);
    std::memset(owners.back().data(), static_cast<int>(i), 16);
    parts.push_back(detail::lend_bytes(owners.back(), owners.back().span().first(16)));
    EXPECT_EQ(parts.back().data()[15], std::byte(i));
    (detail::bytes_shared(parts.back()) ? lent : copied) += 1;
    EXPECT_LE(detail::shared_bytes(), detail::max_shared_bytes() + block);
  }
  EXPECT_EQ(lent, (detail::max_shared_bytes() - base + block - 1) / block);
  EXPECT_GE(copied, 8u);
  parts.clear();
  EXPECT_EQ(detail::shared_bytes(), base);
  Bytes again = detail::lend_bytes(owners[0], owners[0].span().first(16));
  EXPECT_TRUE(detail::bytes_shared(again));
}

// lend_bytes shares only a part that lies in its owner's bytes; any other is copied.
TEST(BytesShared, LendingCopiesAPartOutsideItsOwner) {
  Bytes owner(20000), other(10000);
  owner.shrink(10000);  // its bytes end at 10,000; the storage behind them stays readable
  std::memset(other.data(), 3, other.size());
  EXPECT_TRUE(detail::bytes_shared(detail::lend_bytes(owner, owner.span().subspan(9000))));
  for (std::span<const std::byte> part :
       {std::span<const std::byte>(other.span()).first(100),
        std::span<const std::byte>(owner.data() + 9000, 2000)}) {  // runs past the owner's end
    Bytes copy = detail::lend_bytes(owner, part);
    EXPECT_FALSE(detail::bytes_shared(copy));
    EXPECT_EQ(copy.size(), part.size());
  }
  EXPECT_FALSE(detail::bytes_shared(owner));
}

// Parts freed on other threads while the owner lends more (ThreadSanitizer's run checks the
// count of owners).
TEST(BytesShared, PartsFreedOnOtherThreads) {
  Bytes owner(1 << 20);
  std::memset(owner.data(), 7, owner.size());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    std::vector<Bytes> parts;
    for (int i = 0; i < 500; ++i) {
      parts.push_back(detail::share_bytes(owner, owner.span().subspan((t * 500 + i) * 100, 100)));
    }
    threads.emplace_back([parts = std::move(parts), &bad]() mutable {
      for (Bytes& p : parts) {
        if (p.data()[99] != std::byte{7}) ++bad;
        p = Bytes();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_FALSE(detail::bytes_shared(owner));
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
