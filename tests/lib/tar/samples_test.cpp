// Grouping tar members into samples: WebDataset's rules, one test per rule.
#include "wds/tar_samples.hpp"

#include <gtest/gtest.h>

#include <cstdio>

#include "lib/tar/samples.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/raw_tar.hpp"

namespace wds {
namespace {

using test::base256_size;
using test::describe;
using test::make_tar;
using test::raw_header;
using test::read_samples;
using test::UnsizedSource;
using Strings = std::vector<std::string>;

struct NameCase {
  const char* name;
  const char* key;  // nullptr: skipped
  const char* ext;
};

TEST(SplitMemberName, MatchesWebDatasetBasePlusExt) {
  // The cases of webdataset's base_plus_ext regex ^((?:.*/|)[^.]+)[.]([^/]*)$.
  const NameCase cases[] = {
      {"a.jpg", "a", "jpg"},
      {"a.b.c", "a", "b.c"},
      {"dir/a.jpg", "dir/a", "jpg"},
      {"dir.x/a.b.jpg", "dir.x/a", "b.jpg"},
      {"./x/y.seg.png", "./x/y", "seg.png"},
      {"a b.txt", "a b", "txt"},
      {"a.JPG", "a", "JPG"},
      {"a.", "a", ""},
      {"a..b", "a", ".b"},
      {"22.05.png", "22", "05.png"},
      {"dir/.hidden.txt", "dir/", "hidden.txt"},  // the regex's backtracking quirk
      {"a/b/.c.d", "a/b/", "c.d"},
      {"README", nullptr, nullptr},
      {".hidden", nullptr, nullptr},
      {"a.b/c", nullptr, nullptr},
      {"a/b.c/d", nullptr, nullptr},
      {"dir/sub/", nullptr, nullptr},
      {"x.y/.hidden.txt", nullptr, nullptr},
      {"", nullptr, nullptr},
  };
  for (const NameCase& c : cases) {
    std::optional<KeyExt> parts = split_member_name(c.name);
    if (!c.key) {
      EXPECT_FALSE(parts.has_value()) << c.name;
      continue;
    }
    ASSERT_TRUE(parts.has_value()) << c.name;
    EXPECT_EQ(parts->key, c.key) << c.name;
    EXPECT_EQ(parts->ext, c.ext) << c.name;
  }
}

TEST(IsMetaMember, SkipsDunderNamesAtTheTopLevelOnly) {
  EXPECT_TRUE(is_meta_member("__meta__"));
  EXPECT_TRUE(is_meta_member("__a.b__"));
  EXPECT_TRUE(is_meta_member("__x__/a.txt"));
  EXPECT_TRUE(is_meta_member("__x__/deep/a.txt"));
  EXPECT_FALSE(is_meta_member("__meta__.json"));
  EXPECT_FALSE(is_meta_member("x/__meta__.json"));
  EXPECT_FALSE(is_meta_member("x/__y__/a.txt"));
  EXPECT_FALSE(is_meta_member("__x/a.txt"));
  EXPECT_FALSE(is_meta_member("a.txt"));
}

TEST(TarSamplesGrouping, ConsecutiveMembersWithOneKeyFormASample) {
  std::string tar = make_tar([](TarWriter& w) {
    w.write_file("a.jpg", "J");
    w.write_file("a.cls", "1");
    w.write_file("a.json", "{}");
    w.write_file("b.jpg", "K");
    w.write_file("b.cls", "2");
  });
  EXPECT_EQ(describe(read_samples(tar)), (Strings{"a:jpg=J,cls=1,json={}", "b:jpg=K,cls=2"}));
}

TEST(TarSamplesGrouping, AKeyThatComesBackStartsANewSample) {
  std::string tar = make_tar([](TarWriter& w) {
    w.write_file("a.jpg", "1");
    w.write_file("b.jpg", "2");
    w.write_file("a.cls", "3");
  });
  EXPECT_EQ(describe(read_samples(tar)), (Strings{"a:jpg=1", "b:jpg=2", "a:cls=3"}));
}

TEST(TarSamplesGrouping, ExtensionIsLowercasedKeyIsNot) {
  std::string tar = make_tar([](TarWriter& w) {
    w.write_file("Img.JPG", "x");
    w.write_file("Img.Seg.PNG", "y");
  });
  EXPECT_EQ(describe(read_samples(tar)), (Strings{"Img:jpg=x,seg.png=y"}));
}

TEST(TarSamplesGrouping, DirectoryPartBelongsToTheKey) {
  std::string tar = make_tar([](TarWriter& w) {
    w.write_file("train/v1.2/a.jpg", "x");
    w.write_file("train/v1.2/a.cls", "1");
    w.write_file("val/a.jpg", "y");
  });
  EXPECT_EQ(describe(read_samples(tar)), (Strings{"train/v1.2/a:jpg=x,cls=1", "val/a:jpg=y"}));
}

TEST(TarSamplesGrouping, OnlyRegularFilesCount) {
  std::string tar = make_tar([](TarWriter& w) {
    w.write_directory("d/");
    w.write_file("d/a.jpg", "x");
    w.write_symlink("d/a.png", "a.jpg");
    w.write_hardlink("d/a.bmp", "d/a.jpg");
    w.write_file("d/a.cls", "1");
  });
  EXPECT_EQ(describe(read_samples(tar)), (Strings{"d/a:jpg=x,cls=1"}));
}

TEST(TarSamplesGrouping, NamesWithoutKeyAndMetadataAreSkipped) {
  std::string tar = make_tar([](TarWriter& w) {
    w.write_file("README", "r");
    w.write_file("__meta__", "m");
    w.write_file("__info__/a.txt", "i");
    w.write_file("a.txt", "A");
    w.write_file(".hidden", "h");
    w.write_file("a.cls", "1");
    w.write_file("__meta__.json", "{}");
  });
  // Skipped members do not break a sample; "__meta__.json" is an ordinary sample, as in Python.
  EXPECT_EQ(describe(read_samples(tar)), (Strings{"a:txt=A,cls=1", "__meta__:json={}"}));
}

TEST(TarSamplesGrouping, EmptyMemberIsAnEmptyField) {
  std::string tar = make_tar([](TarWriter& w) {
    w.write_file("a.txt", "");
    w.write_file("a.cls", "0");
  });
  std::vector<Sample> samples = read_samples(tar);
  ASSERT_EQ(samples.size(), 1u);
  ASSERT_NE(samples[0].find("txt"), nullptr);
  EXPECT_TRUE(samples[0].find("txt")->empty());
}

TEST(TarSamplesGrouping, SamplesCarryUrlAndLocalPath) {
  test::TempDir dir;
  std::string path = dir.write("s.tar", make_tar([](TarWriter& w) { w.write_file("a.txt", "x"); }));
  TarSamples from_file({path, "file://" + path});
  std::optional<Sample> s = from_file.next();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->url(), path);
  EXPECT_EQ(s->local_path(), path);
  s = from_file.next();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->url(), "file://" + path);  // __url__ is the URL as given
  EXPECT_EQ(s->local_path(), path);

