// Tests for wds::DistributedSampler (PyTorch semantics) and the wds::Rng it draws from.
#include "wds/sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <thread>
#include <vector>

#include "wds/error.hpp"
#include "wds/random.hpp"

namespace wds {
namespace {

using Indices = std::vector<std::uint64_t>;
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

DistributedSampler make(std::uint64_t n, int replicas, int rank, bool shuffle, bool drop_last,
                        std::uint64_t seed = 0) {
  return DistributedSampler(n, {.num_replicas = replicas,
                                .rank = rank,
                                .shuffle = shuffle,
                                .seed = seed,
                                .drop_last = drop_last});
}

// Every rank's indices for one configuration, rank 0 first.
std::vector<Indices> all_ranks(std::uint64_t n, int replicas, bool shuffle, bool drop_last,
                               std::uint64_t seed = 0, std::uint64_t epoch = 0) {
  std::vector<Indices> out;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s = make(n, replicas, r, shuffle, drop_last, seed);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

// Undoes rank r taking positions r, r + R, ...: the padded (or cut) global list.
Indices interleave(const std::vector<Indices>& ranks) {
  Indices out;
  for (std::size_t k = 0; k < ranks[0].size(); ++k) {
    for (const Indices& r : ranks) out.push_back(r.at(k));
  }
  return out;
}

// The permutation as sampler.hpp specifies it, built from the library's Rng.
Indices spec_permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) {
  Indices all(n);
  std::iota(all.begin(), all.end(), std::uint64_t{0});
  Rng rng(derive_seed(seed, {seed_purpose::sampler, epoch}));
  rng.shuffle(all.begin(), all.end());
  return all;
}

// --- sizes -------------------------------------------------------------------------------------

struct SizeCase {
  std::uint64_t n;
  int replicas;
  bool drop_last;
  std::uint64_t num_samples;  // worked out by hand from PyTorch's formulas
};

TEST(DistributedSampler, SizesFollowPyTorch) {
  const SizeCase cases[] = {
      {10, 3, false, 4},  // ceil(10/3)
      {10, 3, true, 3},   // ceil((10-3)/3) = ceil(7/3)
      {9, 3, false, 3},
      {9, 3, true, 3},    // divides evenly: ceil(9/3)
      {11, 4, false, 3},  // ceil(11/4)
      {11, 4, true, 2},   // ceil(7/4)
      {0, 3, false, 0},   // empty dataset
      {0, 3, true, 0},
      {2, 5, false, 1},  // smaller than num_replicas: padded up to one
                         // each
      {2, 5, true, 0},   // ceil(-3/5) = 0
      {3, 8, false, 1},
      {3, 8, true, 0},
      {5, 5, true, 1},
      {1, 1, false, 1},
      {1, 1, true, 1},
      {7, 1, false, 7},
      {7, 1, true, 7},
      {kMax, 1, false, kMax},
      {kMax, 2, true, kMax / 2},  // 2^63 - 1; total 2^64 - 2 still fits
  };
  for (const SizeCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "n=" << c.n << " replicas=" << c.replicas << " drop_last=" << c.drop_last);
    for (int rank : {0, c.replicas - 1}) {
      DistributedSampler s = make(c.n, c.replicas, rank, true, c.drop_last);
      EXPECT_EQ(s.size(), c.num_samples);
      EXPECT_EQ(s.total_size(), c.num_samples * static_cast<std::uint64_t>(c.replicas));
    }
  }
}

TEST(DistributedSampler, SizeDoesNotDependOnShuffleOrEpoch) {
  for (bool shuffle : {false, true}) {
    DistributedSampler s = make(10, 3, 2, shuffle, false);
    s.set_epoch(5);
    EXPECT_EQ(s.size(), 4u);
    EXPECT_EQ(s.indices().size(), 4u);
  }
}

// --- without shuffle: exact lists --------------------------------------------------------------

TEST(DistributedSampler, SequentialPadsWithHead) {
  // [0..9] padded by 2 to [0..9, 0, 1]; rank r takes positions r, r+3, r+6, r+9.
  EXPECT_EQ(all_ranks(10, 3, false, false),
            (std::vector<Indices>{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}));
  // [0..10] padded by 1 to [0..10, 0].
  EXPECT_EQ(all_ranks(11, 4, false, false),
            (std::vector<Indices>{{0, 4, 8}, {1, 5, 9}, {2, 6, 10}, {3, 7, 0}}));
}

TEST(DistributedSampler, SequentialDropLastCutsTail) {
  // [0..9] cut to [0..8].
  EXPECT_EQ(all_ranks(10, 3, false, true), (std::vector<Indices>{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}}));
  // [0..10] cut to [0..7].
  EXPECT_EQ(all_ranks(11, 4, false, true), (std::vector<Indices>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // Divides evenly: nothing cut.
  EXPECT_EQ(all_ranks(6, 3, false, true), (std::vector<Indices>{{0, 3}, {1, 4}, {2, 5}}));
}

TEST(DistributedSampler, DatasetSmallerThanReplicasRepeatsHead) {
  // padding 3 > 2: ([0,1] * ceil(3/2))[:3] = [0,1,0], so [0,1,0,1,0].
  EXPECT_EQ(all_ranks(2, 5, false, false), (std::vector<Indices>{{0}, {1}, {0}, {1}, {0}}));
  // padding 5 > 3: ([0,1,2] * 2)[:5], so [0,1,2,0,1,2,0,1].
  EXPECT_EQ(all_ranks(3, 8, false, false),
            (std::vector<Indices>{{0}, {1}, {2}, {0}, {1}, {2}, {0}, {1}}));
  EXPECT_EQ(all_ranks(1, 4, false, false), (std::vector<Indices>{{0}, {0}, {0}, {0}}));
}

TEST(DistributedSampler, DatasetSmallerThanReplicasWithDropLastIsEmpty) {
  for (bool shuffle : {false, true}) {
    for (const Indices& r : all_ranks(2, 5, shuffle, true)) EXPECT_TRUE(r.empty());
  }
}

TEST(DistributedSampler, EmptyDatasetIsEmpty) {
  for (bool shuffle : {false, true}) {
    for (bool drop_last : {false, true}) {
      for (const Indices& r : all_ranks(0, 3, shuffle, drop_last)) EXPECT_TRUE(r.empty());
    }
  }
}

TEST(DistributedSampler, SingleReplicaGetsEverythingInOrder) {
  EXPECT_EQ(make(5, 1, 0, false, false).indices(), (Indices{0, 1, 2, 3, 4}));
}

TEST(DistributedSampler, HugeSequentialDatasetIsNotMaterialised) {
  // n = 2^40 + 1 over 2^30 ranks: 1025 each, total 2^40 + 2^30, so the last position of rank r is
  // 2^40 + r, which wraps to index r - 1 (r >= 1). A full list would need 8 TiB.
  const std::uint64_t n = (std::uint64_t{1} << 40) + 1;
  const int replicas = 1 << 30;
  for (int rank : {0, 1, 5, replicas - 1}) {
    SCOPED_TRACE(rank);
    Indices got = make(n, replicas, rank, false, false).indices();
    ASSERT_EQ(got.size(), 1025u);
    for (std::uint64_t k = 0; k < 1024; ++k) {
      ASSERT_EQ(got[k], static_cast<std::uint64_t>(rank) + (k << 30));
    }
    const std::uint64_t last = rank == 0 ? std::uint64_t{1} << 40 : rank - 1;
    EXPECT_EQ(got[1024], last);
  }
}

// --- with shuffle: properties ------------------------------------------------------------------

TEST(DistributedSampler, ShuffledRanksHaveEqualLength) {
  for (bool drop_last : {false, true}) {
    for (const Indices& r : all_ranks(23, 4, true, drop_last, 3)) {
      EXPECT_EQ(r.size(), drop_last ? 5u : 6u);
    }
  }
}

TEST(DistributedSampler, ShuffledEvenSplitCoversEveryIndexOnce) {
  for (bool drop_last : {false, true}) {
    Indices all;
    for (const Indices& r : all_ranks(12, 3, true, drop_last, 11)) {
      all.insert(all.end(), r.begin(), r.end());
    }
    std::sort(all.begin(), all.end());
    Indices expected(12);
    std::iota(expected.begin(), expected.end(), std::uint64_t{0});
    EXPECT_EQ(all, expected);
  }
}

TEST(DistributedSampler, ShuffledRanksShareTheSpecifiedPermutation) {
  // 10 over 4: total 12, so the interleaved ranks are the permutation plus its first two.
  Indices perm = spec_permutation(10, 99, 3);
  Indices padded = interleave(all_ranks(10, 4, true, false, 99, 3));
  ASSERT_EQ(padded.size(), 12u);
  EXPECT_EQ(Indices(padded.begin(), padded.begin() + 10), perm);
  EXPECT_EQ(padded[10], perm[0]);
  EXPECT_EQ(padded[11], perm[1]);
  // It is a permutation, not just any list.
  Indices sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint64_t i = 0; i < 10; ++i) EXPECT_EQ(sorted[i], i);
}

TEST(DistributedSampler, ShuffledDropLastIsHeadOfPermutation) {
  Indices perm = spec_permutation(10, 5, 0);
  Indices cut = interleave(all_ranks(10, 3, true, true, 5));
  EXPECT_EQ(cut, Indices(perm.begin(), perm.begin() + 9));
}

TEST(DistributedSampler, ShuffledSmallDatasetRepeatsPermutation) {
  // 3 over 8: padded position p is perm[p % 3].
  Indices perm = spec_permutation(3, 1, 0);
  Indices padded = interleave(all_ranks(3, 8, true, false, 1));
  ASSERT_EQ(padded.size(), 8u);
  for (std::size_t p = 0; p < padded.size(); ++p) EXPECT_EQ(padded[p], perm[p % 3]) << p;
}

TEST(DistributedSampler, SameSeedAndEpochGiveSameOrder) {
  DistributedSampler a = make(100, 3, 1, true, false, 42);
  DistributedSampler b = make(100, 3, 1, true, false, 42);
  a.set_epoch(2);
  b.set_epoch(2);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_EQ(a.indices(), a.indices());
}

TEST(DistributedSampler, EpochAndSeedChangeOrder) {
  DistributedSampler s = make(100, 3, 1, true, false, 42);
  Indices e0 = s.indices();
  s.set_epoch(1);
  Indices e1 = s.indices();
  EXPECT_NE(e0, e1);
  EXPECT_NE(make(100, 3, 1, true, false, 43).indices(), e0);
  // A sampler constructed afresh and moved to the same epoch agrees.
  std::vector<Indices> ranks = all_ranks(100, 3, true, false, 42, 1);
  EXPECT_EQ(ranks[1], e1);
}

TEST(DistributedSampler, SetEpochSelectsThatEpochsPermutation) {
  DistributedSampler s = make(16, 1, 0, true, false, 8);
  EXPECT_EQ(s.epoch(), 0u);
  EXPECT_EQ(s.indices(), spec_permutation(16, 8, 0));
  s.set_epoch(7);
  EXPECT_EQ(s.epoch(), 7u);
  EXPECT_EQ(s.indices(), spec_permutation(16, 8, 7));
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), spec_permutation(16, 8, 0));
}

