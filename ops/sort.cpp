// sort, argsort, topk, cumsum, randperm (ops/sort_ops.h).
//
// Every kernel works on rows: the op moves `dim` to the last place with a
// transpose (its own inverse) and makes that contiguous, the kernel sorts or
// scans each row, and the op transposes the result back (a copy, so the
// outputs are contiguous) -- the same path on the CPU and on CUDA.
//
// Every op has one output (docs/architecture.md): sort's dispatcher output is
// the values; its forward also writes the indices, which the op returns next to
// them and keeps for backward (dispatch::save_for_backward).
#include <limits>

#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;

namespace {

// x with dim d moved last, contiguous ([1] for a 0-d tensor).
Tensor to_rows(const Tensor& x, int64_t d) {
  if (x.dim() == 0) return x.reshape({1}).contiguous();
  const int64_t last = x.dim() - 1;
  return (d == last ? x : x.transpose(d, last)).contiguous();
}

// Back from the rows layout to a tensor of `ndim` dims with d in place (a
// contiguous copy when d was moved and `contiguous`, else a view).
Tensor from_rows(const Tensor& r, int64_t d, int64_t ndim, bool contiguous) {
  if (ndim == 0) return r.reshape({});
  const int64_t last = ndim - 1;
  if (d == last) return r;
  const Tensor t = r.transpose(d, last);
  return contiguous ? t.contiguous() : t;
}

// Values and indices of the first k (k < 0: all) of each sorted row, in the rows layout.
std::pair<Tensor, Tensor> sorted_rows(const Tensor& x, int64_t d, bool descending, int64_t k) {
  const Tensor xr = to_rows(x, d);
  Tensor v = make_tensor(xr.shape(), TensorOptions(xr.dtype(), xr.device()));
  Tensor i = make_tensor(xr.shape(), TensorOptions(DType::Int64, xr.device()));
  if (xr.numel() > 0) kernels::sort(xr, v, i, descending);
  const int64_t last = xr.dim() - 1;
  if (k >= 0 && k < xr.shape()[last]) {
    // topk: the first k of a full sort (O(n log n) per row, not O(n log k))
    v = v.narrow(last, 0, k).contiguous();
    i = i.narrow(last, 0, k).contiguous();
  }
  return {v, i};
}

// The gradient of values taken at `idx_rows` (rows layout, last dim k) from an
// input of shape in_shape along d: zeros with g scattered to the source positions.
Tensor scatter_back(const Tensor& g, const Tensor& idx_rows, int64_t d, const Shape& in_shape) {
  const int64_t ndim = static_cast<int64_t>(in_shape.size());
  const Tensor gr = to_rows(g, d);
  Shape rows_shape = idx_rows.shape();
  rows_shape.back() = ndim == 0 ? 1 : in_shape[d];
  Tensor grad = zeros(rows_shape, TensorOptions(g.dtype(), g.device()));
  if (gr.numel() > 0) kernels::take_along_dim_backward(gr, idx_rows, grad);
  return from_rows(grad, d, ndim, false);
}

// sort and topk: the values through the dispatcher (so autograd records them),
// the indices written by the forward into `indices`.
Tensor sort_values(OpId op, const Tensor& x, int64_t d, bool descending, int64_t k, Tensor& indices) {
  const Shape in_shape = x.shape();
  const int64_t ndim = x.dim();
  return dispatch::call(
      op, {x},
      [&](const std::vector<Tensor>& in) {
        auto [v, i] = sorted_rows(in[0], d, descending, k);
        if (dispatch::recording()) dispatch::save_for_backward(i);
        indices = from_rows(i, d, ndim, true);
        return from_rows(v, d, ndim, true);
      },
      [d, in_shape](const Saved& s, const Tensor& g) -> Grads { return {scatter_back(g, s.extra(0), d, in_shape)}; },
      Save::Nothing);
}

// The inclusive (reverse: from the end) cumulative sum along d; its backward is
// the cumulative sum of the gradient the other way, itself differentiable.
Tensor cumsum_dir(const Tensor& a, int64_t d, bool reverse) {
  return dispatch::call(
      OpId::cumsum, {a},
      [d, reverse](const std::vector<Tensor>& in) {
        const Tensor xr = to_rows(in[0], d);
        Tensor out = make_tensor(xr.shape(), TensorOptions(xr.dtype(), xr.device()));
        if (xr.numel() > 0) kernels::cumsum(xr, out, reverse);
        return from_rows(out, d, in[0].dim(), true);
      },
      [d, reverse](const Saved&, const Tensor& g) -> Grads { return {cumsum_dir(g, d, !reverse)}; }, Save::Nothing);
}

int64_t size_along(const Tensor& x, int64_t d) { return x.dim() == 0 ? 1 : x.shape()[d]; }

}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  ops::check_defined("sort", {{"input", &x}});
  (void)stable;  // every sort is stable (allowed for stable=false too)
  const int64_t d = ops::wrap_dim("sort", dim, x.dim());
  Tensor indices;
  Tensor values = sort_values(OpId::sort, x, d, descending, -1, indices);
  return {values, indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  ops::check_defined("argsort", {{"input", &x}});
  (void)stable;
  const int64_t d = ops::wrap_dim("argsort", dim, x.dim());
  return dispatch::call_nograd(OpId::argsort, {x}, [d, descending](const std::vector<Tensor>& in) {
    return from_rows(sorted_rows(in[0], d, descending, -1).second, d, in[0].dim(), true);
  });
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  ops::check_defined("topk", {{"input", &x}});
  (void)sorted;  // always sorted (PyTorch leaves the order of sorted=false unspecified)
  const int64_t d = ops::wrap_dim("topk", dim, x.dim());
  const int64_t n = size_along(x, d);
  HG_CHECK(k >= 0 && k <= n,
           "topk: k ({}) is out of range for dimension {} of size {} of {}; choose 0 <= k <= {} (selected index k "
           "out of range)",
           k, d, n, x.describe(), n);
  // A 0-d input gives its element for k = 0 too, as PyTorch (a 0-d result cannot be empty).
  const int64_t kk = x.dim() == 0 ? 1 : k;
  Tensor indices;
  Tensor values = sort_values(OpId::topk, x, d, largest, kk, indices);
  return {values, indices};
}

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  ops::check_defined("cumsum", {{"input", &x}});
  HG_CHECK(!dtype || *dtype != DType::Bool, "cumsum: dtype bool is not supported for {}; use int64 (the default "
           "for bool input)", x.describe());
  const int64_t d = ops::wrap_dim("cumsum", dim, x.dim());
  // As PyTorch: an explicit dtype casts the input first; bool and int64 give int64.
  const DType target = dtype ? *dtype : (is_floating(x.dtype()) ? x.dtype() : DType::Int64);
  const Tensor a = x.dtype() == target ? x : x.to(target);
  if (dtype) {
    // CUDA autocast runs cumsum in float32 only when no dtype is given
    // (PyTorch's fp32_set_opt_dtype): an explicit dtype is kept.
    dispatch::ExcludeGuard no_autocast(dispatch::Layer::Autocast);
    return cumsum_dir(a, d, false);
  }
  return cumsum_dir(a, d, false);
}

