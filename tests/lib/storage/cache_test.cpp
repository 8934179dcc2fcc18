// The shard cache (lib/storage/cache.cpp) over a scripted HTTP transport: entries are checksummed
// when written and verified block by block when read; a damaged or truncated entry is deleted,
// named in a warning and fetched again; an unusable cache directory is read past with one warning.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "lib/checksum.hpp"
#include "lib/storage/cache.hpp"
#include "tests/support/fake_transport.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/remote.hpp"
#include "wds/source.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

// A shard of 60 samples of `size` bytes each (by default ~330 KB: several 64 KiB checksum
// blocks, one read).
std::string make_shard(std::size_t size = 5000) {
  return test::make_tar([size](TarWriter& w) {
    for (int i = 0; i < 60; ++i) {
      std::string data(size, static_cast<char>('a' + i % 26));
      data += std::to_string(i);
      w.write(
          test::make_sample("s" + std::to_string(i), {{"bin", data}, {"cls", std::to_string(i)}}));
    }
  });
}

// Serves `data` for every URL, honouring "Range: bytes=A-" and "bytes=A-B".
std::shared_ptr<test::FakeTransport> server(std::string data) {
  return std::make_shared<test::FakeTransport>([data](const test::FakeRequest& r) {
    test::FakeResponse out;
    std::optional<std::string> range = r.header("Range");
    if (!range) {
      out.body = data;
      out.headers = {{"content-length", std::to_string(data.size())}};
      return out;
    }
    const std::string spec = range->substr(range->find('=') + 1);
    const std::size_t from = std::stoull(spec);
    const std::string to_text = spec.substr(spec.find('-') + 1);
    const std::size_t to = to_text.empty() ? data.size() - 1 : std::stoull(to_text);
    out.status = 206;
    out.body = data.substr(from, to - from + 1);
    out.headers = {{"content-range", "bytes " + std::to_string(from) + "-" + std::to_string(to) +
                                         "/" + std::to_string(data.size())},
                   {"content-length", std::to_string(out.body.size())}};
    return out;
  });
}

// Warnings (retry-hook calls with attempt 0) and retries, as the hook saw them.
struct Heard {
  std::mutex mu;
  Strings warnings;
  int retries = 0;
};

OpenOptions through(const std::shared_ptr<test::FakeTransport>& fake, const std::string& dir,
                    const std::shared_ptr<Heard>& heard) {
  OpenOptions open;
  HttpOptions http;
  http.initial_backoff = std::chrono::milliseconds(0);
  open.backend_options.set(http);
  open.backend_options.set(http::TransportOption{fake});
  open.backend_options.set(CacheOptions{dir, 0});
  open.on_retry = [heard](const Error& e, int attempt) {
    std::lock_guard lock(heard->mu);
    if (attempt == 0) {
      heard->warnings.push_back(e.what());
    } else {
      ++heard->retries;
    }
  };
  return open;
}

Strings samples_of(const std::string& url, const OpenOptions& open) {
  TarSamplesOptions options;
  options.open = open;
  options.read_ahead = 0;
  TarSamples samples(Strings{url}, options);
  Strings out;
  while (std::optional<Sample> s = samples.next()) out.push_back(test::describe(*s));
  return out;
}

Strings samples_of_bytes(const std::string& bytes) {
  return test::describe(test::read_samples(bytes));
}

std::string drain(ByteSource& src) {
  std::string out;
  for (auto c = src.read(); !c.empty(); c = src.read()) {
    out.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  return out;
}

void flip_byte(const std::string& path, std::uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x20));
}

class Cache : public ::testing::Test {
 protected:
  const std::string shard_ = make_shard();
  const std::string url_ = "http://fake.test/data/shard-000.tar";
  test::TempDir dir_;
  const std::string cache_dir_ = dir_.file("cache");
  std::shared_ptr<test::FakeTransport> fake_ = server(shard_);
  std::shared_ptr<Heard> heard_ = std::make_shared<Heard>();
  OpenOptions open_ = through(fake_, cache_dir_, heard_);
  const std::string entry_ = cache_path(cache_dir_, url_);

