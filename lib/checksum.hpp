// A fast non-cryptographic 64-bit checksum for the shard cache (lib/storage/cache.cpp): it guards cached
// bytes against a disk's damage (truncation, flipped bytes), not against an adversary. Eight
// 64-bit lanes take one 64-byte stripe at a time: each lane adds the product of the two 32-bit
// halves of its word XORed with a key that changes with the stripe's position (so moved stripes
// change the sum), and its neighbour adds the word itself (so no word is lost to a zero
// product); the lanes and the length are then mixed into one value. An AVX2 path (chosen at run
// time) and the portable one compute the same value; either runs at memory speed, far faster
// than zlib's crc32 (bench/README.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace wds {

class Checksum {
 public:
  // Adds bytes; any split of the same bytes into calls gives the same value.
  void update(std::span<const std::byte> bytes) noexcept;
  // The checksum of everything added so far (the state is left as it is).
  std::uint64_t value() const noexcept;
  void reset() noexcept { *this = Checksum(); }

  // The checksum of `bytes` in one go.
  static std::uint64_t of(std::span<const std::byte> bytes) noexcept;
  // Which implementation runs: "avx512", "avx2" or "portable" (for the benchmark's note).
  static const char* implementation() noexcept;
  // The portable implementation's value, whatever runs (for tests: both must agree).
  static std::uint64_t portable(std::span<const std::byte> bytes) noexcept;

  static constexpr std::size_t kStripe = 64;

 private:
  std::uint64_t acc_[8] = {0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0,
                           0x082EFA98EC4E6C89, 0x452821E638D01377, 0xBE5466CF34E90C6C,
                           0xC0AC29B7C97C50DD, 0x3F84D5B5B5470917};
  std::uint64_t stripes_ = 0;  // stripes taken so far: the position key
  std::uint64_t length_ = 0;
  std::byte tail_[kStripe] = {};  // bytes of an unfinished stripe
  std::size_t tail_size_ = 0;
};

}  // namespace wds
