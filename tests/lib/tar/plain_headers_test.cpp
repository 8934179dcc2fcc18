// TarReader's plain path (lib/tar/reader.cpp): the headers it parses itself, and that it reads
// every archive, whole, cut or damaged, to the same entries and the same errors as libarchive
// alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "lib/tar/format.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/raw_tar.hpp"
#include "wds/error.hpp"
#include "wds/tar_reader.hpp"
#include "wds/tar_writer.hpp"

namespace wds {
namespace {

using test::kEndBlocks;
using test::make_tar;
using test::memory_source;
using test::octal_size;
using test::padded;
using test::raw_header;
using test::UnsizedSource;

// The header's views point into `block`, which must outlive them.
std::optional<PlainHeader> plain(const std::string& block) {
  EXPECT_EQ(block.size(), 512u);
  return parse_plain_header(reinterpret_cast<const std::byte*>(block.data()));
}

std::string with_checksum(std::string h) {
  h.replace(148, 8, "        ");
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  char field[8];
  std::snprintf(field, sizeof field, "%06o", sum);
  h.replace(148, 7, field, 7);
  return h;
}

// A GNU-format header ("ustar  \0") of the same member.
std::string gnu(std::string h) {
  h.replace(257, 8, "ustar  \0", 8);
  return with_checksum(std::move(h));
}

TEST(PlainHeader, TakesUstarAndGnuFilesAndDirectories) {
  const std::string block = raw_header("a/b.jpg", octal_size(1234));
  std::optional<PlainHeader> h = plain(block);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->name, "a/b.jpg");
  EXPECT_EQ(h->prefix, "");
  EXPECT_EQ(h->size, 1234u);
  EXPECT_FALSE(h->directory);

  std::string prefixed = raw_header("name.txt", octal_size(0));
  prefixed.replace(345, 6, "top/in");
  prefixed = with_checksum(prefixed);
  h = plain(prefixed);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->prefix, "top/in");
  EXPECT_EQ(h->name, "name.txt");

  const std::string gnu_block = gnu(raw_header("g.cls", octal_size(1)));
  h = plain(gnu_block);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->name, "g.cls");
  EXPECT_EQ(h->size, 1u);

  h = plain(raw_header("dir/", octal_size(0), '5'));
  ASSERT_TRUE(h);
  EXPECT_TRUE(h->directory);

  h = plain(raw_header("old", octal_size(7), '\0'));  // a NUL type is a regular file
  ASSERT_TRUE(h);
  EXPECT_EQ(h->size, 7u);

  std::string spaced = raw_header("s", octal_size(0));
  spaced.replace(124, 12, "        17 \0", 12);  // leading spaces, a trailing space
  spaced = with_checksum(spaced);
  h = plain(spaced);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->size, 15u);
}

