// Tests of count_rank_samples (wds/wids_index.hpp): the per-rank counts it computes from
// per-shard counts equal what the split functions and WebDataset pipelines actually yield.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"
#include "wds/split.hpp"
#include "wds/webdataset.hpp"
#include "wds/wids_index.hpp"

namespace wds {
namespace {

using test::error_code;

// Uneven shards: 5, 3, 7, 2 and 4 samples.
class RankSampleCountsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::size_t n = 0; n < kCounts.size(); ++n) {
      urls_.push_back(dir_.write(
          "s" + std::to_string(n) + ".tar", test::make_tar([&](TarWriter& w) {
            for (std::uint64_t i = 0; i < kCounts[n]; ++i) {
              w.write(test::make_sample("s" + std::to_string(n) + "_" + std::to_string(i),
                                        {{"cls", std::to_string(i)}}));
            }
          })));
    }
    WidsIndex index;
    for (const std::string& url : urls_) index.shards.push_back(build_wids_entry(url));
    counts_ = index.nsamples();
  }

  static std::uint64_t stream_count(const std::vector<std::string>& urls) {
    TarSamples samples(urls);
    std::uint64_t n = 0;
    while (samples.next()) ++n;
    return n;
  }

  // Samples rank `rank` of `world` reads in a pass of WebDataset (all `workers` together).
  std::uint64_t pipeline_count(int rank, int world, SplitPolicy policy, int workers = 1,
                               bool shuffle = false, std::uint64_t epoch = 0) const {
    std::uint64_t n = 0;
    for (int w = 0; w < workers; ++w) {
      WebDatasetOptions o;
      o.seed = 11;
      o.shuffle_shards = shuffle;
      o.distributed.rank = rank;
      o.distributed.world_size = world;
      o.split_policy = policy;
      Pipeline<Sample> ds = WebDataset(urls_, o).with_worker(w, workers);
      ds.set_epoch(epoch);
      for ([[maybe_unused]] Sample& s : ds) ++n;
    }
    return n;
  }

  static constexpr std::array<std::uint64_t, 5> kCounts = {5, 3, 7, 2, 4};
  test::TempDir dir_;
  std::vector<std::string> urls_;
  std::vector<std::uint64_t> counts_;
};

TEST_F(RankSampleCountsTest, CountsComeFromTheShards) {
  EXPECT_EQ(counts_, std::vector<std::uint64_t>(kCounts.begin(), kCounts.end()));
}

TEST_F(RankSampleCountsTest, UnbalancedAndDropLastEqualSplitByNodeThenTarSamples) {
  for (int world : {2, 3}) {
    for (SplitPolicy policy : {SplitPolicy::unbalanced, SplitPolicy::drop_last}) {
      const RankSampleCounts c = count_rank_samples(counts_, world, {.policy = policy});
      ASSERT_EQ(c.per_rank.size(), static_cast<std::size_t>(world));
      std::uint64_t smallest = UINT64_MAX;
      for (int rank = 0; rank < world; ++rank) {
        const std::uint64_t got = stream_count(split_by_node(urls_, rank, world, policy));
        EXPECT_EQ(c.per_rank[rank], got) << to_string(policy) << " rank " << rank << "/" << world;
        EXPECT_EQ(c.per_rank[rank], pipeline_count(rank, world, policy));
        smallest = std::min(smallest, got);
      }
      EXPECT_EQ(c.equal, smallest);
      EXPECT_EQ(c.choice.policy, policy);
      EXPECT_EQ(c.choice.source, "option");
    }
  }
  // Figures, so that a wrong split cannot pass by agreeing with itself: 2 ranks unbalanced read
  // shards 0, 2, 4 (16) and 1, 3 (5); 3 ranks drop_last drop shards 3 and 4 (6 samples).
  EXPECT_EQ(count_rank_samples(counts_, 2, {.policy = SplitPolicy::unbalanced}).per_rank,
            (std::vector<std::uint64_t>{16, 5}));
  const RankSampleCounts dropped =
      count_rank_samples(counts_, 3, {.policy = SplitPolicy::drop_last});
  EXPECT_EQ(dropped.per_rank, (std::vector<std::uint64_t>{5, 3, 7}));
  EXPECT_EQ(dropped.equal, 3u);
  EXPECT_EQ(dropped.dropped, 6u);
}

TEST_F(RankSampleCountsTest, ReplicateAndSplitSamplesEqualWebDataset) {
  for (int world : {2, 3}) {
    const RankSampleCounts rep =
        count_rank_samples(counts_, world, {.policy = SplitPolicy::replicate});
    for (int rank = 0; rank < world; ++rank) {
      EXPECT_EQ(rep.per_rank[rank], 21u);
      EXPECT_EQ(rep.per_rank[rank], pipeline_count(rank, world, SplitPolicy::replicate));
    }
    for (int workers : {1, 2}) {
      const RankSampleCounts c = count_rank_samples(
          counts_, world, {.policy = SplitPolicy::split_samples, .num_workers = workers});
      std::uint64_t sum = 0;
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_EQ(c.per_rank[rank],
                  pipeline_count(rank, world, SplitPolicy::split_samples, workers))
            << "rank " << rank << "/" << world << ", " << workers << " workers";
        sum += c.per_rank[rank];
      }
      EXPECT_EQ(sum, 21u);
      EXPECT_EQ(c.equal, *std::min_element(c.per_rank.begin(), c.per_rank.end()));
    }
  }
}

TEST_F(RankSampleCountsTest, ShuffledShardsFollowTheEpochsOrder) {
  bool differs = false;
  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    const RankSampleCounts c = count_rank_samples(
        counts_, 2,
        {.policy = SplitPolicy::unbalanced, .shuffle_shards = true, .seed = 11, .epoch = epoch});
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(c.per_rank[rank], pipeline_count(rank, 2, SplitPolicy::unbalanced, 1, true, epoch))
          << "epoch " << epoch << " rank " << rank;
    }
    differs = differs || c.per_rank[0] != 16;
  }
  EXPECT_TRUE(differs) << "no epoch's order changed rank 0's share: the test shows nothing";
}

TEST_F(RankSampleCountsTest, EvenRefusesACountThatDoesNotDivide) {
  EXPECT_EQ(error_code([&] { count_rank_samples(counts_, 2, {.policy = SplitPolicy::even}); }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] { count_rank_samples(counts_, 0); }), ErrorCode::invalid_argument);
  EXPECT_EQ(count_rank_samples(counts_, 5, {.policy = SplitPolicy::even}).per_rank,
            (std::vector<std::uint64_t>{5, 3, 7, 2, 4}));
}

}  // namespace
}  // namespace wds
