#include "lib/checksum.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WDS_CHECKSUM_X86 1
#endif

namespace wds {
namespace {

// Per lane: the key at stripe 0 and what it grows by per stripe (odd, so positions differ).
constexpr std::uint64_t kKey[8] = {0xB7E151628AED2A6B, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F,
                                   0x165667B19E3779F9, 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD,
                                   0xC4CEB9FE1A85EC53, 0x27D4EB2F165667C5};
constexpr std::uint64_t kStep[8] = {0x9FB21C651E98DF25, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9,
                                    0x85EBCA77C2B2AE63, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3,
                                    0x589965CC75374CC3, 0x1D8E4E27C47D124F};

std::uint64_t load64(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

// Takes n whole stripes from p, the first at position `s`.
void stripes_portable(std::uint64_t* acc, const std::byte* p, std::size_t n,
                      std::uint64_t s) noexcept {
  std::uint64_t key[8];
  for (int j = 0; j < 8; ++j) key[j] = kKey[j] + s * kStep[j];
  for (std::size_t i = 0; i < n; ++i, p += Checksum::kStripe) {
    std::uint64_t v[8];
    for (int j = 0; j < 8; ++j) v[j] = load64(p + 8 * j);
    for (int j = 0; j < 8; ++j) {
      const std::uint64_t k = v[j] ^ key[j];
      acc[j] += (k & 0xFFFFFFFFu) * (k >> 32) + v[j ^ 1];
      key[j] += kStep[j];
    }
  }
}

#ifdef WDS_CHECKSUM_X86
__attribute__((target("avx2"))) void stripes_avx2(std::uint64_t* acc, const std::byte* p,
                                                  std::size_t n, std::uint64_t s) noexcept {
  std::uint64_t key[8];
  for (int j = 0; j < 8; ++j) key[j] = kKey[j] + s * kStep[j];
    // (no lambda: it would not inherit the target attribute)
#define WDS_LOAD(q) _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))
  __m256i a0 = WDS_LOAD(acc), a1 = WDS_LOAD(acc + 4);
  __m256i k0 = WDS_LOAD(key), k1 = WDS_LOAD(key + 4);
  const __m256i i0 = WDS_LOAD(kStep), i1 = WDS_LOAD(kStep + 4);
  for (std::size_t i = 0; i < n; ++i, p += Checksum::kStripe) {
    const __m256i v0 = WDS_LOAD(p), v1 = WDS_LOAD(p + 32);
    const __m256i x0 = _mm256_xor_si256(v0, k0), x1 = _mm256_xor_si256(v1, k1);
    // lo32 * hi32 of each lane, plus the neighbouring lane's word (64-bit halves swapped
    // within each 128-bit half: lane j gets word j ^ 1).
    const __m256i m0 = _mm256_add_epi64(_mm256_mul_epu32(x0, _mm256_srli_epi64(x0, 32)),
                                        _mm256_shuffle_epi32(v0, 0x4E));
    const __m256i m1 = _mm256_add_epi64(_mm256_mul_epu32(x1, _mm256_srli_epi64(x1, 32)),
                                        _mm256_shuffle_epi32(v1, 0x4E));
    a0 = _mm256_add_epi64(a0, m0);
    a1 = _mm256_add_epi64(a1, m1);
    k0 = _mm256_add_epi64(k0, i0);
    k1 = _mm256_add_epi64(k1, i1);
  }
#undef WDS_LOAD
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc), a0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + 4), a1);
}

