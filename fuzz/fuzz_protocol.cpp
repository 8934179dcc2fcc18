// The data service's control messages (service/protocol.hpp), as a server receives them from
// any peer that connects and a trainer from its producers: the header, start, welcome, error,
// credit, release and shared-memory table decoders.
//
// Input: a selector byte (which decoder, mod 7), then the frame's bytes, in a buffer of its own.
// Checks: no crash, out-of-bounds read, UB or leak, no allocation beyond -malloc_limit_mb,
// errors are wds::Error; what decodes encodes again to bytes that decode to the same encoding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "service/protocol.hpp"

namespace {

namespace p = wds::protocol;

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

// encode(decode(encode(m))) == encode(m): the encoding of what decoded is a fixed point.
template <class Decode>
void round_trip(const std::string& encoded, Decode decode, const char* what) {
  wds_fuzz::check(p::encode(decode(bytes_of(encoded))) == encoded, what);
}

void run(std::uint8_t selector, std::span<const std::byte> in) {
  switch (selector % 7) {
    case 0: {
      const p::Header h = p::decode_header(in, "fuzz");
      if (h.version == p::kProtocolVersion) {
        const std::string again = p::encode_header(h.type, h.generation, h.seq, h.flags);
        wds_fuzz::check(
            again.size() == in.size() && std::memcmp(again.data(), in.data(), in.size()) == 0,
            "a header of this version encodes to the same bytes");
      }
      return;
    }
    case 1: {
      const std::string e = p::encode(p::decode_start(in, "fuzz"));
      round_trip(
          e, [](auto b) { return p::decode_start(b, "fuzz"); }, "start round-trips");
      return;
    }
    case 2: {
      const std::string e = p::encode(p::decode_welcome(in, "fuzz"));
      round_trip(
          e, [](auto b) { return p::decode_welcome(b, "fuzz"); }, "welcome round-trips");
      return;
    }
    case 3: {
      const std::string e = p::encode(p::decode_error(in, "fuzz"));
      round_trip(
          e, [](auto b) { return p::decode_error(b, "fuzz"); }, "error round-trips");
      return;
    }
    case 4: {
      const std::uint64_t n = p::decode_credit(in, "fuzz");
      wds_fuzz::check(p::decode_credit(bytes_of(p::encode_credit(n)), "fuzz") == n,
                      "credit round-trips");
      return;
    }
    case 5: {
      const p::SharedTable t = p::decode_shared_table(in, "fuzz");
      for (const p::SharedFrame& f : t.frames) {
        wds_fuzz::check(
            f.frame > 0 && f.offset <= f.block_bytes && f.length <= f.block_bytes - f.offset,
            "a decoded table's frames lie inside their blocks");
      }
      round_trip(
          p::encode(t), [](auto b) { return p::decode_shared_table(b, "fuzz"); },
          "shared-memory table round-trips");
      return;
    }
    default: {
      const std::vector<std::uint64_t> serials = p::decode_release(in, "fuzz");
      wds_fuzz::check(p::decode_release(bytes_of(p::encode_release(serials)), "fuzz") == serials,
                      "release round-trips");
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The frame in a buffer of exactly its size, so that ASan sees a read past its end.
  std::vector<std::byte> frame(size - 1);
  if (size > 1) std::memcpy(frame.data(), data + 1, size - 1);
  try {
    run(data[0], frame);
  } catch (const wds::Error&) {
  }
  return 0;
}
