// Reading one sample through an index (wds::read_indexed_sample): bounded reads that take in the
// tar header(s) in front of each member's data and check them against the index. The shard may
// have been replaced under a valid index, so its headers (pax, GNU long names, base-256 sizes)
// are hostile; so may the index be.
//
// Input: index text, a NUL byte, then the shard. The shard is served under the URL scheme
// "fuzzmem:" (ranged reads, as a file or an HTTP Range gives them). Every sample of the index is
// read, then every sample of the index build_index makes of the shard. Checks: no crash,
// out-of-bounds read, UB or leak, no allocation beyond -malloc_limit_mb, errors are wds::Error;
// a sample read has the key its entry names and one field per member.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "wds/backend.hpp"
#include "wds/index.hpp"
#include "wds/source.hpp"

namespace {

// The current input's shard; the scheme's factory serves ranges of it.
std::span<const std::byte> g_shard;

std::unique_ptr<wds::ByteSource> open_fuzzmem(const std::string& url,
                                              const wds::OpenOptions& options) {
  std::size_t begin =
      static_cast<std::size_t>(std::min<std::uint64_t>(options.offset, g_shard.size()));
  std::size_t end = g_shard.size();
  if (options.length)
    end = static_cast<std::size_t>(std::min<std::uint64_t>(end, begin + *options.length));
  return std::make_unique<wds_fuzz::ChunkSource>(url, g_shard.subspan(begin, end - begin), 4096,
                                                 true);
}

void read_samples(const wds::ShardIndex& index, const std::string& url) {
  std::size_t n = 0;
  for (const wds::IndexedSample& entry : index.samples) {
    if (++n > 16) break;
    try {
      wds::Sample s = wds::read_indexed_sample(url, entry);
      wds_fuzz::check(entry.key.empty() || s.key() == entry.key, "the sample has its entry's key");
      wds_fuzz::check(s.fields().size() == entry.members.size(), "one field per indexed member");
    } catch (const wds::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  wds::register_backend({.schemes = {"fuzzmem"}, .open = open_fuzzmem});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view all = wds_fuzz::as_text(data, size);
  std::size_t nul = all.find('\0');
  if (nul == std::string_view::npos) return 0;
  g_shard = wds_fuzz::as_bytes(data + nul + 1, size - nul - 1);
  const std::string url = "fuzzmem:shard.tar";
  try {
    read_samples(wds::parse_index(all.substr(0, nul), "fuzz.idx"), url);
  } catch (const wds::Error&) {
  }
  try {
    read_samples(wds::build_index(url), url);
  } catch (const wds::Error&) {
  }
  return 0;
}
