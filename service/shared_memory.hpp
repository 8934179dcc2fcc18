// Batches in shared memory, for trainers on the producer's host: the producer's batches are
// allocated in memory files (memfd), and a batch message names the file and the place instead of
// carrying the bytes. A trainer maps each file once and its tensors point into it, so a batch
// crosses without being copied through the kernel on either side and without page faults on the
// trainer for every new batch.
//
// How a trainer finds a file: a memfd has no name, but a process of the same user may open
// another's descriptors through /proc/PID/fd/N. The producer offers its pid and the descriptor of
// a small memfd holding 16 random bytes, over the (authenticated) service connection; a trainer
// that opens it and reads the same bytes shares the host, the pid namespace and the user with
// the producer, and accepts. Anything else (another host, another container, another user) falls
// back to sending the bytes. The files vanish with the last process using them, also when one
// crashes: nothing is left in /dev/shm.
//
// Lifetime: a block the producer lends stays out of its pool until the trainer gives it back (a
// release message when the last tensor using it dies); a freed block's serial is announced, so
// the trainer unmaps it (after its last tensor dies).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wds/tensor_pool.hpp"

namespace wds::detail::shm {

using Nonce = std::array<std::byte, 16>;

// The producer's side: a BlockAllocator whose large blocks are memory files. Blocks under
// kMinShared bytes (labels, small fields: cheaper to copy than to map), and blocks it cannot make
// (no memfd; or memory files would take more than half of the process's descriptor limit, which
// sockets and shards need too), come from the heap; find() does not know them.
class Arena final : public BlockAllocator {
 public:
  static constexpr std::size_t kMinShared = std::size_t{64} << 10;

  struct Block {
    std::uint64_t serial = 0;  // unique within this arena
    int fd = -1;
    std::size_t bytes = 0;  // the file's size (a whole number of pages)
    const std::byte* base = nullptr;
  };

  Arena() = default;
  ~Arena() override;
  std::byte* allocate(std::size_t nbytes) override;
  void deallocate(std::byte* block, std::size_t nbytes) noexcept override;

  // The shared block starting at `base`, if it is one of this arena's.
  std::optional<Block> find(const void* base) const;
  // The serials of blocks freed since the last call.
  std::vector<std::uint64_t> take_retired();

 private:
  mutable std::mutex mutex_;
  std::map<const std::byte*, Block> blocks_;
  std::vector<std::uint64_t> retired_;
  std::uint64_t next_serial_ = 1;
};

// What a producer offers its trainers: its pid and a memfd holding a nonce.
class Offer {
 public:
  // Makes the memfd; valid() is false if it cannot (shared memory is then not offered).
  Offer();
  ~Offer();
  Offer(const Offer&) = delete;
  Offer& operator=(const Offer&) = delete;
  bool valid() const noexcept { return fd_ >= 0; }
  int pid() const noexcept { return pid_; }
  int fd() const noexcept { return fd_; }
  const Nonce& nonce() const noexcept { return nonce_; }

 private:
  int pid_ = 0;
  int fd_ = -1;
  Nonce nonce_{};
};

// The trainer's side. True if /proc/PID/fd/FD can be opened and holds `nonce`.
bool verify(int pid, int fd, const Nonce& nonce) noexcept;

// A producer's block mapped into this process; unmapped when the last owner lets go.
class Mapping {
 public:
  Mapping(std::byte* base, std::size_t bytes) noexcept : base_(base), bytes_(bytes) {}
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  std::span<std::byte> bytes() const noexcept { return {base_, bytes_}; }

 private:
  std::byte* base_;
  std::size_t bytes_;
};

// Maps `bytes` of the producer's descriptor `fd` (read and write: a trainer may change its batch
// in place). Throws unavailable naming `where` if the file cannot be opened or is smaller.
std::shared_ptr<Mapping> map_block(int pid, int fd, std::size_t bytes, std::string_view where);

}  // namespace wds::detail::shm
