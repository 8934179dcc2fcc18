#include "service/shared_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "wds/error.hpp"
#include "wds/tensor.hpp"

namespace wds::detail::shm {
namespace {

std::size_t page_size() {
  static const std::size_t size = [] {
    const long n = ::sysconf(_SC_PAGESIZE);
    return n > 0 ? static_cast<std::size_t>(n) : std::size_t{4096};
  }();
  return size;
}

// Memory files live in this process, across all arenas: each is a descriptor. Past half the
// descriptor limit, blocks come from the heap, so that sockets and shards still open.
std::atomic<std::size_t> live_files{0};

std::size_t file_budget() {
  static const std::size_t budget = [] {
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY)
      return std::size_t{4096};
    return static_cast<std::size_t>(lim.rlim_cur / 2);
  }();
  return budget;
}

std::string proc_fd_path(int pid, int fd) {
  return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
}

}  // namespace

Arena::~Arena() {
  // Blocks still out hold the arena (their deleters own a shared_ptr to it), so none is left.
  for (auto& [base, b] : blocks_) {
    ::munmap(const_cast<std::byte*>(base), b.bytes);
    ::close(b.fd);
    live_files.fetch_sub(1);
  }
}

std::byte* Arena::allocate(std::size_t nbytes) {
  if (nbytes >= kMinShared && live_files.fetch_add(1) < file_budget()) {
    const std::size_t page = page_size();
    const std::size_t bytes = (nbytes + page - 1) / page * page;
    const int fd = ::memfd_create("wds-batch", MFD_CLOEXEC);
    if (fd >= 0) {
      void* p = MAP_FAILED;
      if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
        p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      }
      if (p != MAP_FAILED) {
        auto* base = static_cast<std::byte*>(p);
        std::lock_guard lock(mutex_);
        blocks_[base] = Block{next_serial_++, fd, bytes, base};
        return base;
      }
      ::close(fd);
    }
    live_files.fetch_sub(1);
    // No memory file (out of descriptors, no memfd): a heap block, sent by copy.
  } else if (nbytes >= kMinShared) {
    live_files.fetch_sub(1);
  }
  return detail::allocate_aligned(nbytes).release();
}

void Arena::deallocate(std::byte* block, std::size_t) noexcept {
  Block b;
  {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(block);
    if (it == blocks_.end()) {
      detail::AlignedFree()(block);
      return;
    }
    b = it->second;
    blocks_.erase(it);
    try {
      retired_.push_back(b.serial);
    } catch (...) {
      // Not announced: the trainer keeps a stale mapping until it sees this producer go.
    }
  }
  ::munmap(block, b.bytes);
  ::close(b.fd);
  live_files.fetch_sub(1);
}

std::optional<Arena::Block> Arena::find(const void* base) const {
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(static_cast<const std::byte*>(base));
  if (it == blocks_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::uint64_t> Arena::take_retired() {
  std::lock_guard lock(mutex_);
  return std::exchange(retired_, {});
}

Offer::Offer() {
  std::random_device random;
  for (std::size_t i = 0; i < nonce_.size(); i += 4) {
    const std::uint32_t r = random();
    std::memcpy(nonce_.data() + i, &r, 4);
  }
  pid_ = static_cast<int>(::getpid());
  fd_ = ::memfd_create("wds-service-offer", MFD_CLOEXEC);
  if (fd_ < 0) return;
  if (::write(fd_, nonce_.data(), nonce_.size()) != static_cast<ssize_t>(nonce_.size())) {
    ::close(fd_);
    fd_ = -1;
  }
}

Offer::~Offer() {
  if (fd_ >= 0) ::close(fd_);
}

bool verify(int pid, int fd, const Nonce& nonce) noexcept {
  if (pid <= 0 || fd < 0) return false;
  std::string path;
  try {
    path = proc_fd_path(pid, fd);
  } catch (...) {
    return false;
  }
  const int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) return false;
  Nonce seen{};
  const ssize_t n = ::pread(f, seen.data(), seen.size(), 0);
  ::close(f);
  return n == static_cast<ssize_t>(seen.size()) && seen == nonce;
}

Mapping::~Mapping() {
  ::munmap(base_, bytes_);
}

std::shared_ptr<Mapping> map_block(int pid, int fd, std::size_t bytes, std::string_view where) {
  const std::string path = proc_fd_path(pid, fd);
  auto fail = [&](const std::string& what) {
    throw Error::unavailable(std::string(where), "",
                             "cannot map the producer's shared memory (" + path + ", " +
                                 std::to_string(bytes) + " bytes): " + what);
  };
  if (bytes == 0) fail("an empty block");
  const int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (f < 0) fail(std::strerror(errno));
  struct stat st {};
  if (::fstat(f, &st) != 0 || st.st_size < 0 || static_cast<std::size_t>(st.st_size) < bytes) {
    ::close(f);
    fail("the file is smaller than the batch says");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  const int err = errno;
  ::close(f);
  if (p == MAP_FAILED) fail(std::strerror(err));
  try {
    return std::make_shared<Mapping>(static_cast<std::byte*>(p), bytes);
  } catch (...) {
    ::munmap(p, bytes);
    throw;
  }
}

}  // namespace wds::detail::shm
