// wds/random.hpp: the library's random number generator, and how seeds are derived.
//
// Every random choice in wds (shard order, shuffle buffers, resampling, samplers) draws from an
// Rng seeded by derive_seed(user_seed, {purpose, epoch, rank, worker}). Both are specified here
// bit for bit, so the same configuration gives the same sequence on every run and machine
// (std::uniform_int_distribution, by contrast, differs between standard libraries).
//
//   wds::Rng rng(wds::derive_seed(seed, {wds::seed_purpose::sample_shuffle, epoch, rank, worker}));
//   std::uint64_t k = rng.below(10);     // uniform in [0, 10)
//   rng.shuffle(v.begin(), v.end());      // Fisher-Yates
//
// The generator is PCG32 (O'Neill's PCG-XSH-RR, 64-bit state, 32-bit output); its whole state
// is two 64-bit words (state()). below() uses Lemire's unbiased multiply-and-reject method on
// 64-bit draws (two outputs, high word first). derive_seed chains SplitMix64 over its inputs.
//
// Thread safety: an Rng is a value; use one per thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>

#include "wds/error.hpp"
#include "wds/state.hpp"

namespace wds {

// g++'s 128-bit integer, named so -Wpedantic accepts it.
__extension__ typedef unsigned __int128 uint128_t;

class Rng {
 public:
  struct State {
    std::uint64_t state = 0;
    std::uint64_t inc = 1;  // odd
    friend bool operator==(const State&, const State&) = default;
  };

  // PCG's reference seeding: stream selects one of 2^63 independent sequences.
  explicit Rng(std::uint64_t seed = 0, std::uint64_t stream = 0) {
    s_.state = 0;
    s_.inc = (stream << 1) | 1u;
    next_u32();
    s_.state += seed;
    next_u32();
  }

  std::uint32_t next_u32() {
    std::uint64_t old = s_.state;
    s_.state = old * 6364136223846793005ULL + s_.inc;
    auto xorshifted = static_cast<std::uint32_t>(((old >> 18u) ^ old) >> 27u);
    auto rot = static_cast<std::uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
  }

  std::uint64_t next_u64() {
    std::uint64_t hi = next_u32();
    return (hi << 32) | next_u32();
  }

  // Uniform in [0, n); n must be > 0 (below(0) returns 0).
  std::uint64_t below(std::uint64_t n) {
    uint128_t m = static_cast<uint128_t>(next_u64()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<uint128_t>(next_u64()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  // Fisher-Yates from the back: for i = n-1 .. 1, swap element i with element below(i + 1).
  template <class RandomIt>
  void shuffle(RandomIt first, RandomIt last) {
    auto n = static_cast<std::uint64_t>(std::distance(first, last));
    for (std::uint64_t i = n; i > 1; --i) {
      using std::swap;
      swap(first[static_cast<std::ptrdiff_t>(i - 1)], first[static_cast<std::ptrdiff_t>(below(i))]);
    }
  }

  State state() const noexcept { return s_; }
  void set_state(State s) noexcept { s_ = s; }

 private:
  State s_;
};

// An Rng in a pipeline's resume state (wds/state.hpp): its two words.
inline void save_item(StateWriter& out, const Rng& rng) {
  out.put(rng.state().state);
  out.put(rng.state().inc);
}
// Restored right after start() seeded `rng`: the increment (the generator's stream) never
// changes after seeding, so a saved one that differs is refused. The state word can be any
// value a draw leads to: only the state's checksum protects it.
inline void load_item(StateReader& in, Rng& rng) {
  Rng::State s;
  s.state = in.get_u64();
  s.inc = in.get_u64();
  if (s.inc != rng.state().inc) {
    throw Error::invalid_argument("pipeline state: a random generator's increment " +
                                  std::to_string(s.inc) + " is not the one its seed gives (" +
                                  std::to_string(rng.state().inc) + "): malformed state");
  }
  rng.set_state(s);
}

// SplitMix64's finaliser: a bijective mix of 64 bits.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A seed for one purpose: mix64 chained over the user seed and each part in order.
constexpr std::uint64_t derive_seed(std::uint64_t user_seed,
                                    std::initializer_list<std::uint64_t> parts) {
  std::uint64_t s = mix64(user_seed);
  for (std::uint64_t p : parts) s = mix64(s ^ p);
  return s;
}

// The first part of every derived seed names what it is for, so that two stages of one
// pipeline never draw the same sequence.
namespace seed_purpose {
inline constexpr std::uint64_t shard_order = 1;     // global shard shuffle before the split
inline constexpr std::uint64_t shard_shuffle = 2;   // shuffle buffer over shard URLs
inline constexpr std::uint64_t sample_shuffle = 3;  // shuffle buffer over samples
inline constexpr std::uint64_t resample = 4;        // ResampledShards
inline constexpr std::uint64_t replicate = 5;       // the replicate policy's per-rank order
inline constexpr std::uint64_t sampler = 6;         // DistributedSampler
inline constexpr std::uint64_t image = 7;           // an image's crop and flip (image_seed)
}  // namespace seed_purpose

}  // namespace wds
