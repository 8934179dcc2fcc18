// The local shard cache: write while streaming, rename when complete, evict least recently used.
#include "lib/cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <vector>

#include "lib/file_source.hpp"
#include "lib/sha256.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

constexpr std::string_view kTempMarker = ".partial-";

std::string url_hash(const std::string& url) {
  return sha256_hex(url).substr(0, 32);  // 128 bits
}

// Copies a remote source's chunks to a temporary file as they pass, and renames the file into
// place when the source ends with every byte (the length checked against the source's size).
class CachingSource final : public ByteSource {
 public:
  CachingSource(std::string url, std::unique_ptr<ByteSource> inner, std::string final_path,
                std::uint64_t max_bytes)
      : ByteSource(std::move(url)),
        inner_(std::move(inner)),
        final_(std::move(final_path)),
        max_bytes_(max_bytes),
        file_(final_, kTempMarker, this->url(), "cache file") {}

  std::span<const std::byte> read() override {
    std::span<const std::byte> chunk = inner_->read();
    if (!file_.is_open()) return chunk;
    if (chunk.empty()) {
      commit();
      return chunk;
    }
    try {
      file_.write(chunk);
    } catch (const Error&) {
      file_.abandon();  // a full disk must not break reading; the shard is just not cached
    }
    written_ += chunk.size();
    return chunk;
  }
  std::optional<std::uint64_t> size() const override { return inner_->size(); }

 private:
  void commit() {
    std::optional<std::uint64_t> expected = inner_->size();
    if (expected && *expected != written_) {
      file_.abandon();
      return;
    }
    try {
      file_.commit(true);
    } catch (const Error&) {
      return;  // not cached; the shard was read all the same
    }
    if (max_bytes_ > 0)
      evict_cache(std::filesystem::path(final_).parent_path().string(), max_bytes_);
  }

  std::unique_ptr<ByteSource> inner_;
  std::string final_;
  std::uint64_t max_bytes_;
  AtomicFile file_;
  std::uint64_t written_ = 0;
};

// A cached file, reported under the original URL, with the file as its local path.
class CachedFile final : public ByteSource {
 public:
  CachedFile(std::string url, std::unique_ptr<ByteSource> file)
      : ByteSource(std::move(url)), file_(std::move(file)) {}
  std::span<const std::byte> read() override { return file_->read(); }
  std::string local_path() const override { return file_->local_path(); }
  std::optional<std::uint64_t> size() const override { return file_->size(); }

 private:
  std::unique_ptr<ByteSource> file_;
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

std::unique_ptr<ByteSource> open_cached(
    const std::string& url, const OpenOptions& options, const CacheOptions& cache,
    const std::function<std::unique_ptr<ByteSource>(const OpenOptions&)>& open_remote) {
  if (cache.dir.empty()) throw Error(ErrorCode::invalid_argument, url, "", "cache dir is empty");
  std::error_code ec;
  std::filesystem::create_directories(cache.dir, ec);
  const std::string path = cache_path(cache.dir, url);
  OpenOptions local = options;
  local.cache = nullptr;
  if (::access(path.c_str(), R_OK) == 0) {
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // used now: last in line for eviction
    return std::make_unique<CachedFile>(url, open_url(path, local));
  }
  std::unique_ptr<ByteSource> remote = open_remote(local);
  if (options.offset != 0) return remote;  // a partial read is not cached
  return std::make_unique<CachingSource>(url, std::move(remote), path, cache.max_bytes);
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
    if (e.path().filename().string().find(kTempMarker) != std::string::npos) continue;
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
  }
}

}  // namespace wds
