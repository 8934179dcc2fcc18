// IndexedDataset (shard indexes loaded or built, a locked LRU of local descriptors read with
// pread) and ChunkedSampler (shard-sized chunks, contiguous per rank).
#include "wds/indexed_dataset.hpp"

#include "wds/sampler.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <limits>
#include <list>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

#include "lib/storage/file.hpp"
#include "lib/tar/indexed_read.hpp"
#include "wds/error.hpp"
#include "wds/random.hpp"

namespace wds {
namespace {

// An open descriptor, closed when the last user lets go: a get() still reading from a shard the
// LRU just evicted keeps it open until its pread is done.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

std::shared_ptr<Fd> open_fd(const std::string& url, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno(url, "open", errno);
  return std::make_shared<Fd>(fd);
}

// A short read is the shard ending before what the index names.
Bytes pread_exactly(const std::string& url, int fd, std::uint64_t offset, std::uint64_t length) {
  Bytes out(static_cast<std::size_t>(length));
  const std::size_t got =
      pread_upto(fd, out.span(), offset, url, "read at byte " + std::to_string(offset));
  if (got < length) throw shard_ends_before_index(url, offset, got, length);
  return out;
}

std::string read_local_file(const std::string& url, const std::string& path) {
  std::shared_ptr<Fd> fd = open_fd(url, path);
  struct stat st {};
  if (::fstat(fd->fd, &st) != 0) throw_errno(url, "stat", errno);
  Bytes b = pread_exactly(url, fd->fd, 0, static_cast<std::uint64_t>(st.st_size));
  return std::string(b.str());
}

std::string read_all(const std::string& url, const OpenOptions& options) {
  std::unique_ptr<ByteSource> src = open_url(url, options);
  std::string out;
  for (auto chunk = src->read(); !chunk.empty(); chunk = src->read()) {
    out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
  }
  return out;
}

// Written under a temporary name and renamed, so that a reader never sees half an index.
void write_index_file(const std::string& path, const std::string& text) {
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error::unavailable(path, "", "cannot write the index");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw_errno(path, "rename", err);
  }
}

[[noreturn]] void missing_index(const std::string& shard_url, const std::string& index_url) {
  throw Error::not_found(shard_url, "",
                         "no index '" + index_url +
                             "' for the shard: make one with DALI's wds2idx.py, or set "
                             "IndexedDatasetOptions::build_missing");
}

}  // namespace

struct IndexedDataset::Impl {
  struct Shard {
    std::string url;
    bool local = false;
    std::shared_ptr<const ShardInfo> info;  // url and local path, shared by its samples
    mutable ShardIndex index;  // over a wids index: filled by ensure_loaded, under `loaded`
  };

  IndexedDatasetOptions options;
  std::vector<Shard> shards;
  std::vector<std::uint64_t> starts;  // starts[s]: first index of shard s; starts.back(): size
  // Over a wids index: where it came from, and a flag per shard whose DALI index is not yet
  // loaded (null when every index was loaded up front).
  std::string wids_url;
  std::unique_ptr<std::once_flag[]> loaded;

  mutable std::mutex mu;
  using Lru = std::list<std::pair<std::size_t, std::shared_ptr<Fd>>>;  // front: most recent
  mutable Lru lru;
  mutable std::unordered_map<std::size_t, Lru::iterator> in_lru;

  void load(const Shard& shard) const;
  void ensure_loaded(std::size_t s) const;
  std::shared_ptr<Fd> acquire(std::size_t s) const;
};

void IndexedDataset::Impl::load(const Shard& shard) const {
  OpenOptions whole = options.open;
  whole.offset = 0;
  whole.length.reset();
  const std::string index_url = default_index_path(shard.url);
  if (!shard.local) {
    try {
      shard.index = parse_index(read_all(index_url, whole), index_url);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::not_found) throw;
      if (!options.build_missing) missing_index(shard.url, index_url);
      shard.index = build_index(shard.url, options.open);  // kept in memory only
    }
    return;
  }
  const std::string& shard_path = shard.info->local_path;
  const std::string index_path = file_url_to_path(index_url);
  struct stat st {};
  if (::stat(shard_path.c_str(), &st) != 0) throw_errno(shard.url, "stat", errno);
  const auto shard_bytes = static_cast<std::uint64_t>(st.st_size);
  if (::access(index_path.c_str(), F_OK) != 0) {
    if (errno != ENOENT) throw_errno(index_url, "access", errno);
    if (!options.build_missing) missing_index(shard.url, index_url);
    shard.index = build_index(shard.url, options.open);
    try {
      write_index_file(index_path, format_index(shard.index));
    } catch (const Error& e) {
      std::fprintf(stderr, "wds: warning: %s (the index is kept in memory only)\n", e.what());
    }
    return;
  }
  shard.index = parse_index(read_local_file(index_url, index_path), index_path);
  if (index_is_older(index_path, shard_path)) {
    throw Error::corrupt_data(
        shard.url, "",
        "index is stale: '" + index_path +
            "' is older than the shard (rebuild it, or delete it and set build_missing)");
  }
  check_index_bounds(shard.index, shard_bytes, shard.url);
}

