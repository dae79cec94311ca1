// logsumexp, the vector norm, var and std: reductions composed of the reduce and
// elementwise kernels inside one op (one autograd node with its own backward
// formula). float16/bfloat16 inputs are computed in float32 (one accumulation
// in float32) and rounded once to the input's dtype, as PyTorch's
// ops with an fp32 accumulator do.
#include <algorithm>
#include <cmath>
#include <limits>

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
using kernels::UnaryOp;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_half(DType dt) { return dt == DType::Float16 || dt == DType::BFloat16; }

// The compute copy of `x`: float32 for the half types.
Tensor widened(const Tensor& x) { return is_half(x.dtype()) ? x.to(DType::Float32) : x; }

// The reduce kernel over `dims`, keeping them as size 1 (no dims: x itself, a 0-d input).
Tensor reduce_keep(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims) {
  if (dims.empty()) return x;
  Tensor out = make_tensor(ops::keepdim_shape(x.shape(), dims), x.options());
  kernels::reduce(op, x, dims, out);
  return out;
}

// A result computed with reduced dims kept, to the op's shape and dtype.
Tensor finish(const Tensor& r, const Shape& in_shape, const std::vector<int64_t>& dims, bool keepdim, DType dt) {
  const Tensor out = r.dtype() == dt ? r : r.to(dt);
  return keepdim ? out : out.reshape(ops::squeezed_shape(in_shape, dims));
}

bool any_reduced_empty(const Shape& in_shape, const std::vector<int64_t>& dims) {
  for (int64_t d : dims)
    if (in_shape[d] == 0) return true;
  return false;
}

}  // namespace

Tensor logsumexp(const Tensor& a0, const Shape& dims_in, bool keepdim) {
  ops::check_defined("logsumexp", {{"input", &a0}});
  // integers (and bool) give float32, as PyTorch
  const Tensor a = is_floating(a0.dtype()) ? a0 : a0.to(DType::Float32);
  const auto dims = ops::normalize_dims("logsumexp", dims_in, a.dim());
  const Shape in_shape = a.shape();
  return dispatch::call(
      OpId::logsumexp, {a},
      [dims, keepdim, in_shape](const std::vector<Tensor>& in) {
        const DType dt = in[0].dtype();
        if (any_reduced_empty(in_shape, dims)) {  // log(0): -inf, as PyTorch
          return full(keepdim ? ops::keepdim_shape(in_shape, dims) : ops::squeezed_shape(in_shape, dims), -kInf,
                      TensorOptions(dt, in[0].device()));
        }
        const Tensor x = widened(in[0]);
        // Shift by the max; an infinite max (all -inf, or a +inf) shifts by 0
        // so that -inf rows give log(0) = -inf and +inf rows give +inf, not NaN.
        const Tensor m = reduce_keep(ReduceOp::Max, x, dims);
        const Tensor shift = where(lt(abs(m), kInf), m, ops::scalar_tensor(0.0, x.dtype(), x.device()));
        const Tensor e = exp(sub(x, shift));
        const Tensor s = dims.empty() ? e : sum(e, dims, true);
        return finish(add(log(s), shift), in_shape, dims, keepdim, dt);
      },
      [dims, in_shape](const Saved& s, const Tensor& g) -> Grads {
        // d/dx = exp(x - out) (the softmax over the reduced dims)
        const Tensor& x = s.input(0);
        const Tensor out = s.output().reshape(ops::keepdim_shape(in_shape, dims));
        const Tensor gk = g.reshape(ops::keepdim_shape(in_shape, dims));
        return {mul(gk, exp(sub(x, out)))};
      },
      Save::Both);
}

