// Interleaving: a worker reads k shards at once, one sample from each in turn (webdataset #482).
// Scenarios: the documented round-robin order, sample for sample; k = 1 reads shard after shard
// and leaves the state as it was; a split job with interleave still reads every sample exactly
// once per epoch; a shard that fails (to open, or midway) frees its slot for the next URL while
// the others go on.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "tests/support/fixtures.hpp"
#include "wds/shardlists.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

class InterleavedShards : public ::testing::Test {
 protected:
  // A shard of `n` samples keyed <name>0, <name>1, ...
  std::string shard(const std::string& name, int n) {
    std::string tar = test::make_tar([&](TarWriter& w) {
      for (int i = 0; i < n; ++i) {
        w.write(
            test::make_sample(name + std::to_string(i),
                              {{"txt", std::string(static_cast<std::size_t>(100 + 40 * i), 'x')}}));
      }
    });
    return dir_.write(name + ".tar", tar);
  }

  static Strings keys(TarSamples& samples) {
    Strings out;
    while (std::optional<Sample> s = samples.next()) out.push_back(s->key());
    return out;
  }

  test::TempDir dir_;
};

// The example of wds/tar_samples.hpp: A (3 samples), B (1), C (2), D (2) with k = 3.
TEST_F(InterleavedShards, ThreeSlotsTakeTurnsAndAnEndedShardsSlotTakesTheNextUrl) {
  const Strings urls{shard("a", 3), shard("b", 1), shard("c", 2), shard("d", 2)};
  TarSamplesOptions o;
  o.interleave = 3;
  TarSamples samples(urls, o);
  EXPECT_EQ(keys(samples), (Strings{"a0", "b0", "c0", "a1", "d0", "c1", "a2", "d1"}));
  EXPECT_EQ(samples.shards_opened(), 4u);
}

// More slots than shards, an empty shard, and slots passed over once the URLs run out.
TEST_F(InterleavedShards, EmptyShardsAreSkippedInTheirSlotsTurnAndMoreSlotsThanShardsIsFine) {
  const Strings urls{shard("a", 2), shard("e", 0), shard("b", 3), shard("c", 1)};
  TarSamplesOptions o;
  o.interleave = 3;
  TarSamples three(urls, o);
  // slot 0: a; slot 1: e is empty, so b at once; slot 2: c; then c ends with no URL left.
  EXPECT_EQ(keys(three), (Strings{"a0", "b0", "c0", "a1", "b1", "b2"}));
  o.interleave = 6;
  TarSamples six(urls, o);
  EXPECT_EQ(keys(six), (Strings{"a0", "b0", "c0", "a1", "b1", "b2"}));
  EXPECT_FALSE(six.next());  // stays ended
}

// k = 1 is reading the shards one after another, and its state keeps the layout and
// configuration it had before interleave existed (so states saved before restore, and the
// fingerprint every rank compares is unchanged).
TEST_F(InterleavedShards, OneSlotReadsShardAfterShardAndLeavesTheStateAsBefore) {
  const Strings urls{shard("a", 3), shard("b", 1), shard("c", 2)};
  TarSamples one(urls);
  EXPECT_EQ(keys(one), (Strings{"a0", "a1", "a2", "b0", "c0", "c1"}));

  WebDatasetOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  Pipeline<Sample> plain = WebDataset(urls, o);
  o.interleave_shards = 1;
  Pipeline<Sample> explicit_one = WebDataset(urls, o);
  o.interleave_shards = 2;
  Pipeline<Sample> two = WebDataset(urls, o);
  EXPECT_EQ(plain.fingerprint(), explicit_one.fingerprint());
  EXPECT_NE(plain.fingerprint(), two.fingerprint());
  auto partway = [](Pipeline<Sample>& p) {
    auto it = p.begin();
    ++it;  // two samples in
    return p.state();
  };
  const std::string state = partway(explicit_one);
  EXPECT_EQ(state, partway(plain));
  EXPECT_EQ(state.find("interleave"), std::string::npos);
  EXPECT_NE(partway(two).find("interleave=2"), std::string::npos);
}

