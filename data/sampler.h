#pragma once
// Sampler: which samples of a data set an epoch visits, in which order
// (PyTorch's torch.utils.data.Sampler). The DataLoader asks it once per epoch
// (DataLoaderOptions::sampler); distributed::DistributedSampler gives each
// rank its own shard.
#include <cstdint>

#include <halfgrad/core/tensor.h>

namespace halfgrad::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // How many indices an epoch yields for a data set of `dataset_size` samples.
  virtual int64_t size(int64_t dataset_size) const = 0;
  // Epoch `epoch`'s indices: a 1-d int64 CPU tensor of size(dataset_size)
  // values in [0, dataset_size). The loader checks both.
  virtual Tensor indices(int64_t dataset_size, int64_t epoch) const = 0;
};

// The DataLoader's seeded shuffle, for samplers to share: a permutation of
// 0 .. n-1 that depends on (seed, epoch) alone (Philox4x32-10 Fisher-Yates).
Tensor shuffled_order(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace halfgrad::data
