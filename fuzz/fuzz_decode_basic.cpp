// The basic field decoders (wds::decode_basic: text, integers, JSON, .npy) and, through
// decode_sample, field decompression (".gz", ".xz", ".bz2", ".zst" fields, nested too).
//
// Input: one byte choosing the field name (kExts), then the field's bytes. Decompression is
// limited to 64 MiB (DecodeOptions::max_decompressed_size; the default is 1 GiB), so that a
// bomb ends quickly in an error. Checks: no crash, UB or leak, no allocation beyond
// -malloc_limit_mb and no run beyond -timeout (decompression stops at its limit rather than
// growing a buffer without bound), decode_basic's errors are wds::Error (decode_sample wraps
// other exceptions itself, so only decode_basic shows them).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "wds/decode.hpp"
#include "wds/sample.hpp"
#include "wds/value.hpp"

namespace {

constexpr std::string_view kExts[] = {
    "txt",    "text",   "transcript", "cls",     "cls2",      "index",      "inx",    "id",
    "json",   "jsn",    "npy",        "bin",     "txt.gz",    "json.gz",    "npy.gz", "cls.gz",
    "txt.xz", "npy.xz", "json.bz2",   "cls.zst", "txt.gz.gz", "npy.zst.gz", "gz",     "bin.gz",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string ext(kExts[data[0] % std::size(kExts)]);
  std::span<const std::byte> bytes = wds_fuzz::as_bytes(data + 1, size - 1);
  try {
    wds::Bytes field = wds::Bytes::copy_of(bytes);
    (void)wds::decode_basic(ext, field);
  } catch (const wds::Error&) {
  }
  try {
    wds::Sample sample("key");
    sample.add(ext, wds::Bytes::copy_of(bytes));
    wds::DecodedSample decoded(std::move(sample));
    wds::DecodeOptions options;
    options.max_decompressed_size = std::size_t{64} << 20;
    wds::decode_sample(decoded, {}, options);
  } catch (const wds::Error&) {
  }
  return 0;
}
