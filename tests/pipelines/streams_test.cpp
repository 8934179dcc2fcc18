// Canonical streams: a job checkpointed on one number of ranks and workers resumes on another.
// Scenarios: a job of 4 ranks x 2 workers is stopped after k steps and restarted on 2 x 1, 3 x 2
// and 8 x 1 (a node failed, a bigger allocation came free): what was consumed before plus after
// is what an uninterrupted run consumes over as many global steps, nothing twice, nothing
// skipped, every rank stepping equally; a state of another configuration (another seed, another
// shuffle size) is refused naming what differs instead of silently continuing differently.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "tests/support/counting_source.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/loader.hpp"
#include "wds/shardlists.hpp"
#include "wds/streams.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

std::atomic<std::uint64_t> g_stream_bytes{0};

class Streams : public ::testing::Test {
 protected:
  void SetUp() override {
    test::register_counting_scheme("scounted", g_stream_bytes);
    // 24 shards of different sizes (3 to 10 samples).
    for (int s = 0; s < 24; ++s) {
      const int n = 3 + (s * 5) % 8;
      std::string tar = test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < n; ++i) {
          std::string key = "s" + std::to_string(s) + "_" + std::to_string(i);
          w.write(test::make_sample(
              key, {{"cls", std::to_string(i)}, {"txt", std::string(200 + 50 * i, 'x')}}));
        }
      });
      urls_.push_back("scounted:" + dir_.write("shard" + std::to_string(s) + ".tar", tar));
      total_ += static_cast<std::size_t>(n);
    }
  }

  WebDatasetOptions options(int rank, int world, std::uint64_t streams = 24,
                            std::size_t shuffle = 5, std::uint64_t seed = 11) const {
    WebDatasetOptions o;
    o.seed = seed;
    o.distributed.rank = rank;
    o.distributed.world_size = world;
    o.shuffle_shards = true;
    o.streams = streams;
    o.stream_shuffle = shuffle;
    return o;
  }
  // Consumer (rank, worker) of a job of world x workers, with_epoch(per_pass) when set.
  Pipeline<Sample> consumer(int rank, int world, int worker, int workers,
                            std::optional<std::uint64_t> per_pass = 100000) const {
    Pipeline<Sample> p = WebDataset(urls_, options(rank, world)).with_worker(worker, workers);
    return per_pass ? p.with_epoch(*per_pass) : p;
  }

  // Every consumer of a world x workers job takes `steps` samples (one per step, in turn).
  struct Job {
    std::vector<Pipeline<Sample>> consumers;
    Strings taken;
    void step(std::uint64_t steps) {
      for (auto& c : consumers) c.begin_pass();
      for (std::uint64_t s = 0; s < steps; ++s) {
        for (auto& c : consumers) {
          std::optional<Sample> item = c.next();
          ASSERT_TRUE(item) << "a consumer ran out at step " << s;
          taken.push_back(item->key());
        }
      }
    }
    std::vector<std::string> states() const {
      std::vector<std::string> out;
      for (const auto& c : consumers) out.push_back(c.state());
      return out;
    }
  };
  Job job(int world, int workers) const {
    Job j;
    for (int r = 0; r < world; ++r) {
      for (int w = 0; w < workers; ++w) j.consumers.push_back(consumer(r, world, w, workers));
    }
    return j;
  }

  static std::multiset<std::string> multiset(const Strings& v) { return {v.begin(), v.end()}; }

  test::TempDir dir_;
  std::set<std::string> before_keys_;
  Strings urls_;
  std::size_t total_ = 0;
};

// The order does not depend on the job's size: after every consumer took s samples, all of them
// together took the first N * s samples of the one-consumer order.
TEST_F(Streams, WhatAllConsumersTookAfterEachStepIsTheSamePrefixWhateverTheJobSize) {
  Job one = job(1, 1);
  one.step(240);
  for (auto [world, workers] : std::vector<std::pair<int, int>>{{2, 1}, {4, 2}, {3, 2}, {6, 4}}) {
    const std::uint64_t n = static_cast<std::uint64_t>(world * workers);
    for (std::uint64_t s = 1; s * n <= 240; s += 3) {
      Job k = job(world, workers);
      k.step(s);
      Strings prefix(one.taken.begin(), one.taken.begin() + static_cast<std::ptrdiff_t>(s * n));
      ASSERT_EQ(multiset(k.taken), multiset(prefix)) << world << "x" << workers << " step " << s;
    }
  }
  // Each stream flows from its shard of epoch 0 (at most 10 samples) into the next epoch's: in
  // 10 samples per stream, every sample of epoch 0 came.
  EXPECT_EQ(std::set<std::string>(one.taken.begin(), one.taken.end()).size(), total_);
}