// A failed load leaves the flag unset: the next read of the shard tries again.
void IndexedDataset::Impl::ensure_loaded(std::size_t s) const {
  if (!loaded) return;
  std::call_once(loaded[s], [&] {
    const Shard& shard = shards[s];
    load(shard);
    const std::uint64_t expected = starts[s + 1] - starts[s];
    if (shard.index.samples.size() != expected) {
      const std::uint64_t found = shard.index.samples.size();
      shard.index = ShardIndex{};
      throw Error::corrupt_data(
          shard.url, "",
          "index is stale: the shard's index ('" + default_index_path(shard.url) + "') lists " +
              std::to_string(found) + " samples, the wids index '" + wids_url + "' says " +
              std::to_string(expected) + " (rebuild whichever is older)");
    }
  });
}

std::shared_ptr<Fd> IndexedDataset::Impl::acquire(std::size_t s) const {
  const Shard& shard = shards[s];
  if (options.max_open_shards == 0) return open_fd(shard.url, shard.info->local_path);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = in_lru.find(s);
    if (it != in_lru.end()) {
      lru.splice(lru.begin(), lru, it->second);
      return it->second->second;
    }
  }
  // Opened without the lock, so that a slow open does not hold up the other threads.
  std::shared_ptr<Fd> fd = open_fd(shard.url, shard.info->local_path);
  std::lock_guard<std::mutex> lock(mu);
  auto it = in_lru.find(s);
  if (it != in_lru.end()) {  // another thread was faster; ours closes on return
    lru.splice(lru.begin(), lru, it->second);
    return it->second->second;
  }
  lru.emplace_front(s, fd);
  in_lru[s] = lru.begin();
  while (lru.size() > options.max_open_shards) {
    in_lru.erase(lru.back().first);
    lru.pop_back();
  }
  return fd;
}

namespace {

std::shared_ptr<const ShardInfo> shard_info(const std::string& url, bool local) {
  return std::make_shared<const ShardInfo>(
      ShardInfo{url, local ? file_url_to_path(url) : std::string()});
}

}  // namespace

IndexedDataset::IndexedDataset(const WidsIndex& index, IndexedDatasetOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->wids_url = index.url;
  impl_->loaded = std::make_unique<std::once_flag[]>(index.shards.size());
  impl_->shards.reserve(index.shards.size());
  impl_->starts.reserve(index.shards.size() + 1);
  impl_->starts.push_back(0);
  for (const WidsShard& w : index.shards) {
    Impl::Shard shard;
    shard.url = w.url;
    shard.local = is_local_url(w.url);
    shard.info = shard_info(shard.url, shard.local);
    if (w.nsamples > std::numeric_limits<std::uint64_t>::max() - impl_->starts.back()) {
      throw Error::invalid_argument(index.url, "", "too many samples");
    }
    impl_->starts.push_back(impl_->starts.back() + w.nsamples);
    impl_->shards.push_back(std::move(shard));
  }
}

IndexedDataset::IndexedDataset(std::vector<std::string> shard_urls, IndexedDatasetOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->shards.reserve(shard_urls.size());
  impl_->starts.reserve(shard_urls.size() + 1);
  impl_->starts.push_back(0);
  for (std::string& url : shard_urls) {
    Impl::Shard shard;
    shard.local = is_local_url(url);
    shard.info = shard_info(url, shard.local);
    shard.url = std::move(url);
    impl_->load(shard);
    const std::uint64_t n = shard.index.samples.size();
    if (n > std::numeric_limits<std::uint64_t>::max() - impl_->starts.back()) {
      throw Error::invalid_argument(shard.url, "", "too many samples");
    }
    impl_->starts.push_back(impl_->starts.back() + n);
    impl_->shards.push_back(std::move(shard));
  }
}

IndexedDataset::~IndexedDataset() = default;

std::uint64_t IndexedDataset::size() const noexcept {
  return impl_->starts.back();
}

std::pair<std::size_t, std::uint64_t> IndexedDataset::locate(std::uint64_t i) const {
  if (i >= size()) {
    throw Error::invalid_argument("sample " + std::to_string(i) +
                                  " is out of range: the dataset has " + std::to_string(size()) +
                                  " samples");
  }
  // The last shard starting at or before i; empty shards share their start with the next one,
  // and upper_bound steps past them.
  const auto& starts = impl_->starts;
  auto it = std::upper_bound(starts.begin(), starts.end(), i);
  const auto s = static_cast<std::size_t>(it - starts.begin()) - 1;
  return {s, i - starts[s]};
}

