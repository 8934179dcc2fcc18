// Shard sets joined by key (wds/join.hpp): images in one set, captions and embeddings in two
// others. A 3-column join must yield exactly the samples of one shard set holding all fields,
// through shuffles, splits, canonical streams and resume; keys or lengths that disagree are
// errors naming both shards.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include "tests/support/fixtures.hpp"
#include "tests/support/resume.hpp"
#include "wds/shardlists.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;
using Fields = std::vector<std::pair<std::string, std::string>>;

constexpr int kShards = 8;

std::string key_of(int shard, int i) {
  return "s" + std::to_string(shard) + "/k" + std::to_string(i);
}
int samples_in(int shard) {
  return 3 + shard % 4;  // shards of unequal lengths
}
// The fields of one sample, per column: jpg and cls; txt; npy (sizes vary, some above a block).
Fields image_fields(int s, int i) {
  return {{"jpg", std::string(static_cast<std::size_t>(100 + 613 * i), char('a' + s))},
          {"cls", std::to_string(s * 10 + i)}};
}
Fields caption_fields(int s, int i) {
  return {{"txt", "a caption of " + key_of(s, i)}};
}
Fields embedding_fields(int s, int i) {
  return {{"npy", std::string(static_cast<std::size_t>(512 + 17 * s), char('0' + i))}};
}

// "key|ext=bytes|..." for comparing samples of different shards, the fields sorted (a
// TarWriter writes a sample's fields in its own order; a join keeps each set's).
std::string describe(const Sample& s) {
  Strings fields;
  for (const Field& f : s.fields()) fields.push_back(f.ext + "=" + std::string(f.data.str()));
  std::sort(fields.begin(), fields.end());
  std::string out = s.key();
  for (const std::string& f : fields) out += "|" + f;
  return out;
}

Strings read_all(Pipeline<Sample> p) {
  Strings out;
  for (Sample& s : p) out.push_back(describe(s));
  return out;
}

class Join : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int s = 0; s < kShards; ++s) {
      const std::string n = std::to_string(s);
      images_.push_back(dir_.write("img-" + n + ".tar", shard(s, image_fields)));
      captions_.push_back(dir_.write("cap-" + n + ".tar", shard(s, caption_fields)));
      embeddings_.push_back(dir_.write("emb-" + n + ".tar", shard(s, embedding_fields)));
      whole_.push_back(dir_.write("all-" + n + ".tar", shard(s, [](int s, int i) {
                                    Fields all = image_fields(s, i);
                                    for (auto* more : {&caption_fields, &embedding_fields}) {
                                      for (auto& f : (*more)(s, i)) all.push_back(f);
                                    }
                                    return all;
                                  })));
    }
  }

  static std::string shard(int s, const std::function<Fields(int, int)>& fields) {
    return test::make_tar([&](TarWriter& w) {
      for (int i = 0; i < samples_in(s); ++i)
        w.write(test::make_sample(key_of(s, i), fields(s, i)));
    });
  }

  // The options of both pipelines compared; the joined one gets `join` on top.
  WebDatasetOptions joined(WebDatasetOptions o) const {
    o.join = {join_list(captions_), join_list(embeddings_)};
    return o;
  }
  static std::string join_list(const Strings& urls) {
    std::string out;
    for (const std::string& u : urls) out += (out.empty() ? "" : "::") + u;
    return out;
  }

  test::TempDir dir_;
  Strings images_, captions_, embeddings_, whole_;
};

WebDatasetOptions on(int rank, int world, std::uint64_t seed = 3, bool shuffle_shards = true) {
  WebDatasetOptions o;
  o.seed = seed;
  o.shuffle_shards = shuffle_shards;
  o.distributed.rank = rank;
  o.distributed.world_size = world;
  return o;
}

