// NumPy .npy fields (wds::parse_npy), read from shards as they come.
//
// Input: the .npy file. Checks: no crash, out-of-bounds read, UB or leak, no allocation beyond
// -malloc_limit_mb (the header's shape is checked against the data before any), errors are
// wds::Error; the zero-copy path (Bytes&&) and the copying one (span) give the same tensor; a
// tensor read writes back (write_npy) to a file that reads as the same tensor.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "wds/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> bytes = wds_fuzz::as_bytes(data, size);
  wds::Tensor copied;
  try {
    copied = wds::parse_npy(bytes, "fuzz.tar", "x.npy");
  } catch (const wds::Error&) {
  }
  try {
    wds::Tensor adopted = wds::parse_npy(wds::Bytes::copy_of(bytes), "fuzz.tar", "x.npy");
    wds_fuzz::check(copied.defined() && adopted == copied, "both parse_npy overloads agree");
  } catch (const wds::Error&) {
    wds_fuzz::check(!copied.defined(), "both parse_npy overloads refuse the same files");
    return 0;
  }
  wds::Tensor again = wds::parse_npy(wds::write_npy(copied));
  wds_fuzz::check(again == copied, "write_npy then parse_npy round-trips");
  return 0;
}
