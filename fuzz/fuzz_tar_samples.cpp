// Tar shard bytes to samples (ShardSamples over TarReader and libarchive): plain tar, and the
// compressed shards libarchive recognises by content (.tar.gz, .tar.xz, ... seeds).
//
// Input: one control byte (chunk size of the source and whether its size is known, see
// fuzz_common.hpp), then the shard. Checks: no crash, UB or leak, no allocation beyond
// -malloc_limit_mb (a member's declared size must not be allocated up front), errors are
// wds::Error naming the shard's URL; every sample has a key, fields whose extensions are
// lowercase and distinct, and starts after the previous sample.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "fuzz_common.hpp"
#include "wds/tar_samples.hpp"

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
  return 0;
}