  std::vector<Sample> from_memory =
      read_samples(test::make_tar([](TarWriter& w) { w.write_file("a.txt", "x"); }), "mem://a.tar");
  EXPECT_EQ(from_memory[0].url(), "mem://a.tar");
  EXPECT_EQ(from_memory[0].local_path(), "");
}

TEST(TarSamplesGrouping, SamplesNeverSpanShards) {
  test::TempDir dir;
  std::string a = dir.write("a.tar", make_tar([](TarWriter& w) { w.write_file("k.jpg", "1"); }));
  std::string b = dir.write("b.tar", make_tar([](TarWriter& w) { w.write_file("k.cls", "2"); }));
  TarSamples samples({a, b});
  std::vector<Sample> out;
  while (auto s = samples.next()) out.push_back(std::move(*s));
  EXPECT_EQ(describe(out), (Strings{"k:jpg=1", "k:cls=2"}));
  EXPECT_EQ(out[0].url(), a);
  EXPECT_EQ(out[1].url(), b);
  EXPECT_EQ(samples.shards_opened(), 2u);
}

std::string duplicate_tar() {
  return make_tar([](TarWriter& w) {
    w.write_file("a.txt", "first");
    w.write_file("a.TXT", "second");
    w.write_file("a.cls", "1");
    w.write_file("b.txt", "b");
  });
}

TEST(TarSamplesDuplicates, RaiseByDefaultNamingMemberAndSample) {
  try {
    read_samples(duplicate_tar(), "dup.tar");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_EQ(e.url(), "dup.tar");
    EXPECT_EQ(e.member(), "a.TXT");
    EXPECT_NE(e.cause().find("duplicate extension 'txt' in sample 'a'"), std::string::npos);
  }
}

TEST(TarSamplesDuplicates, ContinuingKeepsTheFirstAndDropsTheDuplicate) {
  std::vector<std::string> seen;
  auto record = [&](const Error& e) {
    seen.push_back(e.member());
    return true;
  };
  EXPECT_EQ(describe(read_samples(duplicate_tar(), "dup.tar", 1 << 20, record)),
            (Strings{"a:txt=first,cls=1", "b:txt=b"}));
  EXPECT_EQ(seen, (Strings{"a.TXT"}));
}

TEST(TarSamplesDuplicates, StoppingEndsTheStream) {
  std::string tar = duplicate_tar();
  ShardSamples shard(test::memory_source(tar), ignore_and_stop);
  EXPECT_FALSE(shard.next().has_value());
  EXPECT_TRUE(shard.stopped());
}

