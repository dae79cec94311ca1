// Reductions over dims with keepdim. The backward of sum/mean spreads the
// gradient back over the reduced dims (a stride-0 view, no copy); max(dim) and
// min(dim) send it to the returned index only, amax/amin and the full max/min
// split it evenly between ties.
#include <memory>

#include <halfgrad/core/alias.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;
using kernels::ReduceOp;

namespace {

// Run a reduce kernel into a new tensor of the right (keepdim or not) shape.
Tensor reduce_kernel(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype) {
  Tensor out = make_tensor(ops::keepdim_shape(in.shape(), dims), TensorOptions(out_dtype, in.device()));
  kernels::reduce(op, in, dims, out);
  return keepdim ? out : alias_with(out, ops::squeezed_shape(in.shape(), dims),
                                    contiguous_strides(ops::squeezed_shape(in.shape(), dims)), 0);
}

// The gradient of a reduction, spread back over the input's shape.
Tensor expand_grad(const Tensor& g, const Shape& in_shape, const std::vector<int64_t>& dims) {
  return ops::broadcast_to(g.reshape(ops::keepdim_shape(in_shape, dims)), in_shape);
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

namespace {

Tensor arg_impl(bool is_min, const Tensor& a, int64_t dim, bool keepdim) {
  const char* name = is_min ? "argmin" : "argmax";
  ops::check_defined(name, {{"input", &a}});
  HG_CHECK(a.dtype() != DType::Bool, "{}: bool input {} is not supported; cast it first, e.g. .to(int64)", name,
           a.describe());
  const int64_t d = ops::wrap_dim(name, dim, a.dim());
  HG_CHECK(a.dim() == 0 || a.shape()[d] > 0, "{}: dimension {} of {} is empty", name, d, a.describe());
  const ReduceOp op = is_min ? ReduceOp::ArgMin : ReduceOp::ArgMax;
  return dispatch::call_nograd(is_min ? OpId::argmin : OpId::argmax, {a},
                               [d, keepdim, op](const std::vector<Tensor>& in) {
                                 if (in[0].dim() == 0) return zeros({}, TensorOptions(DType::Int64, in[0].device()));
                                 return reduce_kernel(op, in[0], {d}, keepdim, DType::Int64);
                               });
}

// max(x, dim) / min(x, dim): the values and their first indices (NaN wins),
// from one kernel pass. The gradient goes to the returned index only
// (PyTorch's value_selecting_reduction_backward).
std::tuple<Tensor, Tensor> extreme_dim(bool is_min, const Tensor& a, int64_t dim, bool keepdim) {
  const char* name = is_min ? "min" : "max";
  ops::check_defined(name, {{"input", &a}});
  HG_CHECK(a.dtype() != DType::Bool, "{}: bool input {} is not supported; cast it first, e.g. .to(int64)", name,
           a.describe());
  const int64_t d = ops::wrap_dim(name, dim, a.dim());
  HG_CHECK(a.dim() == 0 || a.shape()[d] > 0,
           "{}: dimension {} of {} is empty (the {} of no elements is not defined); use amax/amin over other dims",
           name, d, a.describe(), name);
  if (a.dim() == 0) return {a, arg_impl(is_min, a, d, keepdim)};
  const Shape in_shape = a.shape();
  const Shape kept = ops::keepdim_shape(in_shape, {d});
  // the forward's indices (kept dims), for the caller and for the backward
  auto indices = std::make_shared<Tensor>();
  const ReduceOp op = is_min ? ReduceOp::Min : ReduceOp::Max;
  Tensor values = dispatch::call(
      is_min ? OpId::min : OpId::max, {a},
      [d, kept, op, indices](const std::vector<Tensor>& in) {
        Tensor out = make_tensor(kept, in[0].options());
        *indices = make_tensor(kept, TensorOptions(DType::Int64, in[0].device()));
        kernels::reduce(op, in[0], {d}, out, *indices);
        // version-checked: an in-place change of the returned indices before backward is an Error
        if (dispatch::recording()) dispatch::save_for_backward(*indices);
        return out;
      },
      [d, in_shape](const Saved& s, const Tensor& g) -> Grads {
        Shape pos_shape(in_shape.size(), 1);
        pos_shape[d] = in_shape[d];
        const Tensor pos = arange(in_shape[d], TensorOptions(DType::Int64, g.device())).reshape(pos_shape);
        const Tensor hit = ops::broadcast_to(eq(pos, s.extra(0)), in_shape);
        return {where(hit, expand_grad(g, in_shape, {d}), ops::scalar_tensor(0.0, g.dtype(), g.device()))};
      },
      Save::Nothing);
  Tensor idx = *indices;
  if (!keepdim) {
    const Shape sq = ops::squeezed_shape(in_shape, {d});
    values = values.reshape(sq);
    idx = alias_with(idx, sq, contiguous_strides(sq), 0);
  }
  return {values, idx};
}

// A sum over dims kept as size 1, or the tensor itself when no dims (0-d input).
Tensor sum_keep(const Tensor& t, const std::vector<int64_t>& dims) { return dims.empty() ? t : sum(t, dims, true); }

// amax/amin (and max(x)/min(x), all dims): the gradient is split evenly
// between the elements equal to the result; a NaN result sends it to the NaN
// elements (PyTorch's evenly_distribute_backward; PyTorch's amax gives NaN there).
Tensor amax_impl(OpId id, bool is_min, const Tensor& a, const Shape& dims_in, bool keepdim) {
  const std::string_view name = op_name(id);
  ops::check_defined(name, {{"input", &a}});
  HG_CHECK(a.dtype() != DType::Bool, "{}: bool input {} is not supported; cast it first, e.g. .to(int64)", name,
           a.describe());
  const auto dims = ops::normalize_dims(name, dims_in, a.dim());
  for (int64_t d : dims)
    HG_CHECK(a.shape()[d] > 0, "{}: dimension {} of {} is empty (the {} of no elements is not defined)", name, d,
             a.describe(), is_min ? "minimum" : "maximum");
  const Shape in_shape = a.shape();
  const ReduceOp op = is_min ? ReduceOp::Min : ReduceOp::Max;
  return dispatch::call(
      id, {a},
      [op, dims, keepdim](const std::vector<Tensor>& in) {
        return reduce_kernel(op, in[0], dims, keepdim, in[0].dtype());
      },
      [dims, in_shape](const Saved& s, const Tensor& g) -> Grads {
        const Tensor& x = s.input(0);
        const Tensor m = s.output().reshape(ops::keepdim_shape(in_shape, dims));
        const Tensor hits = where(ne(m, m), ne(x, x), eq(x, m)).to(g.dtype());
        const Tensor gk = g.reshape(ops::keepdim_shape(in_shape, dims));
        return {mul(hits, div(gk, sum_keep(hits, dims)))};
      },
      Save::Both);
}

}  // namespace

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) { return arg_impl(false, a, dim, keepdim); }
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) { return arg_impl(true, a, dim, keepdim); }
Tensor argmax(const Tensor& a) { return argmax(a.reshape({-1}), 0, false); }
Tensor argmin(const Tensor& a) { return argmin(a.reshape({-1}), 0, false); }

