// Scenario: a training job is killed mid-epoch and restarted from its checkpoint. The restored
// pipeline must yield exactly what the uninterrupted one would have: prefix + resumed ==
// uninterrupted, sample for sample, across several passes, and must not read again the part of
// a plain shard it had already consumed.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>

#include "tests/support/counting_source.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/resume.hpp"
#include "wds/shardlists.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

// Bytes read through "counted:" URLs (a file source underneath), to see what is read again.
std::atomic<std::uint64_t> g_bytes_read{0};

void register_counted_scheme() {
  test::register_counting_scheme("counted", g_bytes_read);
}

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    register_counted_scheme();
    for (int s = 0; s < 6; ++s) {
      std::string tar = test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < 7; ++i) {
          std::string key = "s" + std::to_string(s) + "_" + std::to_string(i);
          w.write(test::make_sample(
              key, {{"cls", std::to_string(i)},
                    {"txt", std::string(static_cast<std::size_t>(300 * i), 'x')}}));
        }
      });
      plain_.push_back("counted:" + dir_.write("p" + std::to_string(s) + ".tar", tar));
      TarWriterOptions gz;
      gz.compression = Compression::gzip;
      std::string packed = test::make_tar(
          [&](TarWriter& w) {
            for (int i = 0; i < 7; ++i) {
              w.write(test::make_sample("z" + std::to_string(s) + "_" + std::to_string(i),
                                        {{"cls", std::to_string(i)}}));
            }
          },
          gz);
      gzipped_.push_back("counted:" + dir_.write("z" + std::to_string(s) + ".tar.gz", packed));
    }
  }

  test::TempDir dir_;
  Strings plain_;
  Strings gzipped_;
};

using Make = std::function<Pipeline<Sample>()>;

// The key, with an identity check of the fields.
std::string key_and_cls(const Sample& s) {
  return s.key() + "/" + std::string(s.at("cls").str());
}

// The keys of `passes` passes.
Strings run(Pipeline<Sample>& p, int passes) {
  return test::run_passes(p, passes, key_and_cls);
}

void check_every_cut(const Make& make, int passes) {
  test::check_every_cut(make, passes, key_and_cls);
}

WebDatasetOptions seeded(bool shuffle_shards) {
  WebDatasetOptions o;
  o.seed = 5;
  o.shuffle_shards = shuffle_shards;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  return o;
}

TEST_F(Resume, FiniteWithoutShuffleBuffer) {
  check_every_cut([&] { return WebDataset(plain_, seeded(true)); }, 2);
}

TEST_F(Resume, FiniteWithShuffleBuffers) {
  check_every_cut(
      [&] {
        WebDatasetOptions o = seeded(true);
        o.shard_shuffle = 3;
        return WebDataset(plain_, o).shuffle(10, 4);
      },
      2);
}

TEST_F(Resume, FixedLengthPassesThatContinueTheStream) {
  check_every_cut([&] { return WebDataset(plain_, seeded(false)).shuffle(6).with_epoch(17); }, 4);
}

TEST_F(Resume, ResampledWithShuffleBuffer) {
  check_every_cut(
      [&] {
        WebDatasetOptions o = seeded(false);
        o.resampled = true;
        return WebDataset(plain_, o).shuffle(8, 3).with_epoch(25);
      },
      3);
}

TEST_F(Resume, OneRankAndWorkerOfMany) {
  check_every_cut(
      [&] {
        ShardListOptions o;
        o.seed = 2;
        o.shuffle = true;
        o.distributed.rank = 1;
        o.distributed.world_size = 2;
        return (ShardList(plain_, o) | split_by_node() | split_by_worker() | shuffle(2) |
                tar_samples() | shuffle(5) | slice(1, std::nullopt, 2))
            .with_worker(0, 1);
      },
      3);
}

