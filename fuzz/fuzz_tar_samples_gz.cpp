// Gzip-compressed shards: the fuzzer's bytes are a tar, compressed here (so mutations reach the
// tar layer through a valid gzip stream) and optionally cut short (a .tar.gz missing its trailer
// or its last deflate blocks, as a truncated download leaves it).
//
// Input: a control byte (the source's chunking, fuzz_common.hpp), a byte whose low 4 bits are
// how many bytes to cut off the end of the gzip stream, then the tar. Checks: no crash, UB or
// leak, errors are wds::Error naming the URL; the complete .tar.gz yields exactly what the plain
// tar yields (the same samples, and an error if and only if the plain tar has one); a cut one
// yields a prefix of those samples.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "wds/tar_samples.hpp"

namespace {

struct Outcome {
  std::vector<wds::Sample> samples;
  bool failed = false;
};

Outcome read_all(std::unique_ptr<wds::ByteSource> source, const std::string& url) {
  Outcome out;
  try {
    wds::ShardSamples shard(std::move(source));
    while (std::optional<wds::Sample> s = shard.next()) out.samples.push_back(std::move(*s));
  } catch (const wds::Error& e) {
    wds_fuzz::check(e.url() == url, "a shard's error names its URL");
    out.failed = true;
  }
  return out;
}

bool same_sample(const wds::Sample& a, const wds::Sample& b) {
  if (a.key() != b.key() || a.offset() != b.offset() || a.fields().size() != b.fields().size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.fields().size(); ++i) {
    if (a.fields()[i].ext != b.fields()[i].ext || a.fields()[i].data != b.fields()[i].data) {
      return false;
    }
  }
  return true;
}

std::vector<std::byte> gzip(std::span<const std::byte> in) {
  z_stream z{};
  // 15 + 16: a gzip wrapper (header and CRC-32/size trailer) rather than zlib's.
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    wds_fuzz::fail("deflateInit2");
  }
  std::vector<std::byte> out(deflateBound(&z, in.size()) + 32);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) wds_fuzz::fail("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::string url = "fuzz.tar.gz";
  std::span<const std::byte> tar = wds_fuzz::as_bytes(data + 2, size - 2);
  std::vector<std::byte> gz = gzip(tar);
  std::size_t cut = std::min<std::size_t>(data[1] & 0x0f, gz.size());
  gz.resize(gz.size() - cut);

  Outcome plain = read_all(wds_fuzz::source_from("fuzz.tar.gz", data[0], tar), url);
  Outcome packed = read_all(wds_fuzz::source_from(url, data[0], gz), url);
  wds_fuzz::check(packed.samples.size() <= plain.samples.size(),
                  "a .tar.gz yields no more samples than its tar");
  for (std::size_t i = 0; i < packed.samples.size(); ++i) {
    wds_fuzz::check(same_sample(packed.samples[i], plain.samples[i]),
                    "a .tar.gz yields the samples of its tar");
  }
  if (cut == 0) {
    wds_fuzz::check(packed.samples.size() == plain.samples.size() && packed.failed == plain.failed,
                    "a complete .tar.gz reads as its tar");
  }
  return 0;
}
