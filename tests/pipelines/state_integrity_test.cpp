// Scenario: a checkpoint's state file is damaged (a flipped bit, a truncated copy, an edited
// number) or written by a buggy or hostile writer. Restoring it must either continue exactly as
// the intact state does or be refused with an error: never continue with other data (another
// order, samples repeated or lost). A damaged state is refused by its checksum; a state whose
// checksum was made to fit (resealed) is refused by the stages' checks of the numbers they read.
#include <gtest/gtest.h>

#include <functional>

#include "tests/support/fixtures.hpp"
#include "wds/loader.hpp"
#include "wds/shardlists.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

// A state's values, to edit them as a writer could: the header, then ('u', digits) or
// ('s', bytes) in order; any checksum is dropped (seal() adds a fitting one).
struct Parsed {
  std::string header;
  std::vector<std::pair<char, std::string>> values;
};

Parsed parse(std::string_view text) {
  Parsed p;
  std::size_t pos = text.find(' ');
  p.header = std::string(text.substr(0, pos));
  if (p.header == "wds-state-2") text.remove_suffix(10);  // " c" and 8 hex digits
  while (pos < text.size()) {
    const char kind = text[pos + 1];
    pos += 2;
    if (kind == 'u') {
      std::size_t end = text.find(' ', pos);
      if (end == std::string_view::npos) end = text.size();
      p.values.emplace_back('u', std::string(text.substr(pos, end - pos)));
      pos = end;
    } else {
      const std::size_t colon = text.find(':', pos);
      const std::size_t n = std::stoul(std::string(text.substr(pos, colon - pos)));
      p.values.emplace_back('s', std::string(text.substr(colon + 1, n)));
      pos = colon + 1 + n;
    }
  }
  return p;
}

// The values as a state without checksum, as earlier versions wrote them.
std::string unsealed(const Parsed& p) {
  std::string out = "wds-state-1";
  for (const auto& [kind, v] : p.values) {
    out += ' ';
    out += kind;
    if (kind == 's') out += std::to_string(v.size()) + ":";
    out += v;
  }
  return out;
}

// The edited state with a checksum that fits: what the stages check must refuse it alone.
std::string seal(const Parsed& p) {
  return reseal_state(unsealed(p));
}

// Single edits of a state: every `stride`-th byte with its lowest bit flipped, every digit
// changed to 0 and to the next digit, every number set to 0, one more and one less (u4 -> u0).
std::vector<std::pair<std::string, std::string>> mutations(const std::string& state,
                                                           std::size_t stride) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 0; i < state.size(); i += stride) {
    std::string m = state;
    m[i] = static_cast<char>(m[i] ^ 1);
    out.emplace_back("byte " + std::to_string(i) + " flipped", std::move(m));
  }
  for (std::size_t i = 0; i < state.size(); ++i) {
    const char c = state[i];
    if (c < '0' || c > '9') continue;
    for (char to : {'0', static_cast<char>('0' + (c - '0' + 1) % 10)}) {
      if (to == c) continue;
      std::string m = state;
      m[i] = to;
      out.emplace_back("digit " + std::to_string(i) + " -> " + to, std::move(m));
    }
  }
  for (std::size_t at = state.find(" u"); at != std::string::npos; at = state.find(" u", at + 1)) {
    std::size_t end = at + 2;
    while (end < state.size() && state[end] >= '0' && state[end] <= '9') ++end;
    if (end == at + 2 || end - at - 2 > 18) continue;
    const std::uint64_t n = std::stoull(state.substr(at + 2, end - at - 2));
    for (std::uint64_t to : {std::uint64_t{0}, n + 1, n - 1}) {
      if (to == n || (n == 0 && to == n - 1)) continue;
      std::string m = state;
      m.replace(at + 2, end - at - 2, std::to_string(to));
      out.emplace_back(
          "u" + std::to_string(n) + " -> u" + std::to_string(to) + " at " + std::to_string(at),
          std::move(m));
    }
  }
  return out;
}

