// Dataset's default batching (stack the samples) and TensorDataset's gather.
#include <halfgrad/data/dataset.h>

#include <vector>

#include <halfgrad/ops/ops.h>

namespace halfgrad::data {

namespace {
void check_indices(const Tensor& indices, const char* op) {
  HG_CHECK(indices.dim() == 1 && indices.dtype() == DType::Int64 && indices.device().is_cpu(),
           "{}: indices must be a 1-d int64 CPU tensor, got {}", op, indices.describe());
}
}  // namespace

Example Dataset::get_batch(const Tensor& indices) const {
  check_indices(indices, "Dataset::get_batch");
  const Tensor idx = indices.contiguous();
  const int64_t* p = idx.data<int64_t>();
  std::vector<Tensor> inputs, targets;
  inputs.reserve(static_cast<size_t>(idx.numel()));
  targets.reserve(static_cast<size_t>(idx.numel()));
  for (int64_t i = 0; i < idx.numel(); ++i) {
    Example e = get(p[i]);
    HG_CHECK(e.input.defined() && e.target.defined(),
             "Dataset::get_batch: sample {} has an undefined input or target; get(i) must return both", p[i]);
    inputs.push_back(std::move(e.input));
    targets.push_back(std::move(e.target));
  }
  HG_CHECK(!inputs.empty(), "Dataset::get_batch: no indices (a batch holds at least one sample)");
  return {stack(inputs), stack(targets)};
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  HG_CHECK(inputs_.defined() && targets_.defined(), "TensorDataset: inputs and targets must both be defined");
  HG_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1,
           "TensorDataset: inputs {} and targets {} need a first dimension that numbers the samples",
           inputs_.describe(), targets_.describe());
  HG_CHECK(inputs_.size(0) == targets_.size(0),
           "TensorDataset: inputs {} hold {} samples but targets {} hold {}; the first dimensions must match",
           inputs_.describe(), inputs_.size(0), targets_.describe(), targets_.size(0));
  HG_CHECK(inputs_.device() == targets_.device(),
           "TensorDataset: inputs {} and targets {} are on different devices; move one (t.to(device))",
           inputs_.describe(), targets_.describe());
}

Example TensorDataset::get(int64_t index) const {
  HG_CHECK(index >= 0 && index < size(), "TensorDataset::get: index {} is out of range for {} samples", index,
           size());
  return {inputs_.select(0, index), targets_.select(0, index)};
}

Example TensorDataset::get_batch(const Tensor& indices) const {
  check_indices(indices, "TensorDataset::get_batch");
  // index_select checks the range on the host for CPU data; on a CUDA device
  // the loader's indices are in range by construction.
  const Tensor idx = inputs_.device().is_cpu() ? indices : indices.to(inputs_.device());
  return {index_select(inputs_, 0, idx), index_select(targets_, 0, idx)};
}

}  // namespace halfgrad::data
