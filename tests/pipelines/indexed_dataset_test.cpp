// Tests of wds/indexed_dataset.hpp: IndexedDataset (indexes loaded, built, stale; global
// numbering; the descriptor LRU; concurrent get; over a wids index) and ChunkedSampler.
#include "wds/indexed_dataset.hpp"

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "tests/support/fixtures.hpp"
#include "wds/backend.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using test::read_file;

using test::describe;
using test::make_sample;
using test::make_tar;
using test::TempDir;

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

IndexedDatasetOptions options(bool build_missing, std::size_t max_open_shards = 8) {
  IndexedDatasetOptions o;
  o.build_missing = build_missing;
  o.max_open_shards = max_open_shards;
  return o;
}

using test::error_code;

// Shards named shard-<n>.tar with the given numbers of samples; sample keys are "s<n>_<i>".
// With write_index, each gets its .idx next to it.
std::vector<std::string> make_shards(const TempDir& dir, const std::vector<int>& counts,
                                     bool write_index = true) {
  std::vector<std::string> urls;
  for (std::size_t n = 0; n < counts.size(); ++n) {
    std::string url =
        dir.write("shard-" + std::to_string(n) + ".tar", make_tar([&](TarWriter& w) {
                    for (int i = 0; i < counts[n]; ++i) {
                      std::string k = "s" + std::to_string(n) + "_" + std::to_string(i);
                      w.write(make_sample(
                          k, {{"cls", std::to_string(i)}, {"txt", k + std::string(i * 50, '.')}}));
                    }
                  }));
    if (write_index)
      dir.write("shard-" + std::to_string(n) + ".idx", format_index(build_index(url)));
    urls.push_back(url);
  }
  return urls;
}

std::vector<std::string> streamed(const std::vector<std::string>& urls) {
  TarSamples samples(urls);
  std::vector<std::string> out;
  while (std::optional<Sample> s = samples.next()) out.push_back(describe(*s));
  return out;
}

TEST(IndexedDatasetTest, SizeGetLocateAcrossShards) {
  TempDir dir;
  const std::vector<std::string> urls = make_shards(dir, {3, 0, 5, 1, 4});
  IndexedDataset ds(urls);
  EXPECT_EQ(ds.num_shards(), 5u);
  EXPECT_EQ(ds.size(), 13u);
  EXPECT_EQ(ds.shard_size(0), 3u);
  EXPECT_EQ(ds.shard_size(1), 0u);
  EXPECT_EQ(ds.shard_start(2), 3u);
  EXPECT_EQ(ds.shard_url(4), urls[4]);

  using P = std::pair<std::size_t, std::uint64_t>;
  EXPECT_EQ(ds.locate(0), P(0, 0));
  EXPECT_EQ(ds.locate(2), P(0, 2));
  EXPECT_EQ(ds.locate(3), P(2, 0));  // the empty shard 1 is stepped over
  EXPECT_EQ(ds.locate(7), P(2, 4));
  EXPECT_EQ(ds.locate(8), P(3, 0));
  EXPECT_EQ(ds.locate(9), P(4, 0));
  EXPECT_EQ(ds.locate(12), P(4, 3));
  EXPECT_EQ(error_code([&] { ds.locate(13); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] { ds.get(13); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] { ds.get(~std::uint64_t{0}); }), ErrorCode::invalid_argument);

  const std::vector<std::string> want = streamed(urls);
  ASSERT_EQ(want.size(), 13u);
  for (std::uint64_t i = 0; i < ds.size(); ++i) {
    Sample s = ds.get(i);
    EXPECT_EQ(describe(s), want[i]);
    EXPECT_EQ(s.url(), urls[ds.locate(i).first]);
    EXPECT_EQ(s.local_path(), urls[ds.locate(i).first]);
  }
  // Backwards, to jump between shards.
  for (std::uint64_t i = ds.size(); i-- > 0;) EXPECT_EQ(describe(ds.get(i)), want[i]);
}

