// Metrics of the reading side: what the tar_samples stage counts in its pipeline's metrics()
// (shards, bytes and read time per scheme, retries, samples, dropped items), on local shards
// written by the test. Retries over a real network are in tests/remote/remote_test.cpp.
#include "wds/metrics.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "tests/support/fixtures.hpp"
#include "wds/backend.hpp"
#include "wds/shardlists.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

// `samples` samples per shard, each a small "cls" and a "bin" field whose size varies, so that a
// shard spans several 1 MiB chunks when `big` is set.
std::string shard_bytes(const std::string& prefix, int samples, std::size_t big = 0) {
  return test::make_tar([&](TarWriter& w) {
    for (int i = 0; i < samples; ++i) {
      const std::string key = prefix + std::to_string(i);
      w.write_file(key + ".cls", std::to_string(i));
      w.write_file(key + ".bin", std::string(100 + big + 37 * i, 'x'));
    }
  });
}

struct Shards {
  test::TempDir dir;
  Strings urls;
  std::uint64_t bytes = 0;  // of all the files
  // Adds a shard file holding `content`.
  std::string add(const std::string& name, const std::string& content) {
    urls.push_back(dir.write(name, content));
    bytes += content.size();
    return urls.back();
  }
};

WebDatasetOptions local_options(ErrorHandler handler = reraise_exception) {
  WebDatasetOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  o.handler = std::move(handler);
  return o;
}

ShardListOptions one_rank() {
  ShardListOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  return o;
}

template <class T>
std::size_t drain(Pipeline<T>& p) {
  std::size_t n = 0;
  for (T& item : p) {
    (void)item;
    ++n;
  }
  return n;
}

TEST(Metrics, CountShardsTheirWholeFilesSamplesAndReadTime) {
  Shards shards;
  shards.add("a.tar", shard_bytes("a", 10, 1 << 20));  // about 10 MiB: many chunks
  shards.add("b.tar", shard_bytes("b", 7));
  shards.add("c.tar", shard_bytes("c", 5));
  Pipeline<Sample> p = ShardList(shards.urls, one_rank()) | tar_samples();
  EXPECT_EQ(p.metrics().samples, 0u);
  EXPECT_TRUE(p.metrics().sources.empty());

  EXPECT_EQ(drain(p), 22u);
  const Metrics m = p.metrics();
  ASSERT_EQ(m.sources.size(), 1u);  // plain paths count as "file"
  const std::optional<SourceMetrics> file = m.source("file");
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->shards, 3u);
  // The reader drains each source to its end (the record padding after the end-of-archive
  // blocks included), so every byte of every file is read, once.
  EXPECT_EQ(file->bytes, shards.bytes);
  EXPECT_EQ(file->retries, 0u);
  EXPECT_GT(file->read_seconds, 0.0);
  EXPECT_EQ(m.samples, 22u);
  EXPECT_EQ(m.dropped, 0u);
  EXPECT_EQ(m.shards(), 3u);
  EXPECT_EQ(m.bytes(), shards.bytes);

  // Counters are never reset: a second pass adds to them.
  EXPECT_EQ(drain(p), 22u);
  EXPECT_EQ(p.metrics().shards(), 6u);
  EXPECT_EQ(p.metrics().bytes(), 2 * shards.bytes);
  EXPECT_EQ(p.metrics().samples, 44u);
}

TEST(Metrics, WebDatasetAndFileUrlsCountTheSame) {
  Shards shards;
  shards.add("a.tar", shard_bytes("a", 4));
  shards.add("b.tar", shard_bytes("b", 6));
  Strings urls = {"file://" + shards.urls[0], "file://" + shards.urls[1]};
  Pipeline<Sample> p = WebDataset(urls, local_options()).shuffle(5);
  EXPECT_EQ(drain(p), 10u);
  const Metrics m = p.metrics();
  const std::optional<SourceMetrics> file = m.source("file");
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->shards, 2u);
  EXPECT_EQ(file->bytes, shards.bytes);
  EXPECT_EQ(m.samples, 10u);
}

TEST(Metrics, ACorruptShardAmongGoodOnesIsOneDroppedItem) {
  Shards shards;
  shards.add("a.tar", shard_bytes("a", 3));
  std::string garbage(5000, '\0');
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 7 + 3);
  shards.add("garbage.tar", garbage);
  shards.add("c.tar", shard_bytes("c", 4));
  for (ErrorHandler handler :
       {ErrorHandler(warn_and_continue), ErrorHandler(ignore_and_continue)}) {
    Pipeline<Sample> p = WebDataset(shards.urls, local_options(handler));
    EXPECT_EQ(drain(p), 7u);
    const Metrics m = p.metrics();
    EXPECT_EQ(m.dropped, 1u);
    EXPECT_EQ(m.samples, 7u);
    EXPECT_EQ(m.shards(), 3u);  // the garbage opened fine; reading it failed
    const std::uint64_t good = shards.bytes - garbage.size();
    EXPECT_GT(m.bytes(), good);  // the good shards whole, and some garbage
    EXPECT_LE(m.bytes(), shards.bytes);
  }
}

