// Pipelines and stages: who reads what, in which order, for how long.
#include "wds/pipeline.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "tests/support/fixtures.hpp"
#include "wds/decode.hpp"
#include "wds/random.hpp"
#include "wds/shardlists.hpp"
#include "wds/transforms.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

Strings names(int n, const std::string& prefix = "s") {
  Strings out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

template <class T>
std::vector<T> one_pass(Pipeline<T>& p) {
  std::vector<T> out;
  for (T& item : p) out.push_back(item);
  return out;
}

ShardListOptions at(int rank, int world, std::uint64_t seed = 0, bool shuffle = false) {
  ShardListOptions o;
  o.distributed.rank = rank;
  o.distributed.world_size = world;
  o.seed = seed;
  o.shuffle = shuffle;
  return o;
}

// A source of the integers 0..n-1 that counts how many were pulled.
class Counting final : public Stream<int> {
 public:
  Counting(int n, int* pulled) : n_(n), pulled_(pulled) {}
  void start(const PassContext&) override { i_ = 0; }
  std::optional<int> next() override {
    if (i_ >= n_) return std::nullopt;
    ++*pulled_;
    return i_++;
  }

 private:
  int n_;
  int* pulled_;
  int i_ = 0;
};

Pipeline<int> integers(int n, int* pulled = nullptr, PassContext ctx = {}) {
  static int ignored;
  int* p = pulled ? pulled : &ignored;
  return Pipeline<int>([n, p] { return std::make_unique<Counting>(n, p); }, ctx);
}

TEST(ShardList, YieldsTheUrlsInOrderEveryPass) {
  Pipeline<std::string> p = ShardList(names(5), at(0, 1));
  EXPECT_EQ(one_pass(p), names(5));
  EXPECT_EQ(one_pass(p), names(5));
  EXPECT_EQ(p.epoch(), 2u);
  EXPECT_THROW(ShardList(Strings{}), Error);
}

TEST(ShardList, ExpandsPatterns) {
  Pipeline<std::string> p = ShardList("a-{0..2}.tar::b.tar", at(0, 1));
  EXPECT_EQ(one_pass(p), (Strings{"a-0.tar", "a-1.tar", "a-2.tar", "b.tar"}));
}

TEST(ShardList, ShuffleIsTheSamePermutationOnEveryRankAndNewEachEpoch) {
  Pipeline<std::string> r0 = ShardList(names(20), at(0, 4, 42, true));
  Pipeline<std::string> r3 = ShardList(names(20), at(3, 4, 42, true));
  Strings e0 = one_pass(r0), e1 = one_pass(r0);
  EXPECT_EQ(e0, one_pass(r3));
  EXPECT_NE(e0, e1);
  EXPECT_TRUE(std::is_permutation(e0.begin(), e0.end(), names(20).begin()));
  // The documented derivation: Fisher-Yates seeded by derive_seed(seed, {shard_order, epoch}).
  Strings expected = names(20);
  Rng rng(derive_seed(42, {seed_purpose::shard_order, 0}));
  rng.shuffle(expected.begin(), expected.end());
  EXPECT_EQ(e0, expected);
  // And a pinned sequence, so that a change of order between versions is noticed.
  Pipeline<std::string> small = ShardList(names(8), at(0, 1, 7, true));
  EXPECT_EQ(one_pass(small), (Strings{"s5", "s2", "s7", "s6", "s4", "s3", "s1", "s0"}));
}

TEST(SplitByNode, SplitsAfterTheGlobalShuffleWithoutOverlap) {
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::multiset<std::string> all;
    for (int rank = 0; rank < 4; ++rank) {
      Pipeline<std::string> p = ShardList(names(12), at(rank, 4, 9, true)) | split_by_node();
      p.set_epoch(epoch);
      Strings mine = one_pass(p);
      EXPECT_EQ(mine.size(), 3u);
      all.insert(mine.begin(), mine.end());
    }
    const Strings every = names(12);
    EXPECT_EQ(all, std::multiset<std::string>(every.begin(), every.end()));
  }
}

