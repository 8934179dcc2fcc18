// TarReader: formats, compression by content, entry types, and how damage is reported.
#include "wds/tar_reader.hpp"

#include <gtest/gtest.h>

#include <locale.h>

#include <string>
#include <vector>

#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using test::make_tar;
using test::memory_source;

struct Entry {
  std::string name;
  EntryType type;
  std::string data;
};

std::vector<Entry> read_entries(const std::string& bytes, std::size_t chunk = 1 << 20) {
  TarReader reader(memory_source(bytes, "mem.tar", chunk));
  std::vector<Entry> out;
  while (const TarEntry* e = reader.next()) {
    Entry entry{std::string(e->name), e->type, {}};
    if (e->type == EntryType::file) {
      Bytes data(e->size);
      reader.read_data(data.span());
      entry.data = std::string(data.str());
    }
    out.push_back(std::move(entry));
  }
  return out;
}

std::string three_members(TarWriterOptions options = {}) {
  return make_tar(
      [](TarWriter& w) {
        w.write_file("a.txt", "alpha");
        w.write_file("a.cls", "");
        w.write_file("b.txt", std::string(3000, 'b'));
      },
      options);
}

TEST(TarReader, ReadsMembersInOrderWithTheirBytes) {
  std::vector<Entry> entries = read_entries(three_members());
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name, "a.txt");
  EXPECT_EQ(entries[0].data, "alpha");
  EXPECT_EQ(entries[1].name, "a.cls");
  EXPECT_EQ(entries[1].data, "");
  EXPECT_EQ(entries[2].data, std::string(3000, 'b'));
}

TEST(TarReader, ChunkSizeDoesNotChangeWhatIsRead) {
  std::string tar = three_members();
  std::vector<Entry> whole = read_entries(tar);
  for (std::size_t chunk : {1, 7, 511, 512, 513, 4096}) {
    std::vector<Entry> chunked = read_entries(tar, chunk);
    ASSERT_EQ(chunked.size(), whole.size()) << "chunk " << chunk;
    for (std::size_t i = 0; i < whole.size(); ++i) {
      EXPECT_EQ(chunked[i].name, whole[i].name);
      EXPECT_EQ(chunked[i].data, whole[i].data) << "chunk " << chunk;
    }
  }
}

TEST(TarReader, ReadsPaxAndGnuLongNamesAndUtf8) {
  const std::string long_dir(150, 'd');
  const std::string long_name = long_dir + "/" + std::string(120, 'n') + ".jpg";
  const std::string utf8 = "caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac.txt";
  for (TarFormat format : {TarFormat::pax, TarFormat::gnu}) {
    TarWriterOptions options;
    options.format = format;
    std::string tar = make_tar(
        [&](TarWriter& w) {
          w.write_file(long_name, "long");
          w.write_file(utf8, "utf8");
        },
        options);
    std::vector<Entry> entries = read_entries(tar);
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].name, long_name);
    EXPECT_EQ(entries[0].data, "long");
    EXPECT_EQ(entries[1].name, utf8);
    EXPECT_EQ(entries[1].data, "utf8");
  }
}

TEST(TarReader, NamesAreTheSameBytesUnderAUtf8Locale) {
  const std::string utf8 = "caf\xc3\xa9/\xe6\x97\xa5.txt";
  for (TarFormat format : {TarFormat::ustar, TarFormat::pax}) {
    TarWriterOptions options;
    options.format = format;
    std::string tar = make_tar([&](TarWriter& w) { w.write_file(utf8, "x"); }, options);
    locale_t loc = ::newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
    ASSERT_NE(loc, static_cast<locale_t>(0));
    locale_t old = ::uselocale(loc);
    std::vector<Entry> entries = read_entries(tar);
    ::uselocale(old);
    ::freelocale(loc);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].name, utf8);
    EXPECT_EQ(read_entries(tar)[0].name, utf8);  // and under the "C" locale
  }
}

TEST(TarReader, UstarSplitsNamesUpTo255BytesAndRefusesLonger) {
  const std::string name = std::string(140, 'p') + "/" + std::string(90, 'n') + ".txt";
  std::vector<Entry> entries =
      read_entries(make_tar([&](TarWriter& w) { w.write_file(name, "x"); }));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].name, name);
  try {
    make_tar([](TarWriter& w) { w.write_file(std::string(300, 'x') + ".txt", "x"); });
    FAIL() << "a 304-byte name fits no ustar header";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.member().find("xxxx.txt"), std::string::npos);
  }
}