TEST(PlainHeader, LeavesEverythingElseToLibarchive) {
  const std::string good = raw_header("a.txt", octal_size(5));
  ASSERT_TRUE(plain(good));
  auto changed = [&](std::size_t at, const std::string& bytes) {
    std::string h = good;
    h.replace(at, bytes.size(), bytes);
    return with_checksum(h);
  };
  EXPECT_FALSE(plain(std::string(512, '\0'))) << "an end block";
  std::string bad_sum = good;
  bad_sum[100] = '1';  // the mode changes, the stored checksum does not
  EXPECT_FALSE(plain(bad_sum)) << "a checksum that does not match";
  EXPECT_FALSE(plain(changed(124, test::base256_size(5)))) << "a base-256 size";
  EXPECT_FALSE(plain(changed(124, "0000000000x\0"))) << "a size with a stray character";
  EXPECT_FALSE(plain(changed(124, std::string(12, '\0')))) << "a size without digits";
  EXPECT_FALSE(plain(changed(108, "00000x0\0"))) << "a uid libarchive's bid refuses";
  EXPECT_FALSE(plain(changed(136, "\x80" + std::string(11, '\0')))) << "a base-256 mtime";
  for (char type : {'1', '2', '3', '4', '6', '7', 'x', 'g', 'L', 'K', 'S', 'D', 'V'}) {
    EXPECT_FALSE(plain(changed(156, std::string(1, type)))) << "type " << type;
  }
  EXPECT_FALSE(plain(raw_header("d/", octal_size(3), '5'))) << "a directory with data";
  EXPECT_FALSE(plain(raw_header("f/", octal_size(3)))) << "a file named like a directory";
  EXPECT_FALSE(plain(raw_header("caf\xc3\xa9.txt", octal_size(3)))) << "a non-ASCII name";
  EXPECT_FALSE(plain(raw_header("tab\there", octal_size(3)))) << "a control character";
  EXPECT_FALSE(plain(changed(345, "pre/"))) << "a prefix ending in '/'";
  EXPECT_FALSE(plain(changed(257, std::string("\0\0\0\0\0\0\0\0", 8)))) << "a v7 header";
  EXPECT_FALSE(plain(changed(263, "01"))) << "an unknown ustar version";
  std::string sparse = gnu(good);
  sparse[386] = '1';
  EXPECT_FALSE(plain(with_checksum(sparse))) << "a GNU sparse map";
  std::string real_size = gnu(good);
  real_size.replace(483, 3, "123");
  EXPECT_FALSE(plain(with_checksum(real_size))) << "a GNU real size";
}

// The rule for numeric fields, written plainly: leading spaces, digits, then NULs or spaces.
bool plain_octal_field(const std::string& f) {
  std::size_t i = f.find_first_not_of(' ');
  if (i == std::string::npos) return true;
  while (i < f.size() && f[i] >= '0' && f[i] <= '7') ++i;
  return f.find_first_not_of(std::string(" \0", 2), i) == std::string::npos;
}

TEST(PlainHeader, TakesANumericFieldExactlyWhenItIsPlainOctal) {
  // Every field of mode's 8 bytes and mtime's 12 from a small alphabet, pseudo-randomly, with
  // runs: digits, the two terminators, what breaks the form.
  const std::string alphabet("0077 \0\08x\x80", 10);
  std::uint32_t x = 12345;
  int taken = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string field[2] = {std::string(8, '0'), std::string(12, '0')};
    for (std::string& f : field) {
      for (char& c : f) {
        x = x * 1103515245 + 12345;
        c = alphabet[(x >> 16) % alphabet.size()];
      }
      // Often the usual shapes: digits then terminators.
      if ((x >> 8) % 3 == 0) {
        const std::size_t digits = (x >> 4) % (f.size() + 1);
        for (std::size_t i = 0; i < f.size(); ++i) {
          f[i] = i < digits ? static_cast<char>('0' + i % 8) : ((x >> i) & 1 ? ' ' : '\0');
        }
      }
    }
    std::string h = raw_header("n.txt", octal_size(1));
    h.replace(100, 8, field[0]);
    h.replace(136, 12, field[1]);
    h = with_checksum(h);
    const bool want = plain_octal_field(field[0]) && plain_octal_field(field[1]);
    ASSERT_EQ(plain(h).has_value(), want)
        << "mode '" << field[0] << "' mtime '" << field[1] << "' (round " << round << ")";
    taken += want;
  }
  EXPECT_GT(taken, 2000);
  EXPECT_LT(taken, 18000);
}

// What a reader makes of an archive: every entry, then the error that ended it, if any.
struct Outcome {
  struct Entry {
    std::string name;
    EntryType type;
    std::uint64_t size, offset;
    bool size_verified;
    std::string data;
    bool operator==(const Entry&) const = default;
  };
  std::vector<Entry> entries;
  std::optional<ErrorCode> code;
  std::string member, cause;
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  for (const Outcome::Entry& e : o.entries) {
    os << "[" << e.name << " " << static_cast<int>(e.type) << " " << e.size << " @" << e.offset
       << (e.size_verified ? " verified" : "") << " " << e.data.size() << " bytes] ";
  }
  if (o.code) os << "error " << static_cast<int>(*o.code) << " '" << o.member << "': " << o.cause;
  return os;
}