// The scenario: 4 ranks x 2 workers, checkpoint after k steps, resume on 2 x 1, 3 x 2
// and 8 x 1 from the merged states: before + after == an uninterrupted 4 x 2 run over as many
// samples; every consumer stepped equally throughout (Job::step asserts each got its sample).
TEST_F(Streams, ResumeOnAnotherWorldSizeConsumesWhatTheUninterruptedJobWould) {
  for (std::uint64_t k : {0u, 1u, 5u, 13u, 30u}) {
    Job before = job(4, 2);
    before.step(k);
    const std::string merged = merge_states(before.states());
    for (auto [world, workers] : std::vector<std::pair<int, int>>{{2, 1}, {3, 2}, {8, 1}}) {
      Job after = job(world, workers);
      for (auto& c : after.consumers) c.restore(merged);
      const std::uint64_t n = static_cast<std::uint64_t>(world * workers);
      const std::uint64_t steps = 24 / n * 4;  // a multiple of 8 samples in all
      after.step(steps);
      Strings all = before.taken;
      all.insert(all.end(), after.taken.begin(), after.taken.end());
      ASSERT_EQ(all.size() % 8, 0u);
      Job straight = job(4, 2);
      straight.step(all.size() / 8);
      EXPECT_EQ(multiset(all), multiset(straight.taken))
          << "k=" << k << " resumed on " << world << "x" << workers;
    }
  }
}

// Without with_epoch a pass is one epoch; a checkpoint at every step of it, resumed on another
// size, finishes the epoch with every sample exactly once.
TEST_F(Streams, ACheckpointAtEveryStepOfAnEpochResumesOnAnotherSize) {
  Strings epoch;
  for (Sample& s : WebDataset(urls_, options(0, 1))) epoch.push_back(s.key());
  ASSERT_EQ(epoch.size(), total_);
  for (std::uint64_t k = 0; k <= total_ / 4 + 1; ++k) {
    std::vector<Pipeline<Sample>> four;
    Strings taken;
    for (int r = 0; r < 4; ++r) four.push_back(consumer(r, 4, 0, 1, std::nullopt));
    for (auto& c : four) c.begin_pass();
    for (std::uint64_t s = 0; s < k; ++s) {
      for (auto& c : four) {
        if (std::optional<Sample> item = c.next()) taken.push_back(item->key());
      }
    }
    std::vector<std::string> states;
    for (auto& c : four) states.push_back(c.state());
    const std::string merged = merge_states(states);
    for (int world : {1, 2, 6}) {
      Strings all = taken;
      for (int r = 0; r < world; ++r) {
        Pipeline<Sample> p = consumer(r, world, 0, 1, std::nullopt);
        p.restore(merged);
        for (Sample& s : p) all.push_back(s.key());
      }
      ASSERT_EQ(multiset(all), multiset(epoch)) << "k=" << k << " on " << world << " ranks";
    }
  }
}

// Resuming reads only what the streams had not consumed, and the buffered samples again.
TEST_F(Streams, ResumingReadsOnlyWhatTheStreamsHadNotConsumed) {
  std::uint64_t all_bytes = 0;
  for (const std::string& u : urls_) all_bytes += std::filesystem::file_size(u.substr(9));
  // Without shuffle buffers: the two parts together read each byte about once.
  WebDatasetOptions o = options(0, 2, 24, 0);
  std::vector<Pipeline<Sample>> two;
  for (int r = 0; r < 2; ++r) {
    o.distributed.rank = r;
    two.push_back(WebDataset(urls_, o));
  }
  g_stream_bytes = 0;
  std::size_t taken = 0;
  for (auto& c : two) c.begin_pass();
  before_keys_.clear();
  for (int s = 0; s < 40; ++s) {
    for (auto& c : two) {
      if (std::optional<Sample> item = c.next()) {
        ++taken;
        before_keys_.insert(item->key());
      }
    }
  }
  const std::uint64_t before = g_stream_bytes.load();
  std::vector<std::string> states;
  for (auto& c : two) states.push_back(c.state());
  const std::string merged = merge_states(states);
  g_stream_bytes = 0;
  std::size_t rest = 0;
  for (int r = 0; r < 3; ++r) {
    WebDatasetOptions o3 = options(r, 3, 24, 0);
    Pipeline<Sample> p = WebDataset(urls_, o3);
    p.restore(merged);
    for (Sample& s : p) {
      (void)s;
      ++rest;
    }
  }
  const std::uint64_t after = g_stream_bytes.load();
  EXPECT_EQ(taken + rest, total_);
  EXPECT_GT(before, 0u);
  // Read again: each shard from the first sample not yet taken on (none of a shard all taken;
  // all of one not begun), nothing before. Without shuffling a stream takes a shard's samples
  // in order, so the first sample not taken is the shard's count of taken samples.
  std::uint64_t expected = 0;
  for (const std::string& url : urls_) {
    const std::string file = url.substr(9);
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<Sample> samples = test::read_samples(bytes, url);
    std::size_t c = 0;
    for (const Sample& smp : samples) c += before_keys_.count(smp.key());
    if (c == samples.size()) continue;
    expected += bytes.size() - (c == 0 ? 0 : samples[c].offset());
  }
  EXPECT_EQ(after, expected);
}