Tensor norm(const Tensor& a, double p, const Shape& dims_in, bool keepdim) {
  ops::check_defined("norm", {{"input", &a}});
  HG_CHECK(is_floating(a.dtype()),
           "norm: input {} must be floating (as torch.linalg.vector_norm); cast it first, e.g. .to(float32)",
           a.describe());
  HG_CHECK(!std::isnan(p), "norm: p is NaN for input {}; give a number, inf or -inf", a.describe());
  const auto dims = ops::normalize_dims("norm", dims_in, a.dim());
  const Shape in_shape = a.shape();
  HG_CHECK(!(std::isinf(p) && any_reduced_empty(in_shape, dims)),
           "norm: p = {} over an empty dimension of {} is not defined (no elements to take the {} of)", p,
           a.describe(), p > 0 ? "max" : "min");
  return dispatch::call(
      OpId::norm, {a},
      [p, dims, keepdim, in_shape](const std::vector<Tensor>& in) {
        const DType dt = in[0].dtype();
        if (std::isinf(p)) {  // max/min |x|: exact in any dtype
          const Tensor r = reduce_keep(p > 0 ? ReduceOp::Max : ReduceOp::Min, abs(in[0]), dims);
          return finish(r, in_shape, dims, keepdim, dt);
        }
        const Tensor x = widened(in[0]);
        auto sum_keep = [&](const Tensor& t) { return dims.empty() ? t : sum(t, dims, true); };
        Tensor r;
        if (p == 0) r = sum_keep(ne(x, 0.0).to(x.dtype()));  // the count of nonzeros
        else if (p == 1) r = sum_keep(abs(x));
        else if (p == 2) r = sqrt(sum_keep(mul(x, x)));
        else r = pow(sum_keep(pow(abs(x), p)), 1.0 / p);
        return finish(r, in_shape, dims, keepdim, dt);
      },
      [p, dims, in_shape](const Saved& s, const Tensor& g) -> Grads {
        // PyTorch's linalg_vector_norm_backward
        const Tensor& x = s.input(0);
        const Tensor nk = s.output().reshape(ops::keepdim_shape(in_shape, dims));
        const Tensor gk = g.reshape(ops::keepdim_shape(in_shape, dims));
        const Tensor zero = ops::scalar_tensor(0.0, x.dtype(), x.device());
        if (p == 0) return {mul(zeros_like(x), gk)};
        if (p == 1) return {mul(sign(x), gk)};
        if (p == 2) return {mul(where(eq(nk, 0.0), zero, div(x, nk)), gk)};
        if (std::isinf(p)) {
          // evenly between the elements whose |x| is the norm
          const Tensor hits = eq(abs(x), nk).to(x.dtype());
          const Tensor count = dims.empty() ? hits : sum(hits, dims, true);
          return {mul(mul(sign(x), hits), div(gk, count))};
        }
        // sign(x) |x|^(p-1) * g / norm^(p-1); 0 where x is 0 or the norm is 0
        const Tensor scaled = where(eq(x, 0.0), zero, mul(sign(x), pow(abs(x), p - 1.0)));
        const Tensor scale = where(eq(nk, 0.0), zero, div(gk, pow(nk, p - 1.0)));
        return {mul(scaled, scale)};
      },
      Save::Both);
}

Tensor Tensor::logsumexp(const Shape& dims, bool keepdim) const { return halfgrad::logsumexp(*this, dims, keepdim); }
Tensor Tensor::norm(double p, const Shape& dims, bool keepdim) const { return halfgrad::norm(*this, p, dims, keepdim); }

namespace {
// var and std: checks, then the one op.
Tensor variance_op(OpId id, const Tensor& a, const Shape& dims_in, double correction, bool keepdim) {
  const std::string_view name = op_name(id);
  ops::check_defined(name, {{"input", &a}});
  HG_CHECK(is_floating(a.dtype()),
           "{}: input {} must be floating (PyTorch: std and var only support floating point dtypes); cast it "
           "first, e.g. .to(float32)",
           name, a.describe());
  HG_CHECK(std::isfinite(correction), "{}: correction must be a finite number, got {}", name, correction);
  const auto dims = ops::normalize_dims(name, dims_in, a.dim());
  const Shape in_shape = a.shape();
  int64_t n = 1;
  for (int64_t d : dims) n *= in_shape[d];
  // N - correction, never below 0: 0 gives inf or NaN (0 / 0), as PyTorch
  const double dof = std::max(static_cast<double>(n) - correction, 0.0);
  const bool is_std = id == OpId::std;
  return dispatch::call(
      id, {a},
      [dims, keepdim, in_shape, dof, is_std](const std::vector<Tensor>& in) {
        const DType dt = in[0].dtype();
        const Tensor x = widened(in[0]);
        const Tensor d = dims.empty() ? sub(x, x) : sub(x, mean(x, dims, true));
        const Tensor ss = dims.empty() ? mul(d, d) : sum(mul(d, d), dims, true);
        const Tensor v = div(ss, dof);
        return finish(is_std ? sqrt(v) : v, in_shape, dims, keepdim, dt);
      },
      [dims, in_shape, dof, is_std](const Saved& s, const Tensor& g) -> Grads {
        // var: 2 (x - mean) / dof * g; std: (x - mean) / (dof * std) * g,
        // in float32 for the half types, with differentiable ops
        const Tensor& x0 = s.input(0);
        const Tensor x = widened(x0);
        const Shape kshape = ops::keepdim_shape(in_shape, dims);
        const Tensor gk = widened(g).reshape(kshape);
        const Tensor centred = dims.empty() ? sub(x, x) : sub(x, mean(x, dims, true));
        Tensor r;
        if (is_std) r = mul(centred, div(gk, mul(widened(s.output()).reshape(kshape), dof)));
        else r = mul(centred, mul(gk, 2.0 / dof));
        return {r.dtype() == x0.dtype() ? r : r.to(x0.dtype())};
      },
      is_std ? Save::Both : Save::Inputs);
}
}  // namespace

Tensor var(const Tensor& a, const Shape& dims, double correction, bool keepdim) {
  return variance_op(OpId::var, a, dims, correction, keepdim);
}

Tensor std(const Tensor& a, const Shape& dims, double correction, bool keepdim) {
  return variance_op(OpId::std, a, dims, correction, keepdim);
}

}  // namespace halfgrad
