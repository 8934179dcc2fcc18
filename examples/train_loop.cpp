// train_loop: the loop a training job runs. Shards are shuffled and split between ranks and
// worker threads, JPEGs decoded to RGB tensors, samples batched into contiguous [N, H, W, 3]
// tensors, and each batch handed over as DLPack, as libtorch or CUDA code would take it.
//
//   build/examples/train_loop 'data/train-{000000..000007}.tar' [workers] [batch] [epochs]
//
// Under torchrun, mpirun or SLURM each process reads its own shards (rank and world size come
// from the environment). Every rank steps the same number of times per epoch: with_epoch on
// the loader counts batches, and resampled shards never run dry.
#include <dlpack/dlpack.h>

#include <cstdio>
#include <cstdlib>
#include <wds/dlpack.hpp>
#include <wds/wds.hpp>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_loop PATTERN [workers] [batch] [epochs]\n");
    return 2;
  }
  const int workers = argc > 2 ? std::atoi(argv[2]) : 2;
  const std::size_t batch = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 32;
  const int epochs = argc > 4 ? std::atoi(argv[4]) : 2;
  try {
    // Shard URLs -> rank split -> worker split -> read -> shuffle -> decode -> tuple -> batch.
    auto batches = wds::WebDataset(argv[1], {.resampled = true})
                       .shuffle(500)
                       .decode("rgb8", {.handler = wds::warn_and_continue})
                       .to_tuple("jpg;png", "cls")
                       .batched(batch, false);
    wds::Loader<wds::Tuple> loader(batches, {.workers = workers, .prefetch = 2});
    loader.with_epoch(20);  // batches per rank per epoch
    for (int epoch = 0; epoch < epochs; ++epoch) {
      double mean = 0;
      int steps = 0;
      for (wds::Tuple& b : loader) {
        const wds::Tensor& images = b[0].get<wds::Tensor>();  // uint8 [batch, H, W, 3]
        const wds::Tensor& labels = b[1].get<wds::Tensor>();  // int64 [batch]
        // Hand over without a copy: torch::fromDLPack(m) would own it; here we just look.
        DLManagedTensor* m = wds::to_dlpack(images);
        const auto* px = static_cast<const std::uint8_t*>(m->dl_tensor.data);
        mean += px[0];
        m->deleter(m);
        if (++steps == 1 && epoch == 0) {
          std::printf("batch: images %s, labels %s\n", images.describe().c_str(),
                      labels.describe().c_str());
        }
      }
      std::printf("epoch %d: %d steps (first pixel mean %.1f)\n", epoch, steps,
                  steps ? mean / steps : 0.0);
    }
  } catch (const wds::Error& e) {
    std::fprintf(stderr, "train_loop: %s\n", e.what());
    return 1;
  }
  return 0;
}
