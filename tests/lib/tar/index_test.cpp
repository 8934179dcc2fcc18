// Tests of wds/index.hpp: DALI-format shard indexes (build, text, parse), reading samples by
// index against streaming, and detection of stale indexes.
#include "wds/index.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/support/fixtures.hpp"
#include "tests/support/raw_tar.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using test::read_file;

using test::base256_size;
using test::make_sample;
using test::make_tar;
using test::octal_size;
using test::padded;
using test::raw_header;
using test::TempDir;

std::vector<Sample> stream_file(const std::string& path) {
  ShardSamples shard(open_url(path));
  std::vector<Sample> out;
  while (std::optional<Sample> s = shard.next()) out.push_back(std::move(*s));
  return out;
}

void expect_same(const Sample& a, const Sample& b) {
  EXPECT_EQ(a.key(), b.key());
  EXPECT_EQ(a.url(), b.url());
  EXPECT_EQ(a.local_path(), b.local_path());
  EXPECT_EQ(a.offset(), b.offset()) << a.key();
  ASSERT_EQ(a.fields().size(), b.fields().size()) << a.key();
  for (std::size_t i = 0; i < a.fields().size(); ++i) {
    EXPECT_EQ(a.fields()[i].ext, b.fields()[i].ext);
    EXPECT_TRUE(a.fields()[i].data == b.fields()[i].data) << a.key() << "." << a.fields()[i].ext;
  }
}

using test::error_code;

// A shard with the awkward cases: a directory, metadata, an empty member, an upper-case
// extension, a key under a dotted directory, a multi-dot extension.
std::string mixed_shard(TarWriterOptions options = {}) {
  return make_tar(
      [](TarWriter& w) {
        w.write_directory("dir");
        w.write_file("__meta__", "skip me");
        w.write(make_sample("a", {{"cls", "1"}, {"txt", "hello"}}));
        w.write_file("b.JPG", std::string(600, 'j'));
        w.write_file("b.seg.png", "");
        w.write_symlink("c.lnk", "b.JPG");
        w.write_file("README", "no extension, skipped");
        w.write_file("d.v2/e.json", "{}");
        w.write(make_sample("a", {{"cls", "2"}}));  // the key comes back: a new sample
      },
      options);
}

TEST(IndexTest, ExactTextOfSmallIndex) {
  TempDir dir;
  const std::string shard = dir.write("s.tar", make_tar([](TarWriter& w) {
                                        w.write(make_sample("a", {{"cls", "1"}, {"txt", "hello"}}));
                                        w.write_file("b.JPG", std::string(600, 'j'));
                                      }));
  // ustar: a 512-byte header in front of every member, data padded to 512.
  // a.cls: header 0, data 512 (1 byte, padded to 1024); a.txt: header 1024, data 1536;
  // b.JPG: header 2048, data 2560.
  EXPECT_EQ(format_index(build_index(shard)),
            "v1.2 2\n"
            "cls 512 1 a.cls txt 1536 5 a.txt\n"
            "JPG 2560 600 b.JPG\n");
}

TEST(IndexTest, BuildFormatParseRoundTrip) {
  TempDir dir;
  const std::string shard = dir.write("mixed.tar", mixed_shard());
  ShardIndex built = build_index(shard);
  ASSERT_EQ(built.samples.size(), 4u);
  EXPECT_EQ(built.samples[0].key, "a");
  EXPECT_EQ(built.samples[1].key, "b");
  EXPECT_EQ(built.samples[1].members[0].ext, "JPG");  // case kept, as DALI does
  EXPECT_EQ(built.samples[1].members[1].ext, "seg.png");
  EXPECT_EQ(built.samples[1].members[1].size, 0u);
  EXPECT_EQ(built.samples[2].key, "d.v2/e");
  EXPECT_EQ(built.samples[3].key, "a");

  ShardIndex parsed = parse_index(format_index(built), "mixed.idx");
  ASSERT_EQ(parsed.samples.size(), built.samples.size());
  for (std::size_t i = 0; i < built.samples.size(); ++i) {
    EXPECT_EQ(parsed.samples[i].key, built.samples[i].key);
    ASSERT_EQ(parsed.samples[i].members.size(), built.samples[i].members.size());
    for (std::size_t k = 0; k < built.samples[i].members.size(); ++k) {
      const IndexMember& a = parsed.samples[i].members[k];
      const IndexMember& b = built.samples[i].members[k];
      EXPECT_EQ(a.ext, b.ext);
      EXPECT_EQ(a.offset, b.offset);
      EXPECT_EQ(a.size, b.size);
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.offset % 512, 0u);
    }
  }
}