Sample IndexedDataset::get(std::uint64_t i) const {
  const auto [s, k] = locate(i);
  impl_->ensure_loaded(s);
  const Impl::Shard& shard = impl_->shards[s];
  const IndexedSample& entry = shard.index.samples[static_cast<std::size_t>(k)];
  if (!shard.local) return read_indexed_sample(shard.url, entry, impl_->options.open);
  std::shared_ptr<Fd> fd = impl_->acquire(s);
  return read_indexed_sample(shard.info, entry, [&](std::uint64_t offset, std::uint64_t length) {
    return pread_exactly(shard.url, fd->fd, offset, length);
  });
}

std::size_t IndexedDataset::num_shards() const noexcept {
  return impl_->shards.size();
}

std::uint64_t IndexedDataset::shard_size(std::size_t shard) const {
  if (shard >= num_shards()) throw std::out_of_range("IndexedDataset::shard_size");
  return impl_->starts[shard + 1] - impl_->starts[shard];
}

std::uint64_t IndexedDataset::shard_start(std::size_t shard) const {
  if (shard >= num_shards()) throw std::out_of_range("IndexedDataset::shard_start");
  return impl_->starts[shard];
}

const std::string& IndexedDataset::shard_url(std::size_t shard) const {
  return impl_->shards.at(shard).url;
}

const ShardIndex& IndexedDataset::shard_index(std::size_t shard) const {
  if (shard >= num_shards()) throw std::out_of_range("IndexedDataset::shard_index");
  impl_->ensure_loaded(shard);
  return impl_->shards[shard].index;
}

// ---------------------------------------------------------------------------------------------

namespace {

std::vector<std::uint64_t> shard_sizes(const IndexedDataset& ds) {
  std::vector<std::uint64_t> out(ds.num_shards());
  for (std::size_t s = 0; s < out.size(); ++s) out[s] = ds.shard_size(s);
  return out;
}

}  // namespace

ChunkedSampler::ChunkedSampler(const IndexedDataset& dataset, ChunkedSamplerOptions options)
    : ChunkedSampler(shard_sizes(dataset), options) {}

ChunkedSampler::ChunkedSampler(std::vector<std::uint64_t> chunk_sizes,
                               ChunkedSamplerOptions options)
    : sizes_(std::move(chunk_sizes)), options_(options) {
  check_replica(options_.num_replicas, options_.rank);
  starts_.reserve(sizes_.size());
  for (std::uint64_t n : sizes_) {
    if (n > std::numeric_limits<std::uint64_t>::max() - dataset_size_) {
      throw Error::invalid_argument("chunk sizes overflow 64 bits");
    }
    starts_.push_back(dataset_size_);
    dataset_size_ += n;
  }
  const auto replicas = static_cast<std::uint64_t>(options_.num_replicas);
  num_samples_ = options_.drop_last
                     ? dataset_size_ / replicas
                     : dataset_size_ / replicas + (dataset_size_ % replicas != 0 ? 1 : 0);
  if (num_samples_ > std::numeric_limits<std::uint64_t>::max() / replicas) {
    throw Error::invalid_argument(
        "dataset size padded to a multiple of num_replicas does not fit in 64 bits");
  }
}

std::vector<std::uint64_t> ChunkedSampler::indices() const {
  std::vector<std::uint64_t> out;
  if (num_samples_ == 0) return out;
  // The chunk order: the same on every rank.
  std::vector<std::size_t> order(sizes_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (options_.shuffle) {
    Rng rng(derive_seed(options_.seed, {seed_purpose::sampler, epoch_, 1}));
    rng.shuffle(order.begin(), order.end());
  }
  // Where each chunk starts in the concatenated list, in that order.
  std::vector<std::uint64_t> pos(order.size() + 1, 0);
  for (std::size_t c = 0; c < order.size(); ++c) pos[c + 1] = pos[c] + sizes_[order[c]];

  // This rank's positions [begin, begin + num_samples) of the padded list; padded position p
  // holds list element p % n (the head repeated). Each chunk has its own Rng, so a rank
  // shuffles only the chunks it touches.
  out.reserve(static_cast<std::size_t>(num_samples_));
  std::size_t cached = order.size();  // the chunk held in `chunk`
  std::vector<std::uint64_t> chunk;
  const std::uint64_t begin = num_samples_ * static_cast<std::uint64_t>(options_.rank);
  for (std::uint64_t p = begin; p < begin + num_samples_; ++p) {
    const std::uint64_t q = p % dataset_size_;
    if (cached == order.size() || q < pos[cached] || q >= pos[cached + 1]) {
      cached =
          static_cast<std::size_t>(std::upper_bound(pos.begin(), pos.end(), q) - pos.begin()) - 1;
      const std::size_t shard = order[cached];
      chunk.resize(static_cast<std::size_t>(sizes_[shard]));
      std::iota(chunk.begin(), chunk.end(), starts_[shard]);
      if (options_.shuffle) {
        Rng rng(derive_seed(options_.seed, {seed_purpose::sampler, epoch_, 2, shard}));
        rng.shuffle(chunk.begin(), chunk.end());
      }
    }
    out.push_back(chunk[static_cast<std::size_t>(q - pos[cached])]);
  }
  return out;
}

}  // namespace wds
