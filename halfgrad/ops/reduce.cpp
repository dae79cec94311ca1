// Reductions over dims with keepdim. The backward of sum/mean spreads the
// gradient back over the reduced dims (a stride-0 view, no copy); max sends
// it to the arg-max position only.
#include <halfgrad/core/alias.h>
#include <halfgrad/ops/dispatch.h>
#include <halfgrad/ops/kernels.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;
using kernels::ReduceOp;

namespace {

Shape keepdim_shape(const Shape& in, const std::vector<int64_t>& dims) {
  Shape s = in;
  for (int64_t d : dims) s[d] = 1;
  return s;
}

Shape squeezed_shape(const Shape& in, const std::vector<int64_t>& dims) {
  Shape s;
  size_t k = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    if (k < dims.size() && dims[k] == d) {
      ++k;
      continue;
    }
    s.push_back(in[d]);
  }
  return s;
}

// Run a reduce kernel into a new tensor of the right (keepdim or not) shape.
Tensor reduce_kernel(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype) {
  Tensor out = make_tensor(keepdim_shape(in.shape(), dims), TensorOptions(out_dtype, in.device()));
  kernels::reduce(op, in, dims, out);
  return keepdim ? out : alias_with(out, squeezed_shape(in.shape(), dims),
                                    contiguous_strides(squeezed_shape(in.shape(), dims)), 0);
}

// The gradient of a reduction, spread back over the input's shape.
Tensor expand_grad(const Tensor& g, const Shape& in_shape, const std::vector<int64_t>& dims) {
  return ops::broadcast_to(g.reshape(keepdim_shape(in_shape, dims)), in_shape);
}

Tensor sum_impl(OpId id, ReduceOp op, const Tensor& a0, const Shape& dims_in, bool keepdim) {
  const std::string_view name = op_name(id);
  ops::check_defined(name, {{"input", &a0}});
  const bool mean_op = op == ReduceOp::Mean;
  HG_CHECK(!mean_op || is_floating(a0.dtype()),
           "mean: input {} must be floating (mean of integers is not defined); cast it first, e.g. .to(float32)",
           a0.describe());
  // sum of bool/int64 gives int64, as in PyTorch
  const Tensor a = a0.dtype() == DType::Bool ? a0.to(DType::Int64) : a0;
  const auto dims = ops::normalize_dims(name, dims_in, a.dim());
  const Shape in_shape = a.shape();
  int64_t count = 1;
  for (int64_t d : dims) count *= in_shape[d];
  return dispatch::call(
      id, {a},
      [op, dims, keepdim](const std::vector<Tensor>& in) {
        return reduce_kernel(op, in[0], dims, keepdim, in[0].dtype());
      },
      [in_shape, dims, mean_op, count](const Saved&, const Tensor& g) -> Grads {
        const Tensor gi = mean_op ? div(g, static_cast<double>(count)) : g;
        return {expand_grad(gi, in_shape, dims)};
      },
      Save::Nothing);
}

}  // namespace

Tensor sum(const Tensor& a) { return sum_impl(OpId::sum, ReduceOp::Sum, a, {}, false); }
Tensor sum(const Tensor& a, const Shape& dims, bool keepdim) {
  HG_CHECK(!dims.empty(), "sum: give at least one dim, or call sum(t) to sum every element");
  return sum_impl(OpId::sum, ReduceOp::Sum, a, dims, keepdim);
}
Tensor mean(const Tensor& a) { return sum_impl(OpId::mean, ReduceOp::Mean, a, {}, false); }
Tensor mean(const Tensor& a, const Shape& dims, bool keepdim) {
  HG_CHECK(!dims.empty(), "mean: give at least one dim, or call mean(t) to average every element");
  return sum_impl(OpId::mean, ReduceOp::Mean, a, dims, keepdim);
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  ops::check_defined("argmax", {{"input", &a}});
  HG_CHECK(a.dtype() != DType::Bool, "argmax: bool input {} is not supported", a.describe());
  const int64_t d = ops::wrap_dim("argmax", dim, a.dim());
  HG_CHECK(a.dim() == 0 || a.shape()[d] > 0, "argmax: dimension {} of {} is empty", d, a.describe());
  return dispatch::call_nograd(OpId::argmax, {a}, [d, keepdim](const std::vector<Tensor>& in) {
    if (in[0].dim() == 0) return zeros({}, TensorOptions(DType::Int64, in[0].device()));
    return reduce_kernel(ReduceOp::ArgMax, in[0], {d}, keepdim, DType::Int64);
  });
}