TEST(IndexTest, EmptyTarGivesEmptyIndex) {
  TempDir dir;
  const std::string shard = dir.write("e.tar", make_tar([](TarWriter&) {}));
  ShardIndex index = build_index(shard);
  EXPECT_TRUE(index.samples.empty());
  EXPECT_EQ(format_index(index), "v1.2 0\n");
  EXPECT_TRUE(parse_index("v1.2 0\n", "e.idx").samples.empty());
}

TEST(IndexTest, ParsesV11) {
  ShardIndex index = parse_index("v1.1 2\njpg 512 10 cls 1536 1\r\ntxt  2560 5\n\n", "old.idx");
  ASSERT_EQ(index.samples.size(), 2u);
  EXPECT_EQ(index.samples[0].key, "");
  ASSERT_EQ(index.samples[0].members.size(), 2u);
  EXPECT_EQ(index.samples[0].members[1].ext, "cls");
  EXPECT_EQ(index.samples[0].members[1].offset, 1536u);
  EXPECT_EQ(index.samples[0].members[1].size, 1u);
  EXPECT_EQ(index.samples[0].members[1].name, "");
  EXPECT_EQ(index.samples[1].members[0].offset, 2560u);
}

TEST(IndexTest, V11IndexReadsSamplesWithKeysFromTheHeaders) {
  TempDir dir;
  const std::string shard = dir.write("m.tar", mixed_shard());
  ShardIndex index = build_index(shard);
  std::string v11 = "v1.1 " + std::to_string(index.samples.size()) + "\n";
  for (const IndexedSample& s : index.samples) {
    for (std::size_t k = 0; k < s.members.size(); ++k) {
      v11 += (k ? " " : "") + s.members[k].ext + " " + std::to_string(s.members[k].offset) + " " +
             std::to_string(s.members[k].size);
    }
    v11 += "\n";
  }
  ShardIndex old = parse_index(v11, "m.idx");
  std::vector<Sample> streamed = stream_file(shard);
  ASSERT_EQ(old.samples.size(), streamed.size());
  for (std::size_t i = 0; i < streamed.size(); ++i) {
    expect_same(read_indexed_sample(shard, old.samples[i]), streamed[i]);
  }
}

TEST(IndexTest, MalformedIndexesNameTheFileAndLine) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"", "line 1"},
      {"v2.0 1\n", "unsupported index version"},
      {"v1.2\n", "line 1"},
      {"v1.2 x\n", "sample count"},
      {"v1.2 2\ncls 512 1 a.cls\n", "line 3: the index ends after 1 of the 2"},
      {"v1.2 1\ncls 512 1 a.cls\njpg 1024 1 b.jpg\n", "line 3: more lines"},
      {"v1.2 1\ncls 513 1 a.cls\n", "line 2: offset 513 is not a multiple of 512"},
      {"v1.2 1\ncls 512 1\n", "line 2: expected groups"},
      {"v1.2 1\n\n", "line 2: no members"},
      {"v1.2 1\ncls 512 -1 a.cls\n", "line 2: size '-1'"},
      {"v1.2 1\njpg 512 1 a.cls\n", "does not match member name"},
      {"v1.2 1\ncls 512 1 a.cls cls 1536 1 b.cls\n", "does not belong to sample 'a'"},
      {"v1.1 1\ncls 0 1\n", "offset 0"},
  };
  for (const Case& c : cases) {
    std::string what;
    EXPECT_EQ(error_code([&] { parse_index(c.text, "/d/x.idx"); }, &what), ErrorCode::corrupt_data)
        << c.text;
    EXPECT_NE(what.find("/d/x.idx"), std::string::npos) << what;
    EXPECT_NE(what.find(c.needle), std::string::npos) << what;
  }
}

TEST(IndexTest, FormatRefusesWhatTheFormatCannotHold) {
  ShardIndex index;
  index.samples.push_back({"a b", {{"txt", 512, 1, "a b.txt"}}});
  EXPECT_EQ(error_code([&] { format_index(index); }), ErrorCode::invalid_argument);
  index.samples[0] = {"a", {{"", 512, 1, "a."}}};
  EXPECT_EQ(error_code([&] { format_index(index); }), ErrorCode::invalid_argument);
}

