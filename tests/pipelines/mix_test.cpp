// Mixing datasets (wds/mix.hpp): weighted draws in their proportions, seeded per (seed, epoch,
// rank, worker), what happens when a source runs out, round-robin order, and resume mid-mix,
// alone and under a Loader.
#include "wds/mix.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "tests/support/fixtures.hpp"
#include "wds/loader.hpp"
#include "wds/shardlists.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

// `n` items "<name><epoch>_<k>" per pass; with `split`, worker w of W keeps the k with
// k % W == w (as a source that splits itself between loader workers). Resumable.
class Items final : public Stream<std::string> {
 public:
  Items(std::string name, int n, bool split) : name_(std::move(name)), n_(n), split_(split) {}
  void start(const PassContext& ctx) override {
    prefix_ = name_ + std::to_string(ctx.epoch) + "_";
    worker_ = split_ ? ctx.worker : 0;
    workers_ = split_ ? ctx.num_workers : 1;
    i_ = 0;
  }
  std::optional<std::string> next() override {
    while (i_ < n_) {
      int k = i_++;
      if (k % workers_ == worker_) return prefix_ + std::to_string(k);
    }
    return std::nullopt;
  }
  void save(StateWriter& out) const override { out.put(static_cast<std::uint64_t>(i_)); }
  void restore(StateReader& in) override { i_ = static_cast<int>(in.get_u64()); }

 private:
  std::string name_;
  int n_;
  bool split_;
  std::string prefix_;
  int worker_ = 0;
  int workers_ = 1;
  int i_ = 0;
};

Pipeline<std::string> items(const std::string& name, int n, PassContext ctx = {},
                            bool split = false) {
  return Pipeline<std::string>([name, n, split] { return std::make_unique<Items>(name, n, split); },
                               ctx);
}

// Its label, forever.
class Label final : public Stream<int> {
 public:
  explicit Label(int label) : label_(label) {}
  void start(const PassContext&) override {}
  std::optional<int> next() override { return label_; }

 private:
  int label_;
};

Pipeline<int> label(int l, PassContext ctx = {}) {
  return Pipeline<int>([l] { return std::make_unique<Label>(l); }, ctx);
}

PassContext seeded(std::uint64_t seed, int rank = 0, int world_size = 1) {
  PassContext c;
  c.seed = seed;
  c.rank = rank;
  c.world_size = world_size;
  return c;
}

template <class T>
std::vector<T> take(Pipeline<T>& p, std::size_t n) {
  std::vector<T> out;
  for (T& item : p) {
    out.push_back(item);
    if (out.size() == n) break;
  }
  return out;
}

Strings one_pass(Pipeline<std::string>& p) {
  Strings out;
  for (std::string& s : p) out.push_back(s);
  return out;
}

// The items of source `name` (its first letter), in the order drawn.
Strings from(const Strings& run, char name) {
  Strings out;
  for (const std::string& s : run) {
    if (s[0] == name) out.push_back(s);
  }
  return out;
}

// "<name>0_0", ..., "<name>0_<n-1>": a source's first pass.
Strings pass_of(char name, int n, int epoch = 0) {
  Strings out;
  for (int k = 0; k < n; ++k) {
    out.push_back(std::string(1, name) + std::to_string(epoch) + "_" + std::to_string(k));
  }
  return out;
}

TEST(Mix, DrawsEachSourceInProportionToItsWeightOver100000Draws) {
  const std::vector<double> weights = {0.6, 0.3, 0.1};
  constexpr std::size_t kDraws = 100000;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    Pipeline<int> p = mix({label(0, seeded(seed)), label(1), label(2)}, weights);
    std::map<int, std::size_t> counts;
    for (int l : take(p, kDraws)) ++counts[l];
    for (int i = 0; i < 3; ++i) {
      // The count of a binomial(n, w): within 5 standard deviations, sqrt(n w (1 - w)) each
      // (at most 775 of 60000 for w = 0.6); a fair draw falls outside with probability below
      // 6e-7, and the seeds are fixed, so this cannot flake.
      const double expected = kDraws * weights[i];
      const double bound = 5 * std::sqrt(kDraws * weights[i] * (1 - weights[i]));
      EXPECT_NEAR(static_cast<double>(counts[i]), expected, bound)
          << "source " << i << ", seed " << seed;
    }
  }
}

