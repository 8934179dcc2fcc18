// Joined shard sets over HTTP with read-ahead: a shard opened ahead of its turn has its partners
// opened with it, so that switching to a joined shard waits for no first byte. A scripted
// server on loopback serves three sets (images; captions; embeddings) and observes the order of
// the requests; an error of a partner opened ahead waits for its shard's turn, and resume is
// exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/fixtures.hpp"
#include "tests/support/resume.hpp"
#include "tests/support/script_server.hpp"
#include "wds/tar_samples.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

constexpr int kShards = 4;

std::string key_of(int shard, int i) {
  return "s" + std::to_string(shard) + "/k" + std::to_string(i);
}
int samples_in(int shard) {
  return 2 + shard % 3;
}

// Shard `s` of set `set` ("img": jpg and cls, "cap": txt, "emb": npy).
std::string shard_bytes(const std::string& set, int s) {
  return test::make_tar([&](TarWriter& w) {
    for (int i = 0; i < samples_in(s); ++i) {
      const std::string key = key_of(s, i);
      if (set == "img") {
        w.write(test::make_sample(
            key, {{"jpg", std::string(static_cast<std::size_t>(300 + 700 * i), char('a' + s))},
                  {"cls", std::to_string(10 * s + i)}}));
      } else if (set == "cap") {
        w.write(test::make_sample(key, {{"txt", "a caption of " + key}}));
      } else {
        w.write(test::make_sample(key, {{"npy", std::string(600 + 13 * s, char('0' + i))}}));
      }
    }
  });
}

// "key|ext=bytes|..." with the fields in the order the join gives them.
std::string describe(const Sample& s) {
  std::string out = s.key();
  for (const Field& f : s.fields()) out += "|" + f.ext + "=" + std::string(f.data.str());
  return out;
}

// The path of a request line ("GET /img-0.tar HTTP/1.1").
std::string path_of(const std::string& request) {
  const std::size_t start = request.find(' ') + 1;
  return request.substr(start, request.find(' ', start) - start);
}

// The three sets over HTTP: GET with Range as a store answers it, 404 for what it does not
// hold. `gate`, if set, is asked before answering and may hold the answer back.
class JoinedStore {
 public:
  using Gate = std::function<void(const std::string& path)>;

  explicit JoinedStore(std::set<std::string> missing = {}, Gate gate = nullptr)
      : gate_(std::move(gate)), server_([this](const std::string& r) { return answer(r); }) {
    for (const char* set : {"img", "cap", "emb"}) {
      for (int s = 0; s < kShards; ++s) {
        const std::string path = "/" + std::string(set) + "-" + std::to_string(s) + ".tar";
        if (!missing.count(path)) files_[path] = shard_bytes(set, s);
      }
    }
  }

  Strings urls(const std::string& set) const {
    Strings out;
    for (int s = 0; s < kShards; ++s) out.push_back(url(set, s));
    return out;
  }
  std::string url(const std::string& set, int s) const {
    return server_.url("/" + set + "-" + std::to_string(s) + ".tar");
  }
  std::string list(const std::string& set) const {  // as a "::" pattern
    std::string out;
    for (const std::string& u : urls(set)) out += (out.empty() ? "" : "::") + u;
    return out;
  }
  // Request paths in order of arrival.
  Strings requested() const {
    Strings out;
    for (const std::string& r : server_.requests()) out.push_back(path_of(r));
    return out;
  }

 private:
  test::Reply answer(const std::string& request) {
    const std::string path = path_of(request);
    if (gate_) gate_(path);
    auto it = files_.find(path);
    if (it == files_.end()) return {.head = "HTTP/1.1 404 Not Found\r\n", .body = "no such key"};
    const std::string& data = it->second;
    const std::size_t range = request.find("\r\nRange: bytes=");
    if (range == std::string::npos) return {.head = "HTTP/1.1 200 OK\r\n", .body = data};
    const std::size_t first = std::stoull(request.substr(range + 15));
    return {.head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " +
                    std::to_string(first) + "-" + std::to_string(data.size() - 1) + "/" +
                    std::to_string(data.size()) + "\r\n",
            .body = data.substr(first)};
  }

  Gate gate_;
  std::map<std::string, std::string> files_;  // written before the server starts
  test::ScriptServer server_;
};

// Holds the answer to one path back until every path of `awaited` was asked for, or a
// deadline passes (then the test fails: what it awaited was not requested ahead).
class HoldUntilRequested {
 public:
  HoldUntilRequested(std::string held, std::set<std::string> awaited)
      : held_(std::move(held)), awaited_(std::move(awaited)) {}

  void operator()(const std::string& path) {
    std::unique_lock lock(mu_);
    awaited_.erase(path);
    changed_.notify_all();
    if (path != held_) return;
    released_ = changed_.wait_for(lock, std::chrono::seconds(10), [&] { return awaited_.empty(); });
  }
  bool released() const {
    std::lock_guard lock(mu_);
    return released_;
  }

 private:
  std::string held_;
  std::set<std::string> awaited_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool released_ = false;
};

TarSamplesOptions joined_options(const JoinedStore& store, std::size_t read_ahead) {
  TarSamplesOptions o;
  o.read_ahead = read_ahead;
  o.open.parallel_parts = 1;  // one GET per shard, so requests name shards one to one
  o.join = std::make_shared<const ShardJoin>(
      store.urls("img"), std::vector<Strings>{store.urls("cap"), store.urls("emb")});
  return o;
}

