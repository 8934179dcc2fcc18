// TarReader: formats, compression by content, entry types, and how damage is reported.
#include "wds/tar_reader.hpp"

#include <gtest/gtest.h>

#include <locale.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/fixtures.hpp"
#include "tests/support/raw_tar.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using test::base256_size;
using test::kEndBlocks;
using test::make_tar;
using test::memory_source;
using test::octal_size;
using test::padded;
using test::raw_header;
using test::UnsizedSource;

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
  return Error::invalid_argument("none");
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
    if (pos_ >= limit_) throw Error::unavailable(url(), "", "connection reset");
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

TEST(TarReader, HeaderDeclaringMoreThanTheSourceHoldsIsRefused) {
  // 4.6 KB whose header claims 100 GiB: refused at the header, before anything is allocated.
  const std::string tar =
      raw_header("a.txt", base256_size(std::uint64_t{100} << 30)) + std::string(4096, 'x');
  TarReader reader(memory_source(tar, "huge.tar"));
  try {
    reader.next();
    FAIL() << "a size the source cannot hold was trusted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_EQ(e.url(), "huge.tar");
    EXPECT_EQ(e.member(), "a.txt");
    EXPECT_NE(e.cause().find("declares 107374182400 bytes"), std::string::npos) << e.what();
  }
  // A size the source does hold is marked safe to allocate.
  TarReader fine(memory_source(three_members()));
  const TarEntry* e = fine.next();
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->size_verified);
}

TEST(TarReader, MemberAboveMaxMemberSizeIsRefusedWhenRead) {
  // On a source of unknown size only the limit stands between a header and an allocation.
  const std::string tar =
      raw_header("a.txt", base256_size(std::uint64_t{100} << 30)) + std::string(4096, 'x');
  TarReader reader(std::make_unique<UnsizedSource>(tar));
  const TarEntry* e = reader.next();
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->size_verified);
  Bytes piece(1024);
  try {
    reader.read_data(piece.span());
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::corrupt_data);
    EXPECT_EQ(err.url(), "pipe:shard");
    EXPECT_EQ(err.member(), "a.txt");
    EXPECT_NE(err.cause().find("declares 107374182400 bytes, above the limit 4294967296 "
                               "(TarReaderOptions::max_member_size)"),
              std::string::npos)
        << err.what();
  }
  // The limit applies to real members too (b.txt has 3000 bytes), and not to one of exactly
  // its size.
  for (std::uint64_t limit : {2999, 3000}) {
    TarReaderOptions options;
    options.max_member_size = limit;
    std::vector<std::string> read;
    TarReader limited(memory_source(three_members()), options);
    try {
      while (const TarEntry* m = limited.next()) {
        EXPECT_EQ(m->size_verified, m->size <= limit) << m->name;
        Bytes data(m->size);
        limited.read_data(data.span());
        read.push_back(m->name);
      }
      EXPECT_EQ(limit, 3000u) << "no error";
    } catch (const Error& err) {
      EXPECT_EQ(limit, 2999u) << err.what();
      EXPECT_EQ(err.member(), "b.txt");
    }
    EXPECT_EQ(read.size(), limit == 3000 ? 3u : 2u);
  }
}

TEST(TarReader, ReadDataAcceptsConsecutivePieces) {
  TarReader reader(memory_source(three_members()));
  const TarEntry* e = nullptr;
  while ((e = reader.next()) && e->name != "b.txt") {
  }
  ASSERT_NE(e, nullptr);
  std::string got;
  for (std::size_t n : {1, 999, 2000}) {
    Bytes piece(n);
    reader.read_data(piece.span());
    got += piece.str();
  }
  EXPECT_EQ(got, std::string(3000, 'b'));
  Bytes more(1);
  EXPECT_THROW(reader.read_data(more.span()), Error);  // past the member's end
}

// A source that never ends: zeros forever, as /dev/zero, an endless pipe or HTTP body.
class EndlessZeros final : public ByteSource {
 public:
  explicit EndlessZeros(std::string prefix = "")
      : ByteSource("endless:zeros"), prefix_(std::move(prefix)), zeros_(64 * 1024, '\0') {}
  std::span<const std::byte> read() override {
    ++reads_;
    if (!prefix_.empty()) {
      std::swap(current_, prefix_);
      prefix_.clear();
      return std::as_bytes(std::span(current_));
    }
    return std::as_bytes(std::span(zeros_));
  }
  int reads() const { return reads_; }

 private:
  std::string prefix_, current_, zeros_;
  int reads_ = 0;
};

TEST(TarReader, EndlessZerosAfterTheEndMarkerDoNotHang) {
  // Zeros only: the end marker at once, then a bounded read of what follows.
  TarReader zeros(std::make_unique<EndlessZeros>());
  EXPECT_EQ(zeros.next(), nullptr);
  EXPECT_EQ(zeros.next(), nullptr);
  // A proper archive followed by endless zeros: its members, then the end.
  TarReader archive(std::make_unique<EndlessZeros>(three_members()));
  int n = 0;
  while (archive.next()) ++n;
  EXPECT_EQ(n, 3);
  const auto& source = static_cast<const EndlessZeros&>(archive.source());
  EXPECT_LE(source.reads(), static_cast<int>(kMaxTrailingBytes / (64 * 1024)) + 2);
}

// A pax header whose `path` record says a length 3 bytes longer than the record.
std::string tar_with_bad_pax_path() {
  const std::string body = " path=paxname.txt\n";
  const std::string record = std::to_string(body.size() + 2 + 3) + body;
  return raw_header("PaxHeader", octal_size(record.size()), 'x') + padded(record) +
         raw_header("ustar.txt", octal_size(5)) + padded("hello") + kEndBlocks;
}

