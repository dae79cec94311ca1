// Dataset's default batching (stack the samples) and TensorDataset's gather.
#include <halfgrad/data/dataset.h>

#include <cstring>
#include <vector>

#include <halfgrad/ops/ops.h>

namespace halfgrad::data {

namespace {
void check_indices(const Tensor& indices, const char* op) {
  HG_CHECK(indices.dim() == 1 && indices.dtype() == DType::Int64 && indices.device().is_cpu(),
           "{}: indices must be a 1-d int64 CPU tensor, got {}", op, indices.describe());
}

// index_select(t, 0, indices) for a contiguous CPU tensor: one memcpy per
// sample row. Same result as the op; ~10x faster than today's generic CPU
// index_select kernel for these whole-row gathers (an epoch of Fashion-MNIST
// in batches of 128: 0.04 s against 0.35 s), and it is the loader's hot path.
Tensor gather_rows(const Tensor& t, const Tensor& indices) {
  const Tensor idx = indices.contiguous();
  const int64_t* p = idx.data<int64_t>();
  const int64_t n = t.size(0), len = idx.numel();
  Shape shape = t.shape();
  shape[0] = len;
  Tensor out = make_tensor(shape, t.options());
  const size_t row = n == 0 ? 0 : static_cast<size_t>(t.numel() / n) * itemsize(t.dtype());
  const auto* src = static_cast<const unsigned char*>(t.data_ptr());
  auto* dst = static_cast<unsigned char*>(out.data_ptr());
  for (int64_t r = 0; r < len; ++r) {
    HG_CHECK(p[r] >= 0 && p[r] < n, "TensorDataset::get_batch: index {} is out of range for {} samples", p[r], n);
    if (row > 0) std::memcpy(dst + static_cast<size_t>(r) * row, src + static_cast<size_t>(p[r]) * row, row);
  }
  return out;
}

Tensor gather(const Tensor& t, const Tensor& indices) {
  if (t.device().is_cpu() && t.is_contiguous()) return gather_rows(t, indices);
  // index_select checks the range on the host for CPU data; on a CUDA device
  // the loader's indices are in range by construction.
  return index_select(t, 0, t.device().is_cpu() ? indices : indices.to(t.device()));
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
  return {gather(inputs_, indices), gather(targets_, indices)};
}

}  // namespace halfgrad::data
