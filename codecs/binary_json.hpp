// MessagePack and CBOR documents as wds::Json (private to codecs/): what decode() makes of
// "mp msg" and "cbor" fields, and what encode writes under "mp msg msgpack" and "cbor".
//
//   Json j = detail::parse_binary_json(bytes.span(), detail::BinaryJson::msgpack);
//   Bytes b = detail::write_binary_json(j, detail::BinaryJson::cbor);
//
// Reading is strict: one whole document, nothing after it; map keys must be strings (JSON's
// objects), strings valid UTF-8 (as Python's msgpack.unpackb and cbor.loads decode them);
// binary values become JSON binary values (bytes in Python); CBOR tags are refused. Arrays and
// maps nest at most kMaxBinaryJsonDepth levels: deeper documents would overflow the stack of
// the recursive reader. Each declared length is only read as far as bytes are left, so a lying
// length costs no allocation.
//
// Errors: corrupt_data wds::Error with the cause ("bad msgpack: ..."); the caller names the member.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <span>

#include "wds/bytes.hpp"
#include "wds/value.hpp"

namespace wds::detail {

enum class BinaryJson { msgpack, cbor };

inline constexpr std::size_t kMaxBinaryJsonDepth = 512;

Json parse_binary_json(std::span<const std::byte> data, BinaryJson format);
Bytes write_binary_json(const Json& value, BinaryJson format);

}  // namespace wds::detail