TEST(Mix, ZeroWeightSourceIsNeverRead) {
  Pipeline<int> p = mix({label(0), label(1), label(2)}, {1, 0, 2});
  for (int l : take(p, 1000)) ASSERT_NE(l, 1);
}

TEST(Mix, SameSeedGivesTheSameSequenceAnotherSeedAnother) {
  auto make = [](std::uint64_t seed) {
    return mix({label(0, seeded(seed)), label(1), label(2)}, {1, 1, 1});
  };
  Pipeline<int> a = make(5), b = make(5), c = make(6);
  std::vector<int> first = take(a, 200);
  EXPECT_EQ(first, take(b, 200));
  EXPECT_NE(first, take(c, 200));
  // MixOptions::seed overrides the sources' seed.
  Pipeline<int> d = mix({label(0, seeded(6)), label(1), label(2)}, {1, 1, 1}, {.seed = 5});
  EXPECT_EQ(first, take(d, 200));
  // Each epoch draws its own sequence.
  EXPECT_NE(first, take(a, 200));
}

TEST(Mix, EveryWorkerAndRankDrawsItsOwnSequence) {
  auto make = [](int rank) {
    return mix({label(0, seeded(9, rank, 2)), label(1, seeded(9, rank, 2))}, {1, 1});
  };
  Pipeline<int> w0 = make(0).with_worker(0, 2);
  Pipeline<int> w1 = make(0).with_worker(1, 2);
  Pipeline<int> r1 = make(1).with_worker(0, 2);
  std::vector<int> seq = take(w0, 200);
  EXPECT_NE(seq, take(w1, 200));
  EXPECT_NE(seq, take(r1, 200));
  EXPECT_EQ(r1.context().rank, 1);
  EXPECT_EQ(r1.context().world_size, 2);
}

TEST(Mix, EachWorkerReadsTheShareOfEverySourceItWouldReadAlone) {
  // Sources that split themselves between workers: the workers' mixes together read every
  // item of every source once (drop), and each worker only its own share.
  Strings all;
  for (int w = 0; w < 2; ++w) {
    Pipeline<std::string> p =
        mix({items("a", 7, {}, true), items("b", 4, {}, true)}, {2, 1}).with_worker(w, 2);
    for (const std::string& s : one_pass(p)) {
      EXPECT_EQ(std::stoi(s.substr(3)) % 2, w) << s;
      all.push_back(s);
    }
  }
  std::sort(all.begin(), all.end());
  Strings expected = pass_of('a', 7);
  for (const std::string& s : pass_of('b', 4)) expected.push_back(s);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
}

TEST(Mix, DropReadsEverySourceToItsEndInItsOwnOrder) {
  Pipeline<std::string> p = mix({items("a", 2), items("b", 5), items("c", 10)}, {5, 1, 1});
  for (int epoch = 0; epoch < 2; ++epoch) {
    Strings run = one_pass(p);
    EXPECT_EQ(run.size(), 17u);
    EXPECT_EQ(from(run, 'a'), pass_of('a', 2, epoch));
    EXPECT_EQ(from(run, 'b'), pass_of('b', 5, epoch));
    EXPECT_EQ(from(run, 'c'), pass_of('c', 10, epoch));
  }
}

TEST(Mix, StopEndsThePassAtTheFirstSourceThatRunsOut) {
  // b cannot run out first: the pass ends when a is drawn after its 3 items, with only a
  // prefix of b read.
  Pipeline<std::string> p =
      mix({items("a", 3), items("b", 1000)}, {1, 1}, {.exhausted = Exhausted::stop});
  Strings run = one_pass(p);
  EXPECT_EQ(from(run, 'a'), pass_of('a', 3));
  Strings b = from(run, 'b');
  const Strings all_b = pass_of('b', 1000);
  ASSERT_LT(b.size(), all_b.size());
  EXPECT_EQ(b, Strings(all_b.begin(), all_b.begin() + static_cast<std::ptrdiff_t>(b.size())));
  // A source of weight 0 is never drawn, so it never ends the pass.
  Pipeline<std::string> q =
      mix({items("a", 3), items("b", 0)}, {1, 0}, {.exhausted = Exhausted::stop});
  EXPECT_EQ(one_pass(q), pass_of('a', 3));
}

