// TarWriter: what it writes reads back identically, here and with GNU tar.
#include "wds/tar_writer.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

TEST(TarWriter, SamplesRoundTripWithFieldsSorted) {
  std::string tar = test::make_tar([](TarWriter& w) {
    w.write(
        test::make_sample("a", {{"txt", "hello"}, {"cls", "3"}, {"jpg", std::string(5000, 'j')}}));
    w.write(test::make_sample("dir/b", {{"seg.png", ""}}));
  });
  std::vector<Sample> back = test::read_samples(tar);
  EXPECT_EQ(test::describe(back),
            (Strings{"a:cls=3,jpg=" + std::string(5000, 'j') + ",txt=hello", "dir/b:seg.png="}));
}

TEST(TarWriter, RefusesKeysThatWouldNotReadBack) {
  for (const char* key : {"", "/abs", "../up", "a/../b", "dir/", "a.b", "dir/x.y"}) {
    try {
      test::make_tar([&](TarWriter& w) { w.write(test::make_sample(key, {{"txt", "x"}})); });
      ADD_FAILURE() << "key '" << key << "' was written";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << key;
      EXPECT_EQ(e.member(), key);
    }
  }
  // Dots in directory names are fine: the key splits at the last component's first dot.
  std::string tar = test::make_tar([](TarWriter& w) {
    w.write(test::make_sample("v1.2/a", {{"txt", "x"}}));
  });
  EXPECT_EQ(test::read_samples(tar)[0].key(), "v1.2/a");
}

TEST(TarWriter, SameInputGivesSameBytesWithFixedMtime) {
  auto make = [] {
    return test::make_tar([](TarWriter& w) { w.write(test::make_sample("a", {{"b", "c"}})); });
  };
  EXPECT_EQ(make(), make());
}

TEST(TarWriter, WriteAfterCloseIsAnError) {
  std::string out;
  TarWriter w(open_memory_sink("mem", out));
  w.close();
  EXPECT_THROW(w.write_file("a.txt", "x"), Error);
}

TEST(TarWriter, GnuTarListsWhatItWrites) {
  if (std::system("tar --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no tar";
  test::TempDir dir;
  {
    TarWriter w(open_sink(dir.file("s.tar")));
    w.write(test::make_sample("a", {{"txt", "x"}, {"cls", "1"}}));
    w.close();
  }
  std::string listing = dir.file("list.txt");
  ASSERT_EQ(std::system(("tar tf '" + dir.file("s.tar") + "' >'" + listing + "'").c_str()), 0);
  std::ifstream in(listing);
  Strings names;
  for (std::string line; std::getline(in, line);) names.push_back(line);
  EXPECT_EQ(names, (Strings{"a.cls", "a.txt"}));
}

TEST(ShardWriter, RollsOverBeforeALimitWouldBePassed) {
  test::TempDir dir;
  ShardWriter out(dir.file("out-%06d.tar"), {.max_count = 3});
  for (int i = 0; i < 7; ++i) out.write(test::make_sample("k" + std::to_string(i), {{"txt", "x"}}));
  out.close();
  ASSERT_EQ(out.shards(), (Strings{dir.file("out-000000.tar"), dir.file("out-000001.tar"),
                                   dir.file("out-000002.tar")}));
  std::vector<std::size_t> counts;
  for (const std::string& shard : out.shards()) {
    counts.push_back(test::read_samples(test::read_file(shard)).size());
  }
  EXPECT_EQ(counts, (std::vector<std::size_t>{3, 3, 1}));

  // By size: 100-byte samples, at most 250 bytes a shard -> 2 per shard; a bigger sample alone.
  ShardWriter by_size(dir.file("s-%d.tar"), {.max_size = 250});
  for (int i = 0; i < 4; ++i) {
    by_size.write(test::make_sample("a" + std::to_string(i), {{"bin", std::string(100, 'b')}}));
  }
  by_size.write(test::make_sample("big", {{"bin", std::string(1000, 'b')}}));
  by_size.close();
  EXPECT_EQ(by_size.shards().size(), 3u);
  EXPECT_EQ(by_size.shards().back(), dir.file("s-2.tar"));
}

TEST(ShardWriter, OpensEachShardWithItsSinkOptions) {
  // A pipe: pattern needs allow_pipe: refused without, written through the command with it.
  test::TempDir dir;
  const std::string pattern = "pipe:cat > '" + dir.file("p-%02d.tar") + "'";
  EXPECT_EQ(test::error_code([&] {
              ShardWriter refused(pattern, {.max_count = 2});
              refused.write(test::make_sample("k", {{"txt", "x"}}));
            }),
            ErrorCode::permission_denied);
  ShardWriter out(pattern, {.max_count = 2, .sink = {.allow_pipe = true}});
  for (int i = 0; i < 3; ++i) out.write(test::make_sample("k" + std::to_string(i), {{"txt", "x"}}));
  out.close();
  EXPECT_EQ(test::describe(test::read_samples(test::read_file(dir.file("p-01.tar")))),
            (Strings{"k2:txt=x"}));
}

TEST(ShardWriter, RefusesPatternsWithoutOneIntegerConversion) {
  test::TempDir dir;
  for (const char* bad : {"out.tar", "out-%s.tar", "out-%d-%d.tar", "out-%06x.tar"}) {
    EXPECT_THROW(ShardWriter(dir.file(bad)), Error) << bad;
  }
  ShardWriter ok(dir.file("out-%d.tar"), {.first_index = 5});
  ok.write(test::make_sample("k", {{"txt", "x"}}));
  ok.close();
  EXPECT_EQ(ok.shards(), (Strings{dir.file("out-5.tar")}));
  EXPECT_THROW(ok.write(test::make_sample("k2", {{"txt", "x"}})), Error);
}

}  // namespace
}  // namespace wds
