// Bytes' storage: blocks from 4 KiB to 64 MiB are kept when freed, in size classes, for the next
// Bytes of their class; smaller and larger ones go straight to and from the heap.
//
// A block starts with a 16-byte header holding its class and its count of owners: one, unless
// Bytes share it (share_bytes), which hold the block's start in their deleter. Classes are eight
// per power of two (4, 4.5, 5, ... 7.5, 8, 9, 10 KiB, ...): a block is at most an eighth larger
// than asked for, and its pages beyond the bytes used are not touched by the Bytes that takes it.
// Idle blocks of all classes together stay under kMaxIdle; a block freed beyond it goes back to
// the heap. One mutex per class: a block is taken and given back once per field, so the locks are
// cold next to the bytes copied into it. All of them are held across fork().
//
// Under AddressSanitizer idle blocks are poisoned and a block is addressable only up to the size
// its Bytes asked for: a read of freed Bytes, or past their end, is still reported (a freed
// block taken again by another Bytes is not, as with any reuse after ASan's quarantine).
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "lib/fork.hpp"
#include "wds/bytes.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define WDS_BYTES_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WDS_BYTES_ASAN 1
#endif
#endif
#ifdef WDS_BYTES_ASAN
#include <sanitizer/asan_interface.h>
#define WDS_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define WDS_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define WDS_POISON(p, n) ((void)(p), (void)(n))
#define WDS_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace wds {
namespace detail {
namespace {

constexpr std::size_t kHeader = 16;
constexpr int kMinShift = 12;  // 4 KiB
constexpr int kMaxShift = 26;  // 64 MiB
constexpr std::size_t kMinPooled = std::size_t{1} << kMinShift;
constexpr std::size_t kMaxPooled = std::size_t{1} << kMaxShift;
constexpr std::uint32_t kUnpooled = 0xffffffff;
constexpr int kSubShift = 3;  // 2^3 classes per power of two
constexpr int kSub = 1 << kSubShift;
// Class 0 is 4 KiB; then kSub classes for each power of two up to 64 MiB.
constexpr int kClasses = 1 + kSub * (kMaxShift - kMinShift);
constexpr std::size_t kMaxIdle = std::size_t{16} << 20;

// The smallest class holding `size` bytes (kMinPooled <= size <= kMaxPooled).
int class_of(std::size_t size) {
  if (size <= kMinPooled) return 0;
  const int p = std::bit_width(size - 1) - 1;  // 2^p < size <= 2^(p+1)
  const std::size_t step = std::size_t{1} << (p - kSubShift);
  const auto j = static_cast<int>((size - (std::size_t{1} << p) + step - 1) / step);  // 1..kSub
  return kSub * (p - kMinShift) + j;
}

std::size_t class_size(int c) {
  if (c == 0) return kMinPooled;
  const int p = kMinShift + (c - 1) / kSub;
  const int j = (c - 1) % kSub + 1;
  return (std::size_t{1} << p) + static_cast<std::size_t>(j) * (std::size_t{1} << (p - kSubShift));
}

struct Idle {
  std::mutex mu;
  std::vector<std::byte*> blocks;  // each a header and class_size() bytes
};

struct Recycler {
  Idle classes[kClasses];
  std::atomic<std::size_t> idle_bytes{0};
};

Recycler& recycler() {
  // Never destroyed: a Bytes may be freed during static destruction, after this would be.
  static auto* r = [] {
    auto* made = new Recycler();
    // A class's lock that another thread held at fork() would stay locked in the child for good
    // (a DataLoader's workers forked while a Loader reads hung at their first Bytes of that
    // class, half the time). A thread never holds one while it takes another.
    for (Idle& idle : made->classes) hold_across_fork(idle.mu);
    return made;
  }();
  return *r;
}

// Made while the program starts, before threads: a fork() while a thread made it would leave the
// child waiting for its initialization for good.
[[maybe_unused]] const Recycler& made_at_start = recycler();

// The header: the class, the count of owners, the size of the block's payload.
std::uint32_t class_of_block(const std::byte* block) {
  return *reinterpret_cast<const std::uint32_t*>(block);
}
std::atomic<std::uint32_t>& owners(std::byte* block) {
  return *reinterpret_cast<std::atomic<std::uint32_t>*>(block + 4);
}
std::uint64_t payload_of_block(const std::byte* block) {
  return *reinterpret_cast<const std::uint64_t*>(block + 8);
}

// The payload bytes of blocks that more than one Bytes owns, and the bound lend_bytes keeps:
// room for 8 HTTP sources lending from their 8 chunks of 512 KiB each (a Loader's workers; at
// 8 MiB, 4 workers reading from RGW copied members that they could have lent, 7% of their CPU).
constexpr std::size_t kMaxShared = std::size_t{32} << 20;
std::atomic<std::size_t> shared_total{0};

// A new block of `payload` bytes, of which the first `size` are for use.
std::byte* fresh(std::size_t payload, std::size_t size, std::uint32_t cls) {
  void* p = std::malloc(kHeader + payload);
  if (!p) throw std::bad_alloc();
  auto* block = static_cast<std::byte*>(p);
  *reinterpret_cast<std::uint32_t*>(block) = cls;
  new (block + 4) std::atomic<std::uint32_t>(1);
  *reinterpret_cast<std::uint64_t*>(block + 8) = payload;
  WDS_POISON(block + kHeader + size, payload - size);
  return block + kHeader;
}

}  // namespace

std::byte* allocate_bytes(std::size_t size) {
  if (size < kMinPooled || size > kMaxPooled) {
    if (size > static_cast<std::size_t>(-1) - kHeader) throw std::bad_alloc();
    return fresh(size, size, kUnpooled);
  }
  const int c = class_of(size);
  Recycler& r = recycler();
  Idle& idle = r.classes[c];
  {
    std::lock_guard lock(idle.mu);
    if (!idle.blocks.empty()) {
      std::byte* block = idle.blocks.back();
      idle.blocks.pop_back();
      r.idle_bytes.fetch_sub(class_size(c), std::memory_order_relaxed);
      owners(block).store(1, std::memory_order_relaxed);
      WDS_UNPOISON(block + kHeader, size);
      return block + kHeader;
    }
  }
  return fresh(class_size(c), size, static_cast<std::uint32_t>(c));
}

void free_bytes(std::byte* p) noexcept {
  if (!p) return;
  std::byte* block = p - kHeader;
  // The last owner takes the block back. One that finds itself the only owner needs no atomic
  // write: a new sharer would need an owner to share from.
  std::atomic<std::uint32_t>& n = owners(block);
  if (n.load(std::memory_order_acquire) != 1) {
    const std::uint32_t before = n.fetch_sub(1, std::memory_order_acq_rel);
    if (before == 2) shared_total.fetch_sub(payload_of_block(block), std::memory_order_relaxed);
    if (before != 1) return;
  }
  const std::uint32_t c = class_of_block(block);
  if (c != kUnpooled) {
    Recycler& r = recycler();
    const std::size_t size = class_size(static_cast<int>(c));
    // Reserve room under the bound first, so that threads freeing at once cannot overshoot it.
    std::size_t held = r.idle_bytes.load(std::memory_order_relaxed);
    while (held + size <= kMaxIdle) {
      if (r.idle_bytes.compare_exchange_weak(held, held + size, std::memory_order_relaxed)) {
        Idle& idle = r.classes[c];
        try {
          WDS_POISON(p, size);
          std::lock_guard lock(idle.mu);
          idle.blocks.push_back(block);
          return;
        } catch (...) {  // no room for the pointer: free the block instead
          r.idle_bytes.fetch_sub(size, std::memory_order_relaxed);
          break;
        }
      }
    }
    WDS_UNPOISON(p, size);
  }
  std::free(block);
}

Bytes share_bytes(const Bytes& owner, std::span<const std::byte> part) {
  if (part.empty()) return Bytes();
  std::byte* start = owner.data_.get_deleter().block;
  if (!start) start = const_cast<std::byte*>(owner.data());
  std::byte* block = start - kHeader;
  // Only the block's one owner can make it shared: no other thread counts it at once.
  if (owners(block).fetch_add(1, std::memory_order_relaxed) == 1) {
    shared_total.fetch_add(payload_of_block(block), std::memory_order_relaxed);
  }
  Bytes out;
  out.data_ = std::unique_ptr<std::byte[], FreeBytes>(const_cast<std::byte*>(part.data()),
                                                      FreeBytes{start});
  out.size_ = part.size();
  return out;
}

Bytes lend_bytes(const Bytes& owner, std::span<const std::byte> part) {
  const auto at = reinterpret_cast<std::uintptr_t>(part.data());
  const auto begin = reinterpret_cast<std::uintptr_t>(owner.data());
  const bool inside = !part.empty() && at >= begin && at - begin <= owner.size() &&
                      part.size() <= owner.size() - (at - begin);
  if (!inside || shared_total.load(std::memory_order_relaxed) >= kMaxShared) {
    return Bytes::copy_of(part);
  }
  return share_bytes(owner, part);
}

std::size_t shared_bytes() noexcept {
  return shared_total.load(std::memory_order_relaxed);
}

std::size_t max_shared_bytes() noexcept {
  return kMaxShared;
}

bool bytes_shared(const Bytes& b) noexcept {
  if (!b.data()) return false;
  const std::byte* start = b.data_.get_deleter().block;
  if (start) return true;
  return owners(const_cast<std::byte*>(b.data()) - kHeader).load(std::memory_order_acquire) > 1;
}

std::size_t idle_bytes() noexcept {
  return recycler().idle_bytes.load(std::memory_order_relaxed);
}

std::size_t max_idle_bytes() noexcept {
  return kMaxIdle;
}

void release_idle_bytes() noexcept {
  Recycler& r = recycler();
  for (int c = 0; c < kClasses; ++c) {
    std::vector<std::byte*> blocks;
    {
      std::lock_guard lock(r.classes[c].mu);
      blocks.swap(r.classes[c].blocks);
    }
    const std::size_t size = class_size(c);
    for (std::byte* block : blocks) {
      r.idle_bytes.fetch_sub(size, std::memory_order_relaxed);
      WDS_UNPOISON(block + kHeader, size);
      std::free(block);
    }
  }
}

}  // namespace detail
}  // namespace wds
