#pragma once
// DistributedSampler: each rank a disjoint shard of the data set per epoch
// (PyTorch's torch.utils.data.distributed.DistributedSampler, same rules):
// the epoch's order (shuffled with `seed` and the epoch, identical on every
// rank: set the same seed everywhere) is padded by repeating its start until
// its length divides by world_size (or, with drop_last, cut to the largest
// multiple), and rank r takes positions r, r + world_size, r + 2 world_size, ...
//
//   auto sampler = std::make_shared<hg::distributed::DistributedSampler>(pg.world_size(), pg.rank());
//   hg::data::DataLoader loader(train_set, {.batch_size = 128, .sampler = sampler});
//   loader.set_epoch(epoch);   // a new shuffle each epoch, as sampler.set_epoch(epoch) in PyTorch
//
// For evaluation, pad = false (ours; PyTorch has no such option) gives every
// sample to exactly one rank: shards then differ by at most one sample, so
// sum the per-rank totals (all_reduce) rather than averaging per-rank means.
//
// Its indices need no communication, so it lives apart from MPI: any process
// knowing its rank and the world's size can shard.
#include <cstdint>

#include <halfgrad/data/sampler.h>

namespace halfgrad::distributed {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  bool pad = true;  // false: no repeated samples, shards of unequal length (evaluation; ignored with drop_last)
};

class DistributedSampler final : public data::Sampler {
 public:
  DistributedSampler(int world_size, int rank, DistributedSamplerOptions options = {});
  int64_t size(int64_t dataset_size) const override;
  Tensor indices(int64_t dataset_size, int64_t epoch) const override;
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }

 private:
  int world_size_, rank_;
  DistributedSamplerOptions options_;
};

}  // namespace halfgrad::distributed