TEST(TarReader, RecognisesCompressionByContentNotName) {
  std::string plain = three_members();
  for (Compression c :
       {Compression::gzip, Compression::bzip2, Compression::xz, Compression::zstd}) {
    TarWriterOptions options;
    options.compression = c;
    std::string packed = three_members(options);
    EXPECT_NE(packed, plain);
    // The URL says .tar: only the content says what it is.
    std::vector<Entry> entries = read_entries(packed, 100);
    ASSERT_EQ(entries.size(), 3u) << "compression " << static_cast<int>(c);
    EXPECT_EQ(entries[2].data, std::string(3000, 'b'));
  }
}

TEST(TarReader, ReportsEntryTypes) {
  std::string tar = make_tar([](TarWriter& w) {
    w.write_directory("dir/");
    w.write_file("dir/a.txt", "a");
    w.write_symlink("dir/b.txt", "a.txt");
    w.write_hardlink("dir/c.txt", "dir/a.txt");
  });
  std::vector<Entry> entries = read_entries(tar);
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].type, EntryType::directory);
  EXPECT_EQ(entries[1].type, EntryType::file);
  EXPECT_EQ(entries[2].type, EntryType::symlink);
  EXPECT_EQ(entries[3].type, EntryType::hardlink);
}

TEST(TarReader, EntryOffsetsPointAtHeaders) {
  std::string tar = three_members();
  TarReader reader(memory_source(tar));
  std::vector<std::uint64_t> offsets;
  while (const TarEntry* e = reader.next()) offsets.push_back(e->offset);
  // 512-byte headers; "alpha" pads to one block, the empty member has none.
  EXPECT_EQ(offsets, (std::vector<std::uint64_t>{0, 1024, 1536}));
  for (std::uint64_t off : offsets) EXPECT_EQ(tar.compare(off + 257, 5, "ustar"), 0);
}

TEST(TarReader, UnreadDataIsSkipped) {
  TarReader reader(memory_source(three_members()));
  ASSERT_NE(reader.next(), nullptr);
  const TarEntry* second = reader.next();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->name, "a.cls");
  const TarEntry* third = reader.next();
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->name, "b.txt");
  EXPECT_EQ(reader.next(), nullptr);
  EXPECT_EQ(reader.next(), nullptr);  // and stays at the end
}

TEST(TarReader, ReadDataChecksItsContract) {
  TarReader reader(memory_source(three_members()));
  const TarEntry* e = reader.next();
  ASSERT_NE(e, nullptr);
  Bytes wrong(e->size + 1);
  EXPECT_THROW(reader.read_data(wrong.span()), Error);
  Bytes right(e->size);
  reader.read_data(right.span());
  EXPECT_THROW(reader.read_data(right.span()), Error);  // twice
}

TEST(TarReader, ArchiveOfOnlyEndBlocksHasNoEntries) {
  std::string tar = make_tar([](TarWriter&) {});
  EXPECT_TRUE(read_entries(tar).empty());
}

TEST(TarReader, ArchiveWithoutEndBlocksIsTruncatedUnlessAllowed) {
  // Cut right after b.txt's data: a member boundary, as a copy interrupted at a block boundary
  // leaves it. Some streaming writers omit the blocks too; they opt out.
  std::string tar = three_members();
  std::string cut = tar.substr(0, 1536 + 512 + 3072);
  TarReader strict(memory_source(cut, "cut.tar"));
  ASSERT_NE(strict.next(), nullptr);
  ASSERT_NE(strict.next(), nullptr);
  ASSERT_NE(strict.next(), nullptr);
  try {
    strict.next();
    FAIL() << "a missing end-of-archive marker went unnoticed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_NE(e.cause().find("end-of-archive"), std::string::npos) << e.what();
    EXPECT_NE(e.cause().find("after member 'b.txt'"), std::string::npos) << e.what();
  }
  TarReader lenient(memory_source(cut), TarReaderOptions{.require_end_marker = false});
  int n = 0;
  while (lenient.next()) ++n;
  EXPECT_EQ(n, 3);
  // One zero block instead of two is still a proper end (libarchive and GNU tar accept it).
  std::string one_block = tar.substr(0, 1536 + 512 + 3072 + 512);
  TarReader strict_one(memory_source(one_block));
  n = 0;
  while (strict_one.next()) ++n;
  EXPECT_EQ(n, 3);
}

