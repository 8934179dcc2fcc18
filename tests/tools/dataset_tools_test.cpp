// wds create, reshard, cat, extract and stats, run as a user runs them: a separate process.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/fixtures.hpp"
#include "tests/support/tool_runner.hpp"

namespace wds {
namespace {

namespace fs = std::filesystem;

using Result = test::ToolResult;
using test::read_file;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A name for the fixture of its own: wds_cli_test.cpp's WdsTool may share the executable.
class DatasetTools : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tool = std::getenv("WDS_TOOL");
    if (!tool || !*tool) GTEST_SKIP() << "WDS_TOOL is not set (run through ctest)";
    tool_ = tool;
  }
  // Runs `wds ARGS` through the shell (ARGS is shell text) in the temporary directory.
  Result run(const std::string& args, const std::string& stdin_file = "") {
    return test::run_tool(tool_, args, dir_, dir_.path().string(), stdin_file);
  }
  Result ok(const std::string& args, const std::string& stdin_file = "") {
    Result r = run(args, stdin_file);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    return r;
  }
  std::string shard(const std::string& name, const std::vector<Sample>& samples) {
    return dir_.write(name, test::make_tar([&](TarWriter& w) {
                        for (const Sample& s : samples) w.write(s);
                      }));
  }
  // `wds ls --json --sha256` of the shards, without "__url__": one line per sample, in order.
  std::vector<std::string> contents(const std::string& args, const std::string& stdin_file = "") {
    Result r = ok("ls --json --sha256 " + args, stdin_file);
    std::vector<std::string> out;
    for (const std::string& line : lines_of(r.out)) {
      nlohmann::json j = nlohmann::json::parse(line);
      j.erase("__url__");
      out.push_back(j.dump());
    }
    return out;
  }
  std::vector<std::string> keys(const std::string& args) {
    std::vector<std::string> out;
    for (const std::string& line : lines_of(ok("ls --json " + args).out)) {
      out.push_back(nlohmann::json::parse(line)["__key__"]);
    }
    return out;
  }
  // Ten shards of two samples: s00 and s01 in in-0.tar, ..., s18 and s19 in in-9.tar.
  void ten_shards() {
    for (int i = 0; i < 10; ++i) {
      std::vector<Sample> samples;
      for (int k = 2 * i; k < 2 * i + 2; ++k) {
        std::string key = (k < 10 ? "s0" : "s") + std::to_string(k);
        samples.push_back(test::make_sample(
            key, {{"cls", std::to_string(k)}, {"txt", std::string(10 + k, 'a' + k)}}));
      }
      shard("in/in-" + std::to_string(i) + ".tar", samples);
    }
  }
  static std::vector<std::string> sorted(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  }

  std::string tool_;
  test::TempDir dir_;
};

TEST_F(DatasetTools, EveryCommandHasHelpWithExamples) {
  for (const char* cmd : {"create", "reshard", "cat", "extract", "stats"}) {
    Result r = run(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("Examples:"), std::string::npos) << cmd << "\n" << r.out;
  }
  EXPECT_NE(run("create --help").out.find("collide"), std::string::npos);
}