TEST(SplitByNode, EvenRefusesACountThatDoesNotDivide) {
  Pipeline<std::string> p = ShardList(names(10), at(1, 4)) | split_by_node();
  try {
    one_pass(p);
    FAIL() << "10 shards over 4 ranks were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    for (const char* word :
         {"10 shards", "4 ranks", "unbalanced", "drop_last", "replicate", "split_samples"}) {
      EXPECT_NE(e.cause().find(word), std::string::npos) << word << " in " << e.what();
    }
  }
  Pipeline<std::string> single = ShardList(names(10), at(0, 1)) | split_by_node();
  EXPECT_EQ(one_pass(single).size(), 10u);
}

Strings split(int n, int rank, int world, SplitPolicy policy, bool allow_empty = false) {
  Pipeline<std::string> p = ShardList(names(n), at(rank, world, 5)) |
                            split_by_node({.policy = policy, .allow_empty = allow_empty});
  return one_pass(p);
}

TEST(SplitByNode, Policies) {
  EXPECT_EQ(split(10, 1, 4, SplitPolicy::unbalanced), (Strings{"s1", "s5", "s9"}));
  EXPECT_EQ(split(10, 3, 4, SplitPolicy::unbalanced), (Strings{"s3", "s7"}));
  EXPECT_EQ(split(10, 1, 4, SplitPolicy::drop_last), (Strings{"s1", "s5"}));
  EXPECT_EQ(split(10, 3, 4, SplitPolicy::drop_last), (Strings{"s3", "s7"}));
  Strings r0 = split(3, 0, 4, SplitPolicy::replicate), r1 = split(3, 1, 4, SplitPolicy::replicate);
  EXPECT_TRUE(std::is_permutation(r0.begin(), r0.end(), names(3).begin()));
  EXPECT_TRUE(std::is_permutation(r1.begin(), r1.end(), names(3).begin()));
  EXPECT_EQ(split(3, 2, 4, SplitPolicy::split_samples), names(3));
}

TEST(SplitByNode, ReplicateGivesEachRankItsOwnOrder) {
  std::set<Strings> orders;
  for (int rank = 0; rank < 6; ++rank) orders.insert(split(8, rank, 6, SplitPolicy::replicate));
  EXPECT_GT(orders.size(), 1u);
  EXPECT_EQ(split(8, 2, 6, SplitPolicy::replicate), split(8, 2, 6, SplitPolicy::replicate));
}