TEST(TarSamplesShards, UnopenableShardGoesToTheHandler) {
  test::TempDir dir;
  std::string good = dir.write("g.tar", make_tar([](TarWriter& w) { w.write_file("a.txt", "x"); }));
  std::string missing = dir.file("missing.tar");

  TarSamples raising({missing, good});
  try {
    raising.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_EQ(e.url(), missing);
  }

  TarSamplesOptions options;
  std::vector<std::string> failed;
  options.handler = [&](const Error& e) {
    failed.push_back(e.url());
    return true;
  };
  TarSamples continuing({missing, good, missing}, options);
  std::vector<Sample> out;
  while (auto s = continuing.next()) out.push_back(std::move(*s));
  EXPECT_EQ(describe(out), (Strings{"a:txt=x"}));
  EXPECT_EQ(failed, (Strings{missing, missing}));
  EXPECT_EQ(continuing.shards_failed(), 2u);
  EXPECT_EQ(continuing.shards_opened(), 1u);

  options.handler = ignore_and_stop;
  TarSamples stopping({missing, good}, options);
  EXPECT_FALSE(stopping.next().has_value());
}

TEST(TarSamplesShards, EmptyListAndEmptyArchivesYieldNothing) {
  TarSamples none(std::vector<std::string>{});
  EXPECT_FALSE(none.next().has_value());
  EXPECT_TRUE(read_samples(make_tar([](TarWriter&) {})).empty());
}

TEST(TarSamplesReservedNames, MemberNamedLikeSampleMetadataIsRefused) {
  // WebDataset's sample dict holds __key__ and __url__ beside the fields: "x.__key__" would
  // be a second __key__ (and `wds ls --json` printed two).
  const std::string tar = make_tar([](TarWriter& w) {
    w.write_file("x.txt", "x");
    w.write_file("x.__key__", "evil");
    w.write_file("x.__URL__", "evil");
    w.write_file("y.__local_path__", "evil");  // first of its sample: no empty sample either
    w.write_file("z.txt", "z");
  });
  try {
    read_samples(tar, "reserved.tar");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_EQ(e.url(), "reserved.tar");
    EXPECT_EQ(e.member(), "x.__key__");
    EXPECT_NE(e.cause().find("'__key__'"), std::string::npos) << e.what();
  }
  std::vector<std::string> seen;
  auto record = [&](const Error& e) {
    seen.push_back(e.member());
    return true;
  };
  EXPECT_EQ(describe(read_samples(tar, "reserved.tar", 1 << 20, record)),
            (Strings{"x:txt=x", "z:txt=z"}));
  EXPECT_EQ(seen, (Strings{"x.__key__", "x.__URL__", "y.__local_path__"}));
  EXPECT_TRUE(is_reserved_field("__key__"));
  EXPECT_FALSE(is_reserved_field("__meta__"));
}

TEST(TarSamplesHugeMembers, HostileSizeOnAnUnsizedSourceIsNotAllocated) {
  // 4.6 KB claiming 100 GiB through a pipe ended in "std::bad_alloc", naming nothing.
  const std::string tar =
      raw_header("a.txt", base256_size(std::uint64_t{100} << 30)) + std::string(4096, 'x');
  ShardSamples shard(std::make_unique<UnsizedSource>(tar, "pipe:cat shard.tar", 1 << 16));
  try {
    shard.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_EQ(e.url(), "pipe:cat shard.tar");
    EXPECT_EQ(e.member(), "a.txt");
    EXPECT_NE(e.cause().find("above the limit"), std::string::npos) << e.what();
  }
  // Below the limit the buffer grows with the bytes that come, and the truncation shows.
  const std::string below =
      raw_header("b.txt", base256_size(std::uint64_t{3} << 30)) + std::string(100000, 'x');
  ShardSamples truncated(std::make_unique<UnsizedSource>(below, "pipe:cat shard.tar", 1 << 16));
  try {
    truncated.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_EQ(e.member(), "b.txt");
  }
}

TEST(TarSamplesHugeMembers, MemberLargerThanTheFirstPieceArrivesWhole) {
  // Unverified sizes are read in pieces (the first 64 MiB) into a growing buffer.
  std::string big((std::size_t{64} << 20) + 12345, '\0');
  for (std::size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i / 4096);
  const std::string tar = make_tar([&](TarWriter& w) {
    w.write_file("a.bin", big);
    w.write_file("a.txt", "t");
  });
  ShardSamples shard(std::make_unique<UnsizedSource>(tar, "pipe:cat shard.tar", 1 << 16));
  std::optional<Sample> s = shard.next();
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ(s->fields().size(), 2u);
  EXPECT_TRUE(s->at("bin").str() == big);
  EXPECT_EQ(s->at("txt").str(), "t");
}

}  // namespace
}  // namespace wds
