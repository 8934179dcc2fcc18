// The wds tool, run as a user runs it: a separate process, output and exit code checked.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/ffmpeg.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/script_server.hpp"
#include "tests/support/tool_runner.hpp"
#include "wds/encode.hpp"

namespace wds {
namespace {

using Result = test::ToolResult;
using test::read_file;

class WdsTool : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tool = std::getenv("WDS_TOOL");
    if (!tool || !*tool) GTEST_SKIP() << "WDS_TOOL is not set (run through ctest)";
    tool_ = tool;
  }
  // Runs `wds ARGS` through the shell (ARGS is shell text).
  Result run(const std::string& args, const std::string& stdin_file = "",
             const std::string& env = "") {
    return test::run_tool(tool_, args, dir_, "", stdin_file, env);
  }
  std::string shard(const std::string& name, const std::vector<Sample>& samples) {
    return dir_.write(name, test::make_tar([&](TarWriter& w) {
                        for (const Sample& s : samples) w.write(s);
                      }));
  }

  std::string tool_;
  test::TempDir dir_;
};

TEST_F(WdsTool, ExpandPrintsOneUrlPerLine) {
  Result r = run("expand 'a-{00..02}.tar::b-{x,y}.tar' 'c.tar'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "a-00.tar\na-01.tar\na-02.tar\nb-x.tar\nb-y.tar\nc.tar\n");
}

TEST_F(WdsTool, ExpandErrorsGoToStderrWithExitCode1) {
  Result r = run("expand 'a-{0..2.tar'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("wds: error: invalid argument"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("position"), std::string::npos) << r.err;
}

TEST_F(WdsTool, ExpandListShowsWhatADirectoryOrGlobLists) {
  dir_.write("shards/b.tar", "");
  dir_.write("shards/a.tar", "");
  dir_.write("shards/notes.txt", "");
  const std::string d = dir_.file("shards");
  Result r = run("expand --list '" + d + "/' '" + d + "/*.tar::x-{1,2}.tar'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, d + "/a.tar\n" + d + "/b.tar\n" + d + "/notes.txt\n" + d + "/a.tar\n" + d +
                       "/b.tar\nx-1.tar\nx-2.tar\n");
  EXPECT_EQ(run("expand '" + d + "/'").out, d + "/\n");  // without --list: braces only
}

TEST_F(WdsTool, ExpandRefusesHugeAndDeeplyNestedPatterns) {
  Result r = run("expand 'x{0..999999999}'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("1000000000 names, above the limit of 10000000"), std::string::npos)
      << r.err;
  r = run("expand --max-names 3 'x{0..3}'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("4 names, above the limit of 3"), std::string::npos) << r.err;
  EXPECT_EQ(run("expand --max-names 4 'x{0..3}'").out, "x0\nx1\nx2\nx3\n");
  r = run("expand --max-names 0 x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--max-names: must be >= 1, got 0"), std::string::npos) << r.err;
  std::string deep;
  for (int i = 0; i < 20000; ++i) deep += "{a,";
  deep += "b" + std::string(20000, '}');
  r = run("expand '${DEEP}'", "", "WDS_DEEP='" + deep + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("levels deep"), std::string::npos) << r.err.substr(0, 300);
}

TEST_F(WdsTool, UsageErrorsExitWith1AndHelpWith0) {
  EXPECT_EQ(run("ls --no-such-option x.tar").exit_code, 1);
  EXPECT_EQ(run("").exit_code, 1);
  for (const char* cmd : {"--help", "expand --help", "ls --help"}) {
    Result r = run(cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("Usage:"), std::string::npos) << cmd;
  }
  EXPECT_NE(run("ls --help").out.find("--world-size"), std::string::npos);
}

TEST_F(WdsTool, LsPrintsOneLinePerSample) {
  std::string path = shard("s.tar", {test::make_sample("a", {{"cls", "7"}, {"txt", "hello"}}),
                                     test::make_sample("b", {{"txt", ""}})});
  Result r = run("ls '" + path + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, path + "\ta\tcls=1\ttxt=5\n" + path + "\tb\ttxt=0\n");
}

// Column stores: --join (repeatable) reads other shard sets in lockstep; their fields join the
// first set's, and bench counts the bytes of all. A set of another length is refused.
TEST_F(WdsTool, LsAndBenchJoinShardSetsByKey) {
  for (int s = 0; s < 2; ++s) {
    const std::string n = std::to_string(s);
    shard("img-" + n + ".tar", {test::make_sample("k" + n + "a", {{"jpg", "JJJJ"}}),
                                test::make_sample("k" + n + "b", {{"jpg", "JJ"}})});
    shard("cap-" + n + ".tar", {test::make_sample("k" + n + "a", {{"txt", "abc"}}),
                                test::make_sample("k" + n + "b", {{"txt", "d"}})});
  }
  const std::string img = dir_.file("img-{0..1}.tar");
  const std::string cap = dir_.file("cap-{0..1}.tar");
  // --join before the URL-PATTERN: it takes one pattern, not the rest of the line.
  Result r = run("ls --join '" + cap + "' '" + img + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string i0 = dir_.file("img-0.tar"), i1 = dir_.file("img-1.tar");
  EXPECT_EQ(r.out, i0 + "\tk0a\tjpg=4\ttxt=3\n" + i0 + "\tk0b\tjpg=2\ttxt=1\n" + i1 +
                       "\tk1a\tjpg=4\ttxt=3\n" + i1 + "\tk1b\tjpg=2\ttxt=1\n");

  r = run("bench --json '" + img + "' --join '" + cap + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["samples"], 4);
  std::uint64_t bytes = 0;
  for (const char* f : {"img-0.tar", "img-1.tar", "cap-0.tar", "cap-1.tar"}) {
    bytes += std::filesystem::file_size(dir_.file(f));
  }
  EXPECT_EQ(j["bytes"], bytes);

  r = run("ls '" + img + "' --join '" + cap + "' --join '" + dir_.file("cap-0.tar") + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has 1 shards, the first shard set 2"), std::string::npos) << r.err;
}

// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

TEST_F(WdsTool, CacheWarningsArePrintedOnceAndTheSamplesAreRight) {
  std::string bytes = test::make_tar([](TarWriter& w) {
    for (int i = 0; i < 20; ++i) {
      w.write(test::make_sample("k" + std::to_string(i), {{"txt", std::string(4000, 'a' + i)}}));
    }
  });
  test::ScriptServer server([&bytes](const std::string&) {
    return test::Reply{.head = "HTTP/1.1 200 OK\r\n", .body = bytes};
  });
  const std::string urls = "'" + server.url("/a.tar") + "' '" + server.url("/b.tar") + "'";
  const std::string expected = run("ls " + urls).out;
  ASSERT_EQ(lines_starting(expected, "http").size(), 40u);

  // A cache dir that cannot be created: one warning for both shards, all samples.
  const std::string bad = dir_.write("file", "x") + "/cache";
  Result r = run("ls --cache-dir '" + bad + "' " + urls);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  std::vector<std::string> warnings = lines_starting(r.err, "wds: warning: ");
  ASSERT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_NE(warnings[0].find(bad + " is not usable"), std::string::npos) << r.err;

  // A damaged entry: named, fetched again, the samples right.
  const std::string cache = dir_.file("cache");
  ASSERT_EQ(run("ls --cache-dir '" + cache + "' " + urls).out, expected);
  std::string entry;
  for (const auto& e : std::filesystem::directory_iterator(cache)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("a.tar.", 0) == 0 && e.path().extension() != ".sum") entry = e.path().string();
  }
  ASSERT_FALSE(entry.empty());
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30000);
    f.put('!');
  }
  r = run("ls --cache-dir '" + cache + "' " + urls);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  warnings = lines_starting(r.err, "wds: warning: ");
  ASSERT_EQ(warnings.size(), 1u) << r.err;
  EXPECT_NE(warnings[0].find("cache file " + entry + " bytes 0-65535 do not match"),
            std::string::npos)
      << r.err;
}

TEST_F(WdsTool, LsJsonHasKeyUrlAndFieldSizes) {
  std::string path = shard(
      "s.tar", {test::make_sample("dir/a", {{"jpg", std::string(1234, 'j')}, {"seg.png", "xy"}})});
  Result r = run("ls --json '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["__key__"], "dir/a");
  EXPECT_EQ(j["__url__"], path);
  EXPECT_EQ(j["jpg"], 1234);
  EXPECT_EQ(j["seg.png"], 2);
  EXPECT_EQ(j.size(), 4u);
}

TEST_F(WdsTool, LsSha256GivesStandardDigests) {
  // FIPS 180-2 test vectors: SHA-256("abc") and SHA-256("").
  std::string path = shard("s.tar", {test::make_sample("a", {{"cls", "abc"}, {"txt", ""}})});
  Result r = run("ls --json --sha256 '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cls"], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(j["txt"], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_F(WdsTool, LsSplitsShardsByRankThenWorker) {
  for (int i = 0; i < 6; ++i) {
    shard("s" + std::to_string(i) + ".tar",
          {test::make_sample("k" + std::to_string(i), {{"cls", "1"}})});
  }
  std::string pattern = "'" + dir_.path().string() + "/s{0..5}.tar'";
  auto keys = [&](const std::string& opts) {
    Result r = run("ls --json " + opts + " " + pattern);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string out;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      out += nlohmann::json::parse(line)["__key__"].get<std::string>() + " ";
    }
    return out;
  };
  EXPECT_EQ(keys(""), "k0 k1 k2 k3 k4 k5 ");
  EXPECT_EQ(keys("--rank 1 --world-size 2"), "k1 k3 k5 ");
  EXPECT_EQ(keys("--rank 1 --world-size 2 --worker 1 --num-workers 2"), "k3 ");
  EXPECT_EQ(keys("--worker 2 --num-workers 3"), "k2 k5 ");
  Result bad = run("ls --rank 2 --world-size 2 " + pattern);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("rank=2 is not below"), std::string::npos) << bad.err;
}

class WdsToolPipeline : public WdsTool {
 protected:
  void SetUp() override {
    WdsTool::SetUp();
    if (IsSkipped()) return;
    for (int i = 0; i < 6; ++i) {
      std::vector<Sample> samples;
      for (int k = 0; k < 3; ++k) {
        samples.push_back(
            test::make_sample("k" + std::to_string(i) + std::to_string(k), {{"cls", "1"}}));
      }
      shard("s" + std::to_string(i) + ".tar", samples);
    }
    pattern_ = "'" + dir_.path().string() + "/s{0..5}.tar'";
  }
  // The keys `wds ls OPTIONS pattern` prints, space-separated.
  std::string keys(const std::string& options, const std::string& env = "") {
    Result r = run(options + " " + pattern_, "", env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string out;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      std::size_t key = line.find('\t') + 1;  // "url <TAB> key <TAB> fields"
      out += line.substr(key, line.find('\t', key) - key) + " ";
    }
    return out;
  }
  std::string pattern_;
};

TEST_F(WdsToolPipeline, RankAndWorldFallBackToTheLaunchersEnvironment) {
  EXPECT_EQ(keys("ls", "RANK=1 WORLD_SIZE=3"), keys("ls --rank 1 --world-size 3"));
  EXPECT_EQ(keys("ls", "OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=3"),
            "k20 k21 k22 k50 k51 k52 ");
  Result bad = run("ls " + pattern_, "", "RANK=1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("RANK is set but WORLD_SIZE is not"), std::string::npos) << bad.err;
}

TEST_F(WdsToolPipeline, SplitPolicies) {
  Result even = run("ls --world-size 4 --rank 0 " + pattern_);
  EXPECT_EQ(even.exit_code, 1);
  EXPECT_NE(even.err.find("6 shards do not divide evenly among 4 ranks"), std::string::npos)
      << even.err;
  EXPECT_EQ(keys("ls --world-size 4 --rank 3 --split-policy unbalanced"), "k30 k31 k32 ");
  EXPECT_EQ(keys("ls --world-size 4 --rank 3 --split-policy drop_last"), "k30 k31 k32 ");
  EXPECT_EQ(keys("ls --world-size 4 --rank 1", "WDS_SPLIT_POLICY=drop_last"), "k10 k11 k12 ");
  Result unknown = run("ls --split-policy sideways " + pattern_);
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("unknown split policy 'sideways'"), std::string::npos);
}

TEST_F(WdsToolPipeline, EpochContinuesTheStreamAcrossPasses) {
  EXPECT_EQ(keys("ls --epoch 4 --passes 3"), "k00 k01 k02 k10 k11 k12 k20 k21 k22 k30 k31 k32 ");
  EXPECT_EQ(keys("ls --epoch 10 --passes 2"),
            "k00 k01 k02 k10 k11 k12 k20 k21 k22 k30 k31 k32 k40 k41 k42 k50 k51 k52 k00 k01 ");
}

TEST_F(WdsToolPipeline, ShufflesAreReproducibleAndSeeded) {
  std::string a = keys("ls --shuffle-shards --shuffle 5 --seed 3");
  EXPECT_EQ(a, keys("ls --shuffle-shards --shuffle 5 --seed 3"));
  EXPECT_EQ(a, keys("ls --shuffle-shards --shuffle 5", "WDS_SEED=3"));
  EXPECT_NE(a, keys("ls --shuffle-shards --shuffle 5 --seed 4"));
  EXPECT_NE(a, keys("ls"));
  std::string r = keys("ls --resampled --epoch 30 --seed 1");
  EXPECT_EQ(std::count(r.begin(), r.end(), ' '), 30);
  EXPECT_EQ(r, keys("ls --resampled --epoch 30 --seed 1"));
}

// --interleave K: K shards at once, one sample from each in turn; a slot whose shard ends takes
// the next shard.
TEST_F(WdsToolPipeline, InterleaveReadsShardsRoundRobin) {
  EXPECT_EQ(keys("ls --interleave 1"), keys("ls"));
  EXPECT_EQ(keys("ls --interleave 2"),
            "k00 k10 k01 k11 k02 k12 k20 k30 k21 k31 k22 k32 k40 k50 k41 k51 k42 k52 ");
  EXPECT_EQ(keys("ls --interleave 4 --epoch 6"), "k00 k10 k20 k30 k01 k11 ");
}

// From a shell: 2 ranks x 2 workers print 4 samples each and save their states; merged, they
// resume on 1 rank (and on 4 ranks of 1 worker): before + after is the whole epoch, once each.
TEST_F(WdsToolPipeline, StreamsStatesSavedByRanksMergeAndResumeOnAnotherNumberOfRanks) {
  const std::string common = "ls --streams 4 --shuffle 2 --shuffle-shards --seed 5 ";
  std::string before;
  for (int r = 0; r < 2; ++r) {
    before += keys(common + "--rank " + std::to_string(r) + " --world-size 2 --workers 2 " +
                   "--stop-after 4 --save-state '" + dir_.file("r" + std::to_string(r)) + "'");
  }
  Result merged = run("merge-states '" + dir_.file("all") + "' '" + dir_.file("r0") + "' '" +
                      dir_.file("r1") + "'");
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_NE(merged.err.find("4 of 4 streams"), std::string::npos) << merged.err;
  auto words = [](const std::string& s) {
    std::multiset<std::string> out;
    std::istringstream in(s);
    for (std::string w; in >> w;) out.insert(w);
    return out;
  };
  std::multiset<std::string> all = words(keys("ls"));
  ASSERT_EQ(all.size(), 18u);
  for (int world : {1, 4}) {
    std::string after;
    for (int r = 0; r < world; ++r) {
      after += keys(common + "--rank " + std::to_string(r) + " --world-size " +
                    std::to_string(world) + " --restore '" + dir_.file("all") + "'");
    }
    EXPECT_EQ(words(before + after), all) << "resumed on " << world << " ranks";
  }
  // One rank's state alone cannot resume a job: it says what to do.
  Result partial = run("merge-states '" + dir_.file("half") + "' '" + dir_.file("r0") + "'");
  EXPECT_NE(partial.err.find("missing"), std::string::npos) << partial.err;
  Result lone = run(common + "--restore '" + dir_.file("half") + "' " + pattern_);
  EXPECT_EQ(lone.exit_code, 1);
  EXPECT_NE(lone.err.find("merge_states"), std::string::npos) << lone.err;
  // Another seed is refused, naming it.
  Result seed = run("ls --streams 4 --shuffle 2 --shuffle-shards --seed 6 --restore '" +
                    dir_.file("all") + "' " + pattern_);
  EXPECT_EQ(seed.exit_code, 1);
  EXPECT_NE(seed.err.find("seed: saved 5, this pipeline 6"), std::string::npos) << seed.err;
}

// A state file damaged after it was saved (one byte changed) is refused by its checksum, naming
// the file, by --restore (of a pipeline and of a loader) and by merge-states.
TEST_F(WdsToolPipeline, ADamagedStateFileIsRefusedNamingTheFile) {
  const std::string common = "ls --streams 4 --shuffle 2 --shuffle-shards --seed 5 --epoch 9 ";
  for (const std::string workers : {"", "--workers 2 "}) {
    const std::string saved = dir_.file("saved" + std::to_string(workers.size()));
    ASSERT_EQ(
        run(common + workers + "--stop-after 4 --save-state '" + saved + "' " + pattern_).exit_code,
        0);
    std::string state = test::read_file(saved);
    ASSERT_GT(state.size(), 100u);
    const std::string damaged = dir_.file("damaged" + std::to_string(workers.size()));
    state[state.size() / 2] = static_cast<char>(state[state.size() / 2] ^ 1);
    dir_.write(damaged.substr(damaged.rfind('/') + 1), state);
    Result r = run(common + workers + "--restore '" + damaged + "' " + pattern_);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(damaged + ": the pipeline state is damaged"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
    Result m = run("merge-states '" + dir_.file("merged") + "' '" + saved + "' '" + damaged + "'");
    EXPECT_EQ(m.exit_code, 1);
    EXPECT_NE(m.err.find(damaged + ": the pipeline state is damaged"), std::string::npos) << m.err;
    // The intact one restores.
    EXPECT_EQ(run(common + workers + "--restore '" + saved + "' " + pattern_).exit_code, 0);
  }
}

// A new user's complaint: a 3 s outage and a dead server looked the same for 35 s, then one
// error. Retries are reported as they happen, at most a line a second (the rest counted).
TEST_F(WdsTool, NetworkRetriesAreReportedAsTheyHappenAtMostOnceASecond) {
  // A port nothing listens on: every attempt is refused at once.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/a.tar";
  Result r = run("ls --retries 3 " + url);
  EXPECT_EQ(r.exit_code, 1);
  std::size_t lines = 0;
  for (std::size_t at = r.err.find("warning: retrying"); at != std::string::npos;
       at = r.err.find("warning: retrying", at + 1)) {
    ++lines;
  }
  // Three retries within 0.2 + 0.4 + 0.8 s: the first is reported at once, the others fall in
  // its second or the next, and the error names the URL.
  EXPECT_GE(lines, 1u) << r.err;
  EXPECT_LE(lines, 2u) << r.err;
  EXPECT_NE(r.err.find("attempt 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(url), std::string::npos) << r.err;
  Result quiet = run("ls --retries 0 " + url);
  EXPECT_EQ(quiet.err.find("warning: retrying"), std::string::npos) << quiet.err;
}

// A new user's mistakes: negative numbers wrapped around to 2^64-1, --epoch 0 printed nothing
// and exited 0, --num-workers 0 answered with a 300-digit range, and --rank alone named
// DistributedOptions::rank. Each must be refused with the flag and what it takes.
TEST_F(WdsToolPipeline, NumberMistakesAreRefusedNamingTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"ls --shuffle -1", "--shuffle: must be >= 0, got -1"},
      {"ls --seed -5", "--seed: must be >= 0, got -5"},
      {"ls --shard-shuffle -2", "--shard-shuffle: must be >= 0, got -2"},
      {"ls --interleave 0", "--interleave: must be >= 1, got 0"},
      {"ls --cache-size -1", "--cache-size: must be >= 0, got -1"},
      {"ls --epoch 0", "--epoch: must be >= 1, got 0"},
      {"ls --passes 0", "--passes: must be >= 1, got 0"},
      {"ls --num-workers 0", "--num-workers: must be >= 1, got 0"},
      {"ls --rank 3000000000 --world-size 4", "--rank: must be at most 2147483647"},
      {"ls --rank 1", "--rank requires --world-size"},
      {"ls --world-size 2", "--world-size requires --rank"},
      {"ls --worker 2 --num-workers 2", "--worker 2 must be below --num-workers 2"},
      {"bench --workers -1", "--workers: must be 0..1024, got -1"},
      {"bench --workers 5000", "--workers: must be at most 1024, got 5000"},
      {"bench --batch 0", "--batch: must be >= 1, got 0"},
      {"bench --prefetch 0", "--prefetch: must be >= 1, got 0"},
  };
  for (const auto& [args, message] : cases) {
    Result r = run(std::string(args) + " " + pattern_);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("DistributedOptions"), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("0000000000000000"), std::string::npos) << args << "\n" << r.err;
  }
  // Even with the launcher's variables set: one flag alone would mix two sources of the split.
  Result r = run("ls --rank 1 " + pattern_, "", "RANK=1 WORLD_SIZE=3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--rank requires --world-size"), std::string::npos) << r.err;
  // The same numbers in range still work; bench --workers 0 runs without a loader thread.
  EXPECT_EQ(keys("ls --shuffle 0 --seed 0 --epoch 1"), "k00 ");
  Result bench = run("bench --workers 0 --json " + pattern_);
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(nlohmann::json::parse(bench.out)["samples"], 18);
}

// A pattern with three dots in its braces is no range, so it stays text and ends as "not found";
// a directory given without '/' is not listed. Both errors say what was probably meant.
TEST_F(WdsTool, NotFoundSaysWhatWasProbablyMeant) {
  shard("data/train-000000.tar", {test::make_sample("a", {{"txt", "x"}})});
  shard("data/train-000001.tar", {test::make_sample("b", {{"txt", "y"}})});
  const std::string data = dir_.file("data");
  Result dots = run("ls '" + data + "/train-{000000...000001}.tar'");
  EXPECT_EQ(dots.exit_code, 1);
  EXPECT_NE(dots.err.find("not found"), std::string::npos) << dots.err;
  EXPECT_NE(dots.err.find("did you mean {000000..000001}?"), std::string::npos) << dots.err;

  Result folder = run("ls '" + data + "'");
  EXPECT_EQ(folder.exit_code, 1);
  EXPECT_NE(folder.err.find("is a directory"), std::string::npos) << folder.err;
  EXPECT_NE(folder.err.find("give " + data + "/ to list its shards"), std::string::npos)
      << folder.err;
  // What the hints propose works.
  EXPECT_EQ(run("ls '" + data + "/train-{000000..000001}.tar'").exit_code, 0);
  EXPECT_EQ(run("ls '" + data + "/'").out, run("ls '" + data + "/train-{000000..000001}.tar'").out);
  // A missing name without the mistake gets no hint.
  Result plain = run("ls '" + data + "/train-000009.tar'");
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_EQ(plain.err.find("did you mean"), std::string::npos) << plain.err;
}

TEST_F(WdsTool, LsReadsStdin) {
  std::string path = shard("s.tar", {test::make_sample("a", {{"txt", "x"}})});
  Result r = run("ls -", path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "-\ta\ttxt=1\n");
}

TEST_F(WdsTool, LsReportsBrokenShardsAndCanGoOn) {
  std::string good = shard("good.tar", {test::make_sample("a", {{"txt", "x"}})});
  std::string missing = dir_.file("missing.tar");
  Result r = run("ls '" + missing + "' '" + good + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("wds: error: not found: " + missing), std::string::npos) << r.err;

  Result warn = run("ls --on-error warn '" + missing + "' '" + good + "'");
  EXPECT_EQ(warn.exit_code, 0);
  EXPECT_EQ(warn.out, good + "\ta\ttxt=1\n");
  EXPECT_NE(warn.err.find("warning: not found: " + missing), std::string::npos) << warn.err;

  Result quiet = run("ls --on-error ignore '" + missing + "' '" + good + "'");
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_EQ(quiet.err, "");
}

// Shards written the way Python webdataset writes them (and by GNU tar), read by wds, must give
// exactly the samples webdataset's own rules give: tests/tools/webdataset_reference.py models
// those rules independently and prints the expected `wds ls --json --sha256` lines.
TEST_F(WdsTool, ReadsWhatPythonWebDatasetWritesAsWebDatasetReadsIt) {
  if (std::system("python3 -c 'import tarfile' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is not installed";
  }
  const std::string script = std::string(WDS_SOURCE_DIR) + "/tests/tools/webdataset_reference.py";
  const std::string data = dir_.file("shards");
  std::string listing = dir_.file("shards.txt");
  ASSERT_EQ(
      std::system(("python3 '" + script + "' write '" + data + "' >'" + listing + "'").c_str()), 0);
  std::istringstream names(read_file(listing));
  int shards = 0;
  for (std::string name; std::getline(names, name); ++shards) {
    const std::string shard = data + "/" + name;
    std::string expected_file = dir_.file("expected.jsonl");
    ASSERT_EQ(
        std::system(
            ("python3 '" + script + "' expect '" + shard + "' >'" + expected_file + "'").c_str()),
        0)
        << name;
    std::string expected = read_file(expected_file);
    ASSERT_FALSE(expected.empty()) << name;
    Result r = run("ls --json --sha256 '" + shard + "'");
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_EQ(r.out, expected) << name;
  }
  EXPECT_EQ(shards, 8);
}

}  // namespace
}  // namespace wds

namespace wds {
namespace {

// Samples with a small JPEG (made by wds's own encoder) and a class label.
std::vector<Sample> image_samples(const std::string& prefix, int n, std::size_t* bytes) {
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    Tensor img(DType::uint8, {8, 8, 3});
    for (std::size_t k = 0; auto& v : img.values<std::uint8_t>())
      v = static_cast<std::uint8_t>(k++ * 7 + i);
    DecodedSample s(prefix + std::to_string(i));
    s.set("jpg", img);
    s.set("cls", i);
    out.push_back(encode_sample(s));
    *bytes += out.back().payload_bytes();
  }
  return out;
}

TEST_F(WdsTool, BenchDecodesBatchesOnWorkersAndPrintsJson) {
  std::size_t payload = 0;
  std::string a = shard("a.tar", image_samples("a", 6, &payload));
  std::string b = shard("b.tar", image_samples("b", 6, &payload));
  Result r = run("bench --decode rgb8 --tuple 'jpg cls' --batch 4 --workers 2 --json '" +
                 dir_.file("{a,b}.tar") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["samples"], 12);
  EXPECT_EQ(j["batches"], 4);  // each worker: 6 samples -> batches of 4 and 2
  // Bytes read from the shards' sources: the whole tar files (headers and padding included).
  EXPECT_EQ(j["bytes"], std::filesystem::file_size(a) + std::filesystem::file_size(b));
  EXPECT_GT(j["bytes"].get<std::size_t>(), payload);
  for (const char* k : {"wall_s", "samples_per_s", "MB_per_s", "peak_rss_mb"}) {
    EXPECT_TRUE(j[k].is_number()) << k;
    EXPECT_GT(j[k].get<double>(), 0) << k;
  }
  // --epoch counts batches over all workers, pass after pass.
  r = run("bench --decode rgb8 --batch 4 --workers 2 --resampled --epoch 5 --passes 2 --json '" +
          dir_.file("{a,b}.tar") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["batches"], 10);
  // The human form ends with a summary line.
  r = run("bench --decode rgb8 --batch 4 '" + a + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6 samples in 2 batches"), std::string::npos) << r.out;
}

TEST_F(WdsTool, BenchRunsTheTrainingAndEvaluationTransforms) {
  std::size_t payload = 0;
  shard("a.tar", image_samples("a", 6, &payload));
  shard("b.tar", image_samples("b", 6, &payload));
  const std::string shards = " '" + dir_.file("{a,b}.tar") + "'";
  for (const std::string& transform :
       {std::string("--random-resized-crop 16 --scale 0.2,1 --ratio 0.5,2 --flip 0.5"),
        std::string("--resize 20 --crop 16")}) {
    Result r = run("bench --decode rgb8 " + transform +
                   " --normalize imagenet --layout chw --dtype float16 --tuple 'jpg cls' --batch 4"
                   " --workers 2 --json" +
                   shards);
    ASSERT_EQ(r.exit_code, 0) << transform << ": " << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["samples"], 12) << transform;
    EXPECT_EQ(j["batches"], 4) << transform;
  }
  // Bad parameters are refused before anything is read, naming the parameter.
  const std::pair<std::string, std::string> refused[] = {
      {"--random-resized-crop 16 --scale 0.5,0.2", "scale (0.5, 0.2)"},
      {"--random-resized-crop 16 --scale 0.5", "--scale '0.5': use MIN,MAX"},
      {"--random-resized-crop 16 --ratio 0,1", "ratio (0, 1)"},
      {"--random-resized-crop 16 --resize 20", "resize or crop"},
      {"--flip 1.5", "flip probability 1.5"},
      {"--normalize 0.5,0.5/1,1 --dtype float32", "mean has 2 values"},
      {"--normalize 0.5,0.5,0.5/1,0,1 --dtype float32", "std 0"},
      {"--normalize imagenet", "float16 or float32"},
      {"--normalize 0.5,x,1/1,1,1 --dtype float32", "'x' is not a number"},
  };
  for (const auto& [flags, message] : refused) {
    Result r = run("bench --decode rgb8 " + flags + shards);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << ": " << r.err;
  }
  Result r = run("bench --random-resized-crop 16" + shards);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("need --decode"), std::string::npos) << r.err;
}

// PNG (as every format but JPEG) decodes through OpenCV's imgcodecs, which the tool does not
// link: it is opened on the first such image (codecs/image.cpp).
TEST_F(WdsTool, BenchDecodesPngWithImgcodecsOpenedOnFirstUse) {
  std::vector<Sample> samples;
  for (int i = 0; i < 3; ++i) {
    Tensor img(DType::uint8, {5, 7, 3});
    std::uint8_t k = 0;
    for (std::uint8_t& v : img.values<std::uint8_t>()) v = static_cast<std::uint8_t>(k++ + i);
    DecodedSample s("p" + std::to_string(i));
    s.set("png", img);
    s.set("cls", i);
    samples.push_back(encode_sample(s));
  }
  samples.push_back(test::make_sample("p3", {{"png", "\x89PNG\r\n\x1a\n broken"}, {"cls", "3"}}));
  std::string path = shard("png.tar", samples);
  Result r = run("bench --decode rgb8 --tuple 'png cls' --batch 3 --json '" + path + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("p3.png"), std::string::npos) << r.err;
  r = run("bench --decode rgb8 --tuple 'png cls' --on-error ignore --json '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["samples"], 3);
}

TEST_F(WdsTool, BenchNamesTheMemberThatDoesNotDecode) {
  std::size_t bytes = 0;
  std::vector<Sample> samples = image_samples("k", 4, &bytes);
  samples[2] = test::make_sample("k2", {{"jpg", "\xff\xd8\xff not a jpeg"}, {"cls", "2"}});
  std::string path = shard("bad.tar", samples);
  Result r = run("bench --decode rgb8 --batch 2 '" + path + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("k2.jpg"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bad.tar"), std::string::npos) << r.err;
  // Skipping bad samples on request.
  r = run("bench --decode rgb8 --on-error ignore --json '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["samples"], 3);
}

// A mono 16-bit WAV of `frames` samples at 8 kHz, written here (no ffmpeg needed).
std::string wav_bytes(int frames) {
  auto le = [](std::uint32_t v, int n) {
    std::string b;
    for (int i = 0; i < n; ++i) b += static_cast<char>((v >> (8 * i)) & 0xff);
    return b;
  };
  std::string data;
  for (int i = 0; i < frames; ++i) data += le(static_cast<std::uint32_t>((i * 37) % 2000), 2);
  return "RIFF" + le(36 + static_cast<std::uint32_t>(data.size()), 4) + "WAVEfmt " + le(16, 4) +
         le(1, 2) + le(1, 2) + le(8000, 4) + le(16000, 4) + le(2, 2) + le(16, 2) + "data" +
         le(static_cast<std::uint32_t>(data.size()), 4) + data;
}

TEST_F(WdsTool, BenchDecodesAudioWindowsWhenAsked) {
  std::vector<Sample> samples;
  for (int i = 0; i < 4; ++i) {
    samples.push_back(
        test::make_sample("w" + std::to_string(i), {{"wav", wav_bytes(16000)}, {"cls", "1"}}));
  }
  const std::string good = shard("audio.tar", samples);
  Result r =
      run("bench --decode-audio --audio-rate 16000 --audio-duration 0.5 --audio-random "
          "--stats --json '" +
          good + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["samples"], 4);
  EXPECT_EQ(j["metrics"]["decoded"], 4) << r.out;
  // Bad media names its member.
  samples[2] = test::make_sample("w2", {{"wav", "RIFF not a wav"}, {"cls", "1"}});
  const std::string bad = shard("bad-audio.tar", samples);
  r = run("bench --decode-audio '" + bad + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("w2.wav"), std::string::npos) << r.err;
  // The window is longer than max_duration: refused before reading.
  r = run("bench --decode-audio --audio-duration 20 --audio-max-duration 10 '" + good + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("max_duration"), std::string::npos) << r.err;
  r = run("bench --audio-rate 16000 '" + good + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("need --decode-audio"), std::string::npos) << r.err;
}

TEST_F(WdsTool, BenchDecodesVideoClipsIntoBatchesWhenAsked) {
  if (!test::have_ffmpeg()) GTEST_SKIP() << "ffmpeg is missing";
  const std::string clip = dir_.file("clip.mp4");
  ASSERT_EQ(test::run_command("ffmpeg -nostdin -loglevel error -y -f lavfi -i "
                              "testsrc2=size=96x64:rate=15 -t 2 -c:v libx264 -pix_fmt yuv420p " +
                              clip)
                .status,
            0);
  std::vector<Sample> samples;
  for (int i = 0; i < 5; ++i) {
    samples.push_back(
        test::make_sample("v" + std::to_string(i), {{"mp4", read_file(clip)}, {"cls", "2"}}));
  }
  const std::string good = shard("video.tar", samples);
  Result r =
      run("bench --decode-video --video-frames 4 --video-size 32x24 --video-random "
          "--tuple 'mp4 cls' --batch 2 --stats --json '" +
          good + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["samples"], 5);
  EXPECT_EQ(j["batches"], 3);
  EXPECT_EQ(j["metrics"]["decoded"], 5) << r.out;
  // Bad media names its member.
  samples[3] = test::make_sample("v3", {{"mp4", "....ftypisom, but not a video"}, {"cls", "1"}});
  r = run("bench --decode-video '" + shard("bad-video.tar", samples) + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("v3.mp4"), std::string::npos) << r.err;
  r = run("bench --decode-video --video-size 32x '" + good + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--video-size"), std::string::npos) << r.err;
  r = run("bench --video-frames 8 '" + good + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("need --decode-video"), std::string::npos) << r.err;
}

// FFmpeg and OpenCV's imgcodecs load about 90 and 115 shared libraries: a run that decodes
// neither audio nor a non-JPEG image must not load them (codecs/ffmpeg.hpp). The dynamic
// loader's own log (LD_DEBUG=files) says which files a run opened.
TEST_F(WdsTool, FfmpegAndImgcodecsAreLoadedOnlyByARunThatDecodesWithThem) {
  auto loaded = [](const Result& r, const std::string& name) {
    return r.err.find("file=" + name) != std::string::npos;
  };
  Result r = run("--help", "", "LD_DEBUG=files");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(loaded(r, "libarchive")) << "LD_DEBUG=files gave no log: " << r.err;
  EXPECT_FALSE(loaded(r, "libavcodec")) << r.err;
  EXPECT_FALSE(loaded(r, "libopencv_imgcodecs")) << r.err;

  std::vector<Sample> samples{test::make_sample("w0", {{"wav", wav_bytes(800)}, {"cls", "1"}})};
  const std::string path = shard("one-audio.tar", samples);
  r = run("bench --decode rgb8 '" + path + "'", "", "LD_DEBUG=files");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(loaded(r, "libavcodec")) << "a run without --decode-audio loaded FFmpeg";
  r = run("bench --decode-audio '" + path + "'", "", "LD_DEBUG=files");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(loaded(r, "libavcodec")) << r.err;
}

// `wds serve` as a child process, for the data service's tests: started with its stderr in a
// file, ready once it printed "serving on ENDPOINT" (the line scripts wait for).
class ServeProcess {
 public:
  ServeProcess(const std::string& tool, const std::string& args, const std::string& err_file)
      : err_file_(err_file) {
    const std::string cmd = "exec '" + tool + "' serve " + args + " 2>'" + err_file + "'";
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    if (::posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) {
      pid_ = -1;
      return;
    }
    // A bound on the wait, so that a server that never says it is ready fails the test instead
    // of hanging it; not a timing assertion.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string err = test::read_file(err_file_);
      const std::size_t at = err.find("serving on ");
      const std::size_t end = err.find('\n', at);
      if (at != std::string::npos && end != std::string::npos) {
        endpoint_ = err.substr(at + 11, end - at - 11);
        return;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited before serving
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // Empty if the server did not start (its stderr says why).
  const std::string& endpoint() const { return endpoint_; }
  std::string err() const { return test::read_file(err_file_); }
  void signal(int sig) const { ::kill(pid_, sig); }
  // Sends `sig` and waits for the exit: its exit code, or -1 if it did not exit normally.
  int stop(int sig = SIGTERM) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  std::string err_file_;
  pid_t pid_ = -1;
  std::string endpoint_;
};

// Four shards of six samples: keys s<shard>_<i>, fields cls and txt.
class WdsService : public WdsTool {
 protected:
  void SetUp() override {
    WdsTool::SetUp();
    if (IsSkipped()) return;
    // Once per run of the suite: each start of the tool costs a noticeable fraction of a second.
    static const bool has_serve = run("serve --help").exit_code == 0;
    if (!has_serve) GTEST_SKIP() << "wds built without the data service";
    for (int s = 0; s < 4; ++s) {
      std::vector<Sample> samples;
      for (int i = 0; i < 6; ++i) {
        const std::string key = "s" + std::to_string(s) + "_" + std::to_string(i);
        samples.push_back(test::make_sample(key, {{"cls", std::to_string(i)}, {"txt", key}}));
      }
      shard("s" + std::to_string(s) + ".tar", samples);
    }
    pattern_ = "'" + dir_.file("s{0..3}.tar") + "'";
  }
  std::unique_ptr<ServeProcess> serve(const std::string& args) {
    return std::make_unique<ServeProcess>(tool_, args + " " + pattern_, dir_.file("serve.err"));
  }
  // The (url, key) lines `wds ls --service` printed.
  static std::vector<std::pair<std::string, std::string>> lines(const std::string& out) {
    std::vector<std::pair<std::string, std::string>> got;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      const std::size_t tab = line.find('\t');
      got.emplace_back(line.substr(0, tab), tab == std::string::npos ? "" : line.substr(tab + 1));
    }
    return got;
  }

  std::string pattern_;
};

// Two trainers (wds ls --service, ranks 0 and 1 of 2) of one `wds serve`: together every sample
// of the dataset exactly once, in equal counts, each line naming the sample's own shard; the
// server then stops cleanly on SIGTERM, writing its state file and a summary per rank.
TEST_F(WdsService, TwoLsTrainersGetEverySampleOnceInEqualCountsWithTheirUrls) {
  auto server = serve("--batch 3 --shuffle-shards --seed 7 --workers 2 --state-file '" +
                      dir_.file("state") + "'");
  ASSERT_FALSE(server->endpoint().empty()) << server->err();
  EXPECT_EQ(server->endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << server->endpoint();
  std::vector<std::string> keys;
  for (int r = 0; r < 2; ++r) {
    Result ls = run("ls --service " + server->endpoint() + " --rank " + std::to_string(r) +
                    " --world-size 2 --epoch 4");  // 2 shards of 6 = 4 batches of 3 per rank
    ASSERT_EQ(ls.exit_code, 0) << ls.err;
    const auto got = lines(ls.out);
    EXPECT_EQ(got.size(), 12u) << "rank " << r << ":\n" << ls.out;
    for (const auto& [url, key] : got) {
      EXPECT_EQ(url, dir_.file(key.substr(0, 2) + ".tar")) << key;
      keys.push_back(key);
    }
  }
  std::sort(keys.begin(), keys.end());
  std::vector<std::string> all;
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < 6; ++i) all.push_back("s" + std::to_string(s) + "_" + std::to_string(i));
  }
  EXPECT_EQ(keys, all);

  // --json: the same samples as objects.
  Result json = run("ls --service " + server->endpoint() + " --rank 1 --world-size 2 --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto first = nlohmann::json::parse(json.out.substr(0, json.out.find('\n')));
  EXPECT_EQ(first.size(), 2u);
  EXPECT_EQ(first["__url__"], dir_.file(first["__key__"].get<std::string>().substr(0, 2) + ".tar"));

  EXPECT_EQ(server->stop(SIGTERM), 0) << server->err();
  const std::string err = server->err();
  EXPECT_NE(err.find("rank 0: "), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1: "), std::string::npos) << err;
  EXPECT_NE(err.find("acknowledged"), std::string::npos) << err;
  EXPECT_FALSE(test::read_file(dir_.file("state")).empty()) << "no state file written at exit";
}

// SIGUSR1 asks a running server to write its state file (a checkpoint of the producer); SIGINT
// stops it as cleanly as SIGTERM.
TEST_F(WdsService, Sigusr1WritesTheStateFileAndSigintStopsCleanly) {
  const std::string state = dir_.file("state");
  auto server = serve("--batch 3 --state-file '" + state + "'");
  ASSERT_FALSE(server->endpoint().empty()) << server->err();
  ASSERT_EQ(run("ls --service " + server->endpoint() + " --epoch 2").exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(state));  // --save-every 0: nothing written yet
  server->signal(SIGUSR1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!std::filesystem::exists(state) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(std::filesystem::exists(state)) << "SIGUSR1 wrote no state file";
  EXPECT_EQ(server->stop(SIGINT), 0) << server->err();
}

// wds bench --service reports what arrived, as bench does: samples from the batches' rows,
// batches, bytes received and (--stats) the waits for the producer.
TEST_F(WdsService, BenchServiceJsonCountsTheSamplesOfTheBatches) {
  auto server = serve("--tuple 'cls txt' --batch 3 --quiet --shared-memory-mb 64");
  ASSERT_FALSE(server->endpoint().empty()) << server->err();
  // A trainer may decline the producer's shared memory (its own option, not the server's).
  Result r = run("bench --service " + server->endpoint() +
                 " --epoch 2 --passes 2 --json --stats --no-shared-memory");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["samples"], 12);  // 2 passes of 2 batches of 3
  EXPECT_EQ(j["batches"], 4);
  EXPECT_GT(j["bytes"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(j["rank"], 0);
  EXPECT_EQ(j["metrics"]["items"], 4);
  EXPECT_TRUE(j["metrics"].contains("consumer_wait_s"));
  EXPECT_EQ(server->stop(), 0) << server->err();
}

// The trainers bring the rank and world size: a server given them would serve one split to
// everyone. And nothing listens beyond loopback without a token.
TEST_F(WdsService, ServeRefusesARankAndAnOpenBindWithoutAToken) {
  Result r = run("serve --rank 0 --world-size 2 " + pattern_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("wds serve does not take --rank"), std::string::npos) << r.err;
  r = run("serve --epoch 10 " + pattern_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--epoch"), std::string::npos) << r.err;
  r = run("serve --bind 'tcp://0.0.0.0:*' " + pattern_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("serving on"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("needs a token"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--token-file"), std::string::npos) << r.err;
  dir_.write("empty-token", "\n");
  r = run("serve --token-file '" + dir_.file("empty-token") + "' " + pattern_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is empty"), std::string::npos) << r.err;
}

// A trainer with the wrong token is refused with a message that says so; with the right one
// (the file's content without its trailing newline) it is served.
TEST_F(WdsService, LsServiceWithAWrongTokenIsRefused) {
  const std::string token = dir_.write("token", "s3cret\n");
  const std::string wrong = dir_.write("wrong", "guess\n");
  auto server = serve("--token-file '" + token + "' --batch 3");
  ASSERT_FALSE(server->endpoint().empty()) << server->err();
  Result r = run("ls --service " + server->endpoint() + " --epoch 1 --token-file '" + wrong + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("token does not match"), std::string::npos) << r.err;
  r = run("ls --service " + server->endpoint() + " --epoch 1", "",
          "WDS_SERVICE_TOKEN_FILE='" + token + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines(r.out).size(), 3u) << r.out;
  EXPECT_EQ(server->stop(), 0) << server->err();
}

// With --service the shards and the pipeline are the server's: patterns and its options are
// refused, naming them, before any connection; without --service the patterns are required.
TEST_F(WdsService, TrainersRefuseTheServersOptions) {
  Result r = run("ls --service tcp://127.0.0.1:1 " + pattern_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("give the URL patterns to wds serve"), std::string::npos) << r.err;
  for (const char* args : {"ls --service tcp://127.0.0.1:1 --shuffle 10",
                           "bench --service tcp://127.0.0.1:1 --decode rgb8"}) {
    r = run(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.err.find("belongs to the server"), std::string::npos) << args << ": " << r.err;
  }
  r = run("ls --credits 3 " + pattern_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--credits requires --service"), std::string::npos) << r.err;
  r = run("ls");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("URL-PATTERN is required"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------------
// wds expand with a rank: the shards it reads, the dropped ones, and the policy in force (which
// was only a warning on stderr, and only when a pipeline ran).

// Clears the variables that would otherwise decide the rank or the policy for the child.
const char* const kNoSplitEnv =
    "env -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK "
    "-u PMI_SIZE -u SLURM_PROCID -u SLURM_NTASKS -u PADDLE_TRAINER_ID -u PADDLE_TRAINERS_NUM "
    "-u PADDLE_TRAINERS -u PADDLE_INIT_TRAINER_ID -u PADDLE_INIT_NUM_GRADIENT_SERVERS "
    "-u WDS_SPLIT_POLICY -u WHALE_UNBALANCED_IO_SLICING -u WHALE_DROP_LAST_FILES";

TEST_F(WdsTool, ExpandShowsTheShardsARankReadsAndTheDroppedOnes) {
  const std::string env = kNoSplitEnv;
  Result r = run("expand --rank 1 --world-size 4 --split-policy drop_last 's{0..9}'", "", env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "s1\ns5\n");
  EXPECT_NE(r.err.find("rank 1 of 4 (options)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("policy drop_last (option)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 dropped: s8 s9"), std::string::npos) << r.err;
  r = run("expand --rank 1 --world-size 4 --split-policy drop_last --dropped 's{0..9}'", "", env);
  EXPECT_EQ(r.out, "s8\ns9\n");
  // Workers split the rank's share: rank 1 of 4 unbalanced reads s1 s5 s9, worker 1 of 2 s5.
  r =
      run("expand --rank 1 --world-size 4 --split-policy unbalanced --worker 1 --num-workers 2 "
          "'s{0..9}'",
          "", env);
  EXPECT_EQ(r.out, "s5\n");
  // The default (even) refuses a count that does not divide, naming the other policies.
  r = run("expand --rank 1 --world-size 4 's{0..9}'", "", env);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("do not divide evenly"), std::string::npos) << r.err;
  r = run("expand --rank 0 --world-size 1 --worker 2 --num-workers 2 's{0..9}'", "", env);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--worker 2 must be below --num-workers 2"), std::string::npos) << r.err;
}

// The examples from the environment: Paddle fluid's count and Whale's switch.
TEST_F(WdsTool, ExpandPlanFollowsTheFrameworksVariables) {
  const std::string env = kNoSplitEnv;
  Result r = run("expand --plan 's{0..9}'", "",
                 env + " PADDLE_TRAINER_ID=1 PADDLE_TRAINERS=4 WHALE_UNBALANCED_IO_SLICING=True");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "s1\ns5\ns9\n");
  EXPECT_NE(r.err.find("rank 1 of 4 (paddle)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(WHALE_UNBALANCED_IO_SLICING)"), std::string::npos) << r.err;
  r = run("expand --plan 's{0..9}'", "",
          env +
              " PADDLE_INIT_TRAINER_ID=2 PADDLE_INIT_NUM_GRADIENT_SERVERS=4 "
              "WHALE_UNBALANCED_IO_SLICING=False WHALE_DROP_LAST_FILES=False");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "s0\ns1\ns2\ns3\ns4\ns5\ns6\ns7\ns8\ns9\n");  // Whale's default: all of it
  EXPECT_NE(r.err.find("rank 2 of 4 (paddle_v2)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("policy replicate (whale_default)"), std::string::npos) << r.err;
  // Without a rank option or --plan, expand prints the whole list and reads no variable.
  r = run("expand 's{0..2}'", "", env + " RANK=x");
  EXPECT_EQ(r.out, "s0\ns1\ns2\n");
}

}  // namespace
}  // namespace wds