TEST(DistributedSampler, ConstIndicesMayRunConcurrently) {
  const DistributedSampler s = make(1000, 4, 3, true, false, 1);
  const Indices expected = s.indices();
  std::vector<Indices> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&s, &g] { g = s.indices(); });
  for (auto& t : threads) t.join();
  for (const Indices& g : got) EXPECT_EQ(g, expected);
}

// --- pinned sequence ---------------------------------------------------------------------------

// random.hpp's documented algorithms, written again from their published definitions so that a
// change to either copy shows up here.
namespace ref {

std::uint64_t splitmix(std::uint64_t x) {
  std::uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Pcg32 {
  std::uint64_t state = 0;
  std::uint64_t inc = 0;

  // pcg32_srandom_r.
  Pcg32(std::uint64_t initstate, std::uint64_t initseq) : inc((initseq << 1) | 1) {
    next();
    state += initstate;
    next();
  }
  // pcg32_random_r (XSH-RR).
  std::uint32_t next() {
    const std::uint64_t old = state;
    state = old * 6364136223846793005ULL + inc;
    const std::uint32_t x = static_cast<std::uint32_t>(((old >> 18) ^ old) >> 27);
    const std::uint32_t rot = static_cast<std::uint32_t>(old >> 59);
    return rot == 0 ? x : (x >> rot) | (x << (32 - rot));
  }
  std::uint64_t next64() {
    const std::uint64_t hi = next();
    return (hi << 32) | next();
  }
  // Lemire, "Fast Random Integer Generation in an Interval" (2019), algorithm 5, 64-bit.
  std::uint64_t below(std::uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next64()) * n;
    if (static_cast<std::uint64_t>(m) < n) {
      const std::uint64_t t = -n % n;
      while (static_cast<std::uint64_t>(m) < t) m = static_cast<unsigned __int128>(next64()) * n;
    }
    return static_cast<std::uint64_t>(m >> 64);
  }
};

}  // namespace ref