// The reference: the three sets from memory, joined sample by sample.
Strings expected_samples(const std::set<int>& skipped = {}) {
  Strings out;
  for (int s = 0; s < kShards; ++s) {
    if (skipped.count(s)) continue;
    std::vector<Sample> parts[3];
    const char* sets[3] = {"img", "cap", "emb"};
    for (int c = 0; c < 3; ++c) parts[c] = test::read_samples(shard_bytes(sets[c], s));
    for (std::size_t i = 0; i < parts[0].size(); ++i) {
      std::string line = describe(parts[0][i]);
      for (int c = 1; c < 3; ++c) line += describe(parts[c][i]).substr(parts[c][i].key().size());
      out.push_back(line);
    }
  }
  return out;
}

TEST(JoinReadAhead, PartnersOfTheShardsAheadAreRequestedBeforeTheFirstShardIsAnswered) {
  // The first shard's answer waits for the partners of the two shards read ahead: only if
  // they are opened ahead does it come.
  auto hold = std::make_shared<HoldUntilRequested>(
      "/img-0.tar", std::set<std::string>{"/img-1.tar", "/cap-1.tar", "/emb-1.tar", "/img-2.tar",
                                          "/cap-2.tar", "/emb-2.tar"});
  JoinedStore store({}, [hold](const std::string& path) { (*hold)(path); });
  TarSamples samples(store.urls("img"), joined_options(store, 2));
  Strings got;
  while (auto s = samples.next()) got.push_back(describe(*s));
  EXPECT_TRUE(hold->released());
  EXPECT_EQ(got, expected_samples());
  EXPECT_EQ(samples.shards_opened(), static_cast<std::size_t>(kShards));
  // Every shard of every set asked for once: opened ahead, then read in its turn.
  Strings requested = store.requested();
  std::sort(requested.begin(), requested.end());
  EXPECT_EQ(std::adjacent_find(requested.begin(), requested.end()), requested.end());
  EXPECT_EQ(requested.size(), 3u * kShards);
}

TEST(JoinReadAhead, WithoutReadAheadAPartnerIsRequestedAtItsShardsTurn) {
  JoinedStore store;
  TarSamples samples(store.urls("img"), joined_options(store, 0));
  ASSERT_TRUE(samples.next());
  // Shard 0's group only: no shard of the next groups was asked for (the first sample waited
  // for all three answers).
  Strings requested = store.requested();
  std::sort(requested.begin(), requested.end());
  EXPECT_EQ(requested, (Strings{"/cap-0.tar", "/emb-0.tar", "/img-0.tar"}));
}

TEST(JoinReadAhead, APartnerThatFailsAheadIsReportedAtItsShardsTurnAndSkipsThatShard) {
  auto hold =
      std::make_shared<HoldUntilRequested>("/img-0.tar", std::set<std::string>{"/cap-1.tar"});
  JoinedStore store({"/cap-1.tar"}, [hold](const std::string& path) { (*hold)(path); });
  TarSamplesOptions o = joined_options(store, 2);
  Strings seen;
  std::vector<Error> errors;
  o.handler = [&](const Error& e) {
    errors.push_back(e);
    seen.push_back("error");
    return true;
  };
  TarSamples samples(store.urls("img"), o);
  while (auto s = samples.next()) seen.push_back(describe(*s));
  EXPECT_TRUE(hold->released());  // cap-1 was asked for while shard 0 waited

  // Shard 0's samples, then shard 1's error in its turn, then shards 2 and 3.
  Strings expected = expected_samples({1, 2, 3});
  expected.push_back("error");
  for (const std::string& line : expected_samples({0, 1})) expected.push_back(line);
  EXPECT_EQ(seen, expected);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code(), ErrorCode::not_found);
  EXPECT_EQ(errors[0].url(), store.url("cap", 1));
  EXPECT_NE(std::string(errors[0].what()).find("/cap-1.tar"), std::string::npos)
      << errors[0].what();
  EXPECT_EQ(samples.shards_failed(), 1u);
}

TEST(JoinReadAhead, WithoutAHandlerAPartnerThatFailsAheadIsRaisedAtItsShardsTurn) {
  JoinedStore store({"/emb-2.tar"});
  TarSamples samples(store.urls("img"), joined_options(store, 3));
  Strings got;
  try {
    while (auto s = samples.next()) got.push_back(describe(*s));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_EQ(e.url(), store.url("emb", 2));
  }
  EXPECT_EQ(got, expected_samples({2, 3}));  // the shards before it, all of them
}

// Resume of a joined remote pipeline with read-ahead: the state holds the first set's shards
// read ahead, and the restored pipeline opens their partners again; with interleave 2 too
// (two groups being read, two more opened ahead).
TEST(JoinReadAhead, AJoinedRemotePipelineResumesExactlyAtSeveralCuts) {
  JoinedStore store;
  for (std::size_t interleave : {1, 2}) {
    auto make = [&] {
      WebDatasetOptions o;
      o.seed = 5;
      o.shuffle_shards = true;
      o.read_ahead = 2;
      o.interleave_shards = interleave;
      o.open.parallel_parts = 1;
      o.join = {store.list("cap"), store.list("emb")};
      o.distributed.rank = 0;  // one rank: not taken from the environment
      o.distributed.world_size = 1;
      return WebDataset(store.urls("img"), o).shuffle(3);
    };
    Pipeline<Sample> p = make();
    const Strings reference = test::run_passes(p, 2, describe);
    ASSERT_EQ(reference.size(), 2 * expected_samples().size());
    for (std::size_t cut : {std::size_t{1}, std::size_t{2}, std::size_t{5}, reference.size() / 2,
                            reference.size() / 2 + 3, reference.size() - 1}) {
      EXPECT_EQ(test::interrupted_run(make, 2, cut, describe), reference)
          << "interleave " << interleave << ", interrupted after " << cut;
    }
  }
}

}  // namespace
}  // namespace wds
