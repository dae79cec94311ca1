// Logical reductions (all, any), closeness (isclose, allclose, equal) and the
// float classifications (isnan, isinf, isfinite), composed of the comparison
// and sum kernels inside one op each (bool results, no gradient).
// all/any cost a comparison pass and a sum (a pass to int64 and the
// reduction); equal/allclose read one bool back to the host.
#include <cmath>
#include <limits>

#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Elementwise logic on bool tensors (broadcasting), through where.
Tensor logical_and(const Tensor& a, const Tensor& b) { return where(a, b, a); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return where(a, a, b); }

Tensor all_any(bool is_all, const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  const char* name = is_all ? "all" : "any";
  ops::check_defined(name, {{"input", &a}});
  std::vector<int64_t> dims;
  if (dim) dims.push_back(ops::wrap_dim(name, *dim, a.dim()));
  if (a.dim() == 0) dims.clear();
  return dispatch::call_nograd(is_all ? OpId::all : OpId::any, {a},
                               [is_all, dims, dim, keepdim](const std::vector<Tensor>& in) {
                                 // all: no zero; any: some nonzero (NaN != 0 is true)
                                 const Tensor hits = is_all ? eq(in[0], 0.0) : ne(in[0], 0.0);
                                 const Tensor count =
                                     dim && !dims.empty() ? sum(hits, dims, keepdim) : sum(hits);
                                 Tensor r = is_all ? eq(count, 0.0) : gt(count, 0.0);
                                 // a 0-d input reduced over its "dim 0" keeps its shape
                                 return (dim && dims.empty()) ? r.reshape(in[0].shape()) : r;
                               });
}

}  // namespace

Tensor all(const Tensor& a) { return all_any(true, a, std::nullopt, false); }
Tensor all(const Tensor& a, int64_t dim, bool keepdim) { return all_any(true, a, dim, keepdim); }
Tensor any(const Tensor& a) { return all_any(false, a, std::nullopt, false); }
Tensor any(const Tensor& a, int64_t dim, bool keepdim) { return all_any(false, a, dim, keepdim); }

Tensor isnan(const Tensor& a) {
  ops::check_defined("isnan", {{"input", &a}});
  return dispatch::call_nograd(OpId::isnan, {a}, [](const std::vector<Tensor>& in) {
    if (!is_floating(in[0].dtype())) return zeros(in[0].shape(), TensorOptions(DType::Bool, in[0].device()));
    return ne(in[0], in[0]);
  });
}

Tensor isinf(const Tensor& a) {
  ops::check_defined("isinf", {{"input", &a}});
  return dispatch::call_nograd(OpId::isinf, {a}, [](const std::vector<Tensor>& in) {
    if (!is_floating(in[0].dtype())) return zeros(in[0].shape(), TensorOptions(DType::Bool, in[0].device()));
    return eq(abs(in[0]), kInf);
  });
}

Tensor isfinite(const Tensor& a) {
  ops::check_defined("isfinite", {{"input", &a}});
  return dispatch::call_nograd(OpId::isfinite, {a}, [](const std::vector<Tensor>& in) {
    if (!is_floating(in[0].dtype())) return ones(in[0].shape(), TensorOptions(DType::Bool, in[0].device()));
    return lt(abs(in[0]), kInf);  // false for NaN and +-inf
  });
}

// PyTorch's isclose: equal (so inf == inf), or NaN with NaN under equal_nan, or
// a finite |a - b| <= atol + rtol * |b|. Computed in the promoted dtype
// (integers and bool: float64, so the tolerance and |a - b| are exact).
Tensor isclose(const Tensor& a0, const Tensor& b0, double rtol, double atol, bool equal_nan) {
  ops::check_defined("isclose", {{"input", &a0}, {"other", &b0}});
  HG_CHECK(rtol >= 0 && atol >= 0, "isclose: rtol ({}) and atol ({}) must be non-negative (inputs {} and {})", rtol,
           atol, a0.describe(), b0.describe());
  DType dt = promote_types(a0.dtype(), b0.dtype());
  if (!is_floating(dt)) dt = DType::Float64;
  ops::broadcast_shapes("isclose", a0.shape(), b0.shape());
  return dispatch::call_nograd(OpId::isclose, {a0.to(dt), b0.to(dt)},
                               [rtol, atol, equal_nan](const std::vector<Tensor>& in) {
                                 const Tensor &a = in[0], &b = in[1];
                                 Tensor close = eq(a, b);
                                 if (equal_nan) close = logical_or(close, logical_and(ne(a, a), ne(b, b)));
                                 const Tensor err = abs(sub(a, b));
                                 const Tensor allowed = add(mul(abs(b), rtol), atol);
                                 const Tensor within = logical_and(lt(err, kInf), le(err, allowed));
                                 return logical_or(close, within);
                               });
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return all(isclose(a, b, rtol, atol, equal_nan)).item<bool>();
}

// torch.equal: false for different shapes; values compared after promotion.
bool equal(const Tensor& a, const Tensor& b) {
  ops::check_defined("equal", {{"input", &a}, {"other", &b}});
  dispatch::check_same_device("equal", {a, b});
  if (a.shape() != b.shape()) return false;
  return all(eq(a, b)).item<bool>();
}

Tensor Tensor::all() const { return halfgrad::all(*this); }
Tensor Tensor::all(int64_t dim, bool keepdim) const { return halfgrad::all(*this, dim, keepdim); }
Tensor Tensor::any() const { return halfgrad::any(*this); }
Tensor Tensor::any(int64_t dim, bool keepdim) const { return halfgrad::any(*this, dim, keepdim); }
bool Tensor::equal(const Tensor& other) const { return halfgrad::equal(*this, other); }
bool Tensor::allclose(const Tensor& other, double rtol, double atol, bool equal_nan) const {
  return halfgrad::allclose(*this, other, rtol, atol, equal_nan);
}
Tensor Tensor::isclose(const Tensor& other, double rtol, double atol, bool equal_nan) const {
  return halfgrad::isclose(*this, other, rtol, atol, equal_nan);
}
Tensor Tensor::isnan() const { return halfgrad::isnan(*this); }
Tensor Tensor::isinf() const { return halfgrad::isinf(*this); }
Tensor Tensor::isfinite() const { return halfgrad::isfinite(*this); }

}  // namespace halfgrad