TEST_F(Streams, ALoaderWithTwoWorkersPerRankResumesOnOneWorkerPerRankAndViceVersa) {
  auto loader_job = [&](int world, int workers) {
    std::vector<std::unique_ptr<Loader<Sample>>> ranks;
    for (int r = 0; r < world; ++r) {
      LoaderOptions<Sample> lo;
      lo.workers = workers;
      lo.ordered = true;
      lo.resumable = true;
      lo.epoch_length = 30;
      ranks.push_back(
          std::make_unique<Loader<Sample>>(WebDataset(urls_, options(r, world)), std::move(lo)));
    }
    return ranks;
  };
  auto step = [](auto& ranks, std::uint64_t steps, Strings& taken) {
    for (auto& l : ranks) l->begin_pass();
    for (std::uint64_t s = 0; s < steps; ++s) {
      for (auto& l : ranks) {
        std::optional<Sample> item = l->next();
        ASSERT_TRUE(item);
        taken.push_back(item->key());
      }
    }
  };
  for (auto [from, to] : std::vector<std::pair<std::pair<int, int>, std::pair<int, int>>>{
           {{4, 2}, {2, 1}}, {{2, 1}, {4, 2}}, {{4, 2}, {3, 2}}}) {
    for (std::uint64_t k : {2u, 7u, 12u}) {
      auto before = loader_job(from.first, from.second);
      Strings taken;
      step(before, k, taken);
      std::vector<std::string> states;
      for (auto& l : before) states.push_back(l->state());
      before.clear();
      const std::string merged = merge_states(states);
      auto after = loader_job(to.first, to.second);
      for (auto& l : after) l->restore(merged);
      const std::uint64_t n_after = static_cast<std::uint64_t>(to.first);
      step(after, 24 / n_after, taken);
      // Nothing twice, nothing skipped: the samples of the straight run's first epochs, each
      // as often as there.
      auto straight = loader_job(from.first, from.second);
      Strings expected;
      step(straight, taken.size() / static_cast<std::uint64_t>(from.first), expected);
      std::multiset<std::string> got(taken.begin(), taken.end());
      std::set<std::string> distinct(taken.begin(), taken.end());
      EXPECT_EQ(distinct.size(), taken.size()) << "a sample came twice (k=" << k << ")";
      if (taken.size() % static_cast<std::size_t>(from.first) == 0 && k % from.second == 0) {
        EXPECT_EQ(got, multiset(expected)) << "k=" << k;
      }
    }
  }
}

TEST_F(Streams, AStreamCountTheJobCannotShareIsRefusedNamingWhatWorks) {
  try {
    (void)WebDataset(urls_, options(0, 5));
    FAIL() << "5 ranks cannot share 24 streams";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1, 2, 3, 4, 6, 8, 12 or 24"), std::string::npos)
        << e.what();
  }
  // Workers are known when the pass starts.
  Pipeline<Sample> p = WebDataset(urls_, options(0, 4)).with_worker(0, 5);
  EXPECT_THROW(p.begin_pass(), Error);
  EXPECT_THROW((void)WebDataset(urls_, options(0, 1, 25)), Error);  // more streams than shards
  EXPECT_EQ(owned_streams(24, 1, 4, 1, 2), (std::vector<std::uint64_t>{5, 13, 21}));
}