TEST(TarReader, MalformedPaxRecordIsCorruptDataNamingTheMember) {
  // libarchive drops the record with a warning and would name the member 'ustar.txt', where
  // Python's tarfile reads the pax header its own way: a different key, silently.
  Error e = read_error(tar_with_bad_pax_path(), "badpax.tar");
  EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
  EXPECT_EQ(e.url(), "badpax.tar");
  EXPECT_EQ(e.member(), "ustar.txt");
  EXPECT_NE(e.cause().find("malformed pax extended attribute"), std::string::npos) << e.what();
}

TEST(TarReader, ArchivesOfGnuTarAndPythonReadWithoutWarnings) {
  // The warnings libarchive gives on such archives (a UTF-8 pax name that the "C" locale
  // cannot hold) must not count as damage: every format, long and non-ASCII names, sparse.
  if (std::system("tar --version >/dev/null 2>&1") != 0 ||
      std::system("python3 -c '' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no tar or python3";
  }
  test::TempDir dir;
  const std::string src = dir.file("src");
  const std::string long_name = std::string(150, 'd') + ".txt";
  ASSERT_EQ(
      std::system(
          ("mkdir -p '" + src + "/sub' && cd '" + src +
           "' && printf a > 'caf\xc3\xa9.txt' && printf bb > '" + long_name +
           "' && printf ccc > sub/x.txt && truncate -s 1M sparse.bin && truncate -s 1M hole.bin && "
           "printf end >> sparse.bin")
              .c_str()),
      0);
  std::vector<std::string> archives;
  for (const char* format : {"gnu", "posix", "ustar", "oldgnu"}) {
    const std::string out = dir.file(std::string("gnu-") + format + ".tar");
    std::system(("tar --format=" + std::string(format) + " --sparse -cf '" + out + "' -C '" + src +
                 "' . 2>/dev/null")
                    .c_str());
    archives.push_back(out);
  }
  for (const char* format : {"PAX_FORMAT", "GNU_FORMAT"}) {
    const std::string out = dir.file(std::string("py-") + format + ".tar");
    ASSERT_EQ(std::system(("python3 -c 'import tarfile; t = tarfile.open(\"" + out +
                           "\", \"w\", format=tarfile." + format + "); t.add(\"" + src +
                           "\", arcname=\".\"); t.close()'")
                              .c_str()),
              0);
    archives.push_back(out);
  }
  for (const std::string& path : archives) {
    if (!std::filesystem::exists(path)) continue;  // ustar cannot hold the long name
    TarReader reader(open_url(path));
    std::vector<std::string> names;
    try {
      while (const TarEntry* e = reader.next()) {
        if (e->type != EntryType::file) continue;
        Bytes data(e->size);
        reader.read_data(data.span());
        names.push_back(e->name);
      }
    } catch (const Error& e) {
      ADD_FAILURE() << path << ": " << e.what();
      continue;
    }
    const bool ustar = path.find("-ustar") != std::string::npos;
    EXPECT_EQ(names.size(), ustar ? 4u : 5u) << path;
    if (!ustar) {
      EXPECT_NE(std::find(names.begin(), names.end(), "./" + long_name), names.end()) << path;
      EXPECT_NE(std::find(names.begin(), names.end(), "./caf\xc3\xa9.txt"), names.end()) << path;
    }
  }
}

std::string noise(std::size_t n, std::uint32_t seed) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    out += static_cast<char>(seed >> 24);
  }
  return out;
}

TEST(TarReader, GzipMissingItsTrailerIsATruncatedGzipStream) {
  TarWriterOptions options;
  options.compression = Compression::gzip;
  // A small archive: the decompressor fails before the first header, while libarchive is still
  // choosing the format (and drops the filter it chose).
  std::string small = make_tar(
      [](TarWriter& w) {
        w.write_file("a.txt", "alpha");
        w.write_file("b.txt", std::string(400, 'b'));
      },
      options);
  Error e = read_error(small.substr(0, small.size() - 8), "no-trailer.tar.gz");
  EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
  EXPECT_EQ(e.url(), "no-trailer.tar.gz");
  EXPECT_NE(e.cause().find("truncated or corrupt gzip stream"), std::string::npos) << e.what();
  EXPECT_EQ(e.cause().find("start of the archive"), std::string::npos) << e.what();
  EXPECT_EQ(e.cause().find("unknown libarchive error"), std::string::npos) << e.what();

  // A larger one: the members before the decompressor's last window are delivered, and the
  // error says how far the reader got.
  std::string large = make_tar(
      [](TarWriter& w) {
        for (int i = 0; i < 8; ++i) w.write_file("m" + std::to_string(i) + ".bin", noise(40000, i));
      },
      options);
  TarReader reader(memory_source(large.substr(0, large.size() - 8), "big.tar.gz", 1000));
  int delivered = 0;
  try {
    while (const TarEntry* m = reader.next()) {
      Bytes data(m->size);
      reader.read_data(data.span());
      EXPECT_EQ(std::string(data.str()), noise(40000, delivered));
      ++delivered;
    }
    FAIL() << "a missing gzip trailer went unnoticed";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::corrupt_data);
    EXPECT_NE(err.cause().find("truncated or corrupt gzip stream"), std::string::npos)
        << err.what();
  }
  EXPECT_GE(delivered, 5);
}

}  // namespace
}  // namespace wds
