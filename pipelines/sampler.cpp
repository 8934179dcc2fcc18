// DistributedSampler: PyTorch's DistributedSampler index arithmetic over a wds::Rng permutation.
#include "wds/sampler.hpp"

#include <cstddef>
#include <limits>
#include <numeric>
#include <string>

#include "wds/error.hpp"
#include "wds/random.hpp"

namespace wds {

void check_replica(int num_replicas, int rank) {
  if (num_replicas < 1) {
    throw Error::invalid_argument("num_replicas " + std::to_string(num_replicas) +
                                  " is less than 1");
  }
  if (rank < 0 || rank >= num_replicas) {
    throw Error::invalid_argument("rank " + std::to_string(rank) + " is not in [0, num_replicas " +
                                  std::to_string(num_replicas) + ")");
  }
}

DistributedSampler::DistributedSampler(std::uint64_t dataset_size,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  check_replica(options_.num_replicas, options_.rank);
  const auto replicas = static_cast<std::uint64_t>(options_.num_replicas);
  if (options_.drop_last) {
    // PyTorch's ceil((n - r) / r) when n % r != 0, else n / r, is floor(n / r) in every case
    // (including n < r, where the ceiling of a value in (-1, 0) is 0); integer division avoids
    // both the negative intermediate and float rounding for n beyond 2^53.
    num_samples_ = dataset_size_ / replicas;
  } else {
    // ceil(n / r) without the overflow of (n + r - 1) / r.
    num_samples_ = dataset_size_ / replicas + (dataset_size_ % replicas != 0 ? 1 : 0);
  }
  // total_size() must not wrap; only reachable when padding a dataset within r of 2^64.
  if (num_samples_ > std::numeric_limits<std::uint64_t>::max() / replicas) {
    throw Error::invalid_argument(
        "dataset_size " + std::to_string(dataset_size_) + " padded to a multiple of " +
        "num_replicas " + std::to_string(options_.num_replicas) + " does not fit in 64 bits");
  }
}

std::vector<std::uint64_t> DistributedSampler::indices() const {
  std::vector<std::uint64_t> out;
  // Also covers dataset_size 0, where the modulo below would divide by zero.
  if (num_samples_ == 0) return out;

  std::vector<std::uint64_t> perm;
  if (options_.shuffle) {
    perm.resize(static_cast<std::size_t>(dataset_size_));
    std::iota(perm.begin(), perm.end(), std::uint64_t{0});
    Rng rng(derive_seed(options_.seed, {seed_purpose::sampler, epoch_}));
    rng.shuffle(perm.begin(), perm.end());
  }

  // PyTorch pads by appending the head of the list, as many whole or partial copies as needed,
  // so padded position p holds element p % n; with drop_last every position is below n anyway.
  // Hence only this rank's num_samples positions are visited, and the unshuffled case needs no
  // list at all.
  const auto replicas = static_cast<std::uint64_t>(options_.num_replicas);
  out.reserve(static_cast<std::size_t>(num_samples_));
  std::uint64_t pos = static_cast<std::uint64_t>(options_.rank);
  for (std::uint64_t k = 0; k < num_samples_; ++k, pos += replicas) {
    // pos < total_size(), which the constructor checked fits in 64 bits.
    const std::uint64_t i = pos % dataset_size_;
    out.push_back(options_.shuffle ? perm[static_cast<std::size_t>(i)] : i);
  }
  return out;
}

}  // namespace wds
