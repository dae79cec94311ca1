// layer_norm (torch.nn.functional.layer_norm): a composite of differentiable
// ops (mean, sub, mul, pow, add), so autograd records the inner ops and the
// result is twice differentiable (ops/transformer_ops.h). Autocast: PyTorch's
// fp32 row on CUDA, none on the CPU (amp/policy.cpp); the statistics of a
// float16/bfloat16 input are computed in float32 either way.
#include <algorithm>

#include <halfgrad/core/error.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

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
  return dispatch::composite(OpId::layer_norm, {input, weight, bias}, [ns, k, eps](const std::vector<Tensor>& in) {
    const Tensor &x = in[0], &w = in[1], &b = in[2];
    check_affine("weight", w, x, ns);
    check_affine("bias", b, x, ns);
    const DType dt = x.dtype(), wide = is_low_precision(dt) ? DType::Float32 : dt;
    Shape dims;
    for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
    const Tensor xw = x.to(wide);
    const Tensor xc = sub(xw, mean(xw, dims, /*keepdim=*/true));
    const Tensor var = mean(mul(xc, xc), dims, /*keepdim=*/true);  // biased, as PyTorch
    Tensor y = mul(xc, pow(add(var, eps), -0.5));
    if (w.defined()) y = mul(y, w.to(wide));
    if (b.defined()) y = add(y, b.to(wide));
    return y.to(dt);
  });
}

}  // namespace halfgrad
