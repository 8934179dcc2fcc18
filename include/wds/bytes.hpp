// wds/bytes.hpp: Bytes, an owning, contiguous byte buffer.
//
//   wds::Bytes b(size);               // uninitialised: a reader fills it in place
//   read_exactly(src, b.span());
//   std::string_view text = b.str();  // view, valid while b lives and is not moved from
//
// Unlike std::vector<std::byte>, a fresh Bytes is not zero-filled, so reading a member into it
// touches every byte once. Moving is O(1); copying copies the bytes.
//
// Storage of 4 KiB and more is recycled: a freed buffer waits, within a process-wide bound of
// idle bytes, for the next Bytes of its size class (sizes rounded up by at most an eighth).
// Why: glibc gives the top of its heap back to the kernel whenever more than 128 KiB of it is
// free, and a loader frees a worker's samples in runs (those its consumer handed back), so the
// worker's next fields faulted their pages in afresh (bench/README.md, "Object stores, fourth
// round").
//
// A source may lend a part of its read buffer as Bytes (ByteSource::lend): such Bytes own their
// bytes as any other, and keep the buffer they lie in alive until the last of them is freed.
//
// Thread safety: a value type; distinct objects may be used from different threads, and a Bytes
// may be freed on another thread than the one that made it. A process forked while other threads
// make and free Bytes makes and frees them too (the recycler's locks are held across fork()).
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>

namespace wds {

class Bytes;

namespace detail {
// Bytes' storage (lib/bytes.cpp): at least `size` (> 0) bytes, 16-byte aligned, recycled or
// fresh; throws std::bad_alloc.
std::byte* allocate_bytes(std::size_t size);
// Takes back what allocate_bytes returned, or one owner of it (share_bytes); from any thread.
void free_bytes(std::byte* p) noexcept;
// The block a Bytes' bytes lie in, when it shares another's (else null: they start the block).
struct FreeBytes {
  std::byte* block = nullptr;
  void operator()(std::byte* p) const noexcept { free_bytes(block ? block : p); }
};
// Bytes that own `part` of `owner`'s storage together with it and any other sharer: no copy;
// the storage is taken back when the last of them is freed (ByteSource::lend).
Bytes share_bytes(const Bytes& owner, std::span<const std::byte> part);
// True while another Bytes shares `b`'s storage (or `b` shares another's).
bool bytes_shared(const Bytes& b) noexcept;
// share_bytes when `part` lies in `owner` and the storage that Bytes share, process-wide, is
// under max_shared_bytes() (32 MiB), else a copy: what a ByteSource lends with, so that samples a
// user holds keep at most that much of their sources' buffers alive beyond their own bytes (a
// shuffle buffer gives its samples bytes of their own: wds/filters.hpp).
Bytes lend_bytes(const Bytes& owner, std::span<const std::byte> part);
std::size_t shared_bytes() noexcept;
std::size_t max_shared_bytes() noexcept;
// The bytes of idle recycled storage now, and their bound (for tests and diagnostics).
std::size_t idle_bytes() noexcept;
std::size_t max_idle_bytes() noexcept;
// Frees every idle block (a test that needs room in the pool starts from an empty one).
void release_idle_bytes() noexcept;
}  // namespace detail

class Bytes {
 public:
  Bytes() = default;
  // `size` bytes of uninitialised storage.
  explicit Bytes(std::size_t size)
      : data_(size ? detail::allocate_bytes(size) : nullptr), size_(size) {}
  static Bytes copy_of(std::span<const std::byte> src) {
    Bytes b(src.size());
    if (!src.empty()) std::memcpy(b.data(), src.data(), src.size());
    return b;
  }
  static Bytes copy_of(std::string_view src) { return copy_of(std::as_bytes(std::span(src))); }

  Bytes(Bytes&& other) noexcept : data_(std::move(other.data_)), size_(other.size_) {
    other.size_ = 0;
  }
  Bytes& operator=(Bytes&& other) noexcept {
    data_ = std::move(other.data_);
    size_ = other.size_;
    other.size_ = 0;
    return *this;
  }
  Bytes(const Bytes& other) : Bytes(copy_of(other.span())) {}
  Bytes& operator=(const Bytes& other) {
    if (this != &other) *this = copy_of(other.span());
    return *this;
  }

  std::size_t size() const noexcept { return size_; }
  // Keeps only the first n bytes (n <= size()), without reallocating: for a buffer filled to
  // less than its size, such as a decompressor's output whose size was not known up front.
  void shrink(std::size_t n) noexcept {
    if (n < size_) size_ = n;
  }
  bool empty() const noexcept { return size_ == 0; }
  std::byte* data() noexcept { return data_.get(); }
  const std::byte* data() const noexcept { return data_.get(); }
  std::span<std::byte> span() noexcept { return {data_.get(), size_}; }
  std::span<const std::byte> span() const noexcept { return {data_.get(), size_}; }
  // The bytes as characters (no encoding check).
  std::string_view str() const noexcept {
    return {reinterpret_cast<const char*>(data_.get()), size_};
  }

  friend bool operator==(const Bytes& a, const Bytes& b) noexcept {
    return a.size_ == b.size_ && (a.size_ == 0 || std::memcmp(a.data(), b.data(), a.size_) == 0);
  }

 private:
  friend Bytes detail::share_bytes(const Bytes&, std::span<const std::byte>);
  friend bool detail::bytes_shared(const Bytes&) noexcept;
  std::unique_ptr<std::byte[], detail::FreeBytes> data_;
  std::size_t size_ = 0;
};

}  // namespace wds
