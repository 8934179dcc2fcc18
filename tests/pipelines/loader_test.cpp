// The loader: every item once, bounded memory, a deterministic order on request, clean stops
// and errors that reach the training loop.
#include "wds/loader.hpp"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "tests/support/fixtures.hpp"
#include "tests/support/streams.hpp"
#include "wds/transforms.hpp"

namespace wds {
namespace {

using test::from_vector;
using test::iota;

std::vector<int> drain(Loader<int>& loader) {
  std::vector<int> out;
  for (int& x : loader) out.push_back(x);
  return out;
}

TEST(Loader, EveryItemExactlyOnceAcrossWorkers) {
  for (int workers : {1, 2, 3, 5}) {
    for (bool ordered : {false, true}) {
      Loader<int> loader(from_vector(iota(101)), {.workers = workers, .ordered = ordered});
      std::vector<int> got = drain(loader);
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, iota(101)) << workers << " workers, ordered " << ordered;
    }
  }
}

TEST(Loader, OrderedIsRoundRobinOverWorkers) {
  // Worker w holds items w, w + 3, ...; ordered hands out worker 0's first, worker 1's first...
  // so 0, 1, 2, 3, ...; workers with fewer items drop out of the rotation.
  Loader<int> loader(from_vector(iota(11)), {.workers = 3, .prefetch = 1, .ordered = true});
  EXPECT_EQ(drain(loader), iota(11));
  // Slow workers do not change the order.
  auto slow = from_vector(iota(12), [](std::size_t i) {
    if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  Loader<int> again(slow, {.workers = 3, .prefetch = 2, .ordered = true});
  EXPECT_EQ(drain(again), iota(12));
}

TEST(Loader, EachPassIsAnEpochOfEveryWorker) {
  Loader<int> loader(from_vector(iota(20)), {.workers = 2});
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int> got = drain(loader);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, iota(20)) << "epoch " << epoch;
  }
}

TEST(Loader, PrefetchBoundsWhatWorkersRunAhead) {
  // Items that take longer to make than the consumer takes to wake up (detail::kHandOffCover)
  // and a consumer slower than the workers: the queues stay at `prefetch`.
  std::atomic<int> produced{0};
  auto counted = from_vector(iota(60), [&](std::size_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(1500));
    ++produced;
  });
  Loader<int> loader(counted, {.workers = 2, .prefetch = 3});
  int consumed = 0;
  for (int& x : loader) {
    (void)x;
    ++consumed;
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    // Queued (3 per worker) plus one in each worker's hands.
    EXPECT_LE(produced.load() - consumed, 2 * 3 + 2);
  }
  EXPECT_EQ(consumed, 60);
  EXPECT_EQ(loader.progress().capacity, 2u * 3u);
}