TEST_F(Streams, MergeRefusesStatesOfDifferentStepsTwiceGivenOrWithAShuffleAfterTheStreams) {
  Job j = job(2, 1);
  j.step(3);
  std::vector<std::string> s = j.states();
  EXPECT_THROW(merge_states({s[0], s[0]}), Error);  // stream 0 twice
  Job later = job(2, 1);
  later.step(4);
  EXPECT_THROW(merge_states({s[0], later.states()[1]}), Error);
  // One rank's state alone lacks the other's streams: restoring it on one rank says so.
  Pipeline<Sample> solo = consumer(0, 1, 0, 1);
  try {
    solo.restore(merge_states({s[0]}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("merge_states"), std::string::npos) << e.what();
  }
  Pipeline<Sample> shuffled = WebDataset(urls_, options(0, 1)).shuffle(10).with_epoch(5);
  for (Sample& x : shuffled) (void)x;
  try {
    merge_states({shuffled.state()});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stream_shuffle"), std::string::npos) << e.what();
  }
  const StreamsStateSummary sum = summarize_streams_state(merge_states(s));
  EXPECT_EQ(sum.count, 24u);
  EXPECT_EQ(sum.streams.size(), 24u);
}

// A state fits only its configuration: another seed or shuffle size is refused, naming it.
TEST_F(Streams, AStateOfAnotherSeedOrShuffleSizeIsRefusedNamingWhatDiffers) {
  Job j = job(1, 1);
  j.step(4);
  const std::string state = j.states()[0];
  auto refusal = [&](WebDatasetOptions o) {
    // Another epoch length is allowed: another world size may need one.
    Pipeline<Sample> p = WebDataset(urls_, o).with_epoch(20);
    try {
      p.restore(state);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(options(0, 1, 24, 5, 12)).find("seed: saved 11, this pipeline 12"),
            std::string::npos);
  EXPECT_NE(refusal(options(0, 1, 24, 7)).find("shuffle: saved 5, this pipeline 7"),
            std::string::npos);
  EXPECT_NE(refusal(options(0, 1, 12)).find("streams: saved 24, this pipeline 12"),
            std::string::npos);
  EXPECT_EQ(refusal(options(0, 1)), "accepted");
}

// Interleave inside canonical streams: 6 streams of 4 shards each, every stream reading 2 of its
// shards at once. A checkpoint at any step of 2 ranks, merged, resumes on 1, 3 and 6 ranks with
// every sample of the epoch exactly once; the order is not the one without interleave, and a
// state of another interleave is refused, naming it.
TEST_F(Streams, InterleavedStreamsResumeOnAnotherSize) {
  auto interleaved = [&](int rank, int world, std::size_t k = 2) {
    WebDatasetOptions o = options(rank, world, 6, 4);
    o.interleave_shards = k;
    return WebDataset(urls_, o);
  };
  Strings epoch, plain;
  for (Sample& s : interleaved(0, 1)) epoch.push_back(s.key());
  for (Sample& s : interleaved(0, 1, 1)) plain.push_back(s.key());
  ASSERT_EQ(epoch.size(), total_);
  EXPECT_EQ(multiset(epoch), multiset(plain));
  EXPECT_NE(epoch, plain);
  for (std::uint64_t k = 0; k <= total_ / 2 + 1; k += 5) {
    std::vector<Pipeline<Sample>> two{interleaved(0, 2), interleaved(1, 2)};
    Strings taken;
    for (auto& c : two) c.begin_pass();
    for (std::uint64_t s = 0; s < k; ++s) {
      for (auto& c : two) {
        if (std::optional<Sample> item = c.next()) taken.push_back(item->key());
      }
    }
    const std::string merged = merge_states({two[0].state(), two[1].state()});
    for (int world : {1, 3, 6}) {
      Strings all = taken;
      for (int r = 0; r < world; ++r) {
        Pipeline<Sample> p = interleaved(r, world);
        p.restore(merged);
        for (Sample& s : p) all.push_back(s.key());
      }
      ASSERT_EQ(multiset(all), multiset(epoch)) << "k=" << k << " on " << world << " ranks";
    }
    std::string what;
    EXPECT_EQ(test::error_code([&] { interleaved(0, 1, 3).restore(merged); }, &what),
              ErrorCode::invalid_argument);
    EXPECT_NE(what.find("interleave: saved 2, this pipeline 3"), std::string::npos) << what;
  }
}

TEST(Configuration, FingerprintIsEqualOnEveryRankAndDiffersWithTheSeedOrWorldSize) {
  test::TempDir dir;
  Strings urls;
  for (int s = 0; s < 4; ++s) {
    urls.push_back(dir.write("f" + std::to_string(s) + ".tar", test::make_tar([&](TarWriter& w) {
                               w.write(test::make_sample("k" + std::to_string(s), {{"cls", "1"}}));
                             })));
  }
  auto make = [&](int rank, int world, std::uint64_t seed) {
    WebDatasetOptions o;
    o.seed = seed;
    o.distributed.rank = rank;
    o.distributed.world_size = world;
    o.shuffle_shards = true;
    return WebDataset(urls, o).shuffle(10);
  };
  EXPECT_EQ(make(0, 2, 1).fingerprint(), make(1, 2, 1).fingerprint());
  EXPECT_NE(make(0, 2, 1).fingerprint(), make(0, 2, 2).fingerprint());
  EXPECT_NE(make(0, 2, 1).fingerprint(), make(0, 4, 1).fingerprint());
  EXPECT_NE(make(0, 2, 1).fingerprint(), make(0, 2, 1).shuffle(5).fingerprint());
  // Without canonical streams a state belongs to its rank: another rank's is refused by name.
  Pipeline<Sample> r1 = make(1, 2, 1);
  for (Sample& s : r1) {
    (void)s;
    break;
  }
  Pipeline<Sample> r0 = make(0, 2, 1);
  try {
    r0.restore(r1.state());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank: saved 1, this pipeline 0"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace wds
