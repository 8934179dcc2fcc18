// tenbin fields ("ten", "tb"; wds/tenbin.hpp), read from shards as they come.
//
// Input: the tenbin buffer. Checks: no crash, out-of-bounds read, UB or leak, no allocation
// beyond -malloc_limit_mb (every length and shape is checked against the bytes left before
// any), errors are wds::Error; the zero-copy path (Bytes&&) and the copying one (span) give the
// same tensors; tensors read write back (write_tenbin) to a buffer that reads as the same.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_common.hpp"
#include "wds/tenbin.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> bytes = wds_fuzz::as_bytes(data, size);
  wds::Tuple copied;
  bool copied_ok = true;
  try {
    copied = wds::parse_tenbin(bytes, "fuzz.tar", "x.ten");
  } catch (const wds::Error& e) {
    wds_fuzz::check(e.code() == wds::ErrorCode::corrupt_data, "a bad buffer is corrupt_data");
    copied_ok = false;
  }
  wds::Tuple adopted;
  try {
    adopted = wds::parse_tenbin(wds::Bytes::copy_of(bytes), "fuzz.tar", "x.ten");
    wds_fuzz::check(copied_ok, "both parse_tenbin overloads refuse the same buffers");
  } catch (const wds::Error&) {
    wds_fuzz::check(!copied_ok, "both parse_tenbin overloads accept the same buffers");
    return 0;
  }
  wds_fuzz::check(adopted.size() == copied.size(), "both overloads give as many arrays");
  std::vector<wds::Tensor> tensors;
  for (std::size_t i = 0; i < copied.size(); ++i) {
    wds_fuzz::check(adopted[i].get<wds::Tensor>() == copied[i].get<wds::Tensor>(),
                    "both parse_tenbin overloads agree");
    tensors.push_back(copied[i].get<wds::Tensor>());
  }
  // More than 9 dimensions read but are not written (webdataset's writer's limit).
  for (const wds::Tensor& t : tensors) {
    if (t.ndim() > 9) return 0;
  }
  const wds::Tuple again = wds::parse_tenbin(wds::write_tenbin(tensors));
  wds_fuzz::check(again.size() == tensors.size(), "write_tenbin then parse_tenbin keeps the count");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    wds_fuzz::check(again[i].get<wds::Tensor>() == tensors[i], "write_tenbin round-trips");
  }
  return 0;
}
