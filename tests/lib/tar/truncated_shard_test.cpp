// Scenario: a shard breaks midway (a partial copy, a dropped connection). Whatever the cut,
// every sample handed on must be whole and identical to the original, samples before the cut
// must all arrive, and the error must name the shard, member and dropped sample.
#include <gtest/gtest.h>

#include <map>

#include "tests/support/fixtures.hpp"
#include "wds/tar_samples.hpp"

namespace wds {
namespace {

std::string shard_with_varied_samples() {
  return test::make_tar([](TarWriter& w) {
    for (int i = 0; i < 12; ++i) {
      std::string key = "s" + std::to_string(i);
      w.write_file(key + ".jpg",
                   std::string(static_cast<std::size_t>(100 + 700 * (i % 4)), 'a' + i));
      w.write_file(key + ".cls", std::to_string(i));
      if (i % 3 == 0) w.write_file(key + ".json", "{\"i\":" + std::to_string(i) + "}");
    }
  });
}

TEST(TruncatedShard, NoCutEverYieldsAnIncompleteSample) {
  const std::string tar = shard_with_varied_samples();
  std::map<std::string, std::string> original;
  for (const Sample& s : test::read_samples(tar)) original[s.key()] = test::describe(s);
  ASSERT_EQ(original.size(), 12u);

  std::vector<std::size_t> cuts;
  for (std::size_t c = 0; c < tar.size(); c += 512) cuts.push_back(c);
  for (std::size_t c = 1; c < tar.size(); c += 997) cuts.push_back(c);  // odd offsets too
  for (std::size_t cut : cuts) {
    std::vector<Error> errors;
    auto record = [&](const Error& e) {
      errors.push_back(e);
      return true;
    };
    std::vector<Sample> got = test::read_samples(tar.substr(0, cut), "cut.tar", 333, record);
    // All samples arrive only when the cut spares the first end-of-archive block, and then
    // nothing is reported; any other cut is exactly one error.
    bool complete = got.size() == original.size();
    EXPECT_EQ(errors.size(), complete ? 0u : 1u) << "cut at " << cut;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].key(), "s" + std::to_string(i)) << "cut at " << cut;
      EXPECT_EQ(test::describe(got[i]), original[got[i].key()]) << "cut at " << cut;
    }
    if (!errors.empty()) {
      EXPECT_EQ(errors[0].url(), "cut.tar");
      EXPECT_EQ(errors[0].code(), ErrorCode::corrupt_data) << errors[0].what();
    }
  }
}

TEST(TruncatedShard, ErrorNamesTheDroppedSample) {
  const std::string tar = shard_with_varied_samples();
  // Cut inside s1.cls's header: s0 is whole, s1 has its jpg only.
  std::size_t cut = 0;
  {
    TarReader reader(test::memory_source(tar));
    while (const TarEntry* e = reader.next()) {
      if (e->name == "s1.cls") cut = e->offset + 100;
    }
  }
  ASSERT_GT(cut, 0u);
  try {
    std::vector<Sample> got = test::read_samples(tar.substr(0, cut), "cut.tar");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.url(), "cut.tar");
    EXPECT_NE(e.cause().find("after member 's1.jpg'"), std::string::npos) << e.what();
    EXPECT_NE(e.cause().find("incomplete sample 's1' (fields read: jpg) was dropped"),
              std::string::npos)
        << e.what();
  }
}

TEST(TruncatedShard, ContinuingHandlerMovesOnToTheNextShard) {
  test::TempDir dir;
  const std::string tar = shard_with_varied_samples();
  std::string broken = dir.write("broken.tar", tar.substr(0, tar.size() / 2));
  std::string whole = dir.write("whole.tar", tar);
  TarSamplesOptions options;
  int errors = 0;
  options.handler = [&](const Error& e) {
    ++errors;
    EXPECT_EQ(e.url(), broken);
    return true;
  };
  TarSamples samples({broken, whole}, options);
  std::size_t from_broken = 0, from_whole = 0;
  while (auto s = samples.next()) (s->url() == broken ? from_broken : from_whole)++;
  EXPECT_EQ(errors, 1);
  EXPECT_GT(from_broken, 0u);
  EXPECT_LT(from_broken, 12u);
  EXPECT_EQ(from_whole, 12u);
  EXPECT_EQ(samples.shards_failed(), 1u);

  options.handler = ignore_and_stop;
  TarSamples stopping({broken, whole}, options);
  std::size_t n = 0;
  while (stopping.next()) ++n;
  EXPECT_EQ(n, from_broken);
}

}  // namespace
}  // namespace wds