TEST_F(DatasetTools, CreateFromDirectoryGroupsFilesByKey) {
  dir_.write("src/cat/001.jpg", std::string(100, 'c'));
  dir_.write("src/cat/001.json", "{}");
  dir_.write("src/dog/001.JPG", std::string(50, 'd'));
  dir_.write("src/dog/002.seg.png", "seg");
  dir_.write("src/README", "not a sample");
  Result r = ok("create 'out/x-%06d.tar' --from-dir src");
  EXPECT_NE(r.out.find("out/x-000000.tar"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 samples"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("README"), std::string::npos) << r.err;  // reported, skipped
  EXPECT_FALSE(fs::exists(dir_.file("out/x-000001.tar")));

  std::vector<std::string> lines = lines_of(ok("ls --json out/x-000000.tar").out);
  ASSERT_EQ(lines.size(), 3u);
  auto expect = [&](const std::string& line, const nlohmann::json& want) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("__url__");
    EXPECT_EQ(j, want);
  };
  expect(lines[0], {{"__key__", "cat/001"}, {"jpg", 100}, {"json", 2}});
  expect(lines[1], {{"__key__", "dog/001"}, {"jpg", 50}});
  expect(lines[2], {{"__key__", "dog/002"}, {"seg.png", 3}});
}

TEST_F(DatasetTools, CreateFromListKeysByLineAndAddsLabels) {
  // The same base name in two class folders: keys by line cannot collide.
  dir_.write("data/n01/img_1.JPEG", std::string("\0\1jpeg-a", 8));
  dir_.write("data/n02/img_1.JPEG", "jpeg-b");
  // A blank line keeps its index; without a TAB, the last space separates (Caffe's lists).
  std::string list =
      dir_.write("data/train.txt", "n01/img_1.JPEG\t0\nn02/img_1.JPEG\t1\n\nn02/img_1.JPEG 5\r\n");
  ok("create 'out/l-%d.tar' --from-list '" + list + "'");
  std::vector<Sample> samples = test::read_samples(read_file(dir_.file("out/l-0.tar")));
  EXPECT_EQ(test::describe(samples),
            (std::vector<std::string>{"00000000:cls=0," + std::string("jpeg=\0\1jpeg-a", 13),
                                      "00000001:cls=1,jpeg=jpeg-b", "00000003:cls=5,jpeg=jpeg-b"}));
  EXPECT_EQ(keys("out/l-0.tar"), (std::vector<std::string>{"00000000", "00000001", "00000003"}));
}

TEST_F(DatasetTools, CreateFromListRefusesWhatIsNotAFile) {
  fs::create_directories(dir_.file("data/folder.jpg"));
  std::string list = dir_.write("data/list.txt", "folder.jpg\t0\n");
  Result r = run("create 'out/l-%d.tar' --from-list '" + list + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("folder.jpg"), std::string::npos) << r.err;
  r = run("create 'out/l-%d.tar' --from-list no-such-list.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no-such-list.txt"), std::string::npos) << r.err;
}