TEST(IndexedDatasetTest, MissingIndexIsNotFoundUnlessBuilt) {
  TempDir dir;
  const std::vector<std::string> urls = make_shards(dir, {2, 3}, false);
  std::string what;
  EXPECT_EQ(error_code([&] { IndexedDataset ds(urls); }, &what), ErrorCode::not_found);
  EXPECT_NE(what.find("shard-0.idx"), std::string::npos) << what;

  IndexedDataset ds(urls, options(true));
  EXPECT_EQ(ds.size(), 5u);
  for (std::size_t n = 0; n < urls.size(); ++n) {
    const std::string idx = default_index_path(urls[n]);
    ASSERT_TRUE(std::filesystem::exists(idx)) << idx;
    const std::string text = read_file(idx);
    EXPECT_EQ(text.rfind("v1.2 ", 0), 0u) << text;
    ShardIndex parsed = parse_index(text, idx);
    EXPECT_EQ(format_index(parsed), text);
    EXPECT_EQ(format_index(parsed), format_index(build_index(urls[n])));
  }
  // No temporary files left behind.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 4u);
  // The written indexes are used from now on, without build_missing.
  IndexedDataset again(urls);
  EXPECT_EQ(describe(again.get(4)), streamed(urls)[4]);
}

TEST(IndexedDatasetTest, StaleIndexesAreDetected) {
  TempDir dir;
  std::vector<std::string> urls = make_shards(dir, {3, 3});
  const std::string idx = default_index_path(urls[1]);
  // Older than its shard.
  std::filesystem::last_write_time(
      idx, std::filesystem::last_write_time(urls[1]) - std::chrono::seconds(10));
  std::string what;
  EXPECT_EQ(error_code([&] { IndexedDataset ds(urls); }, &what), ErrorCode::corrupt_data);
  EXPECT_NE(what.find("index is stale"), std::string::npos) << what;
  EXPECT_NE(what.find("older"), std::string::npos) << what;

  // Newer, but naming bytes beyond the shard's end.
  std::filesystem::resize_file(urls[1], 1024);
  std::filesystem::last_write_time(
      idx, std::filesystem::last_write_time(urls[1]) + std::chrono::seconds(10));
  EXPECT_EQ(error_code([&] { IndexedDataset ds(urls); }, &what), ErrorCode::corrupt_data);
  EXPECT_NE(what.find("beyond the shard"), std::string::npos) << what;

  // Rewritten after loading: get() notices from the headers.
  std::vector<std::string> fresh = make_shards(dir, {3, 3});
  IndexedDataset ds(fresh);
  dir.write("shard-0.tar", make_tar([](TarWriter& w) {
              for (int i = 0; i < 3; ++i)
                w.write(make_sample("x" + std::to_string(i), {{"cls", "1"}}));
            }));
  EXPECT_EQ(error_code([&] { ds.get(1); }, &what), ErrorCode::corrupt_data);
  EXPECT_NE(what.find("index is stale"), std::string::npos) << what;
  EXPECT_NO_THROW(ds.get(4));
}

TEST(IndexedDatasetTest, LruHoldsAtMostMaxOpenShards) {
  TempDir dir;
  const std::vector<std::string> urls = make_shards(dir, {2, 2, 2, 2, 2, 2, 2, 2, 2, 2});
  const std::size_t before = open_fds();
  {
    IndexedDataset ds(urls, options(false, 3));
    EXPECT_EQ(open_fds(), before);  // nothing open before the first get()
    for (int round = 0; round < 2; ++round) {
      for (std::uint64_t i = 0; i < ds.size(); ++i) {
        ds.get(i);
        EXPECT_LE(open_fds(), before + 3);
      }
    }
    EXPECT_EQ(open_fds(), before + 3);
    // A hit does not open anything.
    ds.get(ds.size() - 1);
    EXPECT_EQ(open_fds(), before + 3);
  }
  EXPECT_EQ(open_fds(), before);  // the destructor closes them
  {
    IndexedDataset ds(urls, options(false, 0));
    for (std::uint64_t i = 0; i < ds.size(); ++i) ds.get(i);
    EXPECT_EQ(open_fds(), before);
  }
}