// Reads `bytes` through the plain path or libarchive alone, from a source that knows its size
// or not, in chunks of `chunk`. With `skip`, every other file's data is left for next() to skip;
// the rest is read in pieces of at most 1,000 bytes (and at most 1 MiB of a member).
Outcome read_with(const std::string& bytes, bool libarchive_alone, std::size_t chunk, bool sized,
                  bool skip) {
  std::unique_ptr<ByteSource> source =
      sized ? memory_source(bytes, "cmp.tar", chunk)
            : std::make_unique<UnsizedSource>(bytes, "cmp.tar", chunk);
  TarReader reader(std::move(source));
  if (libarchive_alone) detail::TarReaderAccess::read_every_header_with_libarchive(reader);
  Outcome out;
  try {
    int n = 0;
    while (const TarEntry* e = reader.next()) {
      out.entries.push_back({e->name, e->type, e->size, e->offset, e->size_verified, {}});
      if (e->type != EntryType::file || (skip && n++ % 2 == 1)) continue;
      const std::uint64_t want = std::min<std::uint64_t>(e->size, 1 << 20);
      std::string& data = out.entries.back().data;
      while (data.size() < want) {
        std::string piece(std::min<std::uint64_t>(want - data.size(), 1000), '\0');
        reader.read_data(std::as_writable_bytes(std::span(piece)));
        data += piece;
      }
    }
  } catch (const Error& e) {
    out.code = e.code();
    out.member = e.member();
    out.cause = e.cause();
    EXPECT_EQ(e.url(), "cmp.tar");
  }
  return out;
}

// A cut inside a member's data or padding that the reader skips: libarchive counts the bytes it
// needed from where it last consumed, which depends on its buffering, and the plain path from
// where the skip starts; the rest of the message is the same.
std::string without_counts(std::string cause) {
  const std::size_t at = cause.find("Truncated input file (needed ");
  if (at == std::string::npos) return cause;
  const std::size_t end = cause.find(')', at);
  return cause.erase(at + 21, end - (at + 21));
}

// Both ways, every chunk size and source kind given.
void expect_same(const std::string& bytes, const std::string& what,
                 std::initializer_list<std::size_t> chunks = {1, 100, 512, 700, 4097, 1 << 20}) {
  for (std::size_t chunk : chunks) {
    for (bool sized : {true, false}) {
      for (bool skip : {false, true}) {
        Outcome alone = read_with(bytes, true, chunk, sized, skip);
        Outcome ours = read_with(bytes, false, chunk, sized, skip);
        ASSERT_EQ(ours.entries, alone.entries)
            << what << ", chunk " << chunk << (sized ? ", sized" : "") << (skip ? ", skip" : "")
            << "\n  plain path: " << ours << "\n  libarchive: " << alone;
        ASSERT_EQ(ours.code, alone.code)
            << what << "\n  plain: " << ours << "\n  libarchive: " << alone;
        ASSERT_EQ(ours.member, alone.member) << what;
        ASSERT_EQ(without_counts(ours.cause), without_counts(alone.cause))
            << what << ", chunk " << chunk << "\n  plain: " << ours.cause
            << "\n  libarchive: " << alone.cause;
      }
    }
  }
}

std::string three_members() {
  return make_tar([](TarWriter& w) {
    w.write_file("a.txt", "alpha");
    w.write_file("a.cls", "");
    w.write_file("b.txt", std::string(3000, 'b'));
  });
}

// Plain members, a pax one (a name past ustar's 100 bytes) in the middle, plain ones after it:
// the stream is handed over to libarchive at the pax header.
std::string handed_over_mid_archive() {
  TarWriterOptions pax;
  pax.format = TarFormat::pax;
  return make_tar(
      [](TarWriter& w) {
        w.write_file("x/001.jpg", std::string(700, 'j'));
        w.write_file("x/001.json", "{}");
        w.write_file("x/" + std::string(120, 'n') + ".txt", "long");
        w.write_file("x/002.jpg", std::string(1024, 'k'));
      },
      pax);
}