TEST_F(DatasetTools, CreateFromListNamesAMissingFileAndWritesNothing) {
  dir_.write("data/a.jpg", "a");
  std::string list = dir_.write("data/list.txt", "a.jpg\t0\nsub/missing.png\t1\n");
  Result r = run("create 'out/l-%d.tar' --from-list '" + list + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("wds: error: not found"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sub/missing.png"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_.file("out/l-0.tar")));
}

TEST_F(DatasetTools, CreateRefusesAnUnreadableFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every file";
  dir_.write("src/a.txt", "a");
  std::string secret = dir_.write("src/b.txt", "b");
  fs::permissions(secret, fs::perms::none);
  Result r = run("create 'out/x-%d.tar' --from-dir src");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("b.txt"), std::string::npos) << r.err;
}

// A link to /etc/hostname in a folder of images was packed into the shard without a word, and
// dangling links and FIFOs were left out silently.
TEST_F(DatasetTools, CreateFromDirectoryDoesNotFollowLinksOutOfTheTree) {
  std::string outside = dir_.write("private/secret.txt", "secret bytes");
  dir_.write("private/docs/d.txt", "outside directory");
  dir_.write("src/a.txt", "aaa");
  dir_.write("src/sub/b.txt", "bbb");
  fs::create_symlink(outside, dir_.file("src/leak.txt"));
  fs::create_symlink(dir_.file("private/docs"), dir_.file("src/docs"));
  fs::create_symlink("a.txt", dir_.file("src/alias.txt"));  // inside: followed
  fs::create_symlink("sub", dir_.file("src/linked"));       // a directory inside: followed
  fs::create_symlink("..", dir_.file("src/sub/up"));        // back to src: a cycle
  fs::create_symlink("missing.txt", dir_.file("src/gone.txt"));
  ASSERT_EQ(::mkfifo(dir_.file("src/pipe.txt").c_str(), 0600), 0);

  Result r = ok("create 'out/x-%d.tar' --from-dir src");
  EXPECT_EQ(keys("out/x-0.tar"), (std::vector<std::string>{"a", "alias", "linked/b", "sub/b"}));
  std::string shard = read_file(dir_.file("out/x-0.tar"));
  EXPECT_EQ(shard.find("secret bytes"), std::string::npos);
  EXPECT_EQ(shard.find("outside directory"), std::string::npos);
  // Each skip is named with its reason, and counted at the end.
  for (const char* why : {"'leak.txt': symbolic link to", "'docs': symbolic link to",
                          "'gone.txt': symbolic link that does not resolve", "'pipe.txt': a FIFO",
                          "'sub/up': symbolic link to a directory it is in"}) {
    EXPECT_NE(r.err.find(why), std::string::npos) << why << "\n" << r.err;
  }
  EXPECT_NE(r.err.find("outside the directory (--follow-symlinks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("6 entries under 'src' skipped"), std::string::npos) << r.err;

  // Asked for, links out of the tree are followed; the rest are still skipped.
  r = ok("create 'out/f-%d.tar' --from-dir src --follow-symlinks");
  EXPECT_EQ(keys("out/f-0.tar"),
            (std::vector<std::string>{"a", "alias", "docs/d", "leak", "linked/b", "sub/b"}));
  EXPECT_NE(read_file(dir_.file("out/f-0.tar")).find("secret bytes"), std::string::npos);
  EXPECT_NE(r.err.find("4 entries under 'src' skipped"), std::string::npos) << r.err;
  EXPECT_EQ(run("create 'out/l-%d.tar' --from-list x.txt --follow-symlinks").exit_code, 1);
}

TEST_F(DatasetTools, MaxcountAndMaxsizeSplitShards) {
  for (int i = 0; i < 10; ++i)
    dir_.write("src/k" + std::to_string(i) + ".bin", std::string(100, 'x'));
  ok("create 'out/c-%03d.tar' --from-dir src --maxcount 3");
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(fs::exists(dir_.file("out/c-00" + std::to_string(i) + ".tar")));
  EXPECT_FALSE(fs::exists(dir_.file("out/c-004.tar")));
  EXPECT_EQ(keys("'out/c-003.tar'"), std::vector<std::string>{"k9"});

  // 100 bytes each, 250 per shard: two samples per shard.
  Result r = ok("create 'out/s-%03d.tar' --from-dir src --maxsize 250");
  EXPECT_NE(r.out.find("total: 5 shards, 10 samples, 1000 bytes"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_.file("out/s-005.tar")));
}

// "--shuffle -1" and "--maxsize -1" were taken as 2^64-1.
TEST_F(DatasetTools, NegativeNumbersAreRefusedNamingTheFlag) {
  dir_.write("src/a.txt", "a");
  shard("in.tar", {test::make_sample("a", {{"txt", "a"}})});
  const std::pair<const char*, const char*> cases[] = {
      {"create 'out/x-%d.tar' --from-dir src --shuffle -1", "--shuffle: must be >= 0, got -1"},
      {"create 'out/x-%d.tar' --from-dir src --maxsize -1", "--maxsize: must be >= 1, got -1"},
      {"create 'out/x-%d.tar' --from-dir src --maxcount 0", "--maxcount: must be >= 1, got 0"},
      {"reshard in.tar -o 'out/r-%d.tar' --seed -5", "--seed: must be >= 0, got -5"},
      {"reshard in.tar -o 'out/r-%d.tar' --shuffle -1", "--shuffle: must be >= 0, got -1"},
      {"reshard in.tar -o 'out/r-%d.tar' --maxsize -1", "--maxsize: must be >= 1, got -1"},
      {"reshard in.tar -o 'out/r-%d.tar' --shards 0", "--shards: must be >= 1, got 0"},
  };
  for (const auto& [args, message] : cases) {
    Result r = run(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
  }
  EXPECT_FALSE(fs::exists(dir_.file("out")));
  ok("create 'out/x-%d.tar' --from-dir src --maxsize 1k --shuffle 0");  // suffixes still work
}

TEST_F(DatasetTools, CreateIsReproducible) {
  for (int i = 0; i < 10; ++i) {
    dir_.write("src/d" + std::to_string(i % 3) + "/k" + std::to_string(i) + ".txt",
               std::to_string(i));
  }
  ok("create 'a/x-%d.tar' --from-dir src --maxcount 4");
  ok("create 'b/x-%d.tar' --from-dir src --maxcount 4");
  ok("create 'c/x-%d.tar' --from-dir src --maxcount 4 --shuffle 5");
  ok("create 'd/x-%d.tar' --from-dir src --maxcount 4 --shuffle 5");
  for (int i = 0; i < 3; ++i) {
    std::string name = "/x-" + std::to_string(i) + ".tar";
    EXPECT_EQ(read_file(dir_.file("a" + name)), read_file(dir_.file("b" + name))) << name;
    EXPECT_EQ(read_file(dir_.file("c" + name)), read_file(dir_.file("d" + name))) << name;
  }
  std::vector<std::string> plain = contents("'a/x-{0..2}.tar'");
  std::vector<std::string> shuffled = contents("'c/x-{0..2}.tar'");
  EXPECT_NE(plain, shuffled);
  EXPECT_EQ(sorted(plain), sorted(shuffled));
}

TEST_F(DatasetTools, ReshardIntoNShardsDealsSamplesRoundRobin) {
  ten_shards();
  ok("reshard 'in/in-{0..9}.tar' -o 'out/r-%02d.tar' --shards 3");
  EXPECT_FALSE(fs::exists(dir_.file("out/r-03.tar")));
  EXPECT_EQ(sorted(contents("'in/in-{0..9}.tar'")), sorted(contents("'out/r-{00..02}.tar'")));
  for (int j = 0; j < 3; ++j) {
    std::vector<std::string> want;
    for (int k = j; k < 20; k += 3) want.push_back((k < 10 ? "s0" : "s") + std::to_string(k));
    EXPECT_EQ(keys("out/r-0" + std::to_string(j) + ".tar"), want) << j;
  }
}

TEST_F(DatasetTools, ReshardWithShuffleKeepsEverySampleOnce) {
  ten_shards();
  Result r = ok("reshard 'in/*.tar' -o 'out/r-%d.tar' --maxcount 7 --shuffle 8 --seed 3");
  EXPECT_NE(r.out.find("total: 3 shards, 20 samples"), std::string::npos) << r.out;
  std::vector<std::string> before = contents("'in/in-{0..9}.tar'");
  std::vector<std::string> after = contents("'out/r-{0..2}.tar'");
  EXPECT_NE(before, after);
  EXPECT_EQ(sorted(before), sorted(after));
  // The same seed, the same shards.
  ok("reshard 'in/*.tar' -o 'again/r-%d.tar' --maxcount 7 --shuffle 8 --seed 3");
  for (int i = 0; i < 3; ++i) {
    std::string name = "/r-" + std::to_string(i) + ".tar";
    EXPECT_EQ(read_file(dir_.file("out" + name)), read_file(dir_.file("again" + name)));
  }
}

TEST_F(DatasetTools, ReshardRefusesToOverwriteItsInputs) {
  ten_shards();
  Result r = run("reshard 'in/in-{0..9}.tar' -o './in/../in/in-%d.tar' --shards 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("overwritten"), std::string::npos) << r.err;
  EXPECT_EQ(run("reshard in/ -o 'out/r-%d.tar'").exit_code, 1);  // no size given
}

TEST_F(DatasetTools, CatWritesOneTarThatWdsAndGnuTarRead) {
  ten_shards();
  Result r = ok("cat 'in/in-{0..2}.tar'");
  std::string all = dir_.write("all.tar", r.out);
  EXPECT_EQ(contents("-", all), contents("'in/in-{0..2}.tar'"));
  std::string listing = dir_.file("listing");
  ASSERT_EQ(std::system(("tar tf '" + all + "' > '" + listing + "'").c_str()), 0);
  EXPECT_EQ(
      lines_of(read_file(listing)),
      (std::vector<std::string>{"s00.cls", "s00.txt", "s01.cls", "s01.txt", "s02.cls", "s02.txt",
                                "s03.cls", "s03.txt", "s04.cls", "s04.txt", "s05.cls", "s05.txt"}));
}

TEST_F(DatasetTools, ExtractWritesTheExactBytes) {
  std::string jpg = std::string("\xff\xd8\0\0binary\n", 10);
  std::string path = shard("s.tar", {test::make_sample("a", {{"txt", "first"}}),
                                     test::make_sample("dir/b", {{"jpg", jpg}, {"seg.png", ""}}),
                                     test::make_sample("a", {{"txt", "second"}})});
  Result r = ok("extract '" + path + "' dir/b -o got");
  EXPECT_EQ(read_file(dir_.file("got/dir/b.jpg")), jpg);
  EXPECT_TRUE(fs::exists(dir_.file("got/dir/b.seg.png")));
  EXPECT_EQ(fs::file_size(dir_.file("got/dir/b.seg.png")), 0u);
  EXPECT_NE(r.out.find("got/dir/b.jpg"), std::string::npos) << r.out;
  ok("extract '" + path + "' a -o got");  // the first sample with the key
  EXPECT_EQ(read_file(dir_.file("got/a.txt")), "first");

  Result missing = run("extract '" + path + "' nope -o got");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("wds: error: not found"), std::string::npos) << missing.err;
  for (const char* key : {"../escape", "dir/../../escape", "/tmp/escape"}) {
    Result bad = run("extract '" + path + "' '" + key + "' -o got/inner");
    EXPECT_EQ(bad.exit_code, 1) << key;
    EXPECT_NE(bad.err.find("refusing key"), std::string::npos) << bad.err;
  }
  EXPECT_FALSE(fs::exists(dir_.file("got/escape.txt")));
  EXPECT_FALSE(fs::exists(dir_.file("escape.txt")));
}

TEST_F(DatasetTools, StatsCountsSamplesBytesAndExtensions) {
  shard("a.tar", {test::make_sample("x", {{"jpg", "12345"}, {"cls", "1"}}),
                  test::make_sample("y", {{"jpg", "123"}})});
  shard("b.tar", {test::make_sample("z", {{"png", "1234567"}, {"cls", "22"}})});
  Result text = ok("stats a.tar b.tar");
  EXPECT_EQ(lines_of(text.out),
            (std::vector<std::string>{
                "a.tar: 2 samples, 9 B (9 bytes); cls 1, jpg 2",
                "b.tar: 1 samples, 9 B (9 bytes); cls 1, png 1",
                "total: 2 shards, 3 samples, 18 B (18 bytes); cls 2, jpg 2, png 1"}));

  std::vector<std::string> json = lines_of(ok("stats --json a.tar b.tar").out);
  ASSERT_EQ(json.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(json[0]),
            nlohmann::json::parse(R"({"url": "a.tar", "samples": 2, "bytes": 9,
                                      "extensions": {"cls": 1, "jpg": 2}})"));
  EXPECT_EQ(nlohmann::json::parse(json[1]),
            nlohmann::json::parse(R"({"url": "b.tar", "samples": 1, "bytes": 9,
                                      "extensions": {"cls": 1, "png": 1}})"));
  EXPECT_EQ(nlohmann::json::parse(json[2]),
            nlohmann::json::parse(R"({"total": true, "shards": 2, "samples": 3, "bytes": 18,
                                      "extensions": {"cls": 2, "jpg": 2, "png": 1}})"));
}

}  // namespace
}  // namespace wds
