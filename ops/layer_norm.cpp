// layer_norm (torch.nn.functional.layer_norm): one op, whose forward is the
// fused kernel (kernels::layer_norm_forward: the row statistics and the
// normalised, scaled, shifted output in one pass per row) and whose backward
// is kernels::layer_norm_backward, as PyTorch's native_layer_norm. The forward
// keeps each row's mean and rstd (the statistics dtype: float32, float64 for
// float64) for the backward. Under create_graph the backward is written with
// differentiable ops instead (the statistics recomputed from the saved
// input), so a double backward works. Autocast: PyTorch's fp32 row on CUDA,
// none on the CPU (amp/policy.cpp); the statistics of a float16/bfloat16
// input are computed in float32 either way.
#include <algorithm>

#include <halfgrad/core/error.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/grad_ops.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;

namespace {

// weight or bias: normalized_shape, and after autocast the input's dtype or
// float32 with a float16/bfloat16 input.
void check_affine(const char* what, const Tensor& t, const Tensor& x, const Shape& normalized_shape) {
  if (!t.defined()) return;
  HG_CHECK(t.shape() == normalized_shape,
           "layer_norm: {} {} must have the shape of normalized_shape {} (the trailing dims of input {})", what,
           t.describe(), shape_str(normalized_shape), x.describe());
  HG_CHECK(t.dtype() == x.dtype() || (is_low_precision(x.dtype()) && t.dtype() == DType::Float32),
           "layer_norm: {} {} must have the input's dtype ({}), or be float32 with a float16/bfloat16 input; "
           "cast it with .to(), or run the forward under amp::autocast",
           what, t.describe(), dtype_name(x.dtype()));
}


// The statistics dtype: float64 for float64, else float32.
DType stat_dtype(DType dt) { return dt == DType::Float64 ? DType::Float64 : DType::Float32; }

// The rows: the product of the dims before the normalized ones.
int64_t leading_numel(const Shape& x, const Shape& ns) {
  int64_t r = 1;
  for (size_t d = 0; d + ns.size() < x.size(); ++d) r *= x[d];
  return r;
}

// weight or bias as the kernels take them: [n] contiguous in the statistics dtype.
Tensor as_stat(const Tensor& t, DType a) {
  if (!t.defined()) return t;
  return t.to(a).contiguous().view({t.numel()});
}

// The backward with differentiable ops (create_graph): the statistics are
// recomputed from x with ops, so the result can be differentiated again in
// x, the weight and g. xhat = (x - mean) * rstd, gw = g * weight:
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)),
//   dweight = sum over the leading dims of g * xhat, dbias = of g.
Grads layer_norm_grad_ops(const Tensor& g, const Tensor& x, const Tensor& w, const Shape& ns, double eps, bool want_x,
                          bool want_w, bool want_b) {
  const auto k = static_cast<int64_t>(ns.size());
  const DType a = stat_dtype(x.dtype());
  Shape dims, lead;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  for (int64_t d = 0; d < x.dim() - k; ++d) lead.push_back(d);
  const Tensor xw = x.to(a), gw0 = g.to(a);
  const Tensor xc = sub(xw, mean(xw, dims, /*keepdim=*/true));
  const Tensor rstd = pow(add(mean(mul(xc, xc), dims, /*keepdim=*/true), eps), -0.5);
  const Tensor xhat = mul(xc, rstd);
  const auto lead_sum = [&](const Tensor& t) { return lead.empty() ? t : sum(t, lead); };
  Tensor dx, dw, db;
  if (want_x) {
    const Tensor gw = w.defined() ? mul(gw0, w.to(a)) : gw0;
    const Tensor inner = sub(sub(gw, mean(gw, dims, true)), mul(xhat, mean(mul(gw, xhat), dims, true)));
    dx = mul(rstd, inner).to(x.dtype());
  }
  if (want_w) dw = lead_sum(mul(gw0, xhat));
  if (want_b) db = lead_sum(gw0);
  return {dx, dw, db};
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  ops::check_defined("layer_norm", {{"input", &input}});
  HG_CHECK(is_floating(input.dtype()), "layer_norm: input {} must be floating", input.describe());
  const auto k = static_cast<int64_t>(normalized_shape.size());
  HG_CHECK(k >= 1, "layer_norm: normalized_shape must have at least one dim (the trailing sizes of input {}), got []",
           input.describe());
  const bool matches =
      k <= input.dim() && std::equal(normalized_shape.begin(), normalized_shape.end(), input.shape().end() - k);
  HG_CHECK(matches,
           "layer_norm: input {} does not end with normalized_shape {}: expected input of shape [*, {}]. "
           "normalized_shape is the sizes of the trailing dims to normalise over (e.g. {{{}}} for the last dim)",
           input.describe(), shape_str(normalized_shape),
           shape_str(normalized_shape).substr(1, shape_str(normalized_shape).size() - 2),
           input.dim() > 0 ? input.shape().back() : 0);
  HG_CHECK(eps >= 0.0, "layer_norm: eps must be non-negative, got {}", eps);
  const Shape ns = normalized_shape;
  return dispatch::call(
      OpId::layer_norm, {input, weight, bias},
      [ns, eps](const std::vector<Tensor>& in) {
        const Tensor &x = in[0], &w = in[1], &b = in[2];
        check_affine("weight", w, x, ns);
        check_affine("bias", b, x, ns);
        const DType a = stat_dtype(x.dtype());
        const int64_t n = shape_numel(ns), rows = leading_numel(x.shape(), ns);
        const Tensor xc = x.contiguous();
        Tensor y = make_tensor(x.shape(), x.options());
        Tensor mean = make_tensor({rows}, x.options().dtype(a));
        Tensor rstd = make_tensor({rows}, x.options().dtype(a));
        kernels::layer_norm_forward(xc.view({rows, n}), as_stat(w, a), as_stat(b, a), eps, y.view({rows, n}), mean,
                                    rstd);
        if (dispatch::recording()) {
          dispatch::save_for_backward(mean);
          dispatch::save_for_backward(rstd);
        }
        return y;
      },
      [ns, eps](const Saved& s, const Tensor& g) -> Grads {
        const Tensor &x = s.input(0), &w = s.input(1), &b = s.input(2);
        const bool want_x = s.needs_grad[0], want_w = w.defined() && s.needs_grad[1],
                   want_b = b.defined() && s.needs_grad[2];
        if (ops::creating_graph()) return layer_norm_grad_ops(g, x, w, ns, eps, want_x, want_w, want_b);
        const DType a = stat_dtype(x.dtype());
        const int64_t n = shape_numel(ns), rows = s.extra(0).numel();
        Tensor gx = want_x ? make_tensor(x.shape(), x.options()) : Tensor();
        Tensor gw = want_w ? make_tensor(ns, x.options().dtype(a)) : Tensor();
        Tensor gb = want_b ? make_tensor(ns, x.options().dtype(a)) : Tensor();
        kernels::layer_norm_backward(g.to(x.dtype()).contiguous().view({rows, n}), x.contiguous().view({rows, n}),
                                     s.extra(0), s.extra(1), as_stat(w, a),
                                     gx.defined() ? gx.view({rows, n}) : Tensor(),
                                     gw.defined() ? gw.view({n}) : Tensor(), gb.defined() ? gb.view({n}) : Tensor());
        // the weight's and bias's sums stay in float32 for float16/bfloat16
        // parameters: the engine rounds them to the parameter's dtype once
        return {gx, gw, gb};
      },
      Save::Inputs);
}

}  // namespace halfgrad