TEST(PlainPath, TakesPlainMembersAndHandsOverAtTheFirstOther) {
  const std::string tar = handed_over_mid_archive();
  TarReader reader(memory_source(tar));
  std::vector<std::string> names;
  std::vector<bool> plain_path;
  while (const TarEntry* e = reader.next()) {
    names.push_back(e->name);
    plain_path.push_back(detail::TarReaderAccess::on_plain_path(reader));
  }
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names[2], "x/" + std::string(120, 'n') + ".txt");
  EXPECT_EQ(plain_path, (std::vector<bool>{true, true, false, false}));

  TarWriterOptions gz;
  gz.compression = Compression::gzip;
  TarReader compressed(memory_source(make_tar([](TarWriter& w) { w.write_file("z", "z"); }, gz)));
  ASSERT_NE(compressed.next(), nullptr);
  EXPECT_FALSE(detail::TarReaderAccess::on_plain_path(compressed));
}

// read_bytes lends a member that lies whole in the source's chunk (4 KiB and more), and reads
// the others into Bytes of their own; the same bytes either way.
TEST(PlainPath, ReadBytesLendsMembersThatLieInTheChunk) {
  const std::string big(5000, 'b'), small(100, 's');
  const std::string tar = make_tar([&](TarWriter& w) {
    w.write_file("a.big", big);
    w.write_file("a.small", small);
  });
  struct Case {
    std::size_t chunk;
    bool big_lent;
  };
  for (Case c : {Case{1 << 20, true}, Case{4096, false}, Case{700, false}}) {
    TarReader reader(memory_source(tar, "mem.tar", c.chunk));
    const TarEntry* e = reader.next();
    ASSERT_NE(e, nullptr);
    Bytes b = reader.read_bytes(e->size);
    EXPECT_EQ(b.str(), big);
    EXPECT_EQ(detail::bytes_shared(b), c.big_lent) << "chunk " << c.chunk;
    e = reader.next();
    ASSERT_NE(e, nullptr);
    Bytes s = reader.read_bytes(e->size);
    EXPECT_EQ(s.str(), small);
    EXPECT_FALSE(detail::bytes_shared(s)) << "a small member is copied";
    EXPECT_EQ(reader.next(), nullptr);
    EXPECT_EQ(b.str(), big) << "lent bytes outlive the reads after them";
  }
  TarReader alone(memory_source(tar));
  detail::TarReaderAccess::read_every_header_with_libarchive(alone);
  ASSERT_NE(alone.next(), nullptr);
  Bytes b = alone.read_bytes(big.size());
  EXPECT_EQ(b.str(), big);
  EXPECT_FALSE(detail::bytes_shared(b)) << "libarchive's path copies";
}

TEST(PlainPath, ReadsWholeArchivesAsLibarchiveDoes) {
  expect_same(three_members(), "three members");
  expect_same(handed_over_mid_archive(), "a pax member in the middle");
  expect_same(kEndBlocks, "only end blocks");
  expect_same("", "empty");
  expect_same(raw_header("d/", octal_size(0), '5') + raw_header("d/f", octal_size(3)) +
                  padded("abc") + raw_header("d/g", octal_size(0)) + kEndBlocks,
              "a directory, then files");
  expect_same(raw_header("a", octal_size(2)) + padded("aa") + kEndBlocks.substr(0, 512),
              "one end block");
  expect_same(raw_header("a", octal_size(2)) + padded("aa") + kEndBlocks + "trailing junk",
              "bytes after the end");
  TarWriterOptions gz;
  gz.compression = Compression::gzip;
  expect_same(make_tar([](TarWriter& w) { w.write_file("z.txt", "zz"); }, gz), "gzip");
}