Error read_error(const std::string& bytes, const std::string& url = "bad.tar") {
  try {
    TarReader reader(memory_source(bytes, url, 1000));
    while (const TarEntry* e = reader.next()) {
      Bytes data(e->size);
      reader.read_data(data.span());
    }
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::invalid_argument, "", "", "none");
}

TEST(TarReader, EmptyFileIsAnError) {
  Error e = read_error("", "empty.tar");
  EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
  EXPECT_EQ(e.url(), "empty.tar");
  EXPECT_NE(e.cause().find("empty file"), std::string::npos) << e.what();
}

TEST(TarReader, NonTarDataIsAnError) {
  for (const std::string& junk :
       {std::string("hello, world\n"), std::string(2000, 'x'), std::string(1024, '\x01')}) {
    Error e = read_error(junk);
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_NE(e.cause().find("not a tar archive"), std::string::npos) << e.what();
  }
}

TEST(TarReader, TruncatedMemberDataNamesTheMember) {
  std::string tar = three_members();
  Error e = read_error(tar.substr(0, 1536 + 512 + 1000));  // inside b.txt's data
  EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
  EXPECT_EQ(e.url(), "bad.tar");
  EXPECT_EQ(e.member(), "b.txt");
  EXPECT_NE(std::string(e.what()).find("b.txt"), std::string::npos);
}

TEST(TarReader, TruncatedHeaderNamesThePreviousMember) {
  std::string tar = three_members();
  Error e = read_error(tar.substr(0, 1536 + 300));  // inside b.txt's header
  EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
  EXPECT_NE(e.cause().find("after member 'a.cls'"), std::string::npos) << e.what();
}

TEST(TarReader, BadHeaderChecksumIsAnError) {
  std::string tar = three_members();
  tar[1536 + 100] ^= 0x5a;  // b.txt's mode field; its stored checksum no longer matches
  Error e = read_error(tar);
  EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
  EXPECT_NE(e.cause().find("checksum"), std::string::npos) << e.what();
  EXPECT_NE(e.cause().find("after member 'a.cls'"), std::string::npos) << e.what();
}

TEST(TarReader, TruncatedCompressedArchiveIsAnError) {
  TarWriterOptions options;
  options.compression = Compression::gzip;
  std::string tar = make_tar(
      [](TarWriter& w) {
        // Incompressible bytes, so that the cut lands inside the member's data.
        std::string noise;
        std::uint32_t x = 12345;
        for (int i = 0; i < 20000; ++i) {
          x = x * 1664525u + 1013904223u;
          noise += static_cast<char>(x >> 24);
        }
        w.write_file("a.bin", noise);
      },
      options);
  Error e = read_error(tar.substr(0, tar.size() / 2), "bad.tar.gz");
  EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
  EXPECT_EQ(e.url(), "bad.tar.gz");
  // The decompressor reads ahead of the tar reader, so its error may come before the member.
  EXPECT_NE(e.cause().find("truncated gzip input"), std::string::npos) << e.what();
}

// A source that fails with a retryable error after `limit` bytes, as a network would.
class FailingSource final : public ByteSource {
 public:
  FailingSource(std::string bytes, std::size_t limit)
      : ByteSource("flaky://shard.tar"), bytes_(std::move(bytes)), limit_(limit) {}
  std::span<const std::byte> read() override {
    if (pos_ >= limit_) throw Error(ErrorCode::unavailable, url(), "", "connection reset");
    std::size_t n = std::min<std::size_t>(100, limit_ - pos_);
    auto out = std::as_bytes(std::span(bytes_)).subspan(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  std::string bytes_;
  std::size_t limit_;
  std::size_t pos_ = 0;
};

TEST(TarReader, SourceErrorsKeepTheirCategoryAndGainTheMember) {
  std::string tar = three_members();
  TarReader reader(std::make_unique<FailingSource>(tar, 1536 + 512 + 1000));
  try {
    while (const TarEntry* e = reader.next()) {
      Bytes data(e->size);
      reader.read_data(data.span());
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable);
    EXPECT_TRUE(e.retryable());
    EXPECT_EQ(e.url(), "flaky://shard.tar");
    EXPECT_EQ(e.member(), "b.txt");
    EXPECT_EQ(e.cause(), "connection reset");
  }
  EXPECT_EQ(reader.next(), nullptr);  // finished after an error
}

TEST(TarReader, SourceErrorBeforeAnyByteIsReported) {
  TarReader reader(std::make_unique<FailingSource>(three_members(), 0));
  try {
    reader.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable);
    EXPECT_NE(e.cause().find("connection reset"), std::string::npos);
  }
}

}  // namespace
}  // namespace wds
