// The data service's batch format: how a batch (a record of named or unnamed values) travels as
// the frames of one ZeroMQ multipart message.
//
// Frame 0 describes the record (magic, version, the values' tree, small values inline); every
// tensor, and every bytes value of kInlineLimit bytes or more, travels as a frame of its own,
// sent from the value's memory; a received tensor keeps the frame's memory (no copy on either
// side, unless a received frame is not aligned for its dtype).
//
// decode() trusts nothing: a truncated, malformed, oversized or wrong-version description, a
// frame index out of range or used twice, a frame whose size is not what its tensor needs, a
// nesting deeper than kMaxDepth: each is a corrupt_data Error naming `where` and what was wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wds/value.hpp"

namespace wds::wire {

inline constexpr std::uint8_t kRecordVersion = 1;
inline constexpr std::size_t kInlineLimit = 4096;
inline constexpr std::size_t kMaxDepth = 64;

// Bytes and whatever keeps them alive: a value's storage when sending, a received message when
// receiving.
struct Frame {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;
};

// What one batch holds: its values, and optionally a name for each (a DecodedSample's fields, or
// a Tuple's ServerOptions::names).
struct Record {
  std::vector<std::string> names;  // empty, or one per value
  Tuple values;
};

// The frames of `record`: the description first, then the data frames, borrowing the values'
// memory (kept alive through Frame::owner; Bytes and Tensor storage is shared, not copied).
std::vector<Frame> encode(const Record& record);
// Moves `record`'s values in, so the frames own what they borrow without copies.
std::vector<Frame> encode(Record&& record);

// The record in `frames` (description first). Tensors point into the frames' memory (kept alive
// by their owners); bytes values are copied (Bytes owns its memory). Throws corrupt_data naming
// `where`.
Record decode(std::span<const Frame> frames, std::string_view where);

// Conversions between what a pipeline yields and a record.
Record to_record(Tuple&& tuple, const std::vector<std::string>& names);
Record to_record(DecodedSample&& sample);
// A Tuple takes the values in order (names are dropped); a DecodedSample takes the names as
// fields (unnamed values are called "0", "1", ...) and its key from a string "__key__".
void from_record(Record&& record, Tuple& out);
void from_record(Record&& record, DecodedSample& out);

}  // namespace wds::wire