TEST(Mix, RestartBeginsTheSourcesNextEpochAndNeverEnds) {
  // a runs out again and again while b is still in its first epoch: the mix goes on drawing
  // both, a through its epochs 0, 1, 2, ...
  Pipeline<std::string> p =
      mix({items("a", 2), items("b", 1000)}, {1, 1}, {.exhausted = Exhausted::restart})
          .with_epoch(40);
  Strings run = one_pass(p);
  ASSERT_EQ(run.size(), 40u);
  Strings a = from(run, 'a');
  ASSERT_GT(a.size(), 4u);
  Strings expected;
  for (int e = 0; expected.size() < a.size(); ++e) {
    for (const std::string& s : pass_of('a', 2, e)) expected.push_back(s);
  }
  expected.resize(a.size());
  EXPECT_EQ(a, expected);
  Strings b = from(run, 'b');
  const Strings all_b = pass_of('b', 1000);
  EXPECT_EQ(b, Strings(all_b.begin(), all_b.begin() + static_cast<std::ptrdiff_t>(b.size())));
}

TEST(Mix, RestartOfAnEmptySourceDropsItInsteadOfSpinning) {
  Pipeline<std::string> p =
      mix({items("a", 0), items("b", 2)}, {10, 1}, {.exhausted = Exhausted::restart}).with_epoch(5);
  EXPECT_EQ(one_pass(p), (Strings{"b0_0", "b0_1", "b1_0", "b1_1", "b2_0"}));
  // All empty: the pass ends (the pipeline's restart yields nothing either).
  Pipeline<std::string> empty =
      mix({items("a", 0), items("b", 0)}, {1, 1}, {.exhausted = Exhausted::restart}).with_epoch(5);
  EXPECT_TRUE(one_pass(empty).empty());
}

TEST(Interleave, TakesOneFromEachInTurnWithEachExhaustionPolicy) {
  auto make = [](Exhausted e) {
    return interleave({items("a", 2), items("b", 1), items("c", 3)}, {.exhausted = e});
  };
  // webdataset's RoundRobin([2, 2], [1], [3, 3, 3], longest=True) gives 2 1 3 2 3 3.
  Pipeline<std::string> drop = make(Exhausted::drop);
  EXPECT_EQ(one_pass(drop), (Strings{"a0_0", "b0_0", "c0_0", "a0_1", "c0_1", "c0_2"}));
  Pipeline<std::string> stop = make(Exhausted::stop);
  EXPECT_EQ(one_pass(stop), (Strings{"a0_0", "b0_0", "c0_0", "a0_1"}));
  EXPECT_EQ(one_pass(stop), (Strings{"a1_0", "b1_0", "c1_0", "a1_1"}));
  Pipeline<std::string> restart = make(Exhausted::restart).with_epoch(9);
  EXPECT_EQ(one_pass(restart),
            (Strings{"a0_0", "b0_0", "c0_0", "a0_1", "b1_0", "c0_1", "a1_0", "b2_0", "c0_2"}));
}