TEST_F(Join, ThreeColumnsYieldTheSamplesOfOneSetHoldingAllFields) {
  WebDatasetOptions plain = on(0, 1, 0, false);
  const Strings expected = read_all(WebDataset(whole_, plain));
  ASSERT_EQ(expected.size(), 36u);
  EXPECT_EQ(read_all(WebDataset(images_, joined(plain))), expected);

  // url(), offset() are the first set's; columns() locates the other parts.
  Pipeline<Sample> p = WebDataset(images_, joined(plain));
  auto it = p.begin();
  ASSERT_TRUE(it != p.end());
  EXPECT_EQ(it->url(), images_[0]);
  ASSERT_EQ(it->columns().size(), 2u);
  EXPECT_EQ(it->columns()[0].shard->url, captions_[0]);
  EXPECT_EQ(it->columns()[1].shard->url, embeddings_[0]);
  EXPECT_EQ(it->columns()[0].offset, 0u);
}

TEST_F(Join, ShuffledAndSplitOverTwoRanksAndTwoWorkersAsOneSet) {
  for (bool shuffle_samples : {false, true}) {
    std::multiset<std::string> seen;
    for (int rank = 0; rank < 2; ++rank) {
      for (int worker = 0; worker < 2; ++worker) {
        auto make = [&](const Strings& urls, WebDatasetOptions o) {
          Pipeline<Sample> p = WebDataset(urls, o).with_worker(worker, 2);
          return shuffle_samples ? p.shuffle(5) : p;
        };
        const Strings expected = read_all(make(whole_, on(rank, 2)));
        const Strings got = read_all(make(images_, joined(on(rank, 2))));
        EXPECT_EQ(got, expected) << "rank " << rank << " worker " << worker;
        seen.insert(got.begin(), got.end());
      }
    }
    const Strings all = read_all(WebDataset(whole_, on(0, 1)));
    EXPECT_EQ(seen, std::multiset<std::string>(all.begin(), all.end()));
  }
}

TEST_F(Join, CanonicalStreamsAndResampledShardsReadTheJoinedSet) {
  WebDatasetOptions streams = on(0, 1, 9, false);
  streams.streams = 4;
  streams.stream_shuffle = 3;
  EXPECT_EQ(read_all(WebDataset(images_, joined(streams))), read_all(WebDataset(whole_, streams)));

  WebDatasetOptions resampled = on(0, 1, 9, false);
  resampled.resampled = true;
  resampled.nshards = 12;
  EXPECT_EQ(read_all(WebDataset(images_, joined(resampled))),
            read_all(WebDataset(whole_, resampled)));
}

