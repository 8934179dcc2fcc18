// Reading under an object store's latency and per-connection cap: a large resource read as
// ranged parts in parallel (through the scripted transport, without a server), and shards opened
// ahead of their turn (against nginx through the shaping proxy; skipped without the servers).
// Whatever the parts and the read-ahead do, every byte and every sample must arrive exactly
// once, in order.
#include <gtest/gtest.h>

#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lib/storage/http_source.hpp"
#include "lib/storage/http_transport.hpp"
#include "tests/support/env.hpp"
#include "tests/support/fake_transport.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/shaping_proxy.hpp"
#include "wds/remote.hpp"
#include "wds/source.hpp"
#include "wds/tar_samples.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

std::string pattern_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + i / 251) & 0xff);
  return s;
}

std::string drain(ByteSource& src) {
  std::string got;
  for (auto c = src.read(); !c.empty(); c = src.read()) {
    got.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  return got;
}

struct Range {
  std::uint64_t first = 0, last = 0;  // inclusive, as in the header
};

std::optional<Range> range_of(const test::FakeRequest& r, std::uint64_t size) {
  std::optional<std::string> h = r.header("Range");
  if (!h) return std::nullopt;
  std::string spec = h->substr(h->find('=') + 1);
  std::size_t dash = spec.find('-');
  Range out{std::stoull(spec.substr(0, dash)), size - 1};
  if (dash + 1 < spec.size())
    out.last = std::min<std::uint64_t>(size - 1, std::stoull(spec.substr(dash + 1)));
  return out;
}

// A store that honours Range (start and end), as S3 does. `cut(range start)`: how many bytes of
// that answer arrive before the connection breaks (nullopt: all of them); asked once per start.
test::FakeTransport::Responder store(
    std::string data, std::function<std::optional<std::size_t>(std::uint64_t)> cut = nullptr) {
  auto asked = std::make_shared<std::map<std::uint64_t, int>>();
  return [data = std::move(data), cut = std::move(cut), asked](const test::FakeRequest& r) {
    test::FakeResponse out;
    std::optional<Range> range = range_of(r, data.size());
    if (range) {
      out.status = 206;
      out.headers = {{"content-range", "bytes " + std::to_string(range->first) + "-" +
                                           std::to_string(range->last) + "/" +
                                           std::to_string(data.size())}};
      out.body = data.substr(range->first, range->last - range->first + 1);
    } else {
      out.headers = {{"content-length", std::to_string(data.size())}};
      out.body = data;
    }
    const std::uint64_t start = range ? range->first : 0;
    if (cut && (*asked)[start]++ == 0) out.cut_after = cut(start);
    return out;
  };
}

// `buffer_bytes` 0: HttpOptions' default.
OpenOptions parts_over(std::shared_ptr<test::FakeTransport> fake, std::size_t parallel,
                       std::uint64_t part_size, std::uint64_t single_stream_rate = 0,
                       std::size_t buffer_bytes = 0) {
  OpenOptions open;
  HttpOptions http;
  http.initial_backoff = std::chrono::milliseconds(0);
  if (buffer_bytes > 0) http.buffer_bytes = buffer_bytes;
  open.backend_options.set(http);
  open.backend_options.set(http::TransportOption{std::move(fake)});
  open.parallel_parts = parallel;
  open.part_size = part_size;
  open.single_stream_rate = single_stream_rate;  // 0: parts whatever the (instant) rate
  return open;
}

TEST(HttpParts, ASlowConnectionIsReadAsRangedPartsHandedOutInOrder) {
  const std::string data = pattern_bytes(700'000);
  auto fake = std::make_shared<test::FakeTransport>(store(data));
  auto src = open_url("http://fake.test/x.tar", parts_over(fake, 3, 65536));
  EXPECT_EQ(drain(*src), data);
  ASSERT_TRUE(src->size().has_value());
  EXPECT_EQ(*src->size(), data.size());

  // The first GET asks for everything and is cut short; ranged parts of at most a part each
  // cover the rest, once each, without a gap.
  std::vector<test::FakeRequest> sent = fake->requests();
  ASSERT_GT(sent.size(), 3u);
  EXPECT_FALSE(sent[0].header("Range"));
  std::vector<Range> parts;
  for (std::size_t i = 1; i < sent.size(); ++i) {
    std::optional<Range> r = range_of(sent[i], data.size());
    ASSERT_TRUE(r) << i;
    EXPECT_LE(r->last - r->first + 1, 65536u);
    parts.push_back(*r);
  }
  std::sort(parts.begin(), parts.end(), [](Range a, Range b) { return a.first < b.first; });
  EXPECT_GE(parts.front().first, 65536u);  // after the rate was measured on the first GET
  for (std::size_t i = 1; i < parts.size(); ++i) EXPECT_EQ(parts[i].first, parts[i - 1].last + 1);
  EXPECT_EQ(parts.back().last, data.size() - 1);
}

TEST(HttpParts, ABrokenPartResumesWithARangeFromWhereItStopped) {
  const std::string data = pattern_bytes(700'000);
  std::optional<std::uint64_t> broken;
  std::mutex mu;
  auto fake = std::make_shared<test::FakeTransport>(
      store(data, [&](std::uint64_t start) -> std::optional<std::size_t> {
        std::lock_guard lock(mu);
        if (start < 300'000 || broken) return std::nullopt;
        broken = start;  // the first part from byte 300,000 on breaks after 5,000 bytes
        return 5000;
      }));
  EXPECT_EQ(drain(*open_url("http://fake.test/x.tar", parts_over(fake, 3, 65536))), data);
  ASSERT_TRUE(broken);
  bool resumed = false;
  for (const test::FakeRequest& r : fake->requests()) {
    std::optional<Range> range = range_of(r, data.size());
    if (range && range->first == *broken + 5000) {
      resumed = true;
      EXPECT_LE(range->last, *broken + 65535);  // the rest of that part only
    }
  }
  EXPECT_TRUE(resumed);
}

TEST(HttpParts, AFastConnectionIsReadByOneGet) {
  const std::string data = pattern_bytes(700'000);
  auto fake = std::make_shared<test::FakeTransport>(store(data));
  // Any rate is "fast" at 1 byte per second: the first GET reads on to the end.
  EXPECT_EQ(drain(*open_url("http://fake.test/x.tar", parts_over(fake, 3, 65536, 1))), data);
  ASSERT_EQ(fake->requests().size(), 1u);
  EXPECT_FALSE(fake->requests()[0].header("Range"));
}

TEST(HttpParts, AFastConnectionReadSlowlyThroughASmallBufferIsStillOneGet) {
  // The rate is measured over the first MiB (a part), but the reader takes 256 KiB and then
  // pauses for 300 ms while a 256 KiB buffer holds the transfer back: that wait is the reader's
  // pace, not the connection's, which answers at once. Counted, the rate would be below 4 MB/s.
  const std::string data = pattern_bytes(3'000'000);
  auto fake = std::make_shared<test::FakeTransport>(store(data));
  const OpenOptions open = parts_over(fake, 3, std::uint64_t{1} << 20, 50'000'000, 256 * 1024);
  auto src = open_url("http://fake.test/x.tar", open);
  std::string got;
  for (auto c = src->read(); !c.empty(); c = src->read()) {
    if (got.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    got.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  EXPECT_EQ(got, data);
  ASSERT_EQ(fake->requests().size(), 1u);
  EXPECT_FALSE(fake->requests()[0].header("Range"));
}

// Two shards from `host` through `fake`, each read to the end; the requests each one sent.
std::vector<std::size_t> requests_per_shard(const std::shared_ptr<test::FakeTransport>& fake,
                                            const std::string& host, const std::string& data,
                                            const OpenOptions& open) {
  std::vector<std::size_t> sent;
  for (const char* name : {"/a.tar", "/b.tar"}) {
    const std::size_t before = fake->requests().size();
    EXPECT_EQ(drain(*open_url(host + name, open)), data) << name;
    sent.push_back(fake->requests().size() - before);
  }
  return sent;
}

// A host name of its own for each use: what parts did is recorded by host for the whole
// process, so a test repeated (--gtest_repeat) starts afresh.
std::string fresh_host(const std::string& name) {
  static int uses = 0;
  return "http://" + name + "-" + std::to_string(uses++) + ".test";
}

// 3 MB at 20 MB/s: one GET takes 150 ms. The first 256 KiB (a part) are measured, slower than
// the 100 MB/s single_stream_rate, so parts are tried on the first shard.
constexpr double kCap = 20e6;
OpenOptions capped_parts(std::shared_ptr<test::FakeTransport> fake) {
  return parts_over(std::move(fake), 3, 256 * 1024, 100'000'000);
}

// The body bytes `fake` has handed out once it has handed out some and then stood still for
// 100 ms.
std::size_t settled(const test::FakeTransport& fake) {
  for (int i = 0; i < 1000 && fake.delivered() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::size_t last = fake.delivered();
  for (int still = 0, i = 0; still < 5 && i < 500; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::size_t now = fake.delivered();
    still = now == last ? still + 1 : 0;
    last = now;
  }
  return last;
}

// Scenario: shards opened ahead of their turn (read-ahead), not read yet. From a host where one
// GET per shard does (its connections were measured fast, or its parts did not pay off), a
// shard sends its request and takes nothing more until it is read, on the reader's thread:
// before, it filled its 4 MiB buffer while the shard before it was read, and 4 workers reading 2
// shards ahead kept 12 transfers going against a busy server. From a host with no such record,
// it reads on and opens its parts before its turn, as shards ahead of an object store's capped
// connections must to keep the reader fed.
TEST(HttpParts, AShardOpenedAheadWhereOneGetDoesTakesNothingUntilRead) {
  const std::string data = pattern_bytes(6'000'000);
  {
    auto fake = std::make_shared<test::FakeTransport>(store(data));
    const std::string host = fresh_host("fast");
    // Any rate is "fast" at 1 byte per second: the first shard records it.
    const OpenOptions open = parts_over(fake, 3, 1 << 20, 1);
    EXPECT_EQ(drain(*open_url(host + "/a.tar", open)), data);
    const std::size_t before = fake->delivered();
    auto ahead = open_url(host + "/b.tar", open);
    EXPECT_EQ(fake->requests().size(), 2u);  // sent when opened
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(fake->delivered(), before);  // nothing moves it but read()
    EXPECT_EQ(drain(*ahead), data);
    EXPECT_EQ(fake->requests().size(), 2u);  // one GET
  }
  {
    // No record: parts whatever the rate, opened before the shard is read.
    auto fake = std::make_shared<test::FakeTransport>(store(data));
    auto ahead = open_url(fresh_host("unknown") + "/a.tar", parts_over(fake, 3, 1 << 20));
    settled(*fake);
    EXPECT_GT(fake->requests().size(), 1u);
    EXPECT_GE(fake->delivered(), std::size_t{4} << 20);
    EXPECT_EQ(drain(*ahead), data);
  }
}

// Threads of this process.
std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

// Scenario: 4 workers, each reading a shard and opening 2 ahead, from a server on the same cores.
// A transfer thread per shard costs the reader a wake-up and a core's cache for every chunk it
// hands over, and takes the cores the server needs. From a host where one GET per shard does, a
// shard has no thread of its own: read() moves its transfer on, on the reader's thread.
TEST(HttpParts, AShardWhereOneGetDoesIsReadWithoutAThreadOfItsOwn) {
  const std::string data = pattern_bytes(600'000);
  // At 1 MB/s, a transfer thread stays busy while the test counts.
  auto fake = std::make_shared<test::FakeTransport>([&data](const test::FakeRequest& r) {
    test::FakeResponse out = store(data)(r);
    out.bytes_per_second = 1e6;
    return out;
  });
  const OpenOptions open = parts_over(fake, 3, 1 << 20, 1);
  const std::size_t before = thread_count();
  {
    auto a = open_url(fresh_host("unknown") + "/a.tar", open);
    auto b = open_url(fresh_host("unknown") + "/b.tar", open);
    EXPECT_GE(thread_count(), before + 2);
  }
  const std::string host = fresh_host("one-get");
  record_one_get_host(host);
  auto a = open_url(host + "/a.tar", open);
  auto b = open_url(host + "/b.tar", open);
  EXPECT_EQ(thread_count(), before);
  EXPECT_EQ(drain(*a), data);
  EXPECT_EQ(drain(*b), data);
  EXPECT_EQ(thread_count(), before);
}

TEST(HttpParts, PartsThatDoNotPayOffAreLeftOutForTheNextShardsFromTheHost) {
  // All connections share 20 MB/s, as readers of one busy server do: three parts download
  // no faster than one GET, and the next shard from that host is read by one GET.
  const std::string data = pattern_bytes(3'000'000);
  auto fake = std::make_shared<test::FakeTransport>(store(data), kCap);
  const OpenOptions open = capped_parts(fake);
  std::vector<std::size_t> sent = requests_per_shard(fake, fresh_host("shared"), data, open);
  EXPECT_GT(sent[0], 1u);
  EXPECT_EQ(sent[1], 1u);
  // The record is the host's: another host still tries parts.
  sent = requests_per_shard(fake, fresh_host("other"), data, open);
  EXPECT_GT(sent[0], 1u);
}

// A store whose every connection is capped at `bytes_per_second` (an object store's cap, scaled
// down), in 16 KiB pieces. URLs ending in `late` answer 100 ms after their request.
std::shared_ptr<test::FakeTransport> capped_store(const std::string& data,
                                                  double bytes_per_second = 2e6,
                                                  const std::string& late = "") {
  return std::make_shared<test::FakeTransport>(
      [data, bytes_per_second, late](const test::FakeRequest& r) {
        test::FakeResponse out = store(data)(r);
        out.piece_bytes = 16384;
        out.bytes_per_second = bytes_per_second;
        if (!late.empty() && r.url.ends_with(late)) {
          out.first_byte_after = std::chrono::milliseconds(100);
        }
        return out;
      });
}

TEST(HttpParts, PartsThatPayOffAreKeptForTheNextShards) {
  // Each connection capped at 5 MB/s, as an object store's are: three parts download about
  // three times as fast as one GET, and the next shard is read in parts too. (At 20 MB/s in
  // 1000-byte pieces, a loaded machine failed it: a first GET whose first bytes came late
  // measured 32 MB/s as they caught up, and starved parts came in at one GET's rate.)
  const std::string data = pattern_bytes(3'000'000);
  auto fake = capped_store(data, 5e6);
  const std::vector<std::size_t> sent =
      requests_per_shard(fake, fresh_host("capped"), data, capped_parts(fake));
  EXPECT_GT(sent[0], 1u);
  EXPECT_GT(sent[1], 1u);
}

// Where the ranged parts of `url` started: the first byte of each Range request, ascending (parts
// start on threads of their own, so their requests arrive in any order).
std::vector<std::uint64_t> part_starts(const test::FakeTransport& fake, const std::string& url) {
  std::vector<std::uint64_t> starts;
  for (const test::FakeRequest& r : fake.requests()) {
    if (r.url != url) continue;
    if (std::optional<std::string> h = r.header("Range")) {
      starts.push_back(std::stoull(h->substr(h->find('=') + 1)));
    }
  }
  std::sort(starts.begin(), starts.end());
  return starts;
}

// Scenario: a reader slower than one connection (a decoding one, scaled down: 2 MB/s) from a store
// whose connections are capped at 5 MB/s. The first shard tries parts, and its first round pays
// off: they download ahead of the reader, at three connections' rate. But the shard as a whole
// comes at the reader's pace, no faster than one GET would bring it, so the next shard is read by
// one GET, without parts' buffers. (Judged on its first round alone, every shard went to parts.)
TEST(HttpParts, PartsForAReaderSlowerThanOneConnectionAreLeftOutForTheNextShards) {
  const std::string data = pattern_bytes(2'000'000);
  auto fake = capped_store(data, 5e6);
  const OpenOptions open = capped_parts(fake);
  const std::string host = fresh_host("slow-reader");
  auto first = open_url(host + "/a.tar", open);
  std::string got;
  for (auto c = first->read(); !c.empty(); c = first->read()) {
    got.append(reinterpret_cast<const char*>(c.data()), c.size());
    std::this_thread::sleep_for(std::chrono::microseconds(c.size() / 2));  // 2 MB/s
  }
  EXPECT_EQ(got, data);
  EXPECT_FALSE(part_starts(*fake, host + "/a.tar").empty());
  const std::size_t before = fake->requests().size();
  EXPECT_EQ(drain(*open_url(host + "/b.tar", open)), data);
  EXPECT_EQ(fake->requests().size() - before, 1u);
}

// A server whose connections share `bytes_per_second` (a busy server's or a link's bandwidth,
// scaled down), in 16 KiB pieces.
std::shared_ptr<test::FakeTransport> shared_server(const std::string& data,
                                                   double bytes_per_second) {
  return std::make_shared<test::FakeTransport>(
      [data](const test::FakeRequest& r) {
        test::FakeResponse out = store(data)(r);
        out.piece_bytes = 16384;
        return out;
      },
      bytes_per_second);
}

// `fake` was sent `n` requests, each a whole GET (no Range: no part).
void expect_one_get_each(const test::FakeTransport& fake, std::size_t n) {
  std::vector<test::FakeRequest> sent = fake.requests();
  EXPECT_EQ(sent.size(), n);
  for (const test::FakeRequest& r : sent) EXPECT_FALSE(r.header("Range")) << r.url;
}

// Scenario: a worker's first shard and the two it opens ahead start at once, from a server whose
// bandwidth they share (8 MB/s together, scaled down from a fast server's). Measured at once,
// each connection would look capped at a third of that, below the 4 MB/s single_stream_rate, and
// all three shards would go to ranged parts. One first GET measures alone; the others take its
// rate: one GET each.
TEST(HttpParts, FirstGetsOpenedAtOnceTakeTheRateOneOfThemMeasuredAlone) {
  const std::string data = pattern_bytes(1'000'000);
  auto fake = shared_server(data, 8e6);
  const OpenOptions open = parts_over(fake, 3, 256 * 1024, 4'000'000);
  const std::string host = fresh_host("shared-fast");
  std::vector<std::unique_ptr<ByteSource>> shards;
  for (const char* name : {"/a.tar", "/b.tar", "/c.tar"}) {
    shards.push_back(open_url(host + name, open));
  }
  for (auto& shard : shards) EXPECT_EQ(drain(*shard), data);
  expect_one_get_each(*fake, 3);
}

// Scenario: the same three shards from an object store whose every connection is capped (2 MB/s
// each, scaled down): the rate measured alone is the cap, one shard tries parts, they pay off,
// and the other two, which took the rate and read on meanwhile, open theirs on that verdict:
// every shard is read in ranged parts. They wait for the verdict, not for PartsRecord's 2 s
// limit.
TEST(HttpParts, FirstGetsOpenedAtOnceFromCappedConnectionsAllGoToParts) {
  const std::string data = pattern_bytes(1'000'000);
  auto fake = capped_store(data);
  const OpenOptions open = parts_over(fake, 3, 256 * 1024, 4'000'000);
  const std::string host = fresh_host("capped-at-once");
  std::vector<std::string> urls;
  std::vector<std::unique_ptr<ByteSource>> shards;
  const auto start = std::chrono::steady_clock::now();
  for (const char* name : {"/a.tar", "/b.tar", "/c.tar"}) {
    urls.push_back(host + name);
    shards.push_back(open_url(urls.back(), open));
  }
  for (auto& shard : shards) EXPECT_EQ(drain(*shard), data);
  // About 0.4 s: a 256 KiB probe at 2 MB/s, the trial's first round of 2 x 256 KiB at 4 MB/s,
  // then the rest of each shard in parts.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  for (const std::string& url : urls) EXPECT_FALSE(part_starts(*fake, url).empty()) << url;
}

// Scenario: 2 workers' first shards and the 2 each opens ahead, 6 at once, from a host behind a
// link they all share (16 MB/s, scaled down from 2 Gbit/s) that is slower than
// single_stream_rate (40 MB/s): the rate measured alone looks capped. One shard tries parts;
// they download no faster than its first GET did, and the other five, which waited for that
// verdict, are read by one GET each. Before, all six opened parts at once, each with up to
// parallel + 2 parts' buffers (4 workers over a 2 Gbit/s link peaked at 378-493 MB where one GET
// each takes 64-72 MB). Once the 16 shards read by one GET after that verdict are used up, the
// next ones opened together again leave the trial to one of them.
TEST(HttpParts, FirstGetsBehindASharedLinkSlowerThanOneStreamLeaveTheTrialToOneShard) {
  const std::string data = pattern_bytes(1'000'000);
  auto fake = shared_server(data, 16e6);
  const OpenOptions open = parts_over(fake, 3, 256 * 1024, 40'000'000);
  const std::string host = fresh_host("slow-link");
  int opened = 0;
  // Opens n shards at once and reads them in turn: how many tried parts.
  auto tried_of = [&](int n) {
    std::vector<std::string> urls;
    std::vector<std::unique_ptr<ByteSource>> shards;
    for (int i = 0; i < n; ++i) {
      urls.push_back(host + "/" + std::to_string(opened++) + ".tar");
      shards.push_back(open_url(urls.back(), open));
    }
    for (auto& shard : shards) EXPECT_EQ(drain(*shard), data);
    int tried = 0;
    for (const std::string& url : urls) tried += part_starts(*fake, url).empty() ? 0 : 1;
    return tried;
  };
  EXPECT_EQ(tried_of(6), 1);
  // 11 of the 16 are left: 11 more by one GET, then another trial among the other 11.
  EXPECT_EQ(tried_of(22), 1);
}

// Scenario: a worker's shard and the 2 it opens ahead from a capped store (2 MB/s per connection,
// scaled down), with a small buffer (64 KiB). The shard read first is the last to get its first
// byte, so one opened ahead measures and tries parts, while the first reads on by one GET,
// waiting for that verdict. The first GET of the shard on trial cannot bring its rest until it
// is read, after the first: the verdict comes from its parts, and the first shard opens its parts
// too. Judged on that first GET's rest too, the verdict came only once the first shard was read,
// all of it by one GET at one connection's rate.
TEST(HttpParts, TheVerdictOnATrialDoesNotWaitForItsShardToBeRead) {
  const std::string data = pattern_bytes(1'000'000);
  auto fake = capped_store(data, 2e6, "/0.tar");
  const OpenOptions open = parts_over(fake, 3, 256 * 1024, 4'000'000, 64 * 1024);
  const std::string host = fresh_host("capped-read-later");
  std::vector<std::string> urls;
  std::vector<std::unique_ptr<ByteSource>> shards;
  for (int i = 0; i < 3; ++i) {
    urls.push_back(host + "/" + std::to_string(i) + ".tar");
    shards.push_back(open_url(urls.back(), open));
  }
  for (auto& shard : shards) EXPECT_EQ(drain(*shard), data);
  EXPECT_FALSE(part_starts(*fake, urls[0]).empty());
  // (The third one, not read meanwhile, may have too little left for parts by the verdict.)
  EXPECT_FALSE(part_starts(*fake, urls[1]).empty() && part_starts(*fake, urls[2]).empty());
}

// Scenario: a shard waits for the verdict on another's trial of parts, and the trial's first round
// takes longer than the 2 s it waits (over a slow link its parts share with the shards being
// read): it reads on by its first GET, as it did meanwhile. Scaled down: every connection is
// capped at 2 MB/s, the trial's parts at 20 KB/s. After its 2 s the waiting shard has about 0.7
// MB left, enough for parts. (It went to parts then: over 1 Gbit/s, 4 workers peaked at 310 MB.)
TEST(HttpParts, AShardWithoutAVerdictInTimeReadsOnByOneGet) {
  const std::string data = pattern_bytes(5'000'000);
  auto fake = std::make_shared<test::FakeTransport>([data](const test::FakeRequest& r) {
    test::FakeResponse out = store(data)(r);
    const bool part = r.header("Range").has_value();
    out.bytes_per_second = part ? 20e3 : 2e6;
    out.piece_bytes = part ? 1024 : 16384;  // a closed trial stops within a piece
    return out;
  });
  const OpenOptions open = parts_over(fake, 3, 256 * 1024, 4'000'000);
  const std::string host = fresh_host("no-verdict");
  auto trial = open_url(host + "/trial.tar", open);  // measures first, and tries parts
  for (int i = 0; i < 1000 && part_starts(*fake, host + "/trial.tar").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(part_starts(*fake, host + "/trial.tar").empty());
  EXPECT_EQ(drain(*open_url(host + "/waiting.tar", open)), data);
  EXPECT_TRUE(part_starts(*fake, host + "/waiting.tar").empty());
}

// Scenario: a shard opened just after another one from the same host measured its connection
// (capped, so it was read in parts) takes that rate rather than measuring again: its parts start
// one part after its first byte, not after a measured part and one more.
TEST(HttpParts, AFirstGetJustAfterAMeasurementTakesItsRate) {
  const std::string data = pattern_bytes(1'000'000);
  auto fake = capped_store(data);
  constexpr std::uint64_t kPart = 256 * 1024;
  const OpenOptions open = parts_over(fake, 3, kPart, 4'000'000);
  const std::string host = fresh_host("capped-in-turn");
  EXPECT_EQ(drain(*open_url(host + "/a.tar", open)), data);
  EXPECT_EQ(drain(*open_url(host + "/b.tar", open)), data);
  const std::vector<std::uint64_t> measured = part_starts(*fake, host + "/a.tar");
  const std::vector<std::uint64_t> taken = part_starts(*fake, host + "/b.tar");
  ASSERT_FALSE(measured.empty());
  ASSERT_FALSE(taken.empty());
  EXPECT_GE(measured.front(), 2 * kPart);
  EXPECT_LT(taken.front(), 2 * kPart);
}

// Scenario: while a large object's first GET measures a slow connection, small objects from the
// same host (too small for parts) are read at once: they do not wait for its rate.
TEST(HttpParts, ASmallObjectDoesNotWaitForAnotherFirstGetsMeasurement) {
  const std::string large = pattern_bytes(3'000'000);
  const std::string small = pattern_bytes(100'000);
  auto fake = std::make_shared<test::FakeTransport>([&](const test::FakeRequest& r) {
    if (r.url.ends_with("/large.tar")) {
      test::FakeResponse out = store(large)(r);
      out.bytes_per_second = 10'000;  // 26 s to measure its first 256 KiB
      return out;
    }
    return store(small)(r);
  });
  const OpenOptions open = parts_over(fake, 3, 256 * 1024, 40'000'000);
  const std::string host = fresh_host("small-objects");
  auto measuring = open_url(host + "/large.tar", open);
  for (int i = 0; i < 1000 && fake->delivered() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(fake->delivered(), 0u);  // its first bytes came: it measures now
  const auto start = std::chrono::steady_clock::now();
  for (const char* name : {"/a.tar", "/b.tar", "/c.tar"}) {
    EXPECT_EQ(drain(*open_url(host + name, open)), small) << name;
  }
  // A small object waiting for the measurement would wait out PartsRecord's 2 s limit.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// Scenario: a host behind a link its connections share (16 MB/s, scaled down from a 4 Gbit/s
// one), between one and two times single_stream_rate (10 MB/s). Alone, a first GET measures the
// link: one GET per shard for the next 16. Measured again once those are read, a first GET opened
// ahead would share the link with the shard being read, look capped at half of it and go to
// ranged parts. The shards read by one GET arrive at the link's rate, their reader's pace
// included, which proves the host fast: none is measured again, and every shard is one GET.
TEST(HttpParts, ShardsReadByOneGetThatArriveFastKeepTheirHostOnOneGet) {
  const std::string data = pattern_bytes(2'000'000);
  auto fake = shared_server(data, 16e6);
  const OpenOptions open = parts_over(fake, 3, 256 * 1024, 10'000'000);
  const std::string host = fresh_host("shared-link");
  // 20 shards, each opened while the one before it is read (read-ahead 1): past the first 16
  // after the measurement, and past PartsRecord's 1 s in which a measured rate is taken as is.
  constexpr int kShards = 20;
  std::unique_ptr<ByteSource> reading = open_url(host + "/0.tar", open);
  for (int i = 1; i <= kShards; ++i) {
    std::unique_ptr<ByteSource> ahead =
        i < kShards ? open_url(host + "/" + std::to_string(i) + ".tar", open) : nullptr;
    EXPECT_EQ(drain(*reading), data) << i - 1;
    reading = std::move(ahead);
  }
  expect_one_get_each(*fake, kShards);
}

TEST(HttpParts, AMissingObjectIsNotFoundWithoutParts) {
  auto fake = std::make_shared<test::FakeTransport>([](const test::FakeRequest&) {
    return test::FakeResponse{.status = 404, .body = "no such key"};
  });
  EXPECT_EQ(test::error_code(
                [&] { drain(*open_url("http://fake.test/x.tar", parts_over(fake, 3, 65536))); }),
            ErrorCode::not_found);
  EXPECT_EQ(fake->requests().size(), 1u);
}

// Every sample of a TarSamples, as "url key ext=size ..." lines, and the errors among them.
Strings read_all(TarSamples& samples) {
  Strings out;
  while (auto s = samples.next()) {
    std::string line = s->url().substr(s->url().rfind('/') + 1) + " " + s->key();
    for (const Field& f : s->fields()) {
      line += " " + f.ext + "=" + std::to_string(std::hash<std::string_view>{}(f.data.str()));
    }
    out.push_back(line);
  }
  return out;
}

class ReadAhead : public ::testing::Test {
 protected:
  void SetUp() override {
    http_ = test::env("WDS_TEST_HTTP");
    data_ = test::env("WDS_TEST_DATA");
    if (http_.empty() || data_.empty()) GTEST_SKIP() << "no test servers (run scripts/test.sh)";
    for (const auto& e : std::filesystem::directory_iterator(data_)) {
      if (e.path().extension() == ".tar") shards_.push_back(e.path().filename().string());
    }
    std::sort(shards_.begin(), shards_.end());
    ASSERT_GE(shards_.size(), 3u);
    port_ = static_cast<std::uint16_t>(std::stoi(http_.substr(http_.rfind(':') + 1)));
  }
  Strings local_samples(const Strings& names) const {
    Strings urls;
    for (const std::string& n : names) urls.push_back(data_ + "/" + n);
    TarSamples samples(urls, TarSamplesOptions{.read_ahead = 0});
    return read_all(samples);
  }
  Strings via(const test::ShapingProxy& proxy, const Strings& names) const {
    Strings urls;
    for (const std::string& n : names) {
      urls.push_back("http://127.0.0.1:" + std::to_string(proxy.port()) + "/" + n);
    }
    return urls;
  }

  std::string http_, data_;
  Strings shards_;
  std::uint16_t port_ = 0;
};

TEST_F(ReadAhead, ShardsOpenedAheadThroughALatentStoreGiveTheSameSamplesInOrder) {
  test::ShapingProxy proxy("127.0.0.1", port_, {.first_byte_delay = std::chrono::milliseconds(20)});
  TarSamplesOptions options{.read_ahead = 2};
  options.open.parallel_parts = 3;
  options.open.part_size = 65536;
  options.open.single_stream_rate = 0;  // parts, whatever the loopback's rate
  TarSamples samples(via(proxy, shards_), options);
  EXPECT_EQ(read_all(samples), local_samples(shards_));
  EXPECT_EQ(samples.shards_opened(), shards_.size());
  // Shards larger than a part were read by ranged parts as well as by their first GET.
  EXPECT_GT(proxy.requests(), static_cast<int>(shards_.size()));
}

TEST_F(ReadAhead, S3ThroughALatentStoreInSignedRangedPartsGivesTheSameSamples) {
  const std::string endpoint = test::env("WDS_TEST_S3_ENDPOINT");
  const std::string bucket = test::env("WDS_TEST_S3_BUCKET");
  if (endpoint.empty()) GTEST_SKIP() << "no S3 test server";
  ::setenv("AWS_ACCESS_KEY_ID", test::env("WDS_TEST_AWS_ACCESS_KEY_ID").c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", test::env("WDS_TEST_AWS_SECRET_ACCESS_KEY").c_str(), 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
  const auto s3_port =
      static_cast<std::uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
  test::ShapingProxy proxy("127.0.0.1", s3_port,
                           {.first_byte_delay = std::chrono::milliseconds(10)});
  TarSamplesOptions options{.read_ahead = 2};
  options.open.backend_options.set(
      S3Options{.endpoint = "http://127.0.0.1:" + std::to_string(proxy.port())});
  options.open.parallel_parts = 3;
  options.open.part_size = 65536;
  options.open.single_stream_rate = 0;
  Strings urls;
  for (const std::string& n : shards_) urls.push_back("s3://" + bucket + "/shards/" + n);
  TarSamples samples(urls, options);
  Strings got = read_all(samples);
  // The same samples; only the URLs differ.
  Strings expected = local_samples(shards_);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], expected[i]) << i;
  }
  // Each part was signed on its own (RGW checks every signature) and shards larger than a
  // part took more than one request.
  EXPECT_GT(proxy.requests(), static_cast<int>(shards_.size()));
}

TEST_F(ReadAhead, AShardThatFailsToOpenAheadIsReportedInItsTurn) {
  test::ShapingProxy proxy("127.0.0.1", port_, {});
  Strings names = {shards_[0], "no-such-shard.tar", shards_[1]};
  Strings seen;
  TarSamplesOptions options{.read_ahead = 2};
  options.handler = [&](const Error& e) {
    seen.push_back("error " +
                   std::string(e.code() == ErrorCode::not_found ? "not_found" : "other"));
    return true;
  };
  TarSamples samples(via(proxy, names), options);
  while (auto s = samples.next()) seen.push_back(s->url().substr(s->url().rfind('/') + 1));
  Strings expected(local_samples({shards_[0]}).size(), shards_[0]);
  expected.push_back("error not_found");
  expected.resize(expected.size() + local_samples({shards_[1]}).size(), shards_[1]);
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(samples.shards_failed(), 1u);
}

TEST_F(ReadAhead, ShardsOpenedAheadAndNeverReadAreClosedWithTheReader) {
  // A first byte that never comes in time: the shards opened ahead are still waiting for it
  // when the reader goes.
  test::ShapingProxy proxy("127.0.0.1", port_,
                           {.first_byte_delay = std::chrono::milliseconds(300)});
  {
    TarSamples samples(via(proxy, shards_), TarSamplesOptions{.read_ahead = 2});
    ASSERT_TRUE(samples.next());
    EXPECT_EQ(samples.read_ahead_urls().size(), 2u);
  }
  // Each shard was asked for once: the first, and the two opened ahead.
  EXPECT_EQ(proxy.requests(), 3);
}

TEST_F(ReadAhead, StateHoldsTheShardsOpenedAheadAndResumeReadsThemInOrder) {
  test::ShapingProxy proxy("127.0.0.1", port_, {});
  const Strings reference = local_samples(shards_);
  ASSERT_GT(reference.size(), 3u);
  for (std::size_t cut : {std::size_t{1}, reference.size() / 2, reference.size() - 1}) {
    Strings got;
    std::optional<TarSamples::Position> at;
    Strings ahead;
    std::size_t taken = 0;
    {
      Strings urls = via(proxy, shards_);
      TarSamples first(
          [&, i = std::size_t{0}]() mutable -> std::optional<std::string> {
            if (i >= urls.size()) return std::nullopt;
            ++taken;
            return urls[i++];
          },
          TarSamplesOptions{.read_ahead = 2});
      for (std::size_t k = 0; k < cut; ++k) {
        auto s = first.next();
        ASSERT_TRUE(s);
        got.push_back(s->url().substr(s->url().rfind('/') + 1) + " " + s->key());
      }
      at = first.position();
      ahead = first.read_ahead_urls();
    }
    // The URL source goes on after what the first reader took, ahead included.
    Strings urls = via(proxy, shards_);
    TarSamples second(
        [&, i = taken]() mutable -> std::optional<std::string> {
          if (i >= urls.size()) return std::nullopt;
          return urls[i++];
        },
        TarSamplesOptions{.read_ahead = 2});
    second.resume_read_ahead(ahead);
    if (at) second.resume(*at);
    while (auto s = second.next()) {
      got.push_back(s->url().substr(s->url().rfind('/') + 1) + " " + s->key());
    }
    Strings expected;
    for (const std::string& line : reference)
      expected.push_back(line.substr(0, line.find(' ', line.find(' ') + 1)));
    EXPECT_EQ(got, expected) << "interrupted after " << cut;
  }
}

}  // namespace
}  // namespace wds
