// The entries of the kernel interface that are the same on every backend
// (declared in kernels/kernels.h): arithmetic on geometry and layer lists, and
// the reduced NLL loss made of other kernels (CUDA's path; the tests run it on
// the CPU too).
#include <halfgrad/kernels/kernels.h>

#include <halfgrad/core/alias.h>

namespace halfgrad::kernels {

ConvCrop crop_negative_padding(const ConvGeometry& g, const int64_t* in) {
  ConvCrop c;
  c.g = g;
  for (int i = 0; i < g.nd; ++i) {
    const int64_t pb = g.pad_before[i], pa = g.pad_after[i];
    // out = (in + pb + pa - extent) / stride + 1 is unchanged: size + max(pb, 0) + max(pa, 0) == in + pb + pa
    c.start[i] = pb < 0 ? -pb : 0;
    c.size[i] = in[i] + (pa < 0 ? pa : 0) - c.start[i];
    c.g.pad_before[i] = pb < 0 ? 0 : pb;
    c.g.pad_after[i] = pa < 0 ? 0 : pa;
    c.cropped = c.cropped || pb < 0 || pa < 0;
    c.empty = c.empty || c.size[i] <= 0;
  }
  return c;
}

int64_t linear_chain_lowest(const Tensor& dx, const std::vector<ChainLayerGrad>& layers) {
  if (dx.defined()) return -1;
  const int64_t count = static_cast<int64_t>(layers.size());
  for (int64_t i = 0; i < count; ++i)
    if (layers[i].dw_wanted || layers[i].db.defined()) return i;
  return count;
}

// The kernels the ops would run (per-sample loss, its sum; the mask target !=
// ignore_index as logp's dtype, its sum; the division), without the
// dispatcher around each.
void nll_loss_reduced_by_kernels(const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                                 int64_t ignore_index, bool mean, const char* op) {
  const int64_t n = logp.shape()[0];
  const Tensor per = make_tensor({n}, logp.options());
  nll_loss(logp, target, per, ignore_index, op);
  const Tensor out1 = alias_with(out, {1}, {1}, out.offset()), count1 = alias_with(count, {1}, {1}, count.offset());
  reduce(ReduceOp::Sum, per, {0}, out1);
  const Tensor ignore = make_tensor({1}, TensorOptions(DType::Int64, target.device()));
  fill(ignore, static_cast<double>(ignore_index));
  const Tensor kept = make_tensor({n}, TensorOptions(DType::Bool, target.device()));
  binary(BinaryOp::Ne, target, alias_with(ignore, {n}, {0}, 0), kept);
  const Tensor kept_f = make_tensor({n}, logp.options());
  copy(kept_f, kept);
  reduce(ReduceOp::Sum, kept_f, {0}, count1);
  if (mean) binary(BinaryOp::Div, out, count, out);
}

}  // namespace halfgrad::kernels