TEST(Metrics, AShardThatFailsToOpenIsDroppedNotOpened) {
  Shards shards;
  shards.add("a.tar", shard_bytes("a", 3));
  Strings urls = {shards.urls[0], shards.dir.file("missing.tar"), shards.urls[0]};
  Pipeline<Sample> p = WebDataset(urls, local_options(ignore_and_continue));
  EXPECT_EQ(drain(p), 6u);
  const Metrics m = p.metrics();
  EXPECT_EQ(m.shards(), 2u);
  EXPECT_EQ(m.bytes(), 2 * shards.bytes);
  EXPECT_EQ(m.dropped, 1u);
  // A handler that stops the stream ends it: nothing is dropped.
  Pipeline<Sample> stop = WebDataset(urls, local_options([](const Error&) { return false; }));
  EXPECT_EQ(drain(stop), 3u);
  EXPECT_EQ(stop.metrics().dropped, 0u);
  EXPECT_EQ(stop.metrics().shards(), 1u);
}

TEST(Metrics, ATruncatedShardDeliversItsCompleteSamplesAndDropsOnce) {
  Shards shards;
  const std::string whole = shard_bytes("t", 6);
  shards.add("t.tar", whole.substr(0, whole.size() / 2));
  shards.add("b.tar", shard_bytes("b", 2));
  Pipeline<Sample> p = WebDataset(shards.urls, local_options(ignore_and_continue));
  const std::size_t n = drain(p);
  EXPECT_GE(n, 3u);
  const Metrics m = p.metrics();
  EXPECT_EQ(m.samples, n);
  EXPECT_EQ(m.dropped, 1u);
  EXPECT_EQ(m.shards(), 2u);
  EXPECT_EQ(m.bytes(), shards.bytes);
}

TEST(Metrics, ADuplicateMemberDroppedByTheHandlerCounts) {
  Shards shards;
  shards.add("d.tar", test::make_tar([](TarWriter& w) {
               w.write_file("k.txt", "one");
               w.write_file("k.TXT", "two");  // the same extension, lowercased
               w.write_file("l.txt", "three");
             }));
  Pipeline<Sample> p = WebDataset(shards.urls, local_options(ignore_and_continue));
  EXPECT_EQ(drain(p), 2u);
  EXPECT_EQ(p.metrics().dropped, 1u);
  EXPECT_EQ(p.metrics().samples, 2u);
}

TEST(Metrics, ACopyOfAPipelineStartsAtZero) {
  Shards shards;
  shards.add("a.tar", shard_bytes("a", 5));
  Pipeline<Sample> p = ShardList(shards.urls, one_rank()) | tar_samples();
  drain(p);
  Pipeline<Sample> q = p;
  const Metrics fresh = q.metrics();
  EXPECT_EQ(fresh.samples, 0u);
  EXPECT_EQ(fresh.shards(), 0u);
  EXPECT_EQ(fresh.bytes(), 0u);
  drain(q);
  EXPECT_EQ(q.metrics().samples, 5u);
  EXPECT_EQ(p.metrics().samples, 5u);  // each counts only its own
  Pipeline<Sample> r = q;
  r = p;  // assigned: a fresh start too
  EXPECT_EQ(r.metrics().samples, 0u);
}

TEST(Metrics, ReadFromAnotherThreadWhileIterating) {
  Shards shards;
  for (int i = 0; i < 4; ++i) shards.add("s" + std::to_string(i) + ".tar", shard_bytes("k", 50));
  Pipeline<Sample> p = ShardList(shards.urls, one_rank()) | tar_samples();
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> looks{0};
  bool monotonic = true;
  std::thread watcher([&] {
    std::uint64_t last_samples = 0, last_bytes = 0;
    while (!done.load()) {
      const Metrics m = p.metrics();
      monotonic = monotonic && m.samples >= last_samples && m.bytes() >= last_bytes;
      last_samples = m.samples;
      last_bytes = m.bytes();
      ++looks;
    }
  });
  // The watcher reads at least once while the pipeline runs, however the threads are scheduled
  // (on a loaded machine the 5 passes can end before the watcher's first look).
  while (looks.load() == 0) std::this_thread::yield();
  std::size_t n = 0;
  for (int pass = 0; pass < 5; ++pass) n += drain(p);
  done = true;
  watcher.join();
  EXPECT_EQ(n, 1000u);
  EXPECT_TRUE(monotonic);
  EXPECT_EQ(p.metrics().samples, 1000u);
  EXPECT_EQ(p.metrics().bytes(), 5 * shards.bytes);
}