  // Reads the shard once to fill the cache.
  void fill() {
    ASSERT_EQ(samples_of(url_, open_), samples_of_bytes(shard_));
    ASSERT_EQ(fake_->requests().size(), 1u);
    ASSERT_EQ(test::read_file(entry_), shard_);
  }
  // The one warning so far, which must name the cache file.
  void expect_one_warning_naming_the_entry(const std::string& problem) {
    std::lock_guard lock(heard_->mu);
    ASSERT_EQ(heard_->warnings.size(), 1u);
    EXPECT_NE(heard_->warnings[0].find(entry_), std::string::npos) << heard_->warnings[0];
    EXPECT_NE(heard_->warnings[0].find(problem), std::string::npos) << heard_->warnings[0];
  }
  // The entry was fetched again and is whole: a later read makes no request and no warning.
  void expect_repaired(std::size_t requests) {
    EXPECT_EQ(test::read_file(entry_), shard_);
    EXPECT_EQ(samples_of(url_, open_), samples_of_bytes(shard_));
    EXPECT_EQ(fake_->requests().size(), requests);
    std::lock_guard lock(heard_->mu);
    EXPECT_EQ(heard_->warnings.size(), 1u);
  }
};

TEST_F(Cache, AVerifiedEntryIsServedFromDiskWithoutARequest) {
  fill();
  EXPECT_EQ(samples_of(url_, open_), samples_of_bytes(shard_));
  EXPECT_EQ(fake_->requests().size(), 1u);
  EXPECT_TRUE(heard_->warnings.empty());
  auto src = open_url(url_, open_);
  EXPECT_EQ(src->local_path(), entry_);
  EXPECT_EQ(src->size(), shard_.size());
}

TEST_F(Cache, ATruncatedEntryIsDeletedNamedAndFetchedAgain) {
  fill();
  std::filesystem::resize_file(entry_, 2286);
  EXPECT_EQ(samples_of(url_, open_), samples_of_bytes(shard_));
  EXPECT_EQ(fake_->requests().size(), 2u);
  expect_one_warning_naming_the_entry("truncated");
  expect_repaired(2);
}

TEST_F(Cache, AFlippedByteIsDetectedBeforeItIsHandedOut) {
  fill();
  // Inside a member's data, past the first blocks (which are handed out before it is reached).
  const std::size_t at = shard_.rfind(std::string(100, 'p'));
  ASSERT_GT(at, 3u * 65536);
  flip_byte(entry_, at + 10);
  EXPECT_EQ(samples_of(url_, open_), samples_of_bytes(shard_));
  EXPECT_EQ(fake_->requests().size(), 2u);
  expect_one_warning_naming_the_entry("damaged");
  expect_repaired(2);
}

TEST(CacheLargeEntry, DamageSeveralReadsInIsFoundAfterTheVerifiedBytesWereHandedOut) {
  const std::string shard = make_shard(60000);  // ~3.6 MB: read 1 MiB at a time
  test::TempDir dir;
  auto fake = server(shard);
  auto heard = std::make_shared<Heard>();
  OpenOptions open = through(fake, dir.file("cache"), heard);
  const std::string url = "http://fake.test/big.tar";
  ASSERT_EQ(samples_of(url, open), samples_of_bytes(shard));
  const std::string entry = cache_path(dir.file("cache"), url);
  flip_byte(entry, 3000000);
  EXPECT_EQ(samples_of(url, open), samples_of_bytes(shard));
  std::vector<test::FakeRequest> sent = fake->requests();
  EXPECT_EQ(sent.size(), 2u);
  std::lock_guard lock(heard->mu);
  ASSERT_EQ(heard->warnings.size(), 1u);
  EXPECT_NE(heard->warnings[0].find(entry + " bytes 2949120-3014655 do not match"),
            std::string::npos)
      << heard->warnings[0];
  EXPECT_EQ(test::read_file(entry), shard);  // cached anew
}

TEST_F(Cache, AMissingChecksumFileCountsAsDamage) {
  fill();
  std::filesystem::remove(entry_ + ".sum");
  EXPECT_EQ(samples_of(url_, open_), samples_of_bytes(shard_));
  expect_one_warning_naming_the_entry("checksum file");
  expect_repaired(2);
}

TEST_F(Cache, ARangedReadOfADamagedEntryGetsTheRestWithARange) {
  fill();
  flip_byte(entry_, 200000);
  auto src = open_url(url_, [&] {
    OpenOptions o = open_;
    o.offset = 70000;
    o.length = 200000;
    return o;
  }());
  EXPECT_EQ(drain(*src), shard_.substr(70000, 200000));
  expect_one_warning_naming_the_entry("damaged");
  // Verified blocks up to the damaged one were served from disk; the rest came by Range.
  std::vector<test::FakeRequest> sent = fake_->requests();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].header("Range"), "bytes=196608-269999");
}

TEST_F(Cache, AnUncachedRangedReadIsNotCached) {
  OpenOptions o = open_;
  o.length = 1000;
  EXPECT_EQ(drain(*open_url(url_, o)), shard_.substr(0, 1000));
  EXPECT_FALSE(std::filesystem::exists(entry_));
}