Tensor argmax(const Tensor& a) { return argmax(a.reshape({-1}), 0, false); }

Tensor max(const Tensor& a, int64_t dim, bool keepdim) {
  ops::check_defined("max", {{"input", &a}});
  HG_CHECK(a.dtype() != DType::Bool, "max: bool input {} is not supported", a.describe());
  const int64_t d = ops::wrap_dim("max", dim, a.dim());
  HG_CHECK(a.dim() == 0 || a.shape()[d] > 0, "max: dimension {} of {} is empty", d, a.describe());
  if (a.dim() == 0) return a;
  const Shape in_shape = a.shape();
  return dispatch::call(
      OpId::max, {a},
      [d, keepdim](const std::vector<Tensor>& in) { return reduce_kernel(ReduceOp::Max, in[0], {d}, keepdim, in[0].dtype()); },
      [d, in_shape](const Saved& s, const Tensor& g) -> Grads {
        // one-hot at the arg-max along d (ties: the first, as the indices PyTorch returns)
        const Tensor idx = argmax(s.input(0), d, true);
        Shape pos_shape(in_shape.size(), 1);
        pos_shape[d] = in_shape[d];
        const Tensor pos = arange(in_shape[d], TensorOptions(DType::Int64, g.device())).reshape(pos_shape);
        const Tensor hit = eq(ops::broadcast_to(pos, in_shape), ops::broadcast_to(idx, in_shape));
        const Tensor gk = expand_grad(g, in_shape, {d});
        return {where(hit, gk, ops::scalar_tensor(0.0, g.dtype(), g.device()))};
      },
      Save::Inputs);
}

// The maximum of all elements. Its gradient is split evenly between tied
// maxima, as PyTorch does for a full reduction (max(dim) picks one index).
Tensor max(const Tensor& a) {
  ops::check_defined("max", {{"input", &a}});
  HG_CHECK(a.numel() > 0, "max: input {} is empty", a.describe());
  HG_CHECK(a.dtype() != DType::Bool, "max: bool input {} is not supported", a.describe());
  const auto dims = ops::normalize_dims("max", {}, a.dim());
  return dispatch::call(
      OpId::max, {a},
      [dims](const std::vector<Tensor>& in) { return reduce_kernel(ReduceOp::Max, in[0], dims, false, in[0].dtype()); },
      [](const Saved& s, const Tensor& g) -> Grads {
        // A NaN maximum: the gradient goes to the NaN elements (PyTorch's
        // evenly_distribute_backward), where eq() would match nothing.
        const Tensor& x = s.input(0);
        const Tensor& m = s.output();
        const Tensor hits = where(ne(m, m), ne(x, x), eq(x, m)).to(g.dtype());
        return {mul(hits, div(g, sum(hits)))};
      },
      Save::Both);
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  ops::check_broadcasts_to("sum_to", "the target shape", shape, a.shape(),
                           "; sum_to reduces a tensor to a shape that broadcasts to it");
  const size_t lead = a.shape().size() - shape.size();
  Shape dims;
  for (size_t i = 0; i < a.shape().size(); ++i) {
    const bool is_lead = i < lead;
    if (is_lead || (shape[i - lead] == 1 && a.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  }
  Tensor r = dims.empty() ? a : sum(a, dims, true);
  return r.reshape(shape);
}

// Tensor methods that forward to these ops.
Tensor Tensor::sum() const { return halfgrad::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return halfgrad::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return halfgrad::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return halfgrad::mean(*this, dims, keepdim); }
Tensor Tensor::matmul(const Tensor& other) const { return halfgrad::matmul(*this, other); }
Tensor Tensor::pow(double e) const { return halfgrad::pow(*this, e); }
Tensor Tensor::exp() const { return halfgrad::exp(*this); }
Tensor Tensor::log() const { return halfgrad::log(*this); }
Tensor Tensor::sqrt() const { return halfgrad::sqrt(*this); }
Tensor Tensor::abs() const { return halfgrad::abs(*this); }
Tensor Tensor::relu() const { return halfgrad::relu(*this); }

}  // namespace halfgrad