// Each mutation of `state` must be refused (an Error, when restoring or reading) or continue
// exactly as `state` does.
void expect_refused_or_same(const std::string& state,
                            const std::function<Strings(const std::string&)>& continuation,
                            std::size_t stride) {
  const Strings expected = continuation(state);
  ASSERT_FALSE(expected.empty());
  std::size_t tried = 0, refused = 0;
  Strings wrong;
  for (const auto& [what, mutated] : mutations(state, stride)) {
    ++tried;
    try {
      if (continuation(mutated) != expected) wrong.push_back(what);
    } catch (const Error&) {
      ++refused;
    }
  }
  std::string examples;
  for (std::size_t i = 0; i < wrong.size() && i < 8; ++i) examples += "\n  " + wrong[i];
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " of " << tried
                             << " mutations restored into another continuation:" << examples;
  EXPECT_GT(refused, tried / 2);
}

class StateIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int s = 0; s < 4; ++s) {
      std::string tar = test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < 6; ++i) {
          w.write(test::make_sample("s" + std::to_string(s) + "_" + std::to_string(i),
                                    {{"cls", std::to_string(i)}}));
        }
      });
      urls_.push_back(dir_.write("shard" + std::to_string(s) + ".tar", tar));
    }
  }

  WebDatasetOptions seeded() const {
    WebDatasetOptions o;
    o.seed = 3;
    o.shuffle_shards = true;
    o.shard_shuffle = 2;
    o.distributed.rank = 0;
    o.distributed.world_size = 1;
    return o;
  }
  WebDatasetOptions streams() const {
    WebDatasetOptions o = seeded();
    o.shard_shuffle = 0;
    o.streams = 4;
    o.stream_shuffle = 3;
    return o;
  }
  Pipeline<Sample> shuffled() const { return WebDataset(urls_, seeded()).shuffle(5, 2); }

  test::TempDir dir_;
  Strings urls_;
};

// The keys of up to `limit` items: the rest of the pass, then the passes after it.
Strings keys(Pipeline<Sample>& p, int passes, std::size_t limit = 200) {
  Strings out;
  for (int k = 0; k < passes; ++k) {
    p.begin_pass();
    while (std::optional<Sample> s = p.next()) {
      out.push_back(s->key());
      if (out.size() == limit) return out;
    }
    out.push_back("--");
  }
  return out;
}

Strings keys(Loader<Sample>& l, int passes, std::size_t limit = 200) {
  Strings out;
  for (int k = 0; k < passes; ++k) {
    for (Sample& s : l) {
      out.push_back(s.key());
      if (out.size() == limit) return out;
    }
    out.push_back("--");
  }
  return out;
}

template <class P>
std::string state_after(P& p, std::size_t items) {
  std::size_t n = 0;
  for (auto& s : p) {
    (void)s;
    if (++n == items) break;
  }
  return p.state();
}

TEST_F(StateIntegrity, EveryMutationOfAShuffledPipelinesStateIsRefusedOrHarmless) {
  Pipeline<Sample> p = shuffled();
  const std::string state = state_after(p, 7);
  expect_refused_or_same(
      state,
      [&](const std::string& s) {
        Pipeline<Sample> q = shuffled();
        q.restore(s);
        return keys(q, 2);
      },
      1);
}

TEST_F(StateIntegrity, EveryMutationOfALoadersStateIsRefusedOrHarmless) {
  auto make = [&] {
    return Loader<Sample>(WebDataset(urls_, seeded()).shuffle(4),
                          {.workers = 2, .ordered = true, .resumable = true});
  };
  Loader<Sample> l = make();
  const std::string state = state_after(l, 7);
  expect_refused_or_same(
      state,
      [&](const std::string& s) {
        Loader<Sample> q = make();
        q.restore(s);
        return keys(q, 2);
      },
      5);
}