// Tests run as root, where permission bits do not stop writes: these directories cannot be
// created or written whoever asks.
TEST(CacheDirectory, UnderARegularFileIsReadPastWithOneWarning) {
  test::TempDir dir;
  const std::string shard = make_shard();
  auto fake = server(shard);
  auto heard = std::make_shared<Heard>();
  const std::string bad = dir.write("file", "x") + "/cache";
  OpenOptions open = through(fake, bad, heard);
  for (int i = 0; i < 3; ++i) {
    const std::string url = "http://fake.test/shard-00" + std::to_string(i) + ".tar";
    EXPECT_EQ(samples_of(url, open), samples_of_bytes(shard)) << url;
  }
  std::lock_guard lock(heard->mu);
  ASSERT_EQ(heard->warnings.size(), 1u);
  EXPECT_NE(heard->warnings[0].find(bad), std::string::npos) << heard->warnings[0];
  EXPECT_NE(heard->warnings[0].find("without the cache"), std::string::npos) << heard->warnings[0];
  EXPECT_EQ(heard->retries, 0);
}

TEST(CacheDirectory, ThatIsARegularFileIsReadPastWithOneWarning) {
  test::TempDir dir;
  const std::string shard = make_shard();
  auto heard = std::make_shared<Heard>();
  const std::string bad = dir.write("not-a-dir", "x");
  OpenOptions open = through(server(shard), bad, heard);
  EXPECT_EQ(samples_of("http://fake.test/a.tar", open), samples_of_bytes(shard));
  EXPECT_EQ(samples_of("http://fake.test/b.tar", open), samples_of_bytes(shard));
  EXPECT_EQ(test::read_file(bad), "x");
  std::lock_guard lock(heard->mu);
  EXPECT_EQ(heard->warnings.size(), 1u);
}

TEST(CacheEviction, TakesTheChecksumFileWithItsEntry) {
  test::TempDir dir;
  const std::string shard = make_shard();
  auto heard = std::make_shared<Heard>();
  OpenOptions open = through(server(shard), dir.file("c"), heard);
  open.backend_options.set(CacheOptions{dir.file("c"), shard.size() + 10});
  for (const char* name : {"a.tar", "b.tar", "c.tar"}) {
    samples_of(std::string("http://fake.test/") + name, open);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct modification times
  }
  Strings names;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("c"))) {
    names.push_back(e.path().string());
  }
  std::sort(names.begin(), names.end());
  const std::string kept = cache_path(dir.file("c"), "http://fake.test/c.tar");
  EXPECT_EQ(names, (Strings{kept, kept + ".sum"}));
}

// ---- the checksum ------------------------------------------------------------------------------

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  std::uint32_t x = 12345;
  for (char& c : s) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(x >> 16);
  }
  return s;
}

std::uint64_t sum(std::string_view s) {
  return Checksum::of(std::as_bytes(std::span(s)));
}

TEST(Checksum, TheFastAndPortableImplementationsAgree) {
  for (std::size_t n : {0, 1, 7, 63, 64, 65, 127, 128, 1000, 65536, 65537, 300001}) {
    const std::string s = pattern(n);
    EXPECT_EQ(sum(s), Checksum::portable(std::as_bytes(std::span(s)))) << n;
  }
}

TEST(Checksum, AnySplitGivesTheSameValue) {
  const std::string s = pattern(10000);
  for (std::size_t piece : {1, 3, 64, 100, 4096}) {
    Checksum c;
    for (std::size_t at = 0; at < s.size(); at += piece) {
      c.update(std::as_bytes(std::span(s.data() + at, std::min(piece, s.size() - at))));
    }
    EXPECT_EQ(c.value(), sum(s)) << piece;
  }
}

TEST(Checksum, EveryFlippedBitMovedStripeAndLengthChangesIt) {
  const std::string s = pattern(1024);
  const std::uint64_t base = sum(s);
  for (std::size_t at = 0; at < s.size(); at += 37) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string t = s;
      t[at] = static_cast<char>(t[at] ^ (1 << bit));
      EXPECT_NE(sum(t), base) << at << " " << bit;
    }
  }
  std::string swapped = s.substr(64, 64) + s.substr(0, 64) + s.substr(128);
  EXPECT_NE(sum(swapped), base);
  EXPECT_NE(sum(s + std::string(1, '\0')), base);  // a zero byte more is not the padding
  EXPECT_NE(sum(std::string(64, '\0')), sum(std::string(128, '\0')));
}

}  // namespace
}  // namespace wds
