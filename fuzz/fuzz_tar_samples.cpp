// Tar shard bytes to samples (ShardSamples over TarReader and libarchive): plain tar, and the
// compressed shards libarchive recognises by content (.tar.gz, .tar.xz, ... seeds).
//
// Input: one control byte (chunk size of the source and whether its size is known, see
// fuzz_common.hpp), then the shard. Checks: no crash, UB or leak, no allocation beyond
// -malloc_limit_mb (a member's declared size must not be allocated up front), errors are
// wds::Error naming the shard's URL; every sample has a key, fields whose extensions are
// lowercase and distinct, and starts after the previous sample. And TarReader reads the shard
// to the same entries, bytes and error whether it parses plain headers itself or leaves every
// header to libarchive (lib/tar/reader.cpp).
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <string>

#include "fuzz_common.hpp"
#include "lib/tar/format.hpp"
#include "wds/tar_reader.hpp"
#include "wds/tar_samples.hpp"

namespace {

// What a TarReader makes of the shard: its entries (data hashed), then its error, if any.
std::string read_tar(const std::string& url, std::uint8_t control, std::span<const std::byte> bytes,
                     bool libarchive_alone) {
  wds::TarReader reader(wds_fuzz::source_from(url, control, bytes));
  if (libarchive_alone) wds::detail::TarReaderAccess::read_every_header_with_libarchive(reader);
  std::string out;
  std::byte piece[4096];
  try {
    while (const wds::TarEntry* e = reader.next()) {
      out += e->name + ' ' + std::to_string(static_cast<int>(e->type)) + ' ' +
             std::to_string(e->size) + " @" + std::to_string(e->offset) +
             (e->size_verified ? " v" : "") + '\n';
      if (e->type != wds::EntryType::file || e->size > (1 << 20)) continue;  // skipped
      std::uint64_t hash = 1469598103934665603ULL, left = e->size;
      while (left > 0) {
        const std::size_t n = left < sizeof piece ? static_cast<std::size_t>(left) : sizeof piece;
        reader.read_data(std::span(piece, n));
        for (std::size_t i = 0; i < n; ++i) {
          hash = (hash ^ static_cast<std::uint8_t>(piece[i])) * 1099511628211ULL;
        }
        left -= n;
      }
      out += std::to_string(hash) + '\n';
    }
  } catch (const wds::Error& e) {
    std::string cause = e.cause();
    // libarchive counts the bytes a skip needed from where it last consumed, which depends on
    // its buffering; the plain path from where the skip starts (tests/lib/tar/plain_headers_test).
    const std::size_t at = cause.find("Truncated input file (needed ");
    if (at != std::string::npos) cause.erase(at + 21, cause.find(')', at) - (at + 21));
    out += "error " + std::to_string(static_cast<int>(e.code())) + " '" + e.member() + "' " + cause;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string url = "fuzz.tar";
  auto source = wds_fuzz::source_from(url, data[0], wds_fuzz::as_bytes(data + 1, size - 1));
  try {
    wds::ShardSamples shard(std::move(source));
    std::optional<std::uint64_t> last_offset;
    while (std::optional<wds::Sample> s = shard.next()) {
      wds_fuzz::check(!s->key().empty(), "a sample has a key");
      wds_fuzz::check(s->url() == url, "a sample names its shard");
      wds_fuzz::check(!last_offset || s->offset() > *last_offset, "samples start in order");
      last_offset = s->offset();
      std::set<std::string> exts;
      for (const wds::Field& f : s->fields()) {
        for (char c : f.ext) {
          wds_fuzz::check(!std::isupper(static_cast<unsigned char>(c)), "extensions lowercased");
        }
        wds_fuzz::check(exts.insert(f.ext).second, "extensions distinct in a sample");
      }
    }
  } catch (const wds::Error& e) {
    wds_fuzz::check(e.url() == url, "a shard's error names its URL");
  }
  const std::span<const std::byte> bytes = wds_fuzz::as_bytes(data + 1, size - 1);
  const std::string plain = read_tar(url, data[0], bytes, false);
  const std::string alone = read_tar(url, data[0], bytes, true);
  if (plain != alone) {
    std::fprintf(stderr, "plain path:\n%s\nlibarchive alone:\n%s\n", plain.c_str(), alone.c_str());
    wds_fuzz::fail("the plain path reads a tar as libarchive does");
  }
  return 0;
}