TEST_F(Join, ListsOfDifferentLengthsAreRefusedNamingBothCounts) {
  WebDatasetOptions o = on(0, 1);
  o.join = {join_list(captions_), join_list(Strings(embeddings_.begin(), embeddings_.end() - 1))};
  std::string what;
  EXPECT_EQ(test::error_code([&] { WebDataset(images_, o); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("has 7 shards, the first shard set 8"), std::string::npos) << what;

  // The class itself checks too, for a tar_samples stage built by hand.
  EXPECT_EQ(
      test::error_code(
          [&] { ShardJoin(images_, {Strings(captions_.begin() + 1, captions_.end())}); }, &what),
      ErrorCode::invalid_argument);
  EXPECT_NE(what.find("7 shards, the first set 8"), std::string::npos) << what;
}

class JoinErrors : public Join {
 protected:
  // Replaces caption shard 1 by one holding `keys` (a caption each), and reads the joined set
  // in order with a handler that collects and continues.
  Strings read_with_captions(const Strings& keys, Strings& errors) {
    captions_[1] = dir_.write("cap-bad.tar", test::make_tar([&](TarWriter& w) {
                                for (const std::string& k : keys)
                                  w.write(test::make_sample(k, {{"txt", "c " + k}}));
                              }));
    WebDatasetOptions o = joined(on(0, 1, 0, false));
    o.handler = [&](const Error& e) {
      errors.push_back(e.what());
      return true;
    };
    Strings keys_read;
    for (Sample& s : WebDataset(images_, o)) keys_read.push_back(s.key());
    return keys_read;
  }
  // The keys of the first set in order, without those of shard 1 from `from` on.
  static Strings expected_keys(int from) {
    Strings out;
    for (int s = 0; s < kShards; ++s) {
      for (int i = 0; i < samples_in(s); ++i) {
        if (s != 1 || i < from) out.push_back(key_of(s, i));
      }
    }
    return out;
  }
};

// Shard 1 holds k0..k3.
TEST_F(JoinErrors, AMissingKeyNamesBothShardsAndKeysAndSkipsTheRestOfTheShard) {
  Strings errors;
  EXPECT_EQ(read_with_captions({"s1/k0", "s1/k2", "s1/k3"}, errors), expected_keys(1));
  ASSERT_EQ(errors.size(), 1u);
  const std::string& e = errors[0];
  EXPECT_NE(e.find(images_[1]), std::string::npos) << e;
  EXPECT_NE(e.find(captions_[1]), std::string::npos) << e;
  EXPECT_NE(e.find("'s1/k1'"), std::string::npos) << e;
  EXPECT_NE(e.find("'s1/k2'"), std::string::npos) << e;
}

TEST_F(JoinErrors, OutOfOrderKeysAreAnError) {
  Strings errors;
  EXPECT_EQ(read_with_captions({"s1/k0", "s1/k1", "s1/k3", "s1/k2"}, errors), expected_keys(2));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("'s1/k2'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("'s1/k3'"), std::string::npos) << errors[0];
}

TEST_F(JoinErrors, APartnerThatEndsEarlyOrLateIsAnError) {
  Strings errors;
  EXPECT_EQ(read_with_captions({"s1/k0", "s1/k1", "s1/k2"}, errors), expected_keys(3));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("'s1/k3'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("meets the end of its partner " + captions_[1]), std::string::npos)
      << errors[0];

  errors.clear();
  // An extra sample after the last: all of the first set's samples were delivered.
  EXPECT_EQ(read_with_captions({"s1/k0", "s1/k1", "s1/k2", "s1/k3", "s1/k4"}, errors),
            expected_keys(4));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("the end of this shard meets sample 's1/k4'"), std::string::npos)
      << errors[0];
}

TEST_F(JoinErrors, WithoutAHandlerTheErrorIsRaisedAsCorruptData) {
  captions_[2] = captions_[3];  // keys s3/... where s2/... are expected
  std::string what;
  EXPECT_EQ(
      test::error_code([&] { read_all(WebDataset(images_, joined(on(0, 1, 0, false)))); }, &what),
      ErrorCode::corrupt_data);
  EXPECT_NE(what.find("sample 's2/k0' at byte 0 meets sample 's3/k0' at byte 0"), std::string::npos)
      << what;
}

TEST_F(JoinErrors, AFieldInTwoSetsNamesBothAndKeepsTheFirst) {
  WebDatasetOptions o = on(0, 1, 0, false);
  o.join = {join_list(captions_), join_list(captions_)};
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_all(WebDataset(images_, o)); }, &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("field 'txt' of sample 's0/k0' is in " + captions_[0]), std::string::npos)
      << what;

  std::size_t reported = 0;
  o.handler = [&](const Error&) {
    ++reported;
    return true;
  };
  o.join = {join_list(captions_), join_list(embeddings_), join_list(captions_)};
  Strings got = read_all(WebDataset(images_, o));
  EXPECT_EQ(got, read_all(WebDataset(whole_, on(0, 1, 0, false))));
  EXPECT_EQ(reported, got.size());
}

TEST_F(JoinErrors, ADamagedPartnerGoesThroughTheHandlerWithItsUrl) {
  std::string bytes = test::read_file(captions_[1]);
  captions_[1] = dir_.write("cap-cut.tar", bytes.substr(0, 1024 + 100));  // inside k1's header
  Strings errors;
  WebDatasetOptions o = joined(on(0, 1, 0, false));
  o.handler = [&](const Error& e) {
    errors.push_back(e.what());
    return true;
  };
  Pipeline<Sample> p = WebDataset(images_, o).with_metrics(true);
  Strings keys;
  for (Sample& s : p) keys.push_back(s.key());
  EXPECT_EQ(keys, JoinErrors::expected_keys(0));  // k0 was being built when k1 failed
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find(captions_[1]), std::string::npos) << errors[0];
  EXPECT_EQ(p.metrics().dropped, 1u);
}