TEST_F(StateIntegrity, EveryMutationOfACanonicalStreamsStateIsRefusedOrHarmless) {
  auto make = [&] { return WebDataset(urls_, streams()).with_epoch(10); };
  Pipeline<Sample> p = make();
  const std::string state = state_after(p, 7);
  expect_refused_or_same(
      state,
      [&](const std::string& s) {
        Pipeline<Sample> q = make();
        q.restore(s);
        return keys(q, 3);
      },
      1);
}

// A damaged state is refused as such, whatever was changed.
TEST_F(StateIntegrity, ADamagedStateIsRefusedByItsChecksum) {
  Pipeline<Sample> p = shuffled();
  const std::string state = state_after(p, 7);
  std::string flipped = state;
  flipped[state.size() / 2] = static_cast<char>(flipped[state.size() / 2] ^ 1);
  for (const std::string& damaged :
       {flipped, state.substr(0, state.size() - 1), state.substr(0, state.size() / 2)}) {
    Pipeline<Sample> q = shuffled();
    std::string what;
    EXPECT_EQ(test::error_code([&] { q.restore(damaged); }, &what), ErrorCode::invalid_argument);
    EXPECT_NE(what.find("damaged"), std::string::npos) << what;
  }
  Pipeline<Sample> q = shuffled();
  q.restore(state);  // the intact one restores
}

// A state saved before states had a checksum ("wds-state-1") still restores, exactly.
TEST_F(StateIntegrity, AStateWithoutChecksumFromAnEarlierVersionStillRestores) {
  Pipeline<Sample> p = shuffled();
  const std::string state = state_after(p, 7);
  const std::string v1 = unsealed(parse(state));
  Pipeline<Sample> a = shuffled();
  a.restore(state);
  Pipeline<Sample> b = shuffled();
  b.restore(v1);
  EXPECT_EQ(keys(b, 2), keys(a, 2));
}

// --- resealed edits: the checksum fits, the stages' checks refuse ---

std::string refusal(const std::function<void()>& f) {
  std::string what;
  EXPECT_EQ(test::error_code(f, &what), ErrorCode::invalid_argument);
  return what;
}

// The count of samples in the buffer of a state's last stage, a sample shuffle: the n before
// its n samples of 3 values each.
std::size_t buffered(const Parsed& s) {
  for (std::size_t n = 1; 3 * n < s.values.size(); ++n) {
    const auto& v = s.values[s.values.size() - 1 - 3 * n];
    if (v.first == 'u' && v.second == std::to_string(n)) return n;
  }
  ADD_FAILURE() << "no buffered samples";
  return 0;
}

// The shuffle buffer's generator: its increment is fixed by the seed.
TEST_F(StateIntegrity, AShuffleGeneratorOfAnotherStreamIsRefused) {
  Pipeline<Sample> p = shuffled();
  Parsed s = parse(state_after(p, 7));
  // The sample shuffle is the last stage: its generator (state, increment), its done flag, its
  // count n and n samples of 3 values each.
  const std::size_t n = buffered(s);
  auto& inc = s.values[s.values.size() - 1 - 3 * n - 2];
  ASSERT_EQ(inc.second, "1");
  inc.second = "3";
  Pipeline<Sample> q = shuffled();
  const std::string what = refusal([&] { q.restore(seal(s)); });
  EXPECT_NE(what.find("increment 3"), std::string::npos) << what;
}

// A flag (done, in a pass, ended) is 0 or 1.
TEST_F(StateIntegrity, AFlagOtherThanZeroOrOneIsRefused) {
  Pipeline<Sample> p = shuffled();
  Parsed s = parse(state_after(p, 7));
  auto& done = s.values[s.values.size() - 1 - 3 * buffered(s) - 1];  // the shuffle's done flag
  ASSERT_EQ(done.second, "0");
  done.second = "2";
  Pipeline<Sample> q = shuffled();
  const std::string what = refusal([&] { q.restore(seal(s)); });
  EXPECT_NE(what.find("a flag is 2"), std::string::npos) << what;
}

