// The local shard cache: write while streaming, rename when complete, verify every block when
// read, evict least recently used.
//
// Each entry "<name>" has a checksum file "<name>.sum" beside it: the entry's size and a
// checksum (lib/checksum.hpp) of every kBlock bytes, itself checksummed. It is renamed into
// place before the entry, so an entry without one was cut short (or written by an older wds).
// A cached read hands out a block only after its checksum matched; a mismatch, a missing block
// or a size that disagrees deletes the entry and fetches the shard from the server again (the
// bytes already handed out, which were verified, are skipped), with one warning naming the
// cache file. So damaged bytes never reach a sample, and the cost is one pass of a
// memory-speed checksum over bytes that were just read.
#include "lib/storage/cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <vector>

#include "lib/checksum.hpp"
#include "lib/fork.hpp"
#include "lib/sha256.hpp"
#include "lib/storage/file.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

constexpr std::string_view kTempMarker = ".partial-";
constexpr std::string_view kSumSuffix = ".sum";
// Checksummed unit: small, so that a ranged read (an index reading one sample) verifies little
// more than it reads; sequential reads take kReadBlocks of them per read().
constexpr std::uint64_t kBlock = 64 * 1024;
constexpr std::uint64_t kReadBlocks = 16;
constexpr char kMagic[8] = {'W', 'D', 'S', 'C', 'S', 'U', 'M', '1'};

using OpenRemote = std::function<std::unique_ptr<ByteSource>(const OpenOptions&)>;

std::string url_hash(const std::string& url) {
  return sha256_hex(url).substr(0, 32);  // 128 bits
}

std::string sum_path(const std::string& path) {
  return path + std::string(kSumSuffix);
}

// Tells the user of a cache problem that does not stop the read: through the retry hook (as
// attempt 0), else on stderr.
void warn(const OpenOptions& options, const std::string& url, const std::string& message) {
  Error e(ErrorCode::unavailable, url, "", message);
  if (options.on_retry) {
    options.on_retry(e, 0);
  } else {
    std::fprintf(stderr, "wds: warning: %s\n", e.what());
  }
}

// Directories found unusable (not creatable, read-only): warned about once per process, then
// shards are read past them without caching (their existing entries are still read).
struct Unusable {
  std::mutex mu;
  std::set<std::string> dirs;
};
Unusable& unusable() {
  static Unusable* u = [] {
    auto* made = new Unusable;  // never destroyed: its lock is held across fork()
    detail::hold_across_fork(made->mu);
    return made;
  }();
  return *u;
}
bool is_unusable(const std::string& dir) {
  std::lock_guard lock(unusable().mu);
  return unusable().dirs.count(dir) > 0;
}
// True the first time.
bool mark_unusable(const std::string& dir) {
  std::lock_guard lock(unusable().mu);
  return unusable().dirs.insert(dir).second;
}

// The checksum file's content: magic, size, block size, block count, the blocks' checksums,
// then the checksum of all that (little-endian 64-bit words after the magic).
struct Sums {
  std::uint64_t size = 0;
  std::uint64_t block = kBlock;
  std::vector<std::uint64_t> blocks;
};

void put64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
std::uint64_t get64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

std::string encode(const Sums& s) {
  std::string out(kMagic, sizeof kMagic);
  put64(out, s.size);
  put64(out, s.block);
  put64(out, s.blocks.size());
  for (std::uint64_t b : s.blocks) put64(out, b);
  put64(out, Checksum::of(std::as_bytes(std::span(out))));
  return out;
}

// nullopt: missing, unreadable or not a whole, consistent checksum file.
std::optional<Sums> read_sums(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || data.size() > (std::size_t{64} << 20)) break;
    data.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const std::size_t head = sizeof kMagic + 24;
  if (data.size() < head + 8 || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) {
    return std::nullopt;
  }
  Sums s;
  s.size = get64(data.data() + 8);
  s.block = get64(data.data() + 16);
  const std::uint64_t count = get64(data.data() + 24);
  if (s.block == 0 || count != (s.size + s.block - 1) / s.block ||
      data.size() != head + 8 * count + 8) {
    return std::nullopt;
  }
  const std::size_t body = data.size() - 8;
  if (get64(data.data() + body) != Checksum::of(std::as_bytes(std::span(data.data(), body)))) {
    return std::nullopt;
  }
  for (std::uint64_t i = 0; i < count; ++i) s.blocks.push_back(get64(data.data() + head + 8 * i));
  return s;
}