TEST(IndexTest, DefaultIndexPath) {
  EXPECT_EQ(default_index_path("/d/train-000001.tar"), "/d/train-000001.idx");
  EXPECT_EQ(default_index_path("/d.x/train.tar.gz"), "/d.x/train.idx");
  EXPECT_EQ(default_index_path("shard.tar"), "shard.idx");
  EXPECT_EQ(default_index_path("s3://bucket/a/b.tar"), "s3://bucket/a/b.idx");
  EXPECT_EQ(default_index_path("/d/.hidden.tar"), "/d/.hidden.idx");  // as wds2idx.py
  EXPECT_EQ(default_index_path("/d/noext"), "/d/noext.idx");
}

// Reads the member's bytes straight from the file at the indexed offset.
void expect_data_at(const std::string& file, const IndexMember& m, const std::string& want) {
  const std::string bytes = read_file(file);
  ASSERT_LE(m.offset + m.size, bytes.size());
  EXPECT_EQ(bytes.substr(m.offset, m.size), want) << m.name;
}

TEST(IndexTest, LongNamesPaxAndGnu) {
  const std::string dir_name = std::string(120, 'd') + "/" + std::string(30, 'e');
  const std::string key = dir_name + "/" + std::string(110, 'k');
  for (TarFormat format : {TarFormat::pax, TarFormat::gnu}) {
    TempDir dir;
    const std::string shard =
        dir.write("long.tar", make_tar(
                                  [&](TarWriter& w) {
                                    w.write(make_sample("short", {{"txt", "s"}}));
                                    w.write(make_sample(key, {{"cls", "7"}, {"txt", "long one"}}));
                                    w.write(make_sample("z", {{"txt", "z"}}));
                                  },
                                  TarWriterOptions{.format = format, .mtime = 1700000000}));
    ShardIndex index = build_index(shard);
    ASSERT_EQ(index.samples.size(), 3u);
    const IndexedSample& s = index.samples[1];
    EXPECT_EQ(s.key, key);
    ASSERT_EQ(s.members.size(), 2u);
    EXPECT_EQ(s.members[0].name, key + ".cls");
    // The first member's header starts at 1024; its long name takes extension headers first,
    // so its data starts later than 1024 + 512.
    EXPECT_GT(s.members[0].offset, 1536u);
    EXPECT_EQ(s.members[0].offset % 512, 0u);
    expect_data_at(shard, s.members[0], "7");
    expect_data_at(shard, s.members[1], "long one");

    std::vector<Sample> streamed = stream_file(shard);
    ASSERT_EQ(streamed.size(), 3u);
    EXPECT_EQ(streamed[1].offset(), 1024u);
    ShardIndex parsed = parse_index(format_index(index), "long.idx");
    for (std::size_t i = 0; i < 3; ++i) {
      expect_same(read_indexed_sample(shard, parsed.samples[i]), streamed[i]);
    }
  }
}