TEST_F(StateIntegrity, ASlicePastItsStopIsRefused) {
  auto make = [&] { return WebDataset(urls_, seeded()).slice(0, 10); };
  Pipeline<Sample> p = make();
  Parsed s = parse(state_after(p, 4));
  auto& index = s.values.back();  // the slice is the last stage: its index
  ASSERT_EQ(index.second, "4");
  index.second = "11";
  Pipeline<Sample> q = make();
  const std::string what = refusal([&] { q.restore(seal(s)); });
  EXPECT_NE(what.find("item 11, past its stop 10"), std::string::npos) << what;
}

TEST_F(StateIntegrity, AnEpochCountOverWithEpochIsRefused) {
  auto make = [&] { return WebDataset(urls_, seeded()).with_epoch(10); };
  Pipeline<Sample> p = make();
  Parsed s = parse(state_after(p, 4));
  // configuration, epoch, yielded, ...
  ASSERT_EQ(s.values[2].second, "4");
  s.values[2].second = "11";
  Pipeline<Sample> q = make();
  const std::string what = refusal([&] { q.restore(seal(s)); });
  EXPECT_NE(what.find("11 items yielded in a pass of with_epoch(10)"), std::string::npos) << what;
}

// A Loader's turn names one of its workers (the old code took it modulo their number).
TEST_F(StateIntegrity, ALoaderTurnBeyondItsWorkersIsRefused) {
  auto make = [&] {
    return Loader<Sample>(WebDataset(urls_, seeded()),
                          {.workers = 2, .ordered = true, .resumable = true});
  };
  Loader<Sample> l = make();
  Parsed s = parse(state_after(l, 3));
  // tag, workers, turn, ...
  ASSERT_EQ(s.values[1].second, "2");
  s.values[2].second = "3";
  Loader<Sample> q = make();
  const std::string what = refusal([&] { q.restore(seal(s)); });
  EXPECT_NE(what.find("turn 3 is not one of its 2 workers"), std::string::npos) << what;
}

// With canonical streams, a worker's position (items after its snapshot) and its streams'
// counts must agree: a skip of one more or less would lose or repeat a sample.
TEST_F(StateIntegrity, ALoaderWorkersSkipThatDoesNotFitItsStreamCountsIsRefused) {
  auto make = [&] {
    return Loader<Sample>(WebDataset(urls_, streams()),
                          {.workers = 2, .ordered = true, .resumable = true, .epoch_length = 10});
  };
  Loader<Sample> l = make();
  const std::string state = state_after(l, 7);
  Parsed s = parse(state);
  // tag, workers, turn, yielded, in_pass, then per worker: snapshot, skip, finished, n, counts.
  std::size_t at = 5;  // worker 0's snapshot
  ASSERT_EQ(s.values[at].first, 's');
  auto& skip = s.values[at + 1];
  const std::uint64_t was = std::stoull(skip.second);
  for (std::uint64_t to : {was + 1, was + 5}) {
    skip.second = std::to_string(to);
    Loader<Sample> q = make();
    const std::string what = refusal([&] { q.restore(seal(s)); });
    EXPECT_NE(what.find("worker 0's position (" + std::to_string(to) + " items after its snapshot"),
              std::string::npos)
        << what;
  }
  // The counts, as edited the other way: a stream's count set to 0 (u4 -> u0).
  skip.second = std::to_string(was);
  const std::size_t streams = std::stoul(s.values[at + 3].second);
  ASSERT_EQ(streams, 2u);
  bool edited = false;
  for (std::size_t k = 0; k < streams; ++k) {
    auto& count = s.values[at + 4 + k];
    if (count.second == "0") continue;
    const std::string kept = count.second;
    count.second = "0";
    Loader<Sample> q = make();
    const std::string what = refusal([&] { q.restore(seal(s)); });
    EXPECT_NE(what.find("does not fit its snapshot"), std::string::npos) << what;
    count.second = kept;
    edited = true;
  }
  EXPECT_TRUE(edited);
  Loader<Sample> q = make();
  q.restore(seal(s));  // unedited: restores
}

