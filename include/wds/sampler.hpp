// wds/sampler.hpp: DistributedSampler, PyTorch's DistributedSampler for datasets read by index.
//
//   wds::DistributedSampler sampler(dataset.size(), {.num_replicas = world, .rank = rank,
//                                                    .shuffle = true, .seed = 42});
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);
//     for (std::uint64_t i : sampler.indices()) use(dataset.get(i));
//   }
//
// PyTorch's semantics exactly: every rank gets the same number of indices, size(); the
// permutation of [0, dataset_size) depends only on (seed, epoch), so all ranks agree on it;
// without drop_last the permutation is padded to a multiple of num_replicas by repeating its head
// (as often as needed when the dataset is smaller than num_replicas); with drop_last the
// permutation is cut to total_size() instead; rank r takes positions r, r + num_replicas, ...
// Sizes use exact integer arithmetic (PyTorch's float division differs above 2^53).
// The permutation itself comes from wds::Rng (Fisher-Yates seeded by
// derive_seed(seed, {seed_purpose::sampler, epoch})), not from torch.randperm.
//
// Errors: invalid_argument Error for num_replicas < 1, rank outside [0, num_replicas), or a
// padded size that does not fit in 64 bits.
// Thread safety: const methods may be called concurrently; set_epoch may not.
#pragma once

#include <cstdint>
#include <vector>

namespace wds {

struct DistributedSamplerOptions {
  int num_replicas = 1;
  int rank = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
};

// Throws the invalid_argument Error the samplers give for num_replicas < 1 or a rank outside
// [0, num_replicas).
void check_replica(int num_replicas, int rank);

class DistributedSampler {
 public:
  DistributedSampler(std::uint64_t dataset_size, DistributedSamplerOptions options = {});

  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
  std::uint64_t epoch() const noexcept { return epoch_; }
  // Indices per rank (PyTorch's num_samples).
  std::uint64_t size() const noexcept { return num_samples_; }
  // num_samples * num_replicas.
  std::uint64_t total_size() const noexcept { return num_samples_ * options_.num_replicas; }
  // This rank's indices for the current epoch, in order.
  std::vector<std::uint64_t> indices() const;

 private:
  std::uint64_t dataset_size_;
  DistributedSamplerOptions options_;
  std::uint64_t num_samples_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace wds