TEST(PlainPath, ReadsArchivesOfGnuTarAndPythonAsLibarchiveDoes) {
  if (std::system("tar --version >/dev/null 2>&1") != 0 ||
      std::system("python3 -c '' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no tar or python3";
  }
  test::TempDir dir;
  const std::string src = dir.file("src");
  ASSERT_EQ(
      std::system(("mkdir -p '" + src + "/sub' && cd '" + src +
                   "' && printf a > 'caf\xc3\xa9.txt' && printf bb > '" + std::string(150, 'd') +
                   ".txt' && printf ccc > sub/x.txt && ln -s sub/x.txt link && "
                   "ln sub/x.txt hard && truncate -s 100K sparse.bin && printf end >> "
                   "sparse.bin")
                      .c_str()),
      0);
  int read = 0;
  for (const char* format : {"gnu", "posix", "ustar", "oldgnu", "v7"}) {
    const std::string out = dir.file(std::string("gnu-") + format + ".tar");
    if (std::system(("tar --format=" + std::string(format) + " --sparse -cf '" + out + "' -C '" +
                     src + "' . 2>/dev/null")
                        .c_str()) != 0 &&
        !std::filesystem::exists(out)) {
      continue;
    }
    std::ifstream in(out, std::ios::binary);
    expect_same(std::string(std::istreambuf_iterator<char>(in), {}), out, {512, 700, 1 << 20});
    ++read;
  }
  for (const char* format : {"PAX_FORMAT", "GNU_FORMAT", "USTAR_FORMAT"}) {
    const std::string out = dir.file(std::string("py-") + format + ".tar");
    if (std::system(("python3 -c 'import tarfile; t = tarfile.open(\"" + out +
                     "\", \"w\", format=tarfile." + format + "); t.add(\"" + src +
                     "/sub\", arcname=\"sub\"); t.add(\"" + src + "/link\", arcname=\"link\"); " +
                     "t.close()'")
                        .c_str()) != 0) {
      continue;
    }
    std::ifstream in(out, std::ios::binary);
    expect_same(std::string(std::istreambuf_iterator<char>(in), {}), out, {512, 700, 1 << 20});
    ++read;
  }
  EXPECT_GE(read, 6);
}

TEST(PlainPath, EveryCutReadsAsLibarchiveReadsIt) {
  for (const std::string& tar : {three_members(), handed_over_mid_archive()}) {
    for (std::size_t cut = 0; cut <= tar.size(); ++cut) {
      // Chunks of one byte for some cuts only: the bytes are the same, the calls many.
      if (cut % 61 == 0) {
        expect_same(tar.substr(0, cut), "cut at " + std::to_string(cut), {1, 512, 700, 4096});
      } else {
        expect_same(tar.substr(0, cut), "cut at " + std::to_string(cut), {700, 4096});
      }
      if (HasFatalFailure()) return;
    }
  }
}

TEST(PlainPath, EveryDamagedHeaderByteReadsAsLibarchiveReadsIt) {
  const std::string tar = three_members();
  for (std::size_t at = 0; at < 2048; ++at) {  // a.txt's and a.cls's headers, a.txt's data
    for (unsigned char flip : {0x01, 0x5a, 0x80}) {
      std::string bad = tar;
      bad[at] = static_cast<char>(bad[at] ^ flip);
      expect_same(bad, "byte " + std::to_string(at) + " ^ " + std::to_string(flip), {700, 4096});
      // The same damage with the checksum mended: a header the plain path must judge itself.
      if (at / 512 != 1) {  // headers: a.txt's at 0, a.cls's at 1024, b.txt's at 1536
        const std::size_t block = at / 512 * 512;
        bad.replace(block, 512, with_checksum(bad.substr(block, 512)));
        expect_same(bad,
                    "byte " + std::to_string(at) + " ^ " + std::to_string(flip) +
                        " with its checksum mended",
                    {700, 4096});
      }
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace wds