// The case: a shard list's position set back (u4 -> u0), with a fitting checksum, read the
// shards before it again (200 samples twice). The shards read and read ahead must have been
// handed out by the list at its position.
TEST_F(StateIntegrity, AShardListPositionBeforeTheShardsBeingReadIsRefused) {
  auto make = [&] {
    WebDatasetOptions o = seeded();
    o.shard_shuffle = 0;
    return WebDataset(urls_, o);
  };
  Pipeline<Sample> p = make();
  Parsed s = parse(state_after(p, 14));  // in the third shard, the fourth read ahead
  // configuration, epoch, yielded, in_pass, chain, stream epoch, then the ShardList's position.
  ASSERT_EQ(s.values[6].second, "4");
  for (const char* to : {"0", "3"}) {
    s.values[6].second = to;
    Pipeline<Sample> q = make();
    const std::string what = refusal([&] { q.restore(seal(s)); });
    EXPECT_NE(what.find("at position " + std::string(to) + " has not handed out yet"),
              std::string::npos)
        << what;
  }
  s.values[6].second = "4";
  Pipeline<Sample> q = make();
  q.restore(seal(s));  // unedited: restores
}

// A worker whose end was handed out has no items after its snapshot: a finished flag with a skip
// is malformed (restored, the worker's rest of the pass would be lost).
TEST_F(StateIntegrity, ALoaderWorkerFinishedWithItemsAfterItsSnapshotIsRefused) {
  auto make = [&] {
    return Loader<Sample>(WebDataset(urls_, seeded()),
                          {.workers = 2, .ordered = true, .resumable = true});
  };
  Loader<Sample> l = make();
  Parsed s = parse(state_after(l, 5));
  // tag, workers, turn, yielded, in_pass, then per worker: snapshot, skip, finished, n, counts.
  ASSERT_EQ(s.values[5].first, 's');
  s.values[6].second = "3";
  s.values[7].second = "1";
  Loader<Sample> q = make();
  const std::string what = refusal([&] { q.restore(seal(s)); });
  EXPECT_NE(what.find("worker 0 has finished, yet its position is 3 items after its snapshot"),
            std::string::npos)
      << what;
}

// An ended stream's stages are not saved: a stream marked ended whose state holds them is
// malformed (restored, the rest of the stream would be lost).
TEST_F(StateIntegrity, AStreamMarkedEndedWithItsStagesSavedIsRefused) {
  auto make = [&] { return WebDataset(urls_, streams()).with_epoch(10); };
  Pipeline<Sample> p = make();
  Parsed s = parse(state_after(p, 5));
  Parsed section = parse(s.values.back().second);
  // tag, count, n, then per stream: id, handed_out, skip, ended, chain.
  ASSERT_EQ(section.values[3 + 3].second, "0");
  section.values[3 + 3].second = "1";
  s.values.back().second = seal(section);
  Pipeline<Sample> q = make();
  const std::string what = refusal([&] { q.restore(seal(s)); });
  EXPECT_NE(what.find("is marked ended, yet its stages' state holds values"), std::string::npos)
      << what;
}

// A canonical-streams state holding one stream twice is malformed (the old code kept the last).
TEST_F(StateIntegrity, AStreamGivenTwiceIsRefused) {
  auto make = [&] { return WebDataset(urls_, streams()).with_epoch(10); };
  Pipeline<Sample> p = make();
  Parsed s = parse(state_after(p, 5));
  // The streams' section is the last value: tag, count, n, then per stream id, handed_out, skip,
  // ended, chain.
  Parsed section = parse(s.values.back().second);
  ASSERT_EQ(section.values[2].second, "4");
  section.values[3 + 5].second = section.values[3].second;  // stream 1's id := stream 0's
  s.values.back().second = seal(section);
  Pipeline<Sample> q = make();
  const std::string what = refusal([&] { q.restore(seal(s)); });
  EXPECT_NE(what.find("holds stream 0 twice"), std::string::npos) << what;
}

}  // namespace
}  // namespace wds