TEST(Metrics, AResumedShardCountsOnceFromItsOffset) {
  Shards shards;
  shards.add("a.tar", shard_bytes("a", 8));
  shards.add("b.tar", shard_bytes("b", 4));
  Pipeline<Sample> p = ShardList(shards.urls, one_rank()) | tar_samples();
  auto it = p.begin();
  for (int i = 0; i < 2; ++i) ++it;  // three samples of a.tar read
  const std::string state = p.state();

  Pipeline<Sample> q = ShardList(shards.urls, one_rank()) | tar_samples();
  q.restore(state);
  std::vector<Sample> rest;
  for (Sample& s : q) rest.push_back(s);
  ASSERT_EQ(rest.size(), 9u);
  ASSERT_EQ(rest.front().key(), "a3");
  const Metrics m = q.metrics();
  EXPECT_EQ(m.samples, 9u);
  EXPECT_EQ(m.shards(), 2u);  // a.tar sought to its fourth sample, then b.tar
  const std::uint64_t a_size = std::filesystem::file_size(shards.urls[0]);
  EXPECT_EQ(m.bytes(), shards.bytes - rest.front().offset());
  EXPECT_LT(m.bytes(), shards.bytes);
  EXPECT_GT(rest.front().offset(), 0u);
  EXPECT_LT(rest.front().offset(), a_size);
}

TEST(Metrics, ARestoredShuffleBufferCountsTheShardsItReopens) {
  Shards shards;
  shards.add("a.tar", shard_bytes("a", 20));
  Pipeline<Sample> p = ShardList(shards.urls, one_rank()) | tar_samples() | shuffle(5, 5);
  auto it = p.begin();
  ++it;
  const std::string state = p.state();
  Pipeline<Sample> q = ShardList(shards.urls, one_rank()) | tar_samples() | shuffle(5, 5);
  q.restore(state);
  const Metrics restored = q.metrics();
  // Every buffered sample was read again from its shard; the stage's own shard once more.
  EXPECT_GE(restored.shards(), 2u);
  EXPECT_GT(restored.bytes(), 0u);
  EXPECT_EQ(restored.samples, 0u);  // restored into the buffer, not read by the stage
  EXPECT_EQ(drain(q), 18u);
}

TEST(Metrics, TarSamplesWithoutAPipelineCountsWhereItsOptionsSay) {
  Shards shards;
  shards.add("a.tar", shard_bytes("a", 3));
  MetricsCounters counters;
  TarSamplesOptions options;
  options.metrics = &counters;
  TarSamples samples(shards.urls, options);
  while (samples.next()) {
  }
  const Metrics m = counters.snapshot();
  EXPECT_EQ(m.samples, 3u);
  EXPECT_EQ(m.shards(), 1u);
  EXPECT_EQ(m.bytes(), shards.bytes);

  // A chain started by hand, with no Pipeline and so no counters, reads as before.
  Pipeline<Sample> p = ShardList(shards.urls, one_rank()) | tar_samples();
  StreamPtr<Sample> chain = p.build();
  chain->start(PassContext{});
  std::size_t n = 0;
  while (chain->next()) ++n;
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(p.metrics().samples, 0u);
}

// A scheme whose sources "retry" once on opening, as a network source would on its transfer
// thread: the stage counts the retry under the scheme's slot and still calls the user's hook.
TEST(Metrics, RetriesAreCountedAndTheUsersHookStillCalled) {
  const std::string tar = shard_bytes("r", 2);
  register_backend({
      .schemes = {"wds-metrics-test"},
      .open =
          [tar](const std::string& url, const OpenOptions& o) {
            if (o.on_retry) o.on_retry(Error::unavailable(url, "", "HTTP 503: test"), 1);
            return open_memory(url, Bytes::copy_of(tar));
          },
  });
  std::mutex mu;
  Strings heard;
  WebDatasetOptions options = local_options();
  options.open.on_retry = [&](const Error& cause, int attempt) {
    std::lock_guard lock(mu);
    heard.push_back(cause.url() + "#" + std::to_string(attempt));
  };
  Pipeline<Sample> p =
      WebDataset(Strings{"wds-metrics-test://x/a.tar", "wds-metrics-test://x/b.tar"}, options);
  EXPECT_EQ(drain(p), 4u);
  EXPECT_EQ(heard, (Strings{"wds-metrics-test://x/a.tar#1", "wds-metrics-test://x/b.tar#1"}));
  const Metrics m = p.metrics();
  EXPECT_EQ(m.retries(), 2u);
  const std::optional<SourceMetrics> other =
      m.source("other");  // a scheme without a slot of its own
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->retries, 2u);
  EXPECT_EQ(other->shards, 2u);
  EXPECT_EQ(other->bytes, 2 * tar.size());
}

}  // namespace
}  // namespace wds
