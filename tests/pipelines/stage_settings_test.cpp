// Every built-in stage's settings reach the pipeline's configuration fingerprint (what resumes
// and ranks compare): pipelines differing in one setting differ, equal ones are equal. Every
// stage passes its upstream's configuration on and counts as a stage of its own.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/streams.hpp"
#include "wds/decode.hpp"
#include "wds/filters.hpp"
#include "wds/mix.hpp"
#include "wds/pipeline.hpp"
#include "wds/shardlists.hpp"
#include "wds/streams.hpp"
#include "wds/transforms.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

// Two shard lists: nothing is read, configuration() only builds the chain.
Strings shards(bool other) {
  return other ? Strings{"a.tar", "b.tar", "c.tar", "e.tar"}
               : Strings{"a.tar", "b.tar", "c.tar", "d.tar"};
}
Pipeline<std::string> urls(bool other = false) {
  return ShardList(shards(other), {.seed = 1});
}
Pipeline<DecodedSample> decoded(bool other = false) {
  return urls(other).tar_samples().decode();
}

// A pipeline's fingerprint, built with one setting of one stage at its first or other value.
struct Case {
  std::string what;
  std::function<std::uint64_t(bool other)> fingerprint;
};

void check(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.fingerprint(false), c.fingerprint(false));
    EXPECT_EQ(c.fingerprint(true), c.fingerprint(true));
    EXPECT_NE(c.fingerprint(false), c.fingerprint(true));
  }
}

SplitOptions policy(bool other) {
  return {.policy = other ? SplitPolicy::even : SplitPolicy::unbalanced};
}
SplitOptions allow_empty(bool other) {
  return {.allow_empty = other};
}
DecodeOptions resized(bool other) {
  DecodeOptions o;
  o.image.resize = other ? 32 : 64;
  return o;
}
StreamsOptions streams(std::uint64_t count, bool shuffle_shards, std::size_t shuffle,
                       std::size_t initial) {
  return {.count = count,
          .seed = 1,
          .shuffle_shards = shuffle_shards,
          .shuffle = shuffle,
          .shuffle_initial = initial};
}

TEST(StageSettings, EachSettingReachesTheFingerprint) {
  check({
      {"ShardList urls", [](bool o) { return urls(o).fingerprint(); }},
      {"ShardList shuffle",
       [](bool o) { return ShardList(shards(false), {.seed = 1, .shuffle = o}).fingerprint(); }},
      {"ResampledShards urls",
       [](bool o) { return ResampledShards(shards(o), {.seed = 1}).fingerprint(); }},
      {"ResampledShards nshards",
       [](bool o) {
         return ResampledShards(shards(false), {.seed = 1, .nshards = o ? 5 : 6}).fingerprint();
       }},
      {"CanonicalStreams urls",
       [](bool o) { return CanonicalStreams(shards(o), streams(2, false, 0, 1)).fingerprint(); }},
      {"CanonicalStreams streams",
       [](bool o) {
         return CanonicalStreams(shards(false), streams(o ? 4 : 2, false, 0, 1)).fingerprint();
       }},
      {"CanonicalStreams shuffle_shards",
       [](bool o) { return CanonicalStreams(shards(false), streams(2, o, 0, 1)).fingerprint(); }},
      {"CanonicalStreams shuffle",
       [](bool o) {
         return CanonicalStreams(shards(false), streams(2, false, o ? 10 : 20, 1)).fingerprint();
       }},
      {"CanonicalStreams shuffle_initial",
       [](bool o) {
         return CanonicalStreams(shards(false), streams(2, false, 10, o ? 1 : 2)).fingerprint();
       }},
      {"shuffle bufsize", [](bool o) { return urls().shuffle(o ? 10 : 20, 5).fingerprint(); }},
      {"shuffle initial", [](bool o) { return urls().shuffle(10, o ? 5 : 6).fingerprint(); }},
      {"slice start", [](bool o) { return urls().slice(o ? 1 : 2, 10, 1).fingerprint(); }},
      {"slice stop", [](bool o) { return urls().slice(1, o ? 10 : 11, 1).fingerprint(); }},
      {"slice stop none",
       [](bool o) {
         return urls().slice(1, o ? std::optional<std::uint64_t>() : 10, 1).fingerprint();
       }},
      {"slice step", [](bool o) { return urls().slice(1, 10, o ? 1 : 2).fingerprint(); }},
      {"repeat passes", [](bool o) { return urls().repeat(o ? 2 : 3).fingerprint(); }},
      {"repeat forever",
       [](bool o) { return urls().repeat(o ? std::optional<std::uint64_t>() : 2).fingerprint(); }},
      {"split_by_node policy",
       [](bool o) { return urls().split_by_node(policy(o)).fingerprint(); }},
      {"split_by_node allow_empty",
       [](bool o) { return urls().split_by_node(allow_empty(o)).fingerprint(); }},
      {"split_by_worker policy",
       [](bool o) { return urls().split_by_worker(policy(o)).fingerprint(); }},
      {"split_by_worker allow_empty",
       [](bool o) { return urls().split_by_worker(allow_empty(o)).fingerprint(); }},
      {"decode image spec",
       [](bool o) { return urls().tar_samples().decode(o ? "rgb8" : "l").fingerprint(); }},
      {"decode image options",
       [](bool o) { return urls().tar_samples().decode("rgb8", resized(o)).fingerprint(); }},
      {"batched batchsize",
       [](bool o) { return decoded().to_tuple("jpg").batched(o ? 4 : 8).fingerprint(); }},
      {"batched partial",
       [](bool o) { return decoded().to_tuple("jpg").batched(4, o).fingerprint(); }},
      {"mix weights",
       [](bool o) {
         return mix({urls(), urls()}, {o ? 0.25 : 0.5, 0.5}).fingerprint();
       }},
      {"mix exhausted",
       [](bool o) {
         return mix({urls(), urls()}, {0.5, 0.5},
                    {.exhausted = o ? Exhausted::stop : Exhausted::drop})
             .fingerprint();
       }},
      {"mix source",
       [](bool o) {
         return interleave({urls(), urls(o)}).fingerprint();
       }},
      {"mix source seed",
       [](bool o) {
         return interleave({urls(), ShardList(shards(false), {.seed = o ? 2u : 1u})}).fingerprint();
       }},
  });
}