TEST(DistributedSampler, PinnedPermutationMatchesReferenceAlgorithm) {
  // derive_seed(7, {sampler = 6, epoch 0}) = splitmix(splitmix(splitmix(7) ^ 6) ^ 0).
  const std::uint64_t seed = ref::splitmix(ref::splitmix(ref::splitmix(7) ^ 6) ^ 0);
  EXPECT_EQ(seed, derive_seed(7, {seed_purpose::sampler, 0}));
  ref::Pcg32 pcg(seed, 0);
  Indices perm{0, 1, 2, 3, 4, 5, 6, 7};
  for (std::uint64_t i = 8; i > 1; --i) std::swap(perm[i - 1], perm[pcg.below(i)]);

  EXPECT_EQ(make(8, 1, 0, true, false, 7).indices(), perm);
  // The same value from a third, Python, implementation; pins it across both C++ copies.
  EXPECT_EQ(perm, (Indices{4, 2, 0, 3, 1, 7, 6, 5}));
  // Split over two ranks: even and odd positions.
  EXPECT_EQ(make(8, 2, 1, true, false, 7).indices(), (Indices{2, 3, 7, 5}));
}

// --- errors ------------------------------------------------------------------------------------

void expect_invalid(std::uint64_t n, int replicas, int rank, const std::string& mentions) {
  SCOPED_TRACE(testing::Message() << "replicas=" << replicas << " rank=" << rank);
  try {
    make(n, replicas, rank, true, false);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.cause().find(mentions), std::string::npos) << e.cause();
  }
}

