// The data service's control messages between a trainer (ZeroMQ DEALER) and a producer (ROUTER).
//
// Every message starts with a header frame of kHeaderSize bytes: magic "WDSS", u16 protocol
// version, u8 type, u8 flags, u64 generation, u64 sequence number (little-endian). A trainer
// bumps its generation each time it (re)starts a producer's stream, and the producer stamps what it
// sends for that stream with it, so the trainer drops whatever was still in flight from before.
//
// clang-format off
//   trainer -> producer                     producer -> trainer
//   start   [header][body: Start]           welcome [header][body: Welcome]
//   credit  [header seq][body: tag]         batch   [header seq][tag][stream state][records...]
//   ping    [header]                        end     [header seq]  (the stream's pass ended)
//   bye     [header]  (the trainer is done) error   [header][body: ErrorReply]
//   shared  [header]  (it can map the       pong    [header]
//                     producer's memory)    who     [header]      (unknown trainer: start)
//   release [header][body: serials]
// clang-format on
//
// Flow control: every batch carries a tag the producer drew at random, and a trainer that takes
// the batch acknowledges it with a credit naming its seq and tag; only that gives the stream room
// for another batch. A trainer cannot acknowledge a batch it has not received (it cannot guess the
// tag), so whatever it sends, the producer never has more batches in flight for it than it
// granted at its start. Version 3: the tag (version 2 acknowledged by seq alone, with a count).
//
// A batch with the flag kShared carries a SharedTable after the stream state: record frames that
// are left empty in the message because their bytes are in the producer's shared memory
// (service/shared_memory.hpp), and the blocks the producer has freed. A trainer releases each
// lent block (once per frame that named it) when it no longer uses it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wds/error.hpp"
#include "wds/service.hpp"

namespace wds::protocol {

inline constexpr std::size_t kHeaderSize = 24;
inline constexpr std::uint16_t kProtocolVersion = kServiceProtocolVersion;

enum class Type : std::uint8_t {
  start = 1,
  credit = 2,
  ping = 3,
  bye = 4,
  shared = 5,
  release = 6,
  welcome = 16,
  batch = 17,
  end = 18,
  error = 19,
  pong = 20,
  who = 21,
};

// Header flags.
inline constexpr std::uint8_t kShared = 1;  // batch: a SharedTable follows the stream state

struct Header {
  std::uint16_t version = 0;
  Type type = Type::ping;
  std::uint8_t flags = 0;
  std::uint64_t generation = 0;
  std::uint64_t seq = 0;
};

// Start (or restart) this trainer's stream.
struct Start {
  int rank = 0;
  int world_size = 1;
  std::uint32_t credits = 1;
  bool continuous = false;  // with_epoch: run pass after pass; else one pass, then end
  std::uint64_t epoch = 0;  // the pipeline's epoch, when there is no state
  std::string token;
  std::optional<std::string> state;  // the stream's position (a Loader state)
};

// How a trainer on the producer's host proves it can map the producer's memory.
struct SharedOffer {
  int pid = 0;
  int fd = -1;
  std::array<std::byte, 16> nonce{};
};

struct Welcome {
  int producer = 0;
  int producers = 1;
  std::optional<SharedOffer> shared;
};

// A record frame whose bytes are in block `serial` (descriptor `fd`, `block_bytes` long) of the
// producer's shared memory, at [offset, offset + length).
struct SharedFrame {
  std::uint32_t frame = 0;  // index among the record frames (0 is the description: never)
  std::uint64_t serial = 0;
  int fd = -1;
  std::uint64_t block_bytes = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

struct SharedTable {
  std::vector<SharedFrame> frames;
  std::vector<std::uint64_t> retired;  // blocks freed: unmap them once unused
};

struct ErrorReply {
  ErrorCode code = ErrorCode::invalid_argument;
  std::string url, member, cause;
};

std::string encode_header(Type type, std::uint64_t generation, std::uint64_t seq = 0,
                          std::uint8_t flags = 0);
// Throws corrupt_data naming `where` if the frame is not a header (the version is not checked:
// the caller answers a wrong version with an error that names both).
Header decode_header(std::span<const std::byte> frame, std::string_view where);

std::string encode(const Start& m);
std::string encode(const Welcome& m);
std::string encode(const ErrorReply& m);
std::string encode_credit(std::uint64_t tag);
std::string encode_tag(std::uint64_t tag);  // a batch's tag frame
std::string encode(const SharedTable& m);
std::string encode_release(std::span<const std::uint64_t> serials);
// Each throws corrupt_data naming `where` for a body that is not one.
Start decode_start(std::span<const std::byte> body, std::string_view where);
Welcome decode_welcome(std::span<const std::byte> body, std::string_view where);
ErrorReply decode_error(std::span<const std::byte> body, std::string_view where);
std::uint64_t decode_credit(std::span<const std::byte> body, std::string_view where);
std::uint64_t decode_tag(std::span<const std::byte> frame, std::string_view where);
SharedTable decode_shared_table(std::span<const std::byte> body, std::string_view where);
std::vector<std::uint64_t> decode_release(std::span<const std::byte> body, std::string_view where);

std::string_view type_name(Type t) noexcept;

}  // namespace wds::protocol