TEST(IndexTest, CompressedShardIsRefused) {
  TempDir dir;
  const std::string shard = dir.write(
      "c.tar.gz", make_tar(
                      [](TarWriter& w) {
                        w.write(make_sample("a", {{"txt", "x"}}));
                      },
                      TarWriterOptions{.compression = Compression::gzip, .mtime = 1700000000}));
  std::string what;
  EXPECT_EQ(error_code([&] { build_index(shard); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("uncompressed"), std::string::npos) << what;
}

TEST(IndexTest, BrokenShardsAreErrors) {
  TempDir dir;
  EXPECT_EQ(error_code([&] { build_index(dir.file("missing.tar")); }), ErrorCode::not_found);
  EXPECT_EQ(error_code([&] { build_index(dir.write("empty.tar", "")); }), ErrorCode::corrupt_data);
  EXPECT_EQ(error_code([&] { build_index(dir.write("junk.tar", std::string(3000, 'x'))); }),
            ErrorCode::corrupt_data);
  std::string tar = make_tar([](TarWriter& w) {
    w.write(make_sample("a", {{"txt", std::string(5000, 'a')}}));
    w.write(make_sample("b", {{"txt", "b"}}));
  });
  EXPECT_EQ(error_code([&] { build_index(dir.write("cut.tar", tar.substr(0, 3000))); }),
            ErrorCode::corrupt_data);
  // Cut at a member boundary: no end-of-archive blocks.
  EXPECT_EQ(error_code([&] { build_index(dir.write("cut2.tar", tar.substr(0, 512 + 5120))); }),
            ErrorCode::corrupt_data);
}

TEST(IndexTest, EverySampleReadByIndexEqualsStreaming) {
  TempDir dir;
  std::string tar = make_tar([](TarWriter& w) {
    w.write_directory("x");
    for (int i = 0; i < 40; ++i) {
      std::string k = "sample" + std::to_string(i);
      w.write(make_sample(k, {{"cls", std::to_string(i)},
                              {"bin", std::string(static_cast<std::size_t>(i * 97), char(i))},
                              {"json", "{\"i\":" + std::to_string(i) + "}"}}));
    }
  });
  const std::string shard = dir.write("big.tar", tar);
  const std::string mixed = dir.write("mixed.tar", mixed_shard());
  for (const std::string& path : {shard, mixed, "file://" + mixed}) {
    ShardIndex index = parse_index(format_index(build_index(path)), "i.idx");
    ShardSamples stream(open_url(path));
    std::size_t i = 0;
    while (std::optional<Sample> s = stream.next()) {
      ASSERT_LT(i, index.samples.size());
      expect_same(read_indexed_sample(path, index.samples[i++]), *s);
    }
    EXPECT_EQ(i, index.samples.size());
  }
}

TEST(IndexTest, DuplicateExtensionIsCorruptDataOnRead) {
  TempDir dir;
  const std::string shard = dir.write("dup.tar", make_tar([](TarWriter& w) {
                                        w.write_file("a.txt", "1");
                                        w.write_file("a.TXT", "2");
                                      }));
  ShardIndex index = build_index(shard);
  ASSERT_EQ(index.samples.size(), 1u);
  EXPECT_EQ(index.samples[0].members.size(), 2u);
  EXPECT_EQ(error_code([&] { read_indexed_sample(shard, index.samples[0]); }),
            ErrorCode::corrupt_data);
}

TEST(IndexTest, ModifiedShardIsDetectedAsStale) {
  TempDir dir;
  auto write_shard = [&](const std::string& name_b, std::size_t size_b) {
    return dir.write("s.tar", make_tar([&](TarWriter& w) {
                       w.write(make_sample("a", {{"txt", "aaaa"}}));
                       w.write_file(name_b, std::string(size_b, 'b'));
                       w.write(make_sample("c", {{"txt", "cc"}}));
                     }));
  };
  const std::string shard = write_shard("b.txt", 100);
  const ShardIndex index = build_index(shard);
  ASSERT_EQ(index.samples.size(), 3u);
  EXPECT_NO_THROW(read_indexed_sample(shard, index.samples[1]));

  struct Change {
    std::string name;
    std::size_t size;
  };
  for (const Change& change :
       {Change{"q.txt", 100}, Change{"b.txt", 101}, Change{"b.txt", 2000}, Change{"b.txt", 10}}) {
    write_shard(change.name, change.size);
    // The changed member is noticed; with 2000 bytes, the next member moved too.
    std::vector<std::size_t> stale_samples = {1};
    if (change.size == 2000) stale_samples.push_back(2);
    for (std::size_t i : stale_samples) {
      std::string what;
      EXPECT_EQ(error_code([&] { read_indexed_sample(shard, index.samples[i]); }, &what),
                ErrorCode::corrupt_data)
          << change.name << " " << change.size << " sample " << i;
      EXPECT_NE(what.find("index is stale"), std::string::npos) << what;
      EXPECT_NE(what.find(shard), std::string::npos) << what;
    }
  }
  // A v1.1 index (no names) still notices a different extension at the offset.
  write_shard("b.bin", 100);
  ShardIndex old = parse_index("v1.1 1\ntxt 1536 100\n", "old.idx");
  EXPECT_EQ(error_code([&] { read_indexed_sample(shard, old.samples[0]); }),
            ErrorCode::corrupt_data);
  // A shard cut short.
  write_shard("b.txt", 100);
  std::filesystem::resize_file(shard, 1024);
  EXPECT_EQ(error_code([&] { read_indexed_sample(shard, index.samples[2]); }),
            ErrorCode::corrupt_data);
  EXPECT_EQ(error_code([&] { check_index_bounds(index, 1024, shard); }), ErrorCode::corrupt_data);
  EXPECT_NO_THROW(check_index_bounds(index, 1 << 20, shard));
}

TEST(IndexTest, IndexOlderThanShard) {
  TempDir dir;
  const std::string shard = dir.write("s.tar", make_tar([](TarWriter& w) {
                                        w.write(make_sample("a", {{"t", "x"}}));
                                      }));
  const std::string idx = dir.write("s.idx", format_index(build_index(shard)));
  const auto now = std::filesystem::last_write_time(shard);
  std::filesystem::last_write_time(idx, now + std::chrono::seconds(5));
  EXPECT_FALSE(index_is_older(idx, shard));
  std::filesystem::last_write_time(idx, now - std::chrono::milliseconds(1));
  EXPECT_TRUE(index_is_older(idx, shard));
  EXPECT_EQ(error_code([&] { index_is_older(dir.file("none.idx"), shard); }), ErrorCode::not_found);
}

TEST(IndexTest, ExtensionHeaderWithWrappingSizeIsCorruptNotAnOverread) {
  // A benign index line; only the shard is crafted: a pax header in front of a.txt declaring
  // 2^64 - 1 bytes, which rounded up to whole blocks wrapped to 0 and passed as "no data",
  // and parse_pax then read that many bytes off the heap.
  TempDir dir;
  const std::string shard =
      dir.write("wrap.tar", raw_header("PaxHeader", base256_size(~std::uint64_t{0}), 'x') +
                                raw_header("a.txt", octal_size(5)) + padded("hello") +
                                std::string(1024, '\0'));
  ShardIndex index = parse_index("v1.2 1\ntxt 1024 5 a.txt\n", "wrap.idx");
  try {
    read_indexed_sample(shard, index.samples[0]);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_EQ(e.url(), shard);
    EXPECT_EQ(e.member(), "a.txt");
    EXPECT_NE(e.cause().find("18446744073709551615"), std::string::npos) << e.what();
  }
}

TEST(IndexTest, BuildIndexRefusesSizesTheShardCannotHold) {
  // 2^63 - 2 bytes: libarchive takes it, and rounded up and made signed it turned negative,
  // so the shard was indexed without a word.
  TempDir dir;
  const std::string shard =
      dir.write("huge.tar", raw_header("a.txt", base256_size((std::uint64_t{1} << 63) - 2)) +
                                std::string(4096, 'x'));
  try {
    build_index(shard);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_EQ(e.url(), shard);
    EXPECT_EQ(e.member(), "a.txt");
    EXPECT_NE(e.cause().find("declares 9223372036854775806 bytes"), std::string::npos) << e.what();
  }
}

TEST(IndexTest, MalformedPaxRecordIsCorruptDataWhenIndexingAndReading) {
  // The path record says a length 3 bytes longer than it has: libarchive drops it with a
  // warning (the member would be 'ustar.txt'), the index reader ignored it the same way.
  const std::string body = " path=paxname.txt\n";
  const std::string record = std::to_string(body.size() + 2 + 3) + body;
  TempDir dir;
  const std::string shard =
      dir.write("badpax.tar", raw_header("PaxHeader", octal_size(record.size()), 'x') +
                                  padded(record) + raw_header("ustar.txt", octal_size(5)) +
                                  padded("hello") + std::string(1024, '\0'));
  std::string what;
  EXPECT_EQ(error_code([&] { build_index(shard); }, &what), ErrorCode::corrupt_data);
  EXPECT_NE(what.find("member 'ustar.txt'"), std::string::npos) << what;
  EXPECT_NE(what.find("malformed pax"), std::string::npos) << what;
  ShardIndex index = parse_index("v1.2 1\ntxt 1536 5 ustar.txt\n", "badpax.idx");
  EXPECT_EQ(error_code([&] { read_indexed_sample(shard, index.samples[0]); }, &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("malformed pax"), std::string::npos) << what;
}

TEST(IndexTest, ReservedExtensionIsCorruptDataOnRead) {
  TempDir dir;
  const std::string shard = dir.write("reserved.tar", make_tar([](TarWriter& w) {
                                        w.write_file("x.txt", "1");
                                        w.write_file("x.__key__", "evil");
                                      }));
  ShardIndex index = build_index(shard);
  ASSERT_EQ(index.samples.size(), 1u);
  std::string what;
  EXPECT_EQ(error_code([&] { read_indexed_sample(shard, index.samples[0]); }, &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("member 'x.__key__'"), std::string::npos) << what;
}

}  // namespace
}  // namespace wds