TEST(IndexedDatasetTest, ConcurrentGet) {
  TempDir dir;
  const std::vector<std::string> urls = make_shards(dir, {7, 3, 9, 5, 6, 4});
  const std::vector<std::string> want = streamed(urls);
  IndexedDataset ds(urls, options(false, 2));  // small, so that threads evict each other
  ASSERT_EQ(ds.size(), want.size());
  std::vector<std::thread> threads;
  std::vector<int> errors(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (std::uint64_t k = 0; k < ds.size(); ++k) {
          std::uint64_t i = (k * 7 + static_cast<std::uint64_t>(t * 5 + round)) % ds.size();
          if (describe(ds.get(i)) != want[i]) ++errors[t];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(errors[t], 0) << "thread " << t;
}

// A scheme serving files from memory with offset and length, standing in for HTTP/S3.
std::mutex g_mem_mu;
std::map<std::string, std::string> g_mem_files;

TEST(IndexedDatasetTest, RemoteShardsUseRangedReads) {
  register_backend({
      .schemes = {"idxmem"},
      .open =
          [](const std::string& url, const OpenOptions& o) {
            std::lock_guard<std::mutex> lock(g_mem_mu);
            auto it = g_mem_files.find(url);
            if (it == g_mem_files.end()) throw Error::not_found(url, "", "no such object");
            std::string bytes =
                it->second.substr(std::min<std::size_t>(o.offset, it->second.size()));
            if (o.length) bytes = bytes.substr(0, static_cast<std::size_t>(*o.length));
            return open_memory(url, Bytes::copy_of(bytes), 100);
          },
  });
  TempDir dir;
  const std::vector<std::string> local = make_shards(dir, {4, 2});
  std::vector<std::string> urls;
  for (std::size_t n = 0; n < local.size(); ++n) {
    std::string url = "idxmem://b/shard-" + std::to_string(n) + ".tar";
    std::lock_guard<std::mutex> lock(g_mem_mu);
    g_mem_files[url] = read_file(local[n]);
    if (n == 0) g_mem_files[default_index_path(url)] = read_file(default_index_path(local[n]));
    urls.push_back(url);
  }
  EXPECT_EQ(error_code([&] { IndexedDataset ds(urls); }), ErrorCode::not_found);
  IndexedDataset ds(urls, options(true));  // shard 1's index built in memory
  ASSERT_EQ(ds.size(), 6u);
  const std::vector<std::string> want = streamed(local);
  for (std::uint64_t i = 0; i < ds.size(); ++i) {
    Sample s = ds.get(i);
    EXPECT_EQ(describe(s), want[i]);
    EXPECT_EQ(s.url(), urls[ds.locate(i).first]);
    EXPECT_EQ(s.local_path(), "");
  }
}

// A wids index of the shards, written into `dir` as index.json (urls relative to it).
std::string write_wids_index(const TempDir& dir, const std::vector<std::string>& urls) {
  WidsIndex index;
  for (const std::string& url : urls) index.shards.push_back(build_wids_entry(url));
  return dir.write("index.json", format_wids_index(index, dir.file("index.json")));
}

TEST(IndexedDatasetWidsTest, SizeFromTheWidsIndexWithoutReadingShardIndexes) {
  TempDir dir;
  const std::vector<std::string> urls = make_shards(dir, {3, 0, 5, 1, 4}, false);
  const std::string where = write_wids_index(dir, urls);
  IndexedDataset ds(read_wids_index(where), options(true));
  EXPECT_EQ(ds.size(), 13u);
  EXPECT_EQ(ds.num_shards(), 5u);
  EXPECT_EQ(ds.shard_size(2), 5u);
  EXPECT_EQ(ds.shard_start(4), 9u);
  EXPECT_EQ(ds.shard_url(3), urls[3]);
  // Nothing was built yet: the DALI indexes appear as their shards are first read.
  for (const std::string& url : urls)
    EXPECT_FALSE(std::filesystem::exists(default_index_path(url)));
  ChunkedSampler sampler(ds, {.num_replicas = 2, .rank = 1});
  EXPECT_EQ(sampler.size(), 7u);
  for (const std::string& url : urls)
    EXPECT_FALSE(std::filesystem::exists(default_index_path(url)));

  const std::vector<std::string> want = streamed(urls);
  EXPECT_EQ(describe(ds.get(7)), want[7]);  // shard 2 only
  EXPECT_TRUE(std::filesystem::exists(default_index_path(urls[2])));
  EXPECT_FALSE(std::filesystem::exists(default_index_path(urls[0])));
  for (std::uint64_t i = ds.size(); i-- > 0;) {
    Sample s = ds.get(i);
    EXPECT_EQ(describe(s), want[i]);
    EXPECT_EQ(s.url(), urls[ds.locate(i).first]);
  }
  EXPECT_EQ(ds.shard_index(4).samples.size(), 4u);
}

TEST(IndexedDatasetWidsTest, MissingShardIndexIsNotFoundOnFirstReadUnlessBuilt) {
  TempDir dir;
  const std::vector<std::string> urls = make_shards(dir, {2, 3}, false);
  IndexedDataset ds(read_wids_index(write_wids_index(dir, urls)));
  EXPECT_EQ(ds.size(), 5u);  // known without any DALI index
  std::string what;
  EXPECT_EQ(error_code([&] { ds.get(3); }, &what), ErrorCode::not_found);
  EXPECT_NE(what.find("shard-1.idx"), std::string::npos) << what;
  // The failed load is tried again on the next read, and succeeds once the index exists.
  dir.write("shard-1.idx", format_index(build_index(urls[1])));
  EXPECT_EQ(describe(ds.get(3)), streamed(urls)[3]);
}

TEST(IndexedDatasetWidsTest, CountDisagreeingWithTheShardIndexIsStale) {
  TempDir dir;
  const std::vector<std::string> urls = make_shards(dir, {2, 3});
  const std::string where = write_wids_index(dir, urls);
  WidsIndex index = read_wids_index(where);
  index.shards[1].nsamples = 4;  // the wids index says 4, the shard's index 3
  IndexedDataset ds(index);
  EXPECT_EQ(ds.size(), 6u);
  EXPECT_EQ(describe(ds.get(1)), streamed(urls)[1]);  // shard 0 agrees
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string what;
    EXPECT_EQ(error_code([&] { ds.get(2); }, &what), ErrorCode::corrupt_data);
    EXPECT_NE(what.find("index is stale"), std::string::npos) << what;
    EXPECT_NE(what.find("shard-1.idx"), std::string::npos) << what;
    EXPECT_NE(what.find(where), std::string::npos) << what;
    EXPECT_NE(what.find("lists 3 samples"), std::string::npos) << what;
    EXPECT_NE(what.find("says 4"), std::string::npos) << what;
  }
  EXPECT_EQ(error_code([&] { ds.shard_index(1); }), ErrorCode::corrupt_data);
}

// ---------------------------------------------------------------------------------------------

std::set<std::size_t> shards_touched(const std::vector<std::uint64_t>& indices,
                                     std::uint64_t per_shard) {
  std::set<std::size_t> out;
  for (std::uint64_t i : indices) out.insert(static_cast<std::size_t>(i / per_shard));
  return out;
}

TEST(ChunkedSamplerTest, RanksCoverAllIndicesAndStayOnFewShards) {
  const std::vector<std::uint64_t> sizes(10, 12);  // 10 shards of 12: 120 samples
  for (int replicas : {1, 2, 3, 4, 5}) {
    std::multiset<std::uint64_t> all;
    for (int rank = 0; rank < replicas; ++rank) {
      ChunkedSampler sampler(sizes, {.num_replicas = replicas, .rank = rank, .seed = 3});
      sampler.set_epoch(2);
      std::vector<std::uint64_t> idx = sampler.indices();
      EXPECT_EQ(idx.size(), 120u / static_cast<unsigned>(replicas));
      EXPECT_EQ(sampler.size(), idx.size());
      all.insert(idx.begin(), idx.end());
      const std::size_t bound = (10 + replicas - 1) / replicas + 1;
      EXPECT_LE(shards_touched(idx, 12).size(), bound) << replicas << " " << rank;
    }
    std::multiset<std::uint64_t> every;
    for (std::uint64_t i = 0; i < 120; ++i) every.insert(i);
    EXPECT_EQ(all, every) << replicas;
  }
}

TEST(ChunkedSamplerTest, ShufflesWithinAndAcrossChunksByEpochAndSeed) {
  const std::vector<std::uint64_t> sizes = {5, 9, 1, 0, 7, 8};
  auto run = [&](std::uint64_t seed, std::uint64_t epoch, bool shuffle = true) {
    ChunkedSampler s(sizes, {.seed = seed, .shuffle = shuffle});
    s.set_epoch(epoch);
    return s.indices();
  };
  const std::vector<std::uint64_t> a = run(1, 0);
  EXPECT_EQ(a, run(1, 0));
  EXPECT_NE(a, run(1, 1));
  EXPECT_NE(a, run(2, 0));
  std::vector<std::uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::uint64_t> iota(30);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_EQ(run(1, 5, false), iota);
  // Each chunk's indices are contiguous in the list (whatever their order inside).
  const std::vector<std::uint64_t> starts = {0, 5, 14, 15, 15, 22, 30};
  auto chunk_of = [&](std::uint64_t i) {
    return std::upper_bound(starts.begin(), starts.end(), i) - starts.begin() - 1;
  };
  std::size_t switches = 0;
  for (std::size_t k = 1; k < a.size(); ++k) switches += chunk_of(a[k]) != chunk_of(a[k - 1]);
  EXPECT_EQ(switches, 4u);  // 5 non-empty chunks
}

TEST(ChunkedSamplerTest, PaddingAndDropLastAsDistributedSampler) {
  const std::vector<std::uint64_t> sizes = {4, 3, 3};  // 10 samples
  std::vector<std::uint64_t> concat;
  for (int rank = 0; rank < 4; ++rank) {
    ChunkedSampler s(sizes, {.num_replicas = 4, .rank = rank, .seed = 9});
    EXPECT_EQ(s.size(), 3u);
    EXPECT_EQ(s.total_size(), 12u);
    std::vector<std::uint64_t> idx = s.indices();
    EXPECT_EQ(idx.size(), 3u);
    concat.insert(concat.end(), idx.begin(), idx.end());
  }
  // Padded by repeating the head of the epoch's list.
  EXPECT_EQ(concat[10], concat[0]);
  EXPECT_EQ(concat[11], concat[1]);
  std::set<std::uint64_t> covered(concat.begin(), concat.end());
  EXPECT_EQ(covered.size(), 10u);

  std::set<std::uint64_t> dropped;
  for (int rank = 0; rank < 4; ++rank) {
    ChunkedSampler s(sizes, {.num_replicas = 4, .rank = rank, .seed = 9, .drop_last = true});
    EXPECT_EQ(s.size(), 2u);
    std::vector<std::uint64_t> idx = s.indices();
    EXPECT_EQ(idx.size(), 2u);
    dropped.insert(idx.begin(), idx.end());
  }
  EXPECT_EQ(dropped.size(), 8u);  // no repeats

  // Smaller than the number of replicas: the list is repeated as often as needed.
  for (int rank = 0; rank < 5; ++rank) {
    ChunkedSampler s(std::vector<std::uint64_t>{2}, {.num_replicas = 5, .rank = rank});
    EXPECT_EQ(s.indices().size(), 1u);
  }
  EXPECT_TRUE(ChunkedSampler(std::vector<std::uint64_t>{}, {}).indices().empty());
  EXPECT_EQ(error_code([&] { ChunkedSampler(sizes, {.num_replicas = 0}); }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(error_code([&] { ChunkedSampler(sizes, {.num_replicas = 2, .rank = 2}); }),
            ErrorCode::invalid_argument);
}

TEST(ChunkedSamplerTest, OverAnIndexedDataset) {
  TempDir dir;
  const std::vector<std::string> urls = make_shards(dir, {6, 6, 6, 6});
  IndexedDataset ds(urls);
  const std::vector<std::string> want = streamed(urls);
  std::set<std::string> seen;
  for (int rank = 0; rank < 2; ++rank) {
    ChunkedSampler sampler(ds, {.num_replicas = 2, .rank = rank, .seed = 5});
    sampler.set_epoch(1);
    std::set<std::size_t> shards;
    for (std::uint64_t i : sampler.indices()) {
      std::string d = describe(ds.get(i));
      EXPECT_EQ(d, want[i]);
      seen.insert(d);
      shards.insert(ds.locate(i).first);
    }
    EXPECT_EQ(shards.size(), 2u);  // 12 samples per rank: exactly two whole shards
  }
  EXPECT_EQ(seen.size(), 24u);
}

}  // namespace
}  // namespace wds