TEST(SplitByNode, ARankWithNoShardIsAnErrorUnlessAllowed) {
  try {
    split(3, 3, 4, SplitPolicy::unbalanced);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.cause().find("rank 3 of 4 gets no shard"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(split(3, 3, 4, SplitPolicy::unbalanced, true).empty());
}

TEST(SplitByNode, PolicyFromTheEnvironment) {
  ::setenv("WDS_SPLIT_POLICY", "drop-last", 1);
  Pipeline<std::string> p = ShardList(names(10), at(3, 4)) | split_by_node();
  EXPECT_EQ(one_pass(p), (Strings{"s3", "s7"}));
  ::setenv("WDS_SPLIT_POLICY", "sideways", 1);
  EXPECT_THROW(one_pass(p), Error);
  ::unsetenv("WDS_SPLIT_POLICY");
}

TEST(SplitByWorker, SplitsTheRanksShards) {
  // WebDataset's example: 12 shards, rank 1 of 3, worker 1 of 2 -> s04 s10.
  Pipeline<std::string> p =
      (ShardList(names(12, "s0"), at(1, 3)) | split_by_node() | split_by_worker())
          .with_worker(1, 2);
  EXPECT_EQ(one_pass(p), (Strings{"s04", "s010"}));
  // Workers default to unbalanced shares: 5 shards over 2 workers is fine.
  Pipeline<std::string> w = (ShardList(names(5), at(0, 1)) | split_by_worker()).with_worker(1, 2);
  EXPECT_EQ(one_pass(w), (Strings{"s1", "s3"}));
  EXPECT_THROW(w.with_worker(2, 2), Error);
}

TEST(SingleNodeOnly, RefusesMultipleRanks) {
  Pipeline<std::string> one = ShardList(names(2), at(0, 1)) | single_node_only();
  EXPECT_EQ(one_pass(one).size(), 2u);
  Pipeline<std::string> many = ShardList(names(2), at(0, 2)) | single_node_only();
  EXPECT_THROW(one_pass(many), Error);
}

TEST(SplitWith, UsesTheCallersSplitter) {
  Pipeline<std::string> p =
      ShardList(names(6), at(1, 2)) | split_with([](Strings urls, const PassContext& ctx) {
        Strings out;
        for (std::size_t i = 0; i < urls.size(); ++i) {
          if (i / 3 == static_cast<std::size_t>(ctx.rank)) out.push_back(urls[i]);  // blocks
        }
        return out;
      });
  EXPECT_EQ(one_pass(p), (Strings{"s3", "s4", "s5"}));
}

TEST(ResampledShards, DrawsWithReplacementPerRankAndWorker) {
  ResampledShardsOptions o;
  o.seed = 3;
  o.nshards = 50;
  o.distributed.rank = 0;
  o.distributed.world_size = 2;
  Pipeline<std::string> r0 = ResampledShards(names(4), o);
  o.distributed.rank = 1;
  Pipeline<std::string> r1 = ResampledShards(names(4), o);
  Strings a = one_pass(r0), b = one_pass(r1);
  EXPECT_EQ(a.size(), 50u);
  EXPECT_NE(a, b);
  std::set<std::string> distinct(a.begin(), a.end());
  EXPECT_EQ(distinct.size(), 4u);  // 50 draws from 4 cover all (probability ~1 - 4 * 0.75^50)
  EXPECT_NE(a, one_pass(r0));      // a new epoch, a new sequence
  Pipeline<std::string> again = ResampledShards(names(4), o);
  EXPECT_EQ(one_pass(again), b);  // deterministic
  Pipeline<std::string> w1 = r1.with_worker(1, 2);
  EXPECT_NE(one_pass(w1), b);
}

TEST(Shuffle, IsAPermutationDeterministicPerSeedAndEpoch) {
  PassContext ctx;
  ctx.seed = 11;
  Pipeline<int> p = integers(100, nullptr, ctx).shuffle(10, 5);
  std::vector<int> a = one_pass(p), b = one_pass(p);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(100);
  for (int i = 0; i < 100; ++i) identity[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a, identity);
  EXPECT_NE(a, b);  // epoch 1
  Pipeline<int> q = integers(100, nullptr, ctx).shuffle(10, 5);
  EXPECT_EQ(one_pass(q), a);
  // A buffer of 10 moves an item at most about 10 + reads ahead: no item jumps far forward.
  for (std::size_t pos = 0; pos < a.size(); ++pos) {
    EXPECT_LE(a[pos], static_cast<int>(2 * pos + 20));
  }
}

// Shards from files lend their members' bytes (ByteSource::lend); a shuffle buffer gives the
// samples it holds bytes of their own, so that it keeps no source buffer alive, while samples
// that pass straight through stay lent.
TEST(Shuffle, HeldSamplesOwnTheirBytes) {
  test::TempDir dir;
  const std::string big(6000, 'x');  // above the 4 KiB below which members are copied anyway
  const Strings urls = {
      dir.write("big.tar", test::make_tar([&](TarWriter& w) {
                  for (int i = 0; i < 20; ++i) {
                    w.write(test::make_sample("k" + std::to_string(100 + i), {{"bin", big}}));
                  }
                }))};
  WebDatasetOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  for (std::size_t buffer : {0, 8}) {
    Pipeline<Sample> p = WebDataset(urls, o).shuffle(buffer);
    std::vector<Sample> got;
    for (Sample& s : p) got.push_back(std::move(s));  // moved: a copy has bytes of its own
    ASSERT_EQ(got.size(), 20u);
    std::size_t lent = 0;
    for (const Sample& s : got) {
      ASSERT_EQ(s.fields().size(), 1u);
      EXPECT_EQ(s.fields()[0].data.str(), big);
      lent += detail::bytes_shared(s.fields()[0].data);
    }
    if (buffer == 0) {
      EXPECT_GT(lent, 0u) << "passed straight through: lent";
    } else {
      EXPECT_EQ(lent, 0u) << "held in the buffer: their own bytes";
    }
  }
}

TEST(Shuffle, EdgeCases) {
  Pipeline<int> passthrough = integers(5).shuffle(0);
  EXPECT_EQ(one_pass(passthrough), (std::vector<int>{0, 1, 2, 3, 4}));
  Pipeline<int> empty = integers(0).shuffle(10);
  EXPECT_TRUE(one_pass(empty).empty());
  Pipeline<int> single = integers(1).shuffle(10);
  EXPECT_EQ(one_pass(single), (std::vector<int>{0}));
}

TEST(Shuffle, ReadsAheadTwoPerOutputUntilInitial) {
  // WebDataset's buffer reads one extra item per input until full, and hands out the first item
  // once `initial` are in: with initial 6 that is after 6 reads.
  int pulled = 0;
  Pipeline<int> p = integers(100, &pulled).shuffle(50, 6);
  p.begin_pass();
  ASSERT_TRUE(p.next().has_value());
  EXPECT_EQ(pulled, 6);
}

TEST(Slice, SelectAndRepeat) {
  Pipeline<int> sliced = integers(12).slice(2, 10, 3);
  EXPECT_EQ(one_pass(sliced), (std::vector<int>{2, 5, 8}));
  int pulled = 0;
  Pipeline<int> head = integers(1000, &pulled).slice(0, 3);
  EXPECT_EQ(one_pass(head).size(), 3u);
  EXPECT_EQ(pulled, 3);  // stops reading at stop
  Pipeline<int> odd = integers(7).select([](int x) { return x % 2 == 1; });
  EXPECT_EQ(one_pass(odd), (std::vector<int>{1, 3, 5}));
  Pipeline<int> twice = integers(3).repeat(2);
  EXPECT_EQ(one_pass(twice), (std::vector<int>{0, 1, 2, 0, 1, 2}));
  Pipeline<int> forever = integers(2).repeat().slice(0, 5);
  EXPECT_EQ(one_pass(forever), (std::vector<int>{0, 1, 0, 1, 0}));
  Pipeline<int> nothing = integers(0).repeat();  // ends: no spinning on empty data
  EXPECT_TRUE(one_pass(nothing).empty());
  EXPECT_THROW(slice(0, 5, 0), Error);
  EXPECT_THROW(repeat(0), Error);
}

TEST(WithEpoch, EachPassHasExactlyNItemsAndContinuesTheStream) {
  Pipeline<int> p = integers(10).with_epoch(4);
  EXPECT_EQ(one_pass(p), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(one_pass(p), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(p.epoch(), 0u);
  EXPECT_EQ(one_pass(p), (std::vector<int>{8, 9, 0, 1}));  // ran out: restarted at epoch 1
  EXPECT_EQ(p.epoch(), 1u);
  EXPECT_EQ(p.size(), 4u);
}

TEST(WithEpoch, EmptyDataEndsThePassInsteadOfSpinning) {
  Pipeline<int> p = integers(0).with_epoch(5);
  EXPECT_TRUE(one_pass(p).empty());
}

TEST(WithEpoch, SetEpochRestartsTheStream) {
  PassContext ctx;
  ctx.seed = 4;
  Pipeline<int> p = integers(20, nullptr, ctx).shuffle(20, 20).with_epoch(5);
  std::vector<int> first = one_pass(p);
  p.set_epoch(0);
  EXPECT_EQ(one_pass(p), first);
  p.set_epoch(1);
  EXPECT_NE(one_pass(p), first);
}

TEST(WithLength, OnlyDeclaresASize) {
  Pipeline<int> p = integers(3).with_length(1000);
  EXPECT_EQ(p.size(), 1000u);
  EXPECT_EQ(one_pass(p).size(), 3u);
  EXPECT_THROW(integers(3).size(), Error);
}

TEST(Pipeline, ACopyStartsFromScratch) {
  Pipeline<int> p = integers(10).with_epoch(3);
  one_pass(p);
  Pipeline<int> copy = p;
  EXPECT_EQ(one_pass(copy), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(one_pass(p), (std::vector<int>{3, 4, 5}));
}

TEST(Pipeline, BreakingOutOfAPassAndStartingAgain) {
  Pipeline<int> p = integers(10);
  for (int x : p) {
    if (x == 2) break;
  }
  EXPECT_EQ(one_pass(p).size(), 10u);  // a new pass starts from the beginning
}

// The whole pipeline over real shards: every sample is read exactly once across 2 ranks x 3
// workers, shard and sample shuffles on.
TEST(Pipeline, RanksAndWorkersReadEverySampleOnce) {
  test::TempDir dir;
  Strings urls;
  std::multiset<std::string> expected;
  for (int s = 0; s < 12; ++s) {
    std::string name = "shard-" + std::to_string(s) + ".tar";
    urls.push_back(dir.write(name, test::make_tar([&](TarWriter& w) {
                               for (int i = 0; i < 5; ++i) {
                                 std::string key =
                                     "s" + std::to_string(s) + "_" + std::to_string(i);
                                 w.write(test::make_sample(key, {{"cls", std::to_string(i)}}));
                                 expected.insert(key);
                               }
                             })));
  }
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<std::string> seen;
    for (int rank = 0; rank < 2; ++rank) {
      for (int worker = 0; worker < 3; ++worker) {
        Pipeline<Sample> p = (ShardList(urls, at(rank, 2, 1, true)) | split_by_node() |
                              split_by_worker() | shuffle(4) | tar_samples() | shuffle(10))
                                 .with_worker(worker, 3);
        p.set_epoch(epoch);
        for (Sample& s : p) seen.insert(s.key());
      }
    }
    EXPECT_EQ(seen, expected) << "epoch " << epoch;
  }
}

TEST(SplitSamples, EverySampleOnceWhenShardsAreFewerThanConsumers) {
  test::TempDir dir;
  std::string url =
      dir.write("one.tar", test::make_tar([](TarWriter& w) {
                  for (int i = 0; i < 23; ++i)
                    w.write(test::make_sample("k" + std::to_string(i), {{"cls", "1"}}));
                }));
  std::multiset<std::string> seen;
  std::map<int, std::size_t> counts;
  for (int rank = 0; rank < 2; ++rank) {
    for (int worker = 0; worker < 2; ++worker) {
      SplitOptions all{.policy = SplitPolicy::split_samples};
      Pipeline<Sample> p = (ShardList(Strings{url}, at(rank, 2)) | split_by_node(all) |
                            split_by_worker(all) | tar_samples() | split_samples())
                               .with_worker(worker, 2);
      for (Sample& s : p) {
        seen.insert(s.key());
        ++counts[rank * 2 + worker];
      }
    }
  }
  EXPECT_EQ(seen.size(), 23u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 23u);
  EXPECT_EQ(counts[0], 6u);
  EXPECT_EQ(counts[3], 5u);
}

// --- the stages as methods: p.stage(args) is p | stage(args) ---

// Items as text, values included (a tensor's int64 elements), to compare two pipelines' output.
std::string render(const Value& v) {
  if (const Tensor* t = v.get_if<Tensor>(); t && t->dtype() == DType::int64) {
    std::string out = "[";
    for (std::int64_t x : t->values<std::int64_t>()) out += std::to_string(x) + " ";
    return out + "]";
  }
  if (const Tuple* list = v.get_if<Tuple>()) {
    std::string out = "(";
    for (const Value& x : *list) out += render(x) + " ";
    return out + ")";
  }
  return v.describe();
}
std::string render(const Tuple& t) {
  return render(Value(t));
}
std::string render(const DecodedSample& s) {
  std::string out = s.key() + ":";
  for (const DecodedSample::Field& f : s.fields()) out += " " + f.ext + "=" + render(f.value);
  return out;
}
std::string render(const Sample& s) {
  return test::describe(s);
}
std::string render(const std::string& s) {
  return s;
}
std::string render(std::size_t n) {
  return std::to_string(n);
}

// Two passes (epochs 0 and 1, each with its own shuffle order) of a pipeline, rendered.
template <class T>
Strings two_passes(Pipeline<T> p) {
  Strings out;
  for (int pass = 0; pass < 2; ++pass) {
    for (T& item : p) out.push_back(render(item));
    out.push_back("--");
  }
  return out;
}

// Both spellings give the same type and the same items (and some items: the stages ran).
template <class A, class B>
void expect_same_pipeline(A fluent, B piped) {
  static_assert(std::is_same_v<A, B>, "a method returns another type than its stage");
  Strings items = two_passes(std::move(fluent));
  EXPECT_GT(items.size(), 2u);
  EXPECT_EQ(items, two_passes(std::move(piped)));
}

// Four shards of six samples: cls, txt and json fields.
Strings small_shards(const test::TempDir& dir) {
  Strings urls;
  for (int s = 0; s < 4; ++s) {
    urls.push_back(
        dir.write("shard-" + std::to_string(s) + ".tar", test::make_tar([&](TarWriter& w) {
                    for (int i = 0; i < 6; ++i) {
                      std::string n = std::to_string(s * 10 + i);
                      w.write(test::make_sample(
                          "k" + n, {{"cls", n}, {"txt", "t" + n}, {"json", "{\"n\": " + n + "}"}}));
                    }
                  })));
  }
  return urls;
}

TEST(FluentMethods, ShardStagesGiveWhatTheirPipedStagesGive) {
  test::TempDir dir;
  const Strings urls = small_shards(dir);
  const ShardListOptions rank1 = at(1, 2, 5, true);
  expect_same_pipeline(ShardList(urls, rank1)
                           .split_by_node()
                           .split_by_worker()
                           .shuffle(2)
                           .tar_samples()
                           .shuffle(10, 3)
                           .with_worker(1, 2),
                       (ShardList(urls, rank1) | split_by_node() | split_by_worker() | shuffle(2) |
                        tar_samples() | shuffle(10, 3))
                           .with_worker(1, 2));
  // The overloads with options; a missing shard skipped by tar_samples' handler.
  Strings with_missing = urls;
  with_missing.push_back(dir.file("missing.tar"));
  const SplitOptions all{.policy = SplitPolicy::split_samples};
  const TarSamplesOptions skip{.handler = ignore_and_continue};
  expect_same_pipeline(ShardList(with_missing, rank1)
                           .split_by_node(all)
                           .split_by_worker(all)
                           .tar_samples(skip)
                           .split_samples()
                           .with_worker(1, 2),
                       (ShardList(with_missing, rank1) | split_by_node(all) | split_by_worker(all) |
                        tar_samples(skip) | split_samples())
                           .with_worker(1, 2));
  const Splitter odd = [](Strings in, const PassContext&) {
    Strings out;
    for (std::size_t i = 1; i < in.size(); i += 2) out.push_back(in[i]);
    return out;
  };
  expect_same_pipeline(
      ShardList(urls, at(0, 1)).single_node_only().split_with(odd).tar_samples(),
      ShardList(urls, at(0, 1)) | single_node_only() | split_with(odd) | tar_samples());
}

TEST(FluentMethods, SampleStagesGiveWhatTheirPipedStagesGive) {
  test::TempDir dir;
  WebDatasetOptions o;
  o.seed = 9;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  const Pipeline<Sample> ds = WebDataset(small_shards(dir), o);
  auto plus_100 = [](Value&& v) { return Value(v.get<std::int64_t>() + 100); };
  auto odd_label = [](const DecodedSample& s) { return s.get<std::int64_t>("label") % 2 == 1; };
  // The usual chain, with the overloads that take no options.
  expect_same_pipeline(
      ds.shuffle(8)
          .decode("rgb8")
          .rename({{"label", "cls"}})
          .map_dict({{"label", plus_100}})
          .select(odd_label)
          .to_tuple("__key__", "label", "txt")
          .batched(4)
          .unbatched()
          .batched(3)
          .slice(1, 6, 2)
          .repeat(2)
          .with_epoch(5),
      (ds | shuffle(8) | decode("rgb8") | rename({{"label", "cls"}}) |
       map_dict({{"label", plus_100}}) | select(odd_label) | to_tuple("__key__", "label", "txt") |
       batched(4) | unbatched() | batched(3) | slice(1, 6, 2) | repeat(2))
          .with_epoch(5));
  // The overloads with options and functions of one's own.
  const DecodeFn upper = [](std::string_view ext, Bytes& data) -> std::optional<Value> {
    if (ext != "txt") return std::nullopt;
    std::string text(data.str());
    for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return Value(std::move(text));
  };
  const DecodeOptions only_txt{.only = {"txt"}};
  auto drop_k1x = [](DecodedSample&& s) -> std::optional<DecodedSample> {
    if (s.key().starts_with("k1")) return std::nullopt;
    return std::move(s);
  };
  auto count = [](std::vector<Tuple>&& rows) { return rows.size(); };
  expect_same_pipeline(ds.decode(upper, only_txt)
                           .decode({}, {.partial = true})
                           .map(drop_k1x, ignore_and_continue)
                           .rename({{"text", "txt"}, {"n", "cls"}}, false, ignore_and_continue)
                           .to_tuple({"text", "n", "json"}, {.missing_is_error = false})
                           .batched(5, false),
                       ds | decode(upper, only_txt) | decode({}, {.partial = true}) |
                           map(drop_k1x, ignore_and_continue) |
                           rename({{"text", "txt"}, {"n", "cls"}}, false, ignore_and_continue) |
                           to_tuple({"text", "n", "json"}, {.missing_is_error = false}) |
                           batched(5, false));
  expect_same_pipeline(ds.decode().batched(4).unbatched(),
                       ds | decode() | batched(4) | unbatched());
  expect_same_pipeline(ds.decode().to_tuple(Strings{"cls", "txt"}).batched(4, count, false),
                       ds | decode() | to_tuple(Strings{"cls", "txt"}) | batched(4, count, false));
  expect_same_pipeline(
      ds.decode({upper, "rgb8"}).map([](DecodedSample&& s) { return s.key(); }),
      ds | decode({upper, "rgb8"}) | map([](DecodedSample&& s) { return s.key(); }));
}

TEST(WebDatasetBuilder, RefusesCombinationsThatWouldLoseOrIgnoreData) {
  WebDatasetOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 3;
  // even: refused at construction, not at the first pass.
  try {
    WebDataset(names(10), o);
    FAIL() << "10 shards over 3 ranks with policy even were accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.cause().find("1 shard dropped"), std::string::npos) << e.what();
  }
  o.split_policy = SplitPolicy::split_samples;
  o.shard_shuffle = 4;  // per-rank orders would break the modulo split
  EXPECT_THROW(WebDataset(names(10), o), Error);
  o.shard_shuffle = 0;
  o.shuffle_shards = true;  // one permutation for all: fine
  EXPECT_NO_THROW(WebDataset(names(10), o));
  WebDatasetOptions r;
  r.resampled = true;
  r.split_policy = SplitPolicy::drop_last;  // would be silently ignored
  EXPECT_THROW(WebDataset(names(10), r), Error);
  r.split_policy.reset();
  r.shuffle_shards = true;
  EXPECT_THROW(WebDataset(names(10), r), Error);
}

}  // namespace
}  // namespace wds