Tensor randperm(int64_t n, std::optional<Generator> generator, TensorOptions o) {
  o = o.with_default_dtype(DType::Int64);
  HG_CHECK(n >= 0, "randperm: n must be non-negative, got {}", n);
  HG_CHECK(o.dtype() != DType::Bool, "randperm: dtype bool is not supported; use int64 (the default)");
  if (is_floating(o.dtype())) {
    const int digits = o.dtype() == DType::Float16    ? 11
                       : o.dtype() == DType::BFloat16 ? 8
                       : o.dtype() == DType::Float32  ? 24
                                                      : 53;
    // every value 0..n-1 must be exact in the dtype (PyTorch: n <= 2049 for float16)
    HG_CHECK(n == 0 || n - 1 <= (int64_t{1} << digits),
             "randperm: n ({}) is too large for dtype {} (it holds integers exactly only up to {}); use int64",
             n, dtype_name(o.dtype()), int64_t{1} << digits);
  }
  Tensor p = make_tensor({n}, TensorOptions(DType::Int64, o.device()));
  Generator* gen = ops::generator_for("randperm", generator, p.device());
  if (n > 0) kernels::randperm(p, gen);
  Tensor t = o.dtype() == DType::Int64 ? p : p.to(o.dtype());
  if (o.requires_grad()) t.requires_grad_(true);
  return t;
}
Tensor randperm(int64_t n, TensorOptions o) { return randperm(n, std::nullopt, o); }

// Tensor methods that forward to these ops.
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending, bool stable) const {
  return halfgrad::sort(*this, dim, descending, stable);
}
Tensor Tensor::argsort(int64_t dim, bool descending, bool stable) const {
  return halfgrad::argsort(*this, dim, descending, stable);
}
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return halfgrad::topk(*this, k, dim, largest, sorted);
}
Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const { return halfgrad::cumsum(*this, dim, dtype); }

}  // namespace halfgrad