TEST_F(Join, MetricsCountTheBytesAndShardsOfAllSets) {
  Pipeline<Sample> p = WebDataset(images_, joined(on(0, 1))).with_metrics(true);
  std::size_t n = 0;
  for (Sample& s : p) n += !s.empty();
  std::uint64_t bytes = 0;
  for (const Strings* set : {&images_, &captions_, &embeddings_}) {
    for (const std::string& url : *set) bytes += test::read_file(url).size();
  }
  const Metrics m = p.metrics();
  EXPECT_EQ(m.samples, n);
  EXPECT_EQ(m.bytes(), bytes);
  EXPECT_EQ(m.shards(), 3u * kShards);
}

// --- resume ---

void check_every_cut(const test::MakePipeline& make, int passes) {
  test::check_every_cut(make, passes, describe);
}

TEST_F(Join, ResumeAtEveryCutOfAJoinedShuffledSplitPipeline) {
  for (int rank = 0; rank < 2; ++rank) {
    for (int worker = 0; worker < 2; ++worker) {
      check_every_cut(
          [&] {
            WebDatasetOptions o = joined(on(rank, 2, 11));
            o.shard_shuffle = 2;
            return WebDataset(images_, o).with_worker(worker, 2).shuffle(4);
          },
          2);
    }
  }
  // Buffered samples reopened from the middle of shards, and a pass that continues.
  check_every_cut(
      [&] { return WebDataset(images_, joined(on(0, 1, 5))).shuffle(7).with_epoch(13); }, 3);
}

// Joined shards read k at a time (interleave_shards): each slot's shard keeps its partners,
// so the samples are those of the set holding all fields, interleaved the same way, and a
// state taken anywhere resumes every slot's columns.
TEST_F(Join, InterleavedJoinedShardsAreTheInterleavedWholeSetAndResume) {
  WebDatasetOptions o = on(0, 1, 0, false);
  o.interleave_shards = 3;
  const Strings expected = read_all(WebDataset(whole_, o));
  ASSERT_EQ(expected.size(), 36u);
  EXPECT_EQ(read_all(WebDataset(images_, joined(o))), expected);
  // Not the order of one shard after another: the slots take turns.
  EXPECT_NE(read_all(WebDataset(images_, joined(on(0, 1, 0, false)))), expected);
  check_every_cut(
      [&] {
        WebDatasetOptions shuffled = joined(on(0, 1, 9));
        shuffled.interleave_shards = 3;
        return WebDataset(images_, shuffled).shuffle(5).with_epoch(20);
      },
      2);
}

TEST_F(Join, AStateOfAnotherJoinIsRefused) {
  auto state_after = [](Pipeline<Sample> p, int n) {
    for (Sample& s : p) {
      (void)s;
      if (--n == 0) break;
    }
    return p.state();
  };
  const std::string unjoined = state_after(WebDataset(images_, on(0, 1)).shuffle(3), 5);
  const std::string with_join = state_after(WebDataset(images_, joined(on(0, 1))).shuffle(3), 5);
  std::string what;
  EXPECT_EQ(test::error_code(
                [&] { WebDataset(images_, joined(on(0, 1))).shuffle(3).restore(unjoined); }, &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find("join: not in the saved pipeline"), std::string::npos) << what;
  EXPECT_EQ(
      test::error_code([&] { WebDataset(images_, on(0, 1)).shuffle(3).restore(with_join); }, &what),
      ErrorCode::invalid_argument);
  EXPECT_NE(what.find("join: not in this pipeline"), std::string::npos) << what;

  WebDatasetOptions other = on(0, 1);
  other.join = {join_list(embeddings_), join_list(captions_)};
  EXPECT_EQ(
      test::error_code([&] { WebDataset(images_, other).shuffle(3).restore(with_join); }, &what),
      ErrorCode::invalid_argument);
  EXPECT_NE(what.find("join 1: saved"), std::string::npos) << what;
}

}  // namespace
}  // namespace wds