TEST(Mix, RefusesBadSourcesAndWeights) {
  auto refuses = [](auto make, const std::string& words) {
    try {
      make();
      ADD_FAILURE() << "accepted: expected an error with \"" << words << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  using Sources = std::vector<Pipeline<int>>;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  refuses([] { mix(Sources{}, {}); }, "no sources");
  refuses([] { interleave(Sources{}); }, "no sources");
  refuses([] { mix({label(0), label(1)}, {1}); }, "1 weights for 2 sources");
  refuses([] { mix({label(0), label(1)}, {1, -0.5}); }, "weight 1 is");
  refuses([&] { mix({label(0), label(1)}, {nan, 1}); }, "weight 0 is");
  refuses([&] { mix({label(0), label(1)}, {1, inf}); }, "weight 1 is");
  refuses([] { mix({label(0), label(1)}, {0, 0}); }, "all weights are zero");
  refuses([] { mix({label(0), label(1).with_epoch(3)}, {1, 1}); }, "source 1 has with_epoch");
  refuses(
      [] {
        mix({label(0, seeded(0, 0, 2)), label(1, seeded(0, 1, 2))}, {1, 1});
      },
      "source 1 is rank 1 of 2 but source 0 is rank 0 of 2");
}

// --- resume ---

using Make = std::function<Pipeline<std::string>()>;

// Every item of `passes` passes, with a marker at each pass's end.
Strings run(Pipeline<std::string>& p, int passes) {
  Strings out;
  for (int k = 0; k < passes; ++k) {
    for (std::string& s : p) out.push_back(s);
    out.push_back("--end of pass--");
  }
  return out;
}

// Stops after `cut` items, saves, restores into a fresh pipeline and runs the rest.
Strings interrupted(const Make& make, int passes, std::size_t cut) {
  Strings out;
  std::string state;
  int pass = 0;
  std::size_t n = 0;
  {
    Pipeline<std::string> p = make();
    bool stopped = false;
    for (; pass < passes && !stopped; ++pass) {
      for (std::string& s : p) {
        out.push_back(s);
        if (++n == cut) {
          stopped = true;
          break;
        }
      }
      if (!stopped) out.push_back("--end of pass--");
    }
    if (stopped) --pass;
    state = p.state();
  }
  Pipeline<std::string> q = make();
  q.restore(state);
  for (; pass < passes; ++pass) {
    for (std::string& s : q) out.push_back(s);
    out.push_back("--end of pass--");
  }
  return out;
}

void check_every_cut(const Make& make, int passes) {
  Pipeline<std::string> p = make();
  const Strings reference = run(p, passes);
  std::size_t items = 0;
  for (const std::string& s : reference) items += s.rfind("--", 0) != 0;
  ASSERT_GT(items, 5u);
  for (std::size_t cut = 1; cut <= items; ++cut) {
    ASSERT_EQ(interrupted(make, passes, cut), reference) << "interrupted after " << cut;
  }
}

// Joins items in pairs, "x+y" (the last one alone if the pass has an odd count): a stage that
// pulls again after its upstream ended, in the same pass.
class Pairs final : public StreamWrapper<std::string> {
 public:
  explicit Pairs(StreamPtr<std::string> up) : StreamWrapper(std::move(up), "pairs") {}
  std::optional<std::string> next() override {
    std::optional<std::string> a = upstream().next();
    if (!a) return std::nullopt;
    std::optional<std::string> b = upstream().next();
    return b ? *a + "+" + *b : *a;
  }
  void settings(Configuration&) const override {}
};

Pipeline<std::string> pairs(const Pipeline<std::string>& p) {
  return p.then([](StreamPtr<std::string> up) -> StreamPtr<std::string> {
    return std::make_unique<Pairs>(std::move(up));
  });
}

// Each sample's key and class, "p0_1/1". Saves and restores through.
class Keys final : public StreamWrapper<Sample, std::string> {
 public:
  explicit Keys(StreamPtr<Sample> up) : StreamWrapper(std::move(up), "keys") {}
  std::optional<std::string> next() override {
    std::optional<Sample> s = upstream().next();
    if (!s) return std::nullopt;
    return s->key() + "/" + std::string(s->at("cls").str());
  }
  void settings(Configuration&) const override {}
};

// Sources with state of their own: shuffled shard lists (an RNG) behind shuffle buffers.
Pipeline<std::string> shuffled(const std::string& prefix, int n, std::uint64_t seed) {
  ShardListOptions o;
  o.seed = seed;
  o.shuffle = true;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  Strings urls;
  for (int i = 0; i < n; ++i) urls.push_back(prefix + std::to_string(i));
  return ShardList(urls, o).shuffle(3, 2);
}

TEST(MixResume, EveryCutOfAMixGivesPrefixPlusRestEqualToUninterrupted) {
  for (Exhausted e : {Exhausted::drop, Exhausted::stop}) {
    SCOPED_TRACE(e == Exhausted::drop ? "drop" : "stop");
    check_every_cut(
        [e] {
          return mix({shuffled("a", 4, 1), shuffled("b", 6, 2), shuffled("c", 9, 3)}, {3, 2, 1},
                     {.exhausted = e});
        },
        3);
  }
  // Saved after the lone last item of a pass that stopped after 9 items (a b c a b c a b c):
  // the restored pass has nothing left.
  check_every_cut(
      [] {
        return pairs(interleave({items("a", 3), items("b", 20), items("c", 20)},
                                {.exhausted = Exhausted::stop}));
      },
      2);
  SCOPED_TRACE("restart");
  check_every_cut(
      [] {
        return mix({shuffled("a", 3, 1), shuffled("b", 5, 2)}, {1, 1},
                   {.exhausted = Exhausted::restart})
            .with_epoch(7);
      },
      3);
}

TEST(MixResume, EveryCutOfAnInterleaveGivesPrefixPlusRestEqualToUninterrupted) {
  for (Exhausted e : {Exhausted::drop, Exhausted::stop}) {
    check_every_cut(
        [e] {
          return interleave({items("a", 4), items("b", 7)}, {.exhausted = e});
        },
        2);
  }
  check_every_cut(
      [] {
        return interleave({items("a", 2), shuffled("b", 5, 4)}, {.exhausted = Exhausted::restart})
            .with_epoch(6);
      },
      3);
}

TEST(MixResume, StateOfAnotherMixIsRefused) {
  Pipeline<std::string> p = interleave({items("a", 4), items("b", 4), items("c", 4)});
  take(p, 3);
  Pipeline<std::string> q = interleave({items("a", 4), items("b", 4)});
  EXPECT_THROW(q.restore(p.state()), Error);
}

// Scenario: a job mixing two datasets of tar shards, with a sample shuffle after the mix, is
// restarted from its checkpoint after any sample: the buffered samples of both datasets are read
// again by location, and the rest follows as it would have.
TEST(MixResume, EveryCutOfAMixOfWebDatasetsWithAShuffleBufferAfterIt) {
  test::TempDir dir;
  std::vector<Strings> urls(2);
  for (int d = 0; d < 2; ++d) {
    for (int s = 0; s < 2; ++s) {
      std::string name = std::string(1, static_cast<char>('p' + d)) + std::to_string(s);
      std::string tar = test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < 3 + 2 * d; ++i) {
          w.write(test::make_sample(name + "_" + std::to_string(i), {{"cls", std::to_string(i)}}));
        }
      });
      urls[d].push_back(dir.write(name + ".tar", tar));
    }
  }
  WebDatasetOptions o;
  o.seed = 3;
  o.shuffle_shards = true;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  auto keys = [](const Pipeline<Sample>& p) {
    return p.then([](StreamPtr<Sample> up) -> StreamPtr<std::string> {
      return std::make_unique<Keys>(std::move(up));
    });
  };
  check_every_cut(
      [&] {
        return keys(mix({WebDataset(urls[0], o), WebDataset(urls[1], o)}, {1, 2}).shuffle(4));
      },
      2);
}