std::tuple<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) { return extreme_dim(false, a, dim, keepdim); }
std::tuple<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim) { return extreme_dim(true, a, dim, keepdim); }

// The maximum/minimum of all elements. The gradient is split evenly between
// tied maxima, as PyTorch does for a full reduction (max(dim) picks one index).
Tensor max(const Tensor& a) {
  ops::check_defined("max", {{"input", &a}});
  HG_CHECK(a.numel() > 0, "max: input {} is empty", a.describe());
  return amax_impl(OpId::max, false, a, {}, false);
}
Tensor min(const Tensor& a) {
  ops::check_defined("min", {{"input", &a}});
  HG_CHECK(a.numel() > 0, "min: input {} is empty", a.describe());
  return amax_impl(OpId::min, true, a, {}, false);
}
Tensor amax(const Tensor& a, const Shape& dims, bool keepdim) { return amax_impl(OpId::amax, false, a, dims, keepdim); }
Tensor amin(const Tensor& a, const Shape& dims, bool keepdim) { return amax_impl(OpId::amin, true, a, dims, keepdim); }

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
Tensor Tensor::max() const { return halfgrad::max(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return halfgrad::max(*this, dim, keepdim); }
Tensor Tensor::min() const { return halfgrad::min(*this); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return halfgrad::min(*this, dim, keepdim); }
Tensor Tensor::argmax() const { return halfgrad::argmax(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return halfgrad::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin() const { return halfgrad::argmin(*this); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return halfgrad::argmin(*this, dim, keepdim); }
Tensor Tensor::amax(const Shape& dims, bool keepdim) const { return halfgrad::amax(*this, dims, keepdim); }
Tensor Tensor::amin(const Shape& dims, bool keepdim) const { return halfgrad::amin(*this, dims, keepdim); }

}  // namespace halfgrad
