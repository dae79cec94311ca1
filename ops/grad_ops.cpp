// The activations' derivatives as ops (ops/grad_ops.h), with the kinks of the
// kernels' math.h arms.
#include <halfgrad/dispatch/grad_mode.h>
#include <halfgrad/ops/grad_ops.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad::ops {

bool creating_graph() { return autograd::grad_enabled(); }

Tensor gelu_grad_ops(const Tensor& x, bool tanh_form) {
  if (!tanh_form) {  // Phi(x) + x phi(x)
    const Tensor cdf = mul(add(erf(mul(x, 0.70710678118654752440)), 1.0), 0.5);
    const Tensor pdf = mul(exp(mul(mul(x, x), -0.5)), 0.39894228040143267794);
    return add(cdf, mul(x, pdf));
  }
  constexpr double beta = 0.79788456080286535588, kappa = 0.044715;  // sqrt(2 / pi)
  const Tensor x_sq = mul(x, x);
  const Tensor t = tanh(mul(add(x, mul(mul(x_sq, x), kappa)), beta));
  const Tensor left = mul(add(t, 1.0), 0.5);
  const Tensor inner = mul(add(mul(x_sq, 3.0 * kappa), 1.0), beta);
  return add(left, mul(mul(mul(x, 0.5), neg(sub(mul(t, t), 1.0))), inner));  // + x/2 (1 - t^2) inner
}

Tensor activation_grad_ops(Activation act, const Tensor& g, const Tensor& z) {
  switch (act) {
    case Activation::None: return g;
    case Activation::ReLU: return where(gt(z, 0.0), g, scalar_tensor(0.0, g.dtype(), g.device()));
    case Activation::GELU: return mul(g, gelu_grad_ops(z, false));
    case Activation::GELUTanh: return mul(g, gelu_grad_ops(z, true));
  }
  return g;
}

}  // namespace halfgrad::ops
