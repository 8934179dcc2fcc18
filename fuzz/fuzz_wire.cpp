// The data service's batch messages (wds::wire::decode), as a trainer or a server receives them.
//
// Input: a control byte (bits 0-3: how many data frames; bit 7: misalign them by one byte), each
// data frame as a u16 little-endian length and its bytes, then the description (frame 0).
// Checks: no crash, out-of-bounds read, UB or leak, no allocation beyond -malloc_limit_mb,
// errors are wds::Error; a record that decodes encodes again (both encoders) into a message
// that decodes to the same values.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_common.hpp"
#include "service/wire.hpp"

namespace {

using wds::wire::Frame;

// A frame in a buffer of its own, so that ASan sees a read past its end.
Frame own_frame(std::span<const std::byte> bytes, std::size_t offset) {
  auto buffer = std::make_shared<std::vector<std::byte>>(bytes.size() + offset);
  if (!bytes.empty()) std::memcpy(buffer->data() + offset, bytes.data(), bytes.size());
  return Frame{std::span<const std::byte>(buffer->data() + offset, bytes.size()), buffer};
}

bool same(const wds::Value& a, const wds::Value& b) {
  if (a.variant().index() != b.variant().index()) return false;
  if (a.is_none()) return true;
  if (auto* x = a.get_if<wds::Bytes>()) return *x == b.get<wds::Bytes>();
  if (auto* x = a.get_if<std::string>()) return *x == b.get<std::string>();
  if (auto* x = a.get_if<std::int64_t>()) return *x == b.get<std::int64_t>();
  if (auto* x = a.get_if<double>()) {
    return std::bit_cast<std::uint64_t>(*x) == std::bit_cast<std::uint64_t>(b.get<double>());
  }
  if (auto* x = a.get_if<wds::Json>()) return *x == b.get<wds::Json>();
  if (auto* x = a.get_if<wds::Tensor>()) return *x == b.get<wds::Tensor>();
  const wds::Tuple& ta = a.get<wds::Tuple>();
  const wds::Tuple& tb = b.get<wds::Tuple>();
  if (ta.size() != tb.size()) return false;
  for (std::size_t i = 0; i < ta.size(); ++i) {
    if (!same(ta[i], tb[i])) return false;
  }
  return true;
}

bool same(const wds::wire::Record& a, const wds::wire::Record& b) {
  if (a.names != b.names || a.values.size() != b.values.size()) return false;
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    if (!same(a.values[i], b.values[i])) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in = wds_fuzz::as_bytes(data, size);
  if (in.empty()) return 0;
  const std::size_t count = data[0] & 15;
  const std::size_t offset = (data[0] & 0x80) ? 1 : 0;
  std::size_t pos = 1;
  std::vector<Frame> frames(1);
  for (std::size_t i = 0; i < count && pos + 2 <= size; ++i) {
    const std::size_t n =
        std::min<std::size_t>(data[pos] | (std::size_t{data[pos + 1]} << 8), size - pos - 2);
    frames.push_back(own_frame(in.subspan(pos + 2, n), offset));
    pos += 2 + n;
  }
  frames[0] = own_frame(in.subspan(pos), 0);

  wds::wire::Record record;
  try {
    record = wds::wire::decode(frames, "fuzz");
  } catch (const wds::Error&) {
    return 0;
  }
  // What decoded is a valid record: it encodes, and decodes back to the same values.
  const wds::wire::Record again = wds::wire::decode(wds::wire::encode(record), "fuzz");
  wds_fuzz::check(same(again, record), "encode(const Record&) then decode round-trips");
  wds::wire::Record copy = again;
  const std::vector<Frame> moved = wds::wire::encode(std::move(copy));
  wds_fuzz::check(same(wds::wire::decode(moved, "fuzz"), record),
                  "encode(Record&&) then decode round-trips");
  return 0;
}
