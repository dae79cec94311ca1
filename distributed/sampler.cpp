#include <halfgrad/distributed/sampler.h>

#include <halfgrad/core/error.h>

namespace halfgrad::distributed {

DistributedSampler::DistributedSampler(int world_size, int rank, DistributedSamplerOptions options)
    : world_size_(world_size), rank_(rank), options_(options) {
  HG_CHECK(world_size > 0 && rank >= 0 && rank < world_size,
           "DistributedSampler: rank {} of a world of {}: need 0 <= rank < world_size", rank, world_size);
}

int64_t DistributedSampler::size(int64_t n) const {
  const int64_t w = world_size_;
  // PyTorch: drop_last cuts to a multiple of the world size, else pads up to one
  if (options_.drop_last) return n / w;
  if (!options_.pad) return (n - rank_ + w - 1) / w;  // positions rank, rank + w, ... below n
  return (n + w - 1) / w;
}

Tensor DistributedSampler::indices(int64_t n, int64_t epoch) const {
  const Tensor order = options_.shuffle ? data::shuffled_order(n, options_.seed, epoch) : Tensor();
  const int64_t per_rank = size(n), total = per_rank * world_size_;
  HG_CHECK(n > 0 || total == 0, "DistributedSampler: the data set is empty");
  Tensor out = make_tensor({per_rank}, TensorOptions(DType::Int64));
  int64_t* dst = out.data<int64_t>();
  const int64_t* src = order.defined() ? order.data<int64_t>() : nullptr;
  for (int64_t i = 0; i < per_rank; ++i) {
    // position in the padded order; padding repeats the order from its start
    const int64_t pos = (rank_ + i * world_size_) % n;
    dst[i] = src ? src[pos] : pos;
  }
  return out;
}

}  // namespace halfgrad::distributed