// Scenario: a worker whose items come in bursts (a shard's samples between waits for bytes),
// each burst faster than the consumer, asleep during the wait, wakes up. A queue of `prefetch`
// would fill before the consumer runs, and the two would take turns; the queue grows instead,
// never beyond detail::kHandOffDepth, and every item still arrives once, in order.
TEST(Loader, AQueueFillingWhileTheConsumerWakesUpGrows) {
  auto bursts = from_vector(iota(2000), [](std::size_t i) {
    if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  Loader<int> loader(bursts, {.workers = 1, .prefetch = 2});
  EXPECT_EQ(loader.progress().capacity, 2u);
  EXPECT_EQ(drain(loader), iota(2000));
  const std::size_t grown = loader.progress().capacity;
  EXPECT_GT(grown, 2u);
  EXPECT_LE(grown, detail::kHandOffDepth);
  // What it learnt holds for the next pass; a prefetch above the cap is kept as it is.
  EXPECT_EQ(drain(loader), iota(2000));
  EXPECT_GE(loader.progress().capacity, grown);
  Loader<int> deep(from_vector(iota(10)), {.workers = 1, .prefetch = 100});
  EXPECT_EQ(drain(deep), iota(10));
  EXPECT_EQ(deep.progress().capacity, 100u);
}

TEST(Loader, BreakingOutAndDestroyingJoinsWorkers) {
  for (int round = 0; round < 20; ++round) {
    Loader<int> loader(from_vector(iota(10000)), {.workers = 3, .prefetch = 1});
    int n = 0;
    for (int& x : loader) {
      (void)x;
      if (++n == 5) break;
    }
    // A new pass after a break starts afresh and sees everything.
    if (round == 0) {
      std::vector<int> got = drain(loader);
      EXPECT_EQ(got.size(), 10000u);
    }
  }  // destructors join blocked workers; a hang here fails by timeout
}

TEST(Loader, WorkerErrorReachesConsumerAfterEarlierItems) {
  auto failing = from_vector(iota(50), [](std::size_t i) {
    if (i == 20) throw Error::corrupt_data("shard-3.tar", "k20.jpg", "bad JPEG");
  });
  Loader<int> loader(failing, {.workers = 2, .ordered = true});
  std::vector<int> seen;
  std::string what;
  EXPECT_EQ(test::error_code(
                [&] {
                  for (int& x : loader) seen.push_back(x);
                },
                &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("k20.jpg"), std::string::npos) << what;
  // Ordered: everything before item 20 arrived first.
  ASSERT_GE(seen.size(), 20u);
  EXPECT_EQ(std::vector<int>(seen.begin(), seen.begin() + 20), iota(20));
  // Other exceptions pass through as they are.
  auto other = from_vector(iota(5), [](std::size_t i) {
    if (i == 3) throw std::runtime_error("boom");
  });
  Loader<int> loader2(other, {.workers = 1});
  EXPECT_THROW(drain(loader2), std::runtime_error);
}

TEST(Loader, WithEpochCountsItemsOfAllWorkersAndContinues) {
  Loader<int> loader(from_vector(iota(10)), {.workers = 2, .ordered = true});
  loader.with_epoch(4);
  std::vector<int> all;
  for (int epoch = 0; epoch < 5; ++epoch) {
    std::vector<int> got = drain(loader);
    EXPECT_EQ(got.size(), 4u) << "epoch " << epoch;
    all.insert(all.end(), got.begin(), got.end());
  }
  // 20 items = the data twice: each item twice, nothing lost between passes.
  std::sort(all.begin(), all.end());
  std::vector<int> twice;
  for (int i = 0; i < 10; ++i) twice.insert(twice.end(), {i, i});
  EXPECT_EQ(all, twice);
}

TEST(Loader, BreakingOutOfAnEpochKeepsTheStream) {
  Loader<int> loader(from_vector(iota(12)), {.workers = 1});
  loader.with_epoch(5);
  std::vector<int> seen;
  for (int& x : loader) {
    seen.push_back(x);
    if (seen.size() == 2) break;
  }
  std::vector<int> next = drain(loader);  // a new epoch: 5 items, continuing the stream
  EXPECT_EQ(next, (std::vector<int>{2, 3, 4, 5, 6}));
}

TEST(Loader, ResumeContinuesWhereTheConsumerWas) {
  auto pipeline = from_vector(iota(40)) | batched(3);
  LoaderOptions<std::vector<int>> options{
      .workers = 3, .prefetch = 2, .ordered = true, .resumable = true};
  Loader<std::vector<int>> full(pipeline, options);
  std::vector<std::vector<int>> expected;
  for (auto& b : full) expected.push_back(b);

  ASSERT_EQ(expected.size(), 15u);  // 5 batches from each worker (14, 13, 13 items)
  for (std::size_t stop_at : {std::size_t{1}, std::size_t{4}, std::size_t{14}}) {
    std::string state;
    {
      Loader<std::vector<int>> first(pipeline, options);
      std::size_t n = 0;
      for (auto& b : first) {
        EXPECT_EQ(b, expected[n]);
        if (++n == stop_at) break;
      }
      state = first.state();
    }
    Loader<std::vector<int>> second(pipeline, options);
    second.restore(state);
    std::vector<std::vector<int>> rest;
    for (auto& b : second) rest.push_back(b);
    std::vector<std::vector<int>> want(expected.begin() + static_cast<long>(stop_at),
                                       expected.end());
    EXPECT_EQ(rest, want) << "stopped after " << stop_at;
  }
  EXPECT_EQ(test::error_code([&] { Loader<int>(from_vector(iota(3))).state(); }),
            ErrorCode::invalid_argument);
}

TEST(Loader, ReportsProgress) {
  std::vector<LoaderProgress> reports;
  LoaderOptions<int> options{.workers = 2, .prefetch = 4};
  options.progress = [&](const LoaderProgress& p) { reports.push_back(p); };
  options.progress_interval = std::chrono::milliseconds(0);
  options.item_bytes = [](const int&) { return std::uint64_t{10}; };
  Loader<int> loader(from_vector(iota(30)), options);
  drain(loader);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().items, 30u);
  EXPECT_EQ(reports.back().bytes, 300u);
  // 2 x prefetch, or more where a worker's queue grew (AQueueFillingWhileTheConsumerWakesUp...).
  EXPECT_GE(reports.back().capacity, 8u);
  EXPECT_LE(reports.back().capacity, 2 * detail::kHandOffDepth);
  EXPECT_EQ(loader.progress().items, 30u);
}

// Scenario: the hand-off under contention. Many tiny items cross from 1-4 workers to a consumer
// that is sometimes slower and sometimes faster than them: every item exactly once, and in
// round-robin order when ordered, also when the consumer breaks off early or a worker fails.
TEST(Loader, HandOffUnderContentionIsExact) {
  const int n = 60000;
  for (int workers = 1; workers <= 4; ++workers) {
    for (bool ordered : {false, true}) {
      for (std::size_t prefetch : {std::size_t{1}, std::size_t{2}, std::size_t{64}}) {
        Loader<int> loader(from_vector(iota(n)),
                           {.workers = workers, .prefetch = prefetch, .ordered = ordered});
        std::vector<int> got;
        got.reserve(n);
        for (int& x : loader) {
          got.push_back(x);
          // Now and then a slow consumer, so workers fill their queues and sleep.
          if (got.size() % 9973 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        const std::string where = std::to_string(workers) + " workers, prefetch " +
                                  std::to_string(prefetch) + (ordered ? ", ordered" : "");
        if (ordered) {
          ASSERT_EQ(got, iota(n)) << where;
        } else {
          std::vector<bool> seen(n, false);
          for (int x : got) {
            ASSERT_FALSE(seen[static_cast<std::size_t>(x)]) << x << " twice, " << where;
            seen[static_cast<std::size_t>(x)] = true;
          }
          ASSERT_EQ(got.size(), static_cast<std::size_t>(n)) << where;
          // Each worker's items stay in its own order.
          std::vector<int> last(static_cast<std::size_t>(workers), -1);
          for (int x : got) {
            int& l = last[static_cast<std::size_t>(x % workers)];
            ASSERT_LT(l, x) << where;
            l = x;
          }
        }
      }
    }
  }
}

TEST(Loader, HandOffEarlyBreakAndErrorsUnderContention) {
  for (int workers = 1; workers <= 4; ++workers) {
    for (bool ordered : {false, true}) {
      // Break at many points; the next pass is a whole new pass of every worker.
      Loader<int> loader(from_vector(iota(5000)), {.workers = workers, .ordered = ordered});
      for (int stop_at : {1, 17, 2500, 4999}) {
        int k = 0;
        for (int& x : loader) {
          (void)x;
          if (++k == stop_at) break;
        }
        std::vector<int> all = drain(loader);
        std::sort(all.begin(), all.end());
        ASSERT_EQ(all, iota(5000)) << workers << " workers, break at " << stop_at;
      }
      // A failing worker: the error arrives, after that worker's earlier items when ordered.
      auto failing = from_vector(iota(20000), [](std::size_t i) {
        if (i == 15001) throw Error::corrupt_data("u", "m", "bad");
      });
      Loader<int> bad(failing, {.workers = workers, .prefetch = 3, .ordered = ordered});
      std::vector<int> seen;
      EXPECT_EQ(test::error_code([&] {
                  for (int& x : bad) seen.push_back(x);
                }),
                ErrorCode::corrupt_data);
      if (ordered) {
        ASSERT_GE(seen.size(), 15001u);
        EXPECT_EQ(std::vector<int>(seen.begin(), seen.begin() + 15001), iota(15001));
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "an item twice";
    }
  }
}

TEST(Loader, MetricsCountItemsAndWaits) {
  // A slow consumer: workers wait on full queues. A slow worker: the consumer waits.
  auto slow_worker = from_vector(
      iota(40), [](std::size_t) { std::this_thread::sleep_for(std::chrono::microseconds(300)); });
  Loader<int> a(slow_worker, {.workers = 2, .prefetch = 2});
  drain(a);
  Metrics m = a.metrics();
  EXPECT_EQ(m.items, 40u);
  EXPECT_GT(m.consumer_waits, 0u);
  EXPECT_GT(m.consumer_wait_seconds, 0.0);
  EXPECT_GT(m.seconds, 0.0);

  Loader<int> b(from_vector(iota(40)), {.workers = 2, .prefetch = 2});
  for (int& x : b) {
    (void)x;
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  m = b.metrics();
  EXPECT_EQ(m.items, 40u);
  EXPECT_GT(m.worker_waits, 0u);
  EXPECT_GT(m.worker_blocked_seconds, 0.0);
  // Read from another thread while the loader runs.
  Loader<int> c(from_vector(iota(20000)), {.workers = 3});
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done) {
      Metrics live = c.metrics();
      EXPECT_LE(live.items, 20000u);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  drain(c);
  done = true;
  reader.join();
  EXPECT_EQ(c.metrics().items, 20000u);
}

TEST(Loader, RejectsBadOptions) {
  EXPECT_EQ(test::error_code([] { Loader<int>(from_vector(iota(3)), {.workers = 0}); }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([] { Loader<int>(from_vector(iota(3)), {.prefetch = 0}); }),
            ErrorCode::invalid_argument);
}

// The message of the wds::Error `f` throws ("" if none).
template <class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Loader, RefusesAbsurdSizesNamingTheArgument) {
  // Before: workers = 5000 started threads until the system refused; prefetch = 10^9 allocated
  // its queues (std::bad_alloc) before anything ran.
  const std::string workers =
      error_text([] { Loader<int>(from_vector(iota(3)), {.workers = 5000}); });
  EXPECT_NE(workers.find("workers = 5000"), std::string::npos) << workers;
  const std::string prefetch =
      error_text([] { Loader<int>(from_vector(iota(3)), {.prefetch = 1'000'000'000}); });
  EXPECT_NE(prefetch.find("prefetch = 1000000000"), std::string::npos) << prefetch;
  const std::string product =
      error_text([] { Loader<int>(from_vector(iota(3)), {.workers = 64, .prefetch = 60000}); });
  EXPECT_NE(product.find("prefetch * workers"), std::string::npos) << product;
  EXPECT_NO_THROW(Loader<int>(from_vector(iota(3)), {.workers = 16, .prefetch = 65536}));
}

// The process's address space now, from /proc (bytes).
std::uint64_t address_space() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0;
  statm >> pages;
  return pages * 4096;
}

// In a child whose address space leaves room for a few thread stacks only: a Loader of 512
// workers; exits 0 if the error named the workers.
[[noreturn]] void start_too_many_workers() {
  const rlim_t room = address_space() + (std::uint64_t{96} << 20);
  const rlimit limit{room, room};
  setrlimit(RLIMIT_AS, &limit);
  Loader<int> loader(from_vector(iota(1000)), {.workers = 512});
  const std::string text = error_text([&] { loader.begin_pass(); });
  std::fprintf(stderr, "%s\n", text.c_str());
  std::exit(text.find("of 512 (workers = 512)") != std::string::npos ? 0 : 1);
}

TEST(Loader, AThreadThatCannotStartIsAnErrorNamingWorkers) {
  // Thread creation fails this way however the machine is set up (RLIMIT_NPROC does not bind
  // root). Before, std::system_error "Resource temporarily unavailable" reached the caller, with
  // no word of workers; now the started workers are stopped and joined and the error says how
  // many could start.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory does not fit a limit on the address space";
#endif
  EXPECT_EXIT(start_too_many_workers(), ::testing::ExitedWithCode(0),
              "could not start worker thread");
}

// Items 0, 1, 2, item 1 held back until `release` is set.
auto held_at_item_1(std::atomic<bool>& release) {
  return from_vector(iota(3), [&release](std::size_t i) {
    if (i == 1) {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
}

TEST(Loader, NextForReturnsWhenTheTimeRunsOutAndLosesNothing) {
  std::atomic<bool> release{false};
  auto stalled = held_at_item_1(release);
  Loader<int> loader(stalled, {.workers = 1, .prefetch = 1});
  loader.begin_pass();
  std::optional<int> item;
  // Item 0 comes; item 1 is held back: next_for gives up, more than once, taking nothing.
  ASSERT_TRUE(loader.next_for(std::chrono::seconds(30), item));
  EXPECT_EQ(item, 0);
  EXPECT_FALSE(loader.next_for(std::chrono::milliseconds(20), item));
  EXPECT_FALSE(loader.next_for(std::chrono::milliseconds(1), item));
  release = true;
  std::vector<int> rest;
  while (true) {
    ASSERT_TRUE(loader.next_for(std::chrono::seconds(30), item));
    if (!item) break;
    rest.push_back(*item);
  }
  EXPECT_EQ(rest, (std::vector<int>{1, 2}));
}

TEST(Loader, StopForGivesUpOnAWorkerInsideAStageAndFinishesLater) {
  std::atomic<bool> release{false};
  auto stalled = held_at_item_1(release);
  Loader<int> loader(stalled, {.workers = 1, .prefetch = 1});
  loader.begin_pass();
  ASSERT_EQ(loader.next(), 0);
  EXPECT_FALSE(loader.stop_for(std::chrono::milliseconds(20)));  // the worker is in item 1
  release = true;
  EXPECT_TRUE(loader.stop_for(std::chrono::seconds(30)));
  // Stopped as by a break: the next pass starts afresh.
  EXPECT_EQ(drain(loader), iota(3));
}

}  // namespace
}  // namespace wds
