// wds index, run as a user runs it: DALI indexes per shard, and --format wids, one wids shard
// index for all the shards that the library reads back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/fixtures.hpp"
#include "tests/support/tool_runner.hpp"
#include "wds/index.hpp"
#include "wds/wids_index.hpp"

namespace wds {
namespace {

namespace fs = std::filesystem;
using Result = test::ToolResult;

class IndexTool : public ::testing::Test {
 protected:
  void SetUp() override {
    tool_ = test::tool_path();
    if (tool_.empty()) GTEST_SKIP() << "WDS_TOOL is not set (run through ctest)";
    fs::create_directories(dir_.path() / "set" / "part");
    fs::create_directories(dir_.path() / "elsewhere");
  }
  // Runs `wds ARGS` in the temporary directory.
  Result run(const std::string& args) {
    return test::run_tool(tool_, args, scratch_, dir_.path().string());
  }
  // A shard of `n` samples at `name` (relative to the temporary directory).
  std::string shard(const std::string& name, int n) {
    return dir_.write(name, test::make_tar([&](TarWriter& w) {
                        for (int i = 0; i < n; ++i) {
                          w.write(test::make_sample("k" + std::to_string(i),
                                                    {{"txt", std::string(i * 700, 't')}}));
                        }
                      }));
  }
  static std::uint64_t streamed_count(const std::string& url) {
    ShardSamples s(open_url(url));
    std::uint64_t n = 0;
    while (s.next()) ++n;
    return n;
  }

  std::string tool_;
  test::TempDir dir_, scratch_;
};

TEST_F(IndexTool, WidsIndexOfAllShardsReadsBackAsTheLibraryBuildsIt) {
  const std::vector<std::string> shards = {shard("set/a.tar", 3), shard("set/part/b.tar", 0),
                                           shard("set/c.tar", 6), shard("elsewhere/d.tar", 2)};
  Result r =
      run("index --format wids --name demo -o set/train.json 'set/{a,part/b,c}.tar' "
          "elsewhere/d.tar");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("set/c.tar: 6 samples"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("4 shards, 11 samples -> set/train.json"), std::string::npos) << r.err;

  const std::string where = dir_.file("set/train.json");
  const nlohmann::json doc = nlohmann::json::parse(test::read_file(where));
  EXPECT_EQ(doc["__kind__"], "wids-shard-index-v1");
  EXPECT_EQ(doc["name"], "demo");
  EXPECT_EQ(doc["shardlist"][0]["url"], "a.tar");
  EXPECT_EQ(doc["shardlist"][1]["url"], "part/b.tar");
  EXPECT_EQ(doc["shardlist"][3]["url"], shards[3]);  // not under set/: absolute

  const WidsIndex index = read_wids_index(where);
  ASSERT_EQ(index.shards.size(), 4u);
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const WidsShard want = build_wids_entry(shards[i]);
    EXPECT_EQ(index.shards[i].url, shards[i]);
    EXPECT_EQ(index.shards[i].nsamples, streamed_count(shards[i]));
    EXPECT_EQ(index.shards[i].nsamples, want.nsamples);
    EXPECT_EQ(index.shards[i].filesize, fs::file_size(shards[i]));
    EXPECT_EQ(index.shards[i].md5sum, want.md5sum);
  }
  EXPECT_EQ(index.nsamples(), (std::vector<std::uint64_t>{3, 0, 6, 2}));
}

TEST_F(IndexTool, WidsToStdoutAndItsErrors) {
  shard("set/a.tar", 2);
  Result r = run("index --format wids -o - set/a.tar");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_wids_index(r.out, dir_.file("x.json")).nsamples(), std::vector<std::uint64_t>{2});

  r = run("index --format wids set/a.tar");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("-o"), std::string::npos) << r.err;
  dir_.write("set/bad.tar", std::string(1000, 'x'));
  r = run("index --format wids -o set/i.json set/a.tar set/bad.tar");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("set/bad.tar"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_.file("set/i.json")));
  r = run("index --format parquet set/a.tar");
  EXPECT_NE(r.exit_code, 0);
}

// A wids index names the shards of wds ls and wds bench: the same samples as the shards named.
TEST_F(IndexTool, AWidsIndexIsReadAsTheShardList) {
  shard("set/a.tar", 3);
  shard("set/part/b.tar", 2);
  ASSERT_EQ(run("index --format wids -o set/train.json set/a.tar set/part/b.tar").exit_code, 0);
  const Result direct = run("ls set/a.tar set/part/b.tar");
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  const Result indexed = run("ls set/train.json");
  ASSERT_EQ(indexed.exit_code, 0) << indexed.err;
  EXPECT_EQ(indexed.out, direct.out);
  EXPECT_EQ(std::count(indexed.out.begin(), indexed.out.end(), '\n'), 5);
  const Result bench = run("bench --json set/train.json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(nlohmann::json::parse(bench.out)["samples"], 5) << bench.out;
  // Not an index: the reader's error names it.
  dir_.write("set/other.json", "{\"shardlist\": []}");
  const Result bad = run("ls set/other.json");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("other.json"), std::string::npos) << bad.err;
}

TEST_F(IndexTool, DaliIsTheDefaultAndUnchanged) {
  const std::string a = shard("set/a.tar", 4);
  Result r = run("index set/a.tar");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::read_file(dir_.file("set/a.idx")), format_index(build_index(a)));
  r = run("index --format dali -o - set/a.tar");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, format_index(build_index(a)));
}

}  // namespace
}  // namespace wds