// positions() and turn() are what resume() takes: a TarSamples resumed from them gives what
// the first would have given next, at every cut; the k = 1 forms refuse k > 1.
TEST_F(InterleavedShards, PositionsAndTurnResumeTheRoundRobinAtEveryCut) {
  const Strings urls{shard("a", 4), shard("b", 1), shard("c", 3), shard("d", 2), shard("f", 5)};
  TarSamplesOptions o;
  o.interleave = 3;
  o.read_ahead = 0;
  TarSamples whole(urls, o);
  const Strings reference = keys(whole);
  ASSERT_EQ(reference.size(), 15u);
  for (std::size_t cut = 0; cut <= reference.size(); ++cut) {
    // The URL source is a cursor, as ShardList is: the resumed one starts where it was.
    std::size_t next_url = 0;
    auto source = [&]() -> std::optional<std::string> {
      if (next_url >= urls.size()) return std::nullopt;
      return urls[next_url++];
    };
    TarSamples first(source, o);
    Strings got;
    for (std::size_t i = 0; i < cut; ++i) got.push_back(first.next()->key());
    const auto positions = first.positions();
    ASSERT_EQ(positions.size(), 3u);
    TarSamples second(source, o);
    second.resume(positions, first.turn());
    for (const std::string& k : keys(second)) got.push_back(k);
    ASSERT_EQ(got, reference) << "cut after " << cut;
  }
  TarSamples three(urls, o);
  EXPECT_EQ(test::error_code([&] { (void)three.position(); }), ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([&] {
              three.resume({std::nullopt, std::nullopt, std::nullopt}, 3);
            }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([&] { three.resume({std::nullopt}, 0); }),
            ErrorCode::invalid_argument);
  o.interleave = 0;
  EXPECT_EQ(test::error_code([&] { TarSamples none(urls, o); }), ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([&] { (void)tar_samples(o)(nullptr); }), ErrorCode::invalid_argument);
}

// 2 ranks x 2 workers, shards shuffled and a shard shuffle buffer, three shards at once per
// worker: every sample exactly once per epoch, and each worker's samples alternate between its
// open shards (not one shard's run after another).
TEST_F(InterleavedShards, ASplitJobReadsEverySampleOncePerEpoch) {
  Strings urls;
  std::size_t total = 0;
  for (int s = 0; s < 16; ++s) {
    const int n = 2 + (s * 3) % 5;
    urls.push_back(shard("s" + std::to_string(s) + "_", n));
    total += static_cast<std::size_t>(n);
  }
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::map<std::string, int> seen;
    for (int rank = 0; rank < 2; ++rank) {
      for (int worker = 0; worker < 2; ++worker) {
        WebDatasetOptions o;
        o.seed = 3;
        o.distributed.rank = rank;
        o.distributed.world_size = 2;
        o.shuffle_shards = true;
        o.shard_shuffle = 2;
        o.interleave_shards = 3;
        Pipeline<Sample> p = WebDataset(urls, o).with_worker(worker, 2);
        p.set_epoch(epoch);
        Strings order;
        for (Sample& s : p) {
          ++seen[s.key()];
          order.push_back(s.key().substr(0, s.key().find('_')));
        }
        // The first three samples come from three different shards.
        ASSERT_GE(order.size(), 3u);
        EXPECT_NE(order[0], order[1]);
        EXPECT_NE(order[1], order[2]);
        EXPECT_NE(order[0], order[2]);
      }
    }
    EXPECT_EQ(seen.size(), total) << "epoch " << epoch;
    for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << key << " in epoch " << epoch;
  }
}

// A shard that cannot be opened and one truncated midway: with a handler that continues, each
// frees its slot for the next URL at once, the other slot goes on, and both errors are reported
// naming their URLs.
TEST_F(InterleavedShards, AFailingShardFreesItsSlotForTheNextUrl) {
  const std::string a = shard("a", 3);
  const std::string missing = dir_.file("missing.tar");
  // b2's data is cut off: b0 comes out, b1 (complete only once b2's header is read) is dropped.
  const std::string b_whole = test::read_file(shard("b", 3));
  const std::string b = dir_.write("b_cut.tar", b_whole.substr(0, 2 * 1024 + 512 + 60));
  const std::string c = shard("c", 2);
  std::vector<Error> errors;
  TarSamplesOptions o;
  o.interleave = 2;
  o.handler = [&](const Error& e) {
    errors.push_back(e);
    return true;
  };
  TarSamples samples(Strings{a, missing, b, c}, o);
  // slot 0: a; slot 1: missing fails, so b; then b fails after b0, so c in the same turn.
  EXPECT_EQ(keys(samples), (Strings{"a0", "b0", "a1", "c0", "a2", "c1"}));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].url(), missing);
  EXPECT_EQ(errors[1].url(), b);
  EXPECT_NE(errors[1].cause().find("'b1'"), std::string::npos) << errors[1].what();
  EXPECT_EQ(samples.shards_failed(), 2u);
  // Raising instead: the error reaches the caller after the samples before it.
  o.handler = reraise_exception;
  TarSamples raising(Strings{a, missing, b, c}, o);
  EXPECT_EQ(raising.next()->key(), "a0");
  EXPECT_THROW(raising.next(), Error);
}

}  // namespace
}  // namespace wds