// The same with one 512-bit register for the eight lanes: half the instructions. (GCC 12's
// intrinsics headers warn about their own undefined-register idiom.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void stripes_avx512(std::uint64_t* acc, const std::byte* p,
                                                       std::size_t n, std::uint64_t s) noexcept {
  std::uint64_t key[8];
  for (int j = 0; j < 8; ++j) key[j] = kKey[j] + s * kStep[j];
  __m512i a = _mm512_loadu_si512(acc);
  __m512i k = _mm512_loadu_si512(key);
  const __m512i step = _mm512_loadu_si512(kStep);
  for (std::size_t i = 0; i < n; ++i, p += Checksum::kStripe) {
    const __m512i v = _mm512_loadu_si512(p);
    const __m512i x = _mm512_xor_si512(v, k);
    const __m512i m = _mm512_add_epi64(_mm512_mul_epu32(x, _mm512_srli_epi64(x, 32)),
                                       _mm512_shuffle_epi32(v, _MM_PERM_BADC));
    a = _mm512_add_epi64(a, m);
    k = _mm512_add_epi64(k, step);
  }
  _mm512_storeu_si512(acc, a);
}
#pragma GCC diagnostic pop
#endif

using StripesFn = void (*)(std::uint64_t*, const std::byte*, std::size_t, std::uint64_t) noexcept;

StripesFn pick() noexcept {
#if defined(WDS_CHECKSUM_X86) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  __builtin_cpu_init();  // this may run before libgcc's own constructor
  if (__builtin_cpu_supports("avx512f")) return stripes_avx512;
  if (__builtin_cpu_supports("avx2")) return stripes_avx2;
#endif
  return stripes_portable;
}

// On first use, not at static initialisation: another static's constructor may come first.
StripesFn chosen() noexcept {
  static const StripesFn fn = pick();
  return fn;
}
thread_local StripesFn forced = nullptr;  // Checksum::portable's, on its thread only

void stripes(std::uint64_t* acc, const std::byte* p, std::size_t n, std::uint64_t s) noexcept {
  (forced ? forced : chosen())(acc, p, n, s);
}

std::uint64_t fmix64(std::uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCD;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53;
  h ^= h >> 33;
  return h;
}

}  // namespace

void Checksum::update(std::span<const std::byte> bytes) noexcept {
  length_ += bytes.size();
  if (tail_size_ > 0) {
    const std::size_t take = std::min(kStripe - tail_size_, bytes.size());
    std::memcpy(tail_ + tail_size_, bytes.data(), take);
    tail_size_ += take;
    bytes = bytes.subspan(take);
    if (tail_size_ < kStripe) return;
    stripes(acc_, tail_, 1, stripes_++);
    tail_size_ = 0;
  }
  const std::size_t n = bytes.size() / kStripe;
  if (n > 0) {
    stripes(acc_, bytes.data(), n, stripes_);
    stripes_ += n;
    bytes = bytes.subspan(n * kStripe);
  }
  std::memcpy(tail_, bytes.data(), bytes.size());
  tail_size_ = bytes.size();
}

std::uint64_t Checksum::value() const noexcept {
  std::uint64_t acc[8];
  std::memcpy(acc, acc_, sizeof acc);
  if (tail_size_ > 0) {  // the last stripe, padded with zeros (the length tells them apart)
    std::byte last[kStripe] = {};
    std::memcpy(last, tail_, tail_size_);
    stripes(acc, last, 1, stripes_);
  }
  std::uint64_t h = length_ * 0x9E3779B97F4A7C15;
  for (int j = 0; j < 8; ++j) {
    h = (h ^ fmix64(acc[j] + static_cast<std::uint64_t>(j))) * 0xC2B2AE3D27D4EB4F;
    h = (h << 31) | (h >> 33);
  }
  return fmix64(h);
}

std::uint64_t Checksum::of(std::span<const std::byte> bytes) noexcept {
  Checksum c;
  c.update(bytes);
  return c.value();
}

const char* Checksum::implementation() noexcept {
#ifdef WDS_CHECKSUM_X86
  if (chosen() == stripes_avx512) return "avx512";
  if (chosen() == stripes_avx2) return "avx2";
#endif
  return "portable";
}

std::uint64_t Checksum::portable(std::span<const std::byte> bytes) noexcept {
  forced = stripes_portable;
  const std::uint64_t v = of(bytes);
  forced = nullptr;
  return v;
}

}  // namespace wds
