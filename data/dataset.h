#pragma once
// Data sets: what a DataLoader (data/loader.h) batches. A Dataset is a
// numbered collection of examples (PyTorch's map-style torch.utils.data.Dataset);
// TensorDataset keeps the whole set as two tensors whose first dimension
// numbers the samples, so a batch is one index_select per tensor instead of
// batch_size small copies.
#include <cstdint>

#include <halfgrad/core/tensor.h>

namespace halfgrad::data {

// One sample, or a batch of them (each tensor with a leading batch dimension).
struct Example {
  Tensor input;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Sample `index` in [0, size()).
  virtual Example get(int64_t index) const = 0;
  // The samples at `indices` (a 1-d int64 CPU tensor of valid indices, in
  // order) as one batch. The default stacks get(i) along a new dimension 0
  // (hg::stack, so every sample must have the same shapes); override it when a
  // batch can be gathered at once (TensorDataset does).
  //
  // A DataLoader with prefetch > 0 calls get_batch from its background thread
  // while your code runs: both must only read the data set (no shared mutable
  // state without your own lock).
  virtual Example get_batch(const Tensor& indices) const;
};

// An in-memory data set: sample i is (inputs[i], targets[i]).
class TensorDataset : public Dataset {
 public:
  // inputs and targets need at least one dimension and the same size(0), and
  // must sit on one device. They are kept by handle (no copy).
  TensorDataset(Tensor inputs, Tensor targets);

  int64_t size() const override { return inputs_.size(0); }
  // Views into the data set's tensors (inputs.select(0, index)).
  Example get(int64_t index) const override;
  // index_select(0, indices) of each tensor: one gather, new memory (for a
  // contiguous CPU tensor a memcpy per sample, with index_select's result).
  Example get_batch(const Tensor& indices) const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_, targets_;
};

}  // namespace halfgrad::data
