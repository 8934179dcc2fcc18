// TarWriter: what it writes reads back identically, here and with GNU tar.
#include "wds/tar_writer.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

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

}  // namespace
}  // namespace wds
