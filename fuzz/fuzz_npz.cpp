// NumPy .npz fields (wds::parse_npz: a zip of .npy members, read with libarchive).
//
// Input: the .npz file. Checks: no crash, out-of-bounds read, UB or leak, no allocation beyond
// -malloc_limit_mb (members decompress to at most the limit given, 16 MiB here, and are sized
// from what the input could expand to), errors are wds::Error naming the member; named arrays
// read write back (write_npz) to a file that reads as the same.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "wds/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  wds::Dict arrays;
  try {
    arrays =
        wds::parse_npz(wds_fuzz::as_bytes(data, size), std::size_t{16} << 20, "fuzz.tar", "x.npz");
  } catch (const wds::Error& e) {
    wds_fuzz::check(e.code() == wds::ErrorCode::corrupt_data, "a bad archive is corrupt_data");
    wds_fuzz::check(e.member() == "x.npz", "the error names the member");
    return 0;
  }
  for (const wds::DictItem& item : arrays) {
    if (!item.value.is<wds::Tensor>() || item.name.empty()) return 0;  // kept as bytes
    // write_npz refuses a name with a backslash and no '/': it would read back with '/'.
    if (item.name.find('\\') != std::string::npos && item.name.find('/') == std::string::npos) {
      return 0;
    }
  }
  const wds::Bytes again = wds::write_npz(arrays);
  const wds::Dict back = wds::parse_npz(again.span());
  wds_fuzz::check(back.size() == arrays.size(), "write_npz then parse_npz keeps the arrays");
  for (std::size_t i = 0; i < back.size(); ++i) {
    wds_fuzz::check(back[i].name == arrays[i].name, "write_npz keeps the names");
    wds_fuzz::check(back[i].value.get<wds::Tensor>() == arrays[i].value.get<wds::Tensor>(),
                    "write_npz round-trips");
  }
  return 0;
}