// Each stage, the first time with the other shard list upstream, the second time followed by
// a stage with settings whose stage number it shifts (a stage without settings shows only so).
TEST(StageSettings, EveryStagePassesItsUpstreamOnAndCountsAsAStage) {
  auto same = [](auto&& x) { return std::move(x); };
  auto keep = [](const auto&) { return true; };
  FieldFn as_is = [](Value&& v) { return std::move(v); };
  using Stage = std::function<Pipeline<std::string>(Pipeline<std::string>)>;
  std::vector<std::pair<std::string, Stage>> on_urls = {
      {"shuffle", [](auto p) { return p.shuffle(10); }},
      {"slice", [](auto p) { return p.slice(0, 10); }},
      {"select", [=](auto p) { return p.select(keep); }},
      {"repeat", [](auto p) { return p.repeat(2); }},
      {"split_samples", [](auto p) { return p.split_samples(); }},
      {"map", [=](auto p) { return p.map(same); }},
      {"split_by_node", [](auto p) { return p.split_by_node(); }},
      {"split_by_worker", [](auto p) { return p.split_by_worker(); }},
      {"single_node_only", [](auto p) { return p.single_node_only(); }},
      {"split_with",
       [](auto p) { return p.split_with([](Strings u, const PassContext&) { return u; }); }},
      {"a sample round trip",  // tar_samples, decode, to_tuple, batched, unbatched, map back
       [](auto p) {
         return p.tar_samples().decode().to_tuple("__url__").batched(2).unbatched().map(
             [](Tuple&& t) { return t[0].get<std::string>(); });
       }},
      {"map_dict, rename",
       [=](auto p) {
         return p.tar_samples()
             .decode()
             .map_dict({{"txt", as_is}})
             .rename({{"text", "txt"}})
             .map([](DecodedSample&& s) { return s.key(); });
       }},
  };
  std::vector<Case> cases;
  for (const auto& [name, stage] : on_urls) {
    cases.push_back({name + " passes its upstream on",
                     [stage](bool o) { return stage(urls(o)).fingerprint(); }});
    cases.push_back({name + " counts as a stage", [stage](bool o) {
                       return (o ? stage(urls()) : urls()).shuffle(10).fingerprint();
                     }});
  }
  check(cases);
}

// A stage of one's own on StreamWrapper: it writes next() and settings(); start, save,
// restore and describe's upstream part are forwarded.
class Prefix final : public StreamWrapper<int, std::string> {
 public:
  Prefix(StreamPtr<int> up, std::string p)
      : StreamWrapper(std::move(up), "prefix"), p_(std::move(p)) {}
  std::optional<std::string> next() override {
    std::optional<int> i = upstream().next();
    return i ? std::optional(p_ + std::to_string(*i)) : std::nullopt;
  }
  void settings(Configuration& c) const override { c.add("prefix", p_); }

 private:
  std::string p_;
};

Pipeline<std::string> prefixed(std::string p) {
  return test::from_vector(test::iota(6)).then([p](StreamPtr<int> up) -> StreamPtr<std::string> {
    return std::make_unique<Prefix>(std::move(up), p);
  });
}

TEST(StageSettings, StreamWrapperForwardsAllButNextAndSettings) {
  Pipeline<std::string> p = prefixed("x");
  EXPECT_NE(p.configuration().text().find("1:prefix.prefix=x\n"), std::string::npos)
      << p.configuration().text();
  EXPECT_NE(p.fingerprint(), prefixed("y").fingerprint());
  // Saved and restored through the stage: the upstream's position.
  p.begin_pass();
  EXPECT_EQ(p.next(), "x0");
  EXPECT_EQ(p.next(), "x1");
  const std::string state = p.state();
  Pipeline<std::string> q = prefixed("x");
  q.restore(state);
  q.begin_pass();
  EXPECT_EQ(q.next(), "x2");
  EXPECT_EQ(q.next(), "x3");
}

}  // namespace
}  // namespace wds