TEST(DistributedSampler, InvalidReplicasOrRankIsAnError) {
  expect_invalid(10, 0, 0, "num_replicas 0");
  expect_invalid(10, -2, 0, "num_replicas -2");
  expect_invalid(10, 3, 3, "rank 3");
  expect_invalid(10, 3, -1, "rank -1");
  expect_invalid(10, 3, 7, "num_replicas 3");
  EXPECT_NO_THROW(make(10, 3, 2, true, false));
}

TEST(DistributedSampler, TotalSizeBeyond64BitsIsAnError) {
  // ceil((2^64 - 1) / 2) * 2 = 2^64: total_size() could not represent it.
  expect_invalid(kMax, 2, 0, "num_replicas 2");
}

// --- wds::Rng ----------------------------------------------------------------------------------

TEST(Rng, MatchesPcg32ReferenceOutput) {
  // pcg32-demo from the PCG C distribution: pcg32_srandom_r(&rng, 42, 54), first six outputs.
  Rng rng(42, 54);
  const std::uint32_t expected[] = {0xa15c02b7, 0x7b47f409, 0xba1d3330,
                                    0x83d2f293, 0xbfa4784b, 0xcbed606e};
  for (std::uint32_t e : expected) EXPECT_EQ(rng.next_u32(), e);
}

TEST(Rng, Mix64MatchesSplitMix64ReferenceOutput) {
  // SplitMix64 seeded with 1234567: its outputs are mix64 of the pre-increment state.
  const std::uint64_t expected[] = {6457827717110365317ULL, 3203168211198807973ULL,
                                    9817491932198370423ULL};
  std::uint64_t x = 1234567;
  for (std::uint64_t e : expected) {
    EXPECT_EQ(mix64(x), e);
    x += 0x9e3779b97f4a7c15ULL;
  }
}

TEST(Rng, BelowStaysInRange) {
  Rng rng(3);
  for (std::uint64_t n : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3}, std::uint64_t{10},
                          (std::uint64_t{1} << 63) + 1, kMax}) {
    for (int i = 0; i < 1000; ++i) ASSERT_LT(rng.below(n), n) << n;
  }
  EXPECT_EQ(rng.below(1), 0u);
}

TEST(Rng, BelowIsRoughlyUniform) {
  Rng rng(12345);
  int buckets[10] = {};
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) ++buckets[rng.below(10)];
  for (int b = 0; b < 10; ++b) {
    EXPECT_GE(buckets[b], kDraws * 8 / 100) << b;
    EXPECT_LE(buckets[b], kDraws * 12 / 100) << b;
  }
}

TEST(Rng, SetStateReplaysSequence) {
  Rng rng(77, 5);
  rng.next_u64();
  const Rng::State saved = rng.state();
  std::vector<std::uint64_t> first;
  for (int i = 0; i < 20; ++i) first.push_back(rng.below(1000 + i));
  EXPECT_NE(rng.state(), saved);

  rng.set_state(saved);
  EXPECT_EQ(rng.state(), saved);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(rng.below(1000 + i), first[i]) << i;

  // A different generator takes over the sequence through its state alone.
  Rng other;
  other.set_state(saved);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(other.below(1000 + i), first[i]) << i;
}

TEST(Rng, ShuffleOfFewerThanTwoDrawsNothing) {
  Rng rng(1);
  const Rng::State before = rng.state();
  std::vector<int> one{42};
  rng.shuffle(one.begin(), one.end());
  rng.shuffle(one.begin(), one.begin());
  EXPECT_EQ(rng.state(), before);
  EXPECT_EQ(one, std::vector<int>{42});
}

}  // namespace
}  // namespace wds