void remove_entry(const std::string& path) {
  ::unlink(path.c_str());
  ::unlink(sum_path(path).c_str());
}

// Copies a remote source's chunks to a temporary file as they pass, checksumming each block,
// and renames the checksum file and then the file into place when the source ends with every
// byte (the length checked against the source's size).
class CachingSource final : public ByteSource {
 public:
  CachingSource(std::string url, std::unique_ptr<ByteSource> inner, std::string final_path,
                std::unique_ptr<AtomicFile> file, std::uint64_t max_bytes)
      : ByteSource(std::move(url)),
        inner_(std::move(inner)),
        final_(std::move(final_path)),
        max_bytes_(max_bytes),
        file_(std::move(file)) {}

  std::span<const std::byte> read() override {
    std::span<const std::byte> chunk = inner_->read();
    if (!file_->is_open()) return chunk;
    if (chunk.empty()) {
      commit();
      return chunk;
    }
    try {
      file_->write(chunk);
    } catch (const Error&) {
      file_->abandon();  // a full disk must not break reading; the shard is just not cached
      return chunk;
    }
    for (std::span<const std::byte> rest = chunk; !rest.empty();) {
      const std::size_t take =
          static_cast<std::size_t>(std::min<std::uint64_t>(rest.size(), kBlock - in_block_));
      block_.update(rest.first(take));
      rest = rest.subspan(take);
      if ((in_block_ += take) == kBlock) end_block();
    }
    sums_.size += chunk.size();
    return chunk;
  }
  std::optional<std::uint64_t> size() const override { return inner_->size(); }

 private:
  void end_block() {
    sums_.blocks.push_back(block_.value());
    block_.reset();
    in_block_ = 0;
  }

  void commit() {
    std::optional<std::uint64_t> expected = inner_->size();
    if (expected && *expected != sums_.size) {
      file_->abandon();
      return;
    }
    if (in_block_ > 0) end_block();
    try {
      AtomicFile sums(sum_path(final_), kTempMarker, url(), "cache checksum file");
      const std::string bytes = encode(sums_);
      sums.write(std::as_bytes(std::span(bytes)));
      sums.commit(true);
      file_->commit(true);
    } catch (const Error&) {
      file_->abandon();
      return;  // not cached; the shard was read all the same
    }
    if (max_bytes_ > 0)
      evict_cache(std::filesystem::path(final_).parent_path().string(), max_bytes_);
  }

  std::unique_ptr<ByteSource> inner_;
  std::string final_;
  std::uint64_t max_bytes_;
  std::unique_ptr<AtomicFile> file_;
  Sums sums_;
  Checksum block_;
  std::uint64_t in_block_ = 0;
};

// Reads the shard from the server, through the cache when its directory is usable; the first
// failure to create a cache file in a directory is warned about, once per process.
std::unique_ptr<ByteSource> fetch(const std::string& url, const OpenOptions& options,
                                  const CacheOptions& cache, const std::string& path,
                                  const OpenRemote& open_remote) {
  OpenOptions local = options;
  local.backend_options.erase<CacheOptions>();
  std::unique_ptr<ByteSource> remote = open_remote(local);
  if (options.offset != 0 || options.length) return remote;  // a partial read is not cached
  if (is_unusable(cache.dir)) return remote;
  std::unique_ptr<AtomicFile> file;
  try {
    file = std::make_unique<AtomicFile>(path, kTempMarker, url, "cache file");
  } catch (const Error& e) {
    // Read-only, not a directory, not creatable: read without the cache.
    if (mark_unusable(cache.dir)) {
      warn(options, url,
           "cache directory " + cache.dir + " is not usable, reading without the cache (" +
               e.cause() + ")");
    }
    return remote;
  }
  return std::make_unique<CachingSource>(url, std::move(remote), path, std::move(file),
                                         cache.max_bytes);
}