// Read-ahead takes shard URLs from upstream before their turn and opens them ("counted:" is
// not a local backend): a checkpoint at any sample holds them, and the restored pipeline reads
// them, then upstream's, in the order the uninterrupted one does.
TEST_F(Resume, ShardsOpenedAheadAreInTheStateAndReadInTheirTurn) {
  for (std::size_t depth : {1, 3, 8}) {
    check_every_cut(
        [&] {
          ShardListOptions o;
          o.seed = 4;
          o.shuffle = true;
          o.distributed.rank = 0;
          o.distributed.world_size = 1;
          TarSamplesOptions read;
          read.read_ahead = depth;
          return (ShardList(plain_, o) | shuffle(3) | tar_samples(read) | shuffle(4))
              .with_worker(0, 1);
        },
        2);
  }
}

TEST_F(Resume, CompressedShardsAreReadAgainUpToThePosition) {
  check_every_cut([&] { return WebDataset(gzipped_, seeded(true)).shuffle(4); }, 2);
}

TEST_F(Resume, RepeatedPasses) {
  check_every_cut([&] { return WebDataset(plain_, seeded(true)).repeat(2).shuffle(3); }, 1);
}

TEST_F(Resume, BufferedSamplesAreReadAgainWithThePipelinesOpenOptions) {
  // pipe: URLs open only when allowed; here only the pipeline's options allow them, so a
  // restored shuffle buffer can only refill itself if it opens shards as the pipeline does.
  ::unsetenv("WDS_ALLOW_PIPE");
  Strings piped;
  for (const std::string& url : plain_) piped.push_back("pipe:cat '" + url.substr(8) + "'");
  check_every_cut(
      [&] {
        WebDatasetOptions o = seeded(true);
        o.open.allow_pipe = true;
        return WebDataset(piped, o).shuffle(6, 3);
      },
      1);
}

TEST_F(Resume, APlainShardIsNotReadAgain) {
  // Stop in the middle of the third shard (no shuffles: shard order is the list order).
  Pipeline<Sample> p = WebDataset(plain_, seeded(false));
  Strings seen;
  std::uint64_t next_offset = 0;
  for (Sample& s : p) {
    seen.push_back(s.key());
    if (seen.size() == 2 * 7 + 3) break;
  }
  std::string state = p.state();
  Pipeline<Sample> q = WebDataset(plain_, seeded(false));
  g_bytes_read = 0;
  q.restore(state);
  std::size_t rest = 0;
  for (Sample& s : q) {
    if (rest++ == 0) {
      EXPECT_EQ(s.key(), "s2_3");
      next_offset = s.offset();
    }
  }
  EXPECT_EQ(rest, 6u * 7 - seen.size());
  // Read again: shard 2 from the fourth sample on, and shards 3 to 5: nothing before.
  std::uint64_t expected = 0;
  for (int s = 2; s < 6; ++s) {
    expected += std::filesystem::file_size(plain_[static_cast<std::size_t>(s)].substr(8));
  }
  expected -= next_offset;
  EXPECT_GT(next_offset, 0u);
  EXPECT_EQ(g_bytes_read.load(), expected);
}

TEST_F(Resume, StateBetweenPassesStartsTheNextPass) {
  Pipeline<Sample> p = WebDataset(plain_, seeded(true));
  Strings first = run(p, 1);
  std::string state = p.state();
  Strings second = run(p, 1);
  Pipeline<Sample> q = WebDataset(plain_, seeded(true));
  q.restore(state);
  EXPECT_EQ(run(q, 1), second);
  EXPECT_NE(first, second);
}

TEST_F(Resume, MismatchedOrDamagedStateIsRefused) {
  Pipeline<Sample> p = WebDataset(plain_, seeded(true));
  for (Sample& s : p) {
    (void)s;
    break;
  }
  std::string state = p.state();
  Pipeline<Sample> other = WebDataset(plain_, seeded(true)).shuffle(10);
  EXPECT_THROW(other.restore(state), Error);
  Pipeline<Sample> same = WebDataset(plain_, seeded(true));
  EXPECT_THROW(same.restore("not a state"), Error);
  EXPECT_THROW(same.restore(state.substr(0, state.size() / 2)), Error);
}