// Scenario: a job loading a mix on 2 worker threads is killed and restarted from the loader's
// checkpoint after any batch: the restored loader hands out what the uninterrupted one would.
TEST(MixResume, EveryCutThroughALoaderWithTwoWorkers) {
  using Batch = std::string;
  auto make = [](Exhausted e) {
    return mix({items("a", 9, {}, true), items("b", 5, {}, true).shuffle(2, 2)}, {2, 1},
               {.exhausted = e});
  };
  for (Exhausted e : {Exhausted::drop, Exhausted::restart}) {
    SCOPED_TRACE(e == Exhausted::drop ? "drop" : "restart");
    LoaderOptions<Batch> options{.workers = 2, .prefetch = 2, .ordered = true, .resumable = true};
    if (e == Exhausted::restart) options.epoch_length = 8;
    const int passes = 2;
    auto all = [&](Loader<Batch>& loader, std::size_t stop_after, int* pass, Strings& out) {
      for (; *pass < passes; ++*pass) {
        for (Batch& b : loader) {
          out.push_back(b);
          if (out.size() == stop_after) return true;
        }
        out.push_back("--end of pass--");
      }
      return false;
    };
    Strings reference;
    {
      Loader<Batch> loader(make(e), options);
      int pass = 0;
      all(loader, 0, &pass, reference);
    }
    ASSERT_GT(reference.size(), 10u);
    for (std::size_t cut = 1; cut <= reference.size(); ++cut) {
      if (reference[cut - 1].rfind("--", 0) == 0) continue;
      Strings got;
      int pass = 0;
      std::string state;
      {
        Loader<Batch> loader(make(e), options);
        ASSERT_TRUE(all(loader, cut, &pass, got));
        state = loader.state();
      }
      Loader<Batch> loader(make(e), options);
      loader.restore(state);
      all(loader, 0, &pass, got);
      ASSERT_EQ(got, reference) << "interrupted after " << cut;
    }
  }
}

}  // namespace
}  // namespace wds