// A cached file, reported under the original URL, with the file as its local path. Each block
// is verified against its checksum before any of it is handed out; on a mismatch (or a file
// shorter than its checksums say) the entry is deleted, a warning names the cache file, and
// the rest is read from the server.
class VerifiedFile final : public ByteSource {
 public:
  VerifiedFile(std::string url, std::string path, int fd, Sums sums, OpenOptions options,
               CacheOptions cache, OpenRemote open_remote)
      : ByteSource(std::move(url)),
        path_(std::move(path)),
        fd_(fd),
        sums_(std::move(sums)),
        options_(std::move(options)),
        cache_(std::move(cache)),
        open_remote_(std::move(open_remote)) {
    begin_ = std::min(options_.offset, sums_.size);
    end_ = options_.length ? std::min(sums_.size, begin_ + *options_.length) : sums_.size;
    pos_ = begin_;
  }
  ~VerifiedFile() override { ::close(fd_); }

  std::span<const std::byte> read() override {
    if (fallback_) return read_fallback();
    if (pos_ >= end_) return {};
    // Whole blocks around what is still wanted, at most kReadBlocks of them.
    const std::uint64_t first = pos_ / sums_.block;
    const std::uint64_t last = std::min((end_ - 1) / sums_.block + 1, first + kReadBlocks);
    const std::uint64_t from = first * sums_.block;
    const std::uint64_t to = std::min(last * sums_.block, sums_.size);
    const std::size_t want = static_cast<std::size_t>(to - from);
    // 64-byte aligned: the checksum's stripes then never straddle cache lines (25% faster).
    buffer_.resize(want + 63);
    std::byte* data =
        buffer_.data() + ((64 - reinterpret_cast<std::uintptr_t>(buffer_.data()) % 64) % 64);
    std::size_t got = 0;
    while (got < want) {
      ssize_t n = ::pread(fd_, data + got, want - got, static_cast<off_t>(from + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw_errno(url(), "read cache file " + path_, errno);
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    std::uint64_t good = to;  // the verified bytes end here
    for (std::uint64_t b = first; b < last; ++b) {
      const std::size_t at = static_cast<std::size_t>((b - first) * sums_.block);
      const std::size_t len = static_cast<std::size_t>(
          std::min<std::uint64_t>(sums_.block, sums_.size - b * sums_.block));
      std::string problem;
      if (at + len > got) {
        problem = "ends at byte " + std::to_string(from + got) + ", its checksum file says " +
                  std::to_string(sums_.size) + " bytes (truncated)";
      } else if (Checksum::of(std::span(data + at, len)) != sums_.blocks[b]) {
        problem = "bytes " + std::to_string(b * sums_.block) + "-" +
                  std::to_string(b * sums_.block + len - 1) +
                  " do not match their checksum (damaged)";
      }
      if (problem.empty()) continue;
      // The blocks before it are handed out first; the next read() comes back to this one.
      if (b == first || b * sums_.block <= pos_) return refetch(problem);
      good = b * sums_.block;
      break;
    }
    const std::size_t skip = static_cast<std::size_t>(pos_ - from);
    const std::size_t n = static_cast<std::size_t>(std::min(good, end_) - pos_);
    pos_ += n;
    return {data + skip, n};
  }
  std::string local_path() const override { return path_; }
  std::optional<std::uint64_t> size() const override { return sums_.size; }

 private:
  std::span<const std::byte> refetch(const std::string& problem) {
    remove_entry(path_);
    warn(options_, url(),
         "cache file " + path_ + " " + problem + "; deleted, reading the shard from the server");
    OpenOptions o = options_;
    if (begin_ == 0 && !options_.length) {
      skip_ = pos_;  // the whole shard again (cached anew); drop what was handed out
    } else {
      o.offset = pos_;
      if (options_.length) o.length = end_ - pos_;
    }
    fallback_ = fetch(url(), o, cache_, path_, open_remote_);
    return read_fallback();
  }

  std::span<const std::byte> read_fallback() {
    for (;;) {
      std::span<const std::byte> chunk = fallback_->read();
      if (chunk.empty() || skip_ == 0) return chunk;
      const std::size_t drop =
          static_cast<std::size_t>(std::min<std::uint64_t>(skip_, chunk.size()));
      skip_ -= drop;
      if (drop < chunk.size()) return chunk.subspan(drop);
    }
  }

  std::string path_;
  int fd_;
  Sums sums_;
  OpenOptions options_;
  CacheOptions cache_;
  OpenRemote open_remote_;
  std::uint64_t begin_ = 0, end_ = 0, pos_ = 0;  // absolute: the range wanted, the next byte
  std::vector<std::byte> buffer_;
  std::unique_ptr<ByteSource> fallback_;  // the server, once the cache file failed
  std::uint64_t skip_ = 0;                // bytes of fallback_ already handed out
};

}  // namespace

std::string cache_path(const std::string& dir, const std::string& url) {
  std::string base = url.substr(url.find_last_of('/') + 1);
  base = base.substr(0, base.find_first_of("?#"));
  for (char& c : base) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  while (!base.empty() && base.front() == '.') base.erase(0, 1);  // no hidden or ".." names
  if (base.size() > 100) base.resize(100);
  if (base.empty()) base = "shard";
  return (std::filesystem::path(dir) / (base + "." + url_hash(url))).string();
}

std::unique_ptr<ByteSource> open_cached(const std::string& url, const OpenOptions& options,
                                        const CacheOptions& cache, const OpenRemote& open_remote) {
  if (cache.dir.empty()) throw Error::invalid_argument(url, "", "cache dir is empty");
  std::error_code ec;
  std::filesystem::create_directories(cache.dir, ec);  // failing: see fetch()
  const std::string path = cache_path(cache.dir, url);
  OpenOptions local = options;
  local.backend_options.erase<CacheOptions>();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    struct stat st {};
    std::optional<Sums> sums = read_sums(sum_path(path));
    const bool stat_ok = ::fstat(fd, &st) == 0;
    if (sums && stat_ok && static_cast<std::uint64_t>(st.st_size) == sums->size) {
      ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // used now: last in line for eviction
      return std::make_unique<VerifiedFile>(url, path, fd, std::move(*sums), local, cache,
                                            open_remote);
    }
    ::close(fd);
    std::string problem;
    if (!sums) {
      problem = "has no valid checksum file (cut short, or written by an older version)";
    } else {
      problem = "holds " + std::to_string(stat_ok ? st.st_size : 0) +
                " bytes, its checksum file says " + std::to_string(sums->size) + " (truncated)";
    }
    // Evicted by another process between the two opens: nothing to warn about.
    if (sums || ::access(path.c_str(), F_OK) == 0) {
      remove_entry(path);
      warn(options, url,
           "cache file " + path + " " + problem + "; deleted, reading the shard from the server");
    }
  }
  return fetch(url, options, cache, path, open_remote);
}

void evict_cache(const std::string& dir, std::uint64_t max_bytes) {
  struct Entry {
    std::filesystem::path path;
    std::filesystem::file_time_type used;
    std::uint64_t size;
  };
  std::vector<Entry> entries;
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const std::string name = e.path().filename().string();
    if (name.find(kTempMarker) != std::string::npos) continue;
    if (name.ends_with(kSumSuffix)) continue;  // goes with its entry
    Entry entry{e.path(), e.last_write_time(ec), e.file_size(ec)};
    if (ec) continue;  // removed meanwhile by another process
    total += entry.size;
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : entries) {
    if (total <= max_bytes) break;
    // A reader that has the file open keeps reading it; only the name goes.
    if (std::filesystem::remove(e.path, ec)) total -= e.size;
    std::filesystem::remove(sum_path(e.path.string()), ec);
  }
}

}  // namespace wds