// A state is data a job may get from elsewhere (a data service trainer hands its producer one):
// one naming a URL outside the pipeline's list, at any place a state names shards (the pass's
// position, the shard shuffle's buffer, the sample shuffle's buffer), is refused, and nothing is
// opened (here, a pipe: command that would leave a file behind).
TEST_F(Resume, AStateNamingAShardOutsideTheListIsRefusedBeforeAnythingIsOpened) {
  auto make = [&] {
    WebDatasetOptions o = seeded(true);
    o.shard_shuffle = 3;
    return WebDataset(plain_, o).shuffle(10, 4);
  };
  Pipeline<Sample> p = make();
  int taken = 0;
  for (Sample& s : p) {
    (void)s;
    if (++taken == 9) break;
  }
  const std::string state = p.state();
  const std::string marker = dir_.file("pwned");
  const std::string evil = "pipe:touch '" + marker + "'; cat " + plain_[0].substr(8);
  int replaced_states = 0;
  for (const std::string& url : plain_) {
    const std::string from = "s" + std::to_string(url.size()) + ":" + url;
    const std::string to = "s" + std::to_string(evil.size()) + ":" + evil;
    std::string forged = state;
    for (std::size_t at = forged.find(from); at != std::string::npos; at = forged.find(from, at)) {
      forged.replace(at, from.size(), to);
      at += to.size();
    }
    if (forged == state) continue;  // this shard is not named in the state
    ++replaced_states;
    // As edited, the checksum refuses it; a hostile writer fixes the checksum too, and the check
    // of the URLs behind it must refuse it alone.
    EXPECT_EQ(test::error_code([&] { make().restore(forged); }), ErrorCode::invalid_argument);
    forged = reseal_state(forged);
    Pipeline<Sample> q = make();
    try {
      q.restore(forged);
      for (Sample& s : q) (void)s;
      ADD_FAILURE() << "restored a state naming " << evil;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      EXPECT_EQ(e.url(), evil);
      EXPECT_NE(e.cause().find("not in this pipeline's list"), std::string::npos) << e.cause();
    }
  }
  EXPECT_GE(replaced_states, 2);  // the position and buffered samples name several shards
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a URL from the state was opened";
  // The unforged state still restores.
  Pipeline<Sample> q = make();
  q.restore(state);
  EXPECT_GT(std::distance(q.begin(), q.end()), 0);
}

// Interleaved shards (three open at once, round-robin) under both shuffles and a split: every
// slot's shard position and the turn are in the state, so a checkpoint at any sample resumes
// exactly, plain shards sought and gzipped ones read again up to each slot's position.
TEST_F(Resume, InterleavedShardsWithShuffleBuffers) {
  for (const Strings* shards : {&plain_, &gzipped_}) {
    check_every_cut(
        [&] {
          WebDatasetOptions o = seeded(true);
          o.shard_shuffle = 3;
          o.interleave_shards = 3;
          return WebDataset(*shards, o).shuffle(10, 4);
        },
        2);
  }
}

TEST_F(Resume, InterleavedShardsInFixedLengthPassesWithReadAhead) {
  check_every_cut(
      [&] {
        WebDatasetOptions o = seeded(false);
        o.interleave_shards = 4;
        o.read_ahead = 2;
        return WebDataset(plain_, o).with_epoch(13);
      },
      4);
}

// The order is part of what a state means: one saved with another interleave is refused, naming
// it, whichever way round.
TEST_F(Resume, AStateOfAnotherInterleaveIsRefusedNamingIt) {
  auto make = [&](std::size_t k) {
    WebDatasetOptions o = seeded(true);
    o.interleave_shards = k;
    return WebDataset(plain_, o);
  };
  for (auto [saved, restored] :
       std::vector<std::pair<std::size_t, std::size_t>>{{3, 2}, {3, 1}, {1, 2}}) {
    Pipeline<Sample> p = make(saved);
    int taken = 0;
    for (Sample& s : p) {
      (void)s;
      if (++taken == 5) break;
    }
    std::string what;
    EXPECT_EQ(test::error_code([&] { make(restored).restore(p.state()); }, &what),
              ErrorCode::invalid_argument);
    EXPECT_NE(what.find("interleave"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace wds
