// Elementwise ops with broadcasting. Tensor-tensor ops first promote their
// inputs to a common dtype with differentiable casts (float16 + float32 gives
// float32, as in PyTorch), then run one kernel; a double operand takes the
// tensor's dtype. Each backward formula sums the gradient back to the
// input's shape where the input was broadcast.
#include <cmath>

#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/grad_ops.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;
using kernels::BinaryOp;
using kernels::UnaryOp;
using ops::creating_graph;

namespace {

// Inputs cast to their promoted dtype (integers become float32 for ops that need floats).
std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b, bool needs_float) {
  DType dt = promote_types(a.dtype(), b.dtype());
  if (needs_float && !is_floating(dt)) dt = DType::Float32;
  return {a.to(dt), b.to(dt)};
}

// A double operand as a 0-d tensor of the tensor's dtype; an integer tensor
// with a fractional value promotes to float32, as in PyTorch.
Tensor scalar_like(const Tensor& t, double value) {
  const bool integral = std::floor(value) == value;
  const DType dt = is_floating(t.dtype()) || integral ? (t.dtype() == DType::Bool ? DType::Int64 : t.dtype())
                                                      : DType::Float32;
  return ops::scalar_tensor(value, dt, t.device());
}

Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Shape& shape, double alpha = 1.0) {
  Tensor out = make_tensor(shape, a.options(), ops::output_format(shape, {&a, &b}));
  kernels::binary(op, ops::broadcast_to(a, shape), ops::broadcast_to(b, shape), out, alpha);
  return out;
}

Tensor binary_op(OpId id, BinaryOp op, const Tensor& a0, const Tensor& b0, bool needs_float,
                 double alpha, dispatch::Backward backward, Save save) {
  const std::string_view name = op_name(id);
  ops::check_defined(name, {{"input", &a0}, {"other", &b0}});
  auto [a, b] = promoted(a0, b0, needs_float);
  const Shape shape = ops::broadcast_shapes(name, a.shape(), b.shape());
  return dispatch::call(
      id, {a, b},
      [op, shape, alpha](const std::vector<Tensor>& in) { return binary_kernel(op, in[0], in[1], shape, alpha); },
      std::move(backward), save);
}

Tensor unary_op(OpId id, UnaryOp op, const Tensor& a0, dispatch::Backward backward, Save save,
                kernels::UnaryParams p = {}, bool needs_float = true) {
  const std::string_view name = op_name(id);
  ops::check_defined(name, {{"input", &a0}});
  const Tensor a = needs_float && !is_floating(a0.dtype()) ? a0.to(DType::Float32) : a0;
  return dispatch::call(
      id, {a},
      [op, p](const std::vector<Tensor>& in) {
        Tensor out = ops::empty_like(in[0], in[0].options());
        kernels::unary(op, in[0], out, p);
        return out;
      },
      std::move(backward), save);
}

Tensor compare_op(OpId id, BinaryOp op, const Tensor& a0, const Tensor& b0) {
  const std::string_view name = op_name(id);
  ops::check_defined(name, {{"input", &a0}, {"other", &b0}});
  auto [a, b] = promoted(a0, b0, false);
  const Shape shape = ops::broadcast_shapes(name, a.shape(), b.shape());
  return dispatch::call_nograd(id, {a, b}, [op, shape](const std::vector<Tensor>& in) {
    Tensor out = make_tensor(shape, TensorOptions(DType::Bool, in[0].device()), ops::output_format(shape, {&in[0], &in[1]}));
    kernels::binary(op, ops::broadcast_to(in[0], shape), ops::broadcast_to(in[1], shape), out);
    return out;
  });
}

// g where mask is true, else 0 (mask is bool, g's shape).
Tensor masked_grad(const Tensor& g, const Tensor& mask) {
  return where(mask, g, ops::scalar_tensor(0.0, g.dtype(), g.device()));
}

// maximum/minimum, as PyTorch: the loser gets 0, a tie gives each side g / 2,
// otherwise g (so where a NaN was taken, both sides get g).
Tensor tie_split_grad(const Tensor& g, const Tensor& loses, const Tensor& ties) {
  return where(loses, ops::scalar_tensor(0.0, g.dtype(), g.device()), where(ties, mul(g, 0.5), g));
}

Tensor logical_and(const Tensor& a, const Tensor& b) { return where(a, b, a); }
Tensor zero_like(const Tensor& g) { return ops::scalar_tensor(0.0, g.dtype(), g.device()); }

Tensor logical_or(const Tensor& a, const Tensor& b) { return where(a, a, b); }

// remainder/fmod: a binary kernel; integer divisors of 0 are an Error on the
// CPU (a host read of b); on CUDA the kernel gives 0 (it cannot throw).
Tensor mod_op(OpId id, BinaryOp op, const Tensor& a0, const Tensor& b0) {
  const std::string_view name = op_name(id);
  ops::check_defined(name, {{"input", &a0}, {"other", &b0}});
  const DType dt = promote_types(a0.dtype(), b0.dtype());
  HG_CHECK(dt != DType::Bool, "{}: bool inputs {} and {} are not supported; cast them first, e.g. .to(int64)", name,
           a0.describe(), b0.describe());
  if (!is_floating(dt) && b0.device().is_cpu() && b0.numel() > 0) {
    const bool zero = any(eq(b0, 0.0)).item<bool>();
    HG_CHECK(!zero, "{}: ZeroDivisionError: integer division by zero (the divisor {} holds a 0; input {})", name,
             b0.describe(), a0.describe());
  }
  // grad_b = -g * floor(a / b) (remainder) or -g * trunc(a / b) (fmod), computed
  // as -g * (a - out) / b: a - out is the multiple of b that was taken away.
  return binary_op(id, op, a0, b0, false, 1.0,
                   [](const Saved& s, const Tensor& g) -> Grads {
                     const Tensor &x = s.input(0), &y = s.input(1);
                     const Tensor q = div(sub(x, s.output()), y);
                     return {sum_to(g, x.shape()), sum_to(neg(mul(g, q)), y.shape())};
                   },
                   Save::Both);
}

}  // namespace

// ---- arithmetic ----------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  ops::check_defined("add", {{"input", &a}, {"other", &b}});
  const Shape sa = a.shape(), sb = b.shape();
  return binary_op(OpId::add, BinaryOp::Add, a, b, false, alpha,
                   [sa, sb, alpha](const Saved&, const Tensor& g) -> Grads {
                     return {sum_to(g, sa), sum_to(alpha == 1.0 ? g : mul(g, alpha), sb)};
                   },
                   Save::Nothing);
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  ops::check_defined("sub", {{"input", &a}, {"other", &b}});
  const Shape sa = a.shape(), sb = b.shape();
  return binary_op(OpId::sub, BinaryOp::Sub, a, b, false, alpha,
                   [sa, sb, alpha](const Saved&, const Tensor& g) -> Grads {
                     return {sum_to(g, sa), sum_to(mul(g, -alpha), sb)};
                   },
                   Save::Nothing);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  ops::check_defined("mul", {{"input", &a}, {"other", &b}});
  return binary_op(OpId::mul, BinaryOp::Mul, a, b, false, 1.0,
                   [](const Saved& s, const Tensor& g) -> Grads {
                     const Tensor &x = s.input(0), &y = s.input(1);
                     return {sum_to(mul(g, y), x.shape()), sum_to(mul(g, x), y.shape())};
                   },
                   Save::Inputs);
}

Tensor div(const Tensor& a, const Tensor& b) {
  ops::check_defined("div", {{"input", &a}, {"other", &b}});
  return binary_op(OpId::div, BinaryOp::Div, a, b, true, 1.0,
                   [](const Saved& s, const Tensor& g) -> Grads {
                     const Tensor &x = s.input(0), &y = s.input(1);
                     const Tensor gx = div(g, y);
                     return {sum_to(gx, x.shape()), sum_to(neg(mul(gx, div(x, y))), y.shape())};
                   },
                   Save::Inputs);
}

Tensor pow(const Tensor& a, const Tensor& b) {
  ops::check_defined("pow", {{"input", &a}, {"other", &b}});
  return binary_op(OpId::pow, BinaryOp::Pow, a, b, true, 1.0,
                   [](const Saved& s, const Tensor& g) -> Grads {
                     const Tensor &x = s.input(0), &y = s.input(1);
                     const Tensor gx = mul(g, mul(y, pow(x, sub(y, 1.0))));
                     // d/dy x^y = x^y log x; at x = 0 (y >= 0) PyTorch defines it as 0
                     const Tensor zero = ops::scalar_tensor(0.0, x.dtype(), x.device());
                     const Tensor gy = where(eq(x, 0.0), zero, mul(g, mul(pow(x, y), log(x))));
                     return {sum_to(gx, x.shape()), sum_to(gy, y.shape())};
                   },
                   Save::Inputs);
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  ops::check_defined("maximum", {{"input", &a}, {"other", &b}});
  return binary_op(OpId::maximum, BinaryOp::Maximum, a, b, false, 1.0,
                   [](const Saved& s, const Tensor& g) -> Grads {
                     const Tensor &x = s.input(0), &y = s.input(1);
                     return {sum_to(tie_split_grad(g, lt(x, y), eq(x, y)), x.shape()),
                             sum_to(tie_split_grad(g, gt(x, y), eq(x, y)), y.shape())};
                   },
                   Save::Inputs);
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  ops::check_defined("minimum", {{"input", &a}, {"other", &b}});
  return binary_op(OpId::minimum, BinaryOp::Minimum, a, b, false, 1.0,
                   [](const Saved& s, const Tensor& g) -> Grads {
                     const Tensor &x = s.input(0), &y = s.input(1);
                     return {sum_to(tie_split_grad(g, gt(x, y), eq(x, y)), x.shape()),
                             sum_to(tie_split_grad(g, lt(x, y), eq(x, y)), y.shape())};
                   },
                   Save::Inputs);
}

Tensor remainder(const Tensor& a, const Tensor& b) { return mod_op(OpId::remainder, BinaryOp::Remainder, a, b); }
Tensor fmod(const Tensor& a, const Tensor& b) { return mod_op(OpId::fmod, BinaryOp::Fmod, a, b); }
// An integer tensor by the scalar 0 is an Error on every device (no device read needed).
Tensor remainder(const Tensor& a, double b) {
  HG_CHECK(is_floating(a.dtype()) || b != 0,
           "remainder: ZeroDivisionError: integer division by zero ({} by the scalar 0)", a.describe());
  return remainder(a, scalar_like(a, b));
}
Tensor fmod(const Tensor& a, double b) {
  HG_CHECK(is_floating(a.dtype()) || b != 0, "fmod: ZeroDivisionError: integer division by zero ({} by the scalar 0)",
           a.describe());
  return fmod(a, scalar_like(a, b));
}

Tensor add(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor sub(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
Tensor mul(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }
Tensor div(const Tensor& a, double b) {
  return div(a, is_floating(a.dtype()) ? scalar_like(a, b) : ops::scalar_tensor(b, DType::Float32, a.device()));
}

Tensor pow(const Tensor& a, double exponent) {
  // An integer tensor to an integral power stays an integer tensor; to a
  // fractional (or infinite) one it becomes float32, as in PyTorch.
  const bool integral = !is_floating(a.dtype()) && std::isfinite(exponent) && std::floor(exponent) == exponent;
  if (integral) {
    HG_CHECK(exponent >= 0,
             "pow: Integers to negative integer powers are not allowed. (the {} tensor {} to the power {}); cast "
             "it to a float dtype first, e.g. pow(t.to(float32), {})",
             dtype_name(a.dtype()), a.describe(), exponent, exponent);
    HG_CHECK(exponent < 9223372036854775808.0,
             "pow: the exponent {} of the {} tensor {} does not fit in int64; cast the tensor to a float dtype "
             "first",
             exponent, dtype_name(a.dtype()), a.describe());
  }
  return unary_op(OpId::pow, UnaryOp::PowScalar, a,
                  [exponent](const Saved& s, const Tensor& g) -> Grads {
                    if (exponent == 0.0) return {zeros_like(g)};  // d x^0 = 0, also at x = 0
                    return {mul(g, mul(pow(s.input(0), exponent - 1.0), exponent))};
                  },
                  Save::Inputs, {exponent, 0.0}, /*needs_float=*/!integral);
}

// ---- unary -------------------------------------------------------------------------
Tensor neg(const Tensor& a) {
  return unary_op(OpId::neg, UnaryOp::Neg, a, [](const Saved&, const Tensor& g) -> Grads { return {neg(g)}; },
                  Save::Nothing, {}, false);
}

Tensor exp(const Tensor& a) {
  return unary_op(OpId::exp, UnaryOp::Exp, a,
                  [](const Saved& s, const Tensor& g) -> Grads { return {mul(g, s.output())}; }, Save::Output);
}

Tensor log(const Tensor& a) {
  return unary_op(OpId::log, UnaryOp::Log, a,
                  [](const Saved& s, const Tensor& g) -> Grads { return {div(g, s.input(0))}; }, Save::Inputs);
}

Tensor sqrt(const Tensor& a) {
  return unary_op(OpId::sqrt, UnaryOp::Sqrt, a,
                  [](const Saved& s, const Tensor& g) -> Grads { return {div(g, mul(s.output(), 2.0))}; },
                  Save::Output);
}

Tensor abs(const Tensor& a) {
  return unary_op(OpId::abs, UnaryOp::Abs, a,
                  [](const Saved& s, const Tensor& g) -> Grads { return {mul(g, sign(s.input(0)))}; },
                  Save::Inputs, {}, false);
}

Tensor relu(const Tensor& a) {
  return unary_op(OpId::relu, UnaryOp::Relu, a,
                  [](const Saved& s, const Tensor& g) -> Grads {
                    // one pass, no mask tensor: g where the output is positive
                    if (creating_graph()) return {masked_grad(g.to(s.output().dtype()), gt(s.output(), 0.0))};
                    return {binary_kernel(BinaryOp::ReluBackward, g.to(s.output().dtype()), s.output(), g.shape())};
                  },
                  Save::Output, {}, false);
}

// One op "gelu" for both forms, as in PyTorch; each form's backward uses its own derivative.
Tensor gelu(const Tensor& a, std::string_view approximate) {
  HG_CHECK(approximate == "none" || approximate == "tanh",
           "gelu: approximate must be \"none\" (exact, the default) or \"tanh\", got \"{}\" for input {}",
           approximate, a.describe());
  const bool tanh_form = approximate == "tanh";
  return unary_op(OpId::gelu, tanh_form ? UnaryOp::GeluTanh : UnaryOp::Gelu, a,
                  [grad_op = tanh_form ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward](
                      const Saved& s, const Tensor& g) -> Grads {
                    const Tensor& x = s.input(0);
                    if (creating_graph())
                      return {mul(g.to(x.dtype()), ops::gelu_grad_ops(x, grad_op == BinaryOp::GeluTanhBackward))};
                    return {binary_kernel(grad_op, g.to(x.dtype()), x, g.shape())};
                  },
                  Save::Inputs);
}

Tensor sigmoid(const Tensor& a) {
  return unary_op(OpId::sigmoid, UnaryOp::Sigmoid, a,
                  [](const Saved& s, const Tensor& g) -> Grads {
                    const Tensor& y = s.output();
                    if (creating_graph()) return {mul(g.to(y.dtype()), mul(y, neg(sub(y, 1.0))))};  // y (1 - y)
                    return {binary_kernel(BinaryOp::SigmoidBackward, g.to(y.dtype()), y, g.shape())};
                  },
                  Save::Output);
}

// MobileNetV3's activations. hardswish and hardsigmoid need floats (PyTorch has
// no integer kernels); relu6 also takes int64, as PyTorch's (hardtanh) does.
// Each backward is one pass on the saved input; the kink values are math.h's.
namespace {
// PyTorch has no integer (or bool) kernels for hardswish and hardsigmoid, and
// relu6 takes int64 but not bool: an Error rather than a silent float32 result.
void check_activation_input(OpId id, const Tensor& a, bool int64_ok) {
  ops::check_defined(op_name(id), {{"input", &a}});
  HG_CHECK(is_floating(a.dtype()) || (int64_ok && a.dtype() == DType::Int64),
           "{}: expected a floating{} tensor, got {}. Cast it first, e.g. .to(float32).", op_name(id),
           int64_ok ? " or int64" : "", a.describe());
}
}  // namespace

Tensor hardswish(const Tensor& a) {
  check_activation_input(OpId::hardswish, a, false);
  return unary_op(OpId::hardswish, UnaryOp::Hardswish, a,
                  [](const Saved& s, const Tensor& g) -> Grads {
                    const Tensor& x = s.input(0);
                    if (creating_graph()) {  // 0 below -3, x / 3 + 1/2 up to 3, then 1
                      const Tensor gx = g.to(x.dtype());
                      return {where(lt(x, -3.0), zero_like(gx), where(le(x, 3.0), mul(gx, add(div(x, 3.0), 0.5)), gx))};
                    }
                    return {binary_kernel(BinaryOp::HardswishBackward, g.to(x.dtype()), x, g.shape())};
                  },
                  Save::Inputs);
}

Tensor hardsigmoid(const Tensor& a) {
  check_activation_input(OpId::hardsigmoid, a, false);
  return unary_op(OpId::hardsigmoid, UnaryOp::Hardsigmoid, a,
                  [](const Saved& s, const Tensor& g) -> Grads {
                    const Tensor& x = s.input(0);
                    if (creating_graph())  // 1/6 strictly inside (-3, 3)
                      return {masked_grad(mul(g.to(x.dtype()), 1.0 / 6.0), logical_and(gt(x, -3.0), lt(x, 3.0)))};
                    return {binary_kernel(BinaryOp::HardsigmoidBackward, g.to(x.dtype()), x, g.shape())};
                  },
                  Save::Inputs);
}

Tensor relu6(const Tensor& a) {
  check_activation_input(OpId::relu6, a, true);
  return unary_op(OpId::relu6, UnaryOp::Relu6, a,
                  [](const Saved& s, const Tensor& g) -> Grads {
                    const Tensor& x = s.input(0);
                    if (creating_graph())  // 0 at and beyond the kinks
                      return {masked_grad(g.to(x.dtype()), logical_and(gt(x, 0.0), lt(x, 6.0)))};
                    return {binary_kernel(BinaryOp::Relu6Backward, g.to(x.dtype()), x, g.shape())};
                  },
                  Save::Inputs, {}, false);
}

namespace {
// prelu's weight as a view that broadcasts against x: 0-d for one weight, else
// [1, C, 1, ...] (the channel dim is dim 1, as PyTorch).
Tensor prelu_weight_view(const Tensor& w, int64_t x_dim) {
  if (w.numel() == 1) return w.reshape({});
  Shape shape(static_cast<size_t>(x_dim), 1);
  shape[1] = w.numel();
  return w.reshape(shape);
}
}  // namespace

Tensor prelu(const Tensor& x, const Tensor& weight) {
  ops::check_defined("prelu", {{"input", &x}, {"weight", &weight}});
  HG_CHECK(is_floating(x.dtype()) && is_floating(weight.dtype()),
           "prelu: expected floating tensors, got input {} and weight {}. Cast them first, e.g. .to(float32).",
           x.describe(), weight.describe());
  HG_CHECK(weight.dim() <= 1,
           "prelu: weight must be a scalar or a 1-d tensor ([1] or [C] with C = input.shape[1]), got {} for input {}",
           weight.describe(), x.describe());
  // As PyTorch: the channel dim is dim 1; a 0-d or 1-d input has one channel.
  const int64_t channels = x.dim() >= 2 ? x.shape()[1] : 1;
  HG_CHECK(weight.numel() == 1 || weight.numel() == channels,
           "prelu: weight {} has {} parameters but input {} has {} channels (dim 1; 1 for a 0-d or 1-d input); pass "
           "one weight or one per channel (nn::PReLU(num_parameters = {}))",
           weight.describe(), weight.numel(), x.describe(), channels, channels);
  return dispatch::call(
      OpId::prelu, {x, weight},
      [](const std::vector<Tensor>& in) {
        ops::check_same_dtype("prelu", in);
        const Tensor wb = prelu_weight_view(in[1], in[0].dim());
        return binary_kernel(BinaryOp::Prelu, in[0], wb, in[0].shape());
      },
      [](const Saved& s, const Tensor& g0) -> Grads {
        const Tensor& x = s.input(0);
        const Tensor& w = s.input(1);
        const Tensor g = g0.to(x.dtype());
        const Tensor wb = prelu_weight_view(w, x.dim());
        const Tensor positive = gt(x, 0.0);
        const Tensor zero = ops::scalar_tensor(0.0, x.dtype(), x.device());
        Tensor dx, dw;
        if (s.needs_grad[0]) dx = where(positive, g, mul(g, wb));
        if (s.needs_grad[1]) {
          // sum over every dim but the channel dim (all dims for one weight); a
          // NaN input contributes NaN, as PyTorch
          const Tensor contrib = where(positive, zero, mul(x, g));
          Shape dims;
          for (int64_t d = 0; d < x.dim(); ++d)
            if (w.numel() == 1 || d != 1) dims.push_back(d);
          dw = (dims.empty() ? contrib : sum(contrib, dims)).reshape(w.shape());
        }
        return {dx, dw};
      },
      Save::Inputs);
}

Tensor tanh(const Tensor& a) {
  return unary_op(OpId::tanh, UnaryOp::Tanh, a,
                  [](const Saved& s, const Tensor& g) -> Grads {
                    const Tensor& y = s.output();
                    if (creating_graph()) return {mul(g.to(y.dtype()), neg(sub(mul(y, y), 1.0)))};  // 1 - y^2
                    return {binary_kernel(BinaryOp::TanhBackward, g.to(y.dtype()), y, g.shape())};
                  },
                  Save::Output);
}

Tensor sin(const Tensor& a) {
  return unary_op(OpId::sin, UnaryOp::Sin, a,
                  [](const Saved& s, const Tensor& g) -> Grads { return {mul(g, cos(s.input(0)))}; }, Save::Inputs);
}

Tensor cos(const Tensor& a) {
  return unary_op(OpId::cos, UnaryOp::Cos, a,
                  [](const Saved& s, const Tensor& g) -> Grads { return {mul(g, neg(sin(s.input(0))))}; },
                  Save::Inputs);
}

Tensor erf(const Tensor& a) {
  return unary_op(OpId::erf, UnaryOp::Erf, a,
                  [](const Saved& s, const Tensor& g) -> Grads {
                    // 2 / sqrt(pi) * exp(-x^2)
                    const Tensor& x = s.input(0);
                    return {mul(g, mul(exp(neg(mul(x, x))), 1.1283791670955126))};
                  },
                  Save::Inputs);
}

// Piecewise-constant ops: a zero gradient (PyTorch's zeros_like(grad): a NaN
// or inf upstream does not leak through).
Tensor floor(const Tensor& a) {
  return unary_op(OpId::floor, UnaryOp::Floor, a,
                  [](const Saved&, const Tensor& g) -> Grads { return {zeros_like(g)}; }, Save::Nothing, {}, false);
}

Tensor round(const Tensor& a) {
  return unary_op(OpId::round, UnaryOp::Round, a,
                  [](const Saved&, const Tensor& g) -> Grads { return {zeros_like(g)}; }, Save::Nothing, {}, false);
}

Tensor sign(const Tensor& a) {
  return unary_op(OpId::sign, UnaryOp::Sign, a,
                  [](const Saved&, const Tensor& g) -> Grads { return {zeros_like(g)}; }, Save::Nothing, {}, false);
}

Tensor clamp(const Tensor& a, std::optional<double> min, std::optional<double> max) {
  HG_CHECK(min || max, "clamp: at least one of min and max must be given");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  HG_CHECK(is_floating(a.dtype()) || ((!min || std::floor(*min) == *min) && (!max || std::floor(*max) == *max)),
           "clamp: fractional bounds for the integer tensor {}; cast it to a float dtype first", a.describe());
  const double lo = min ? *min : nan, hi = max ? *max : nan;  // NaN: no bound
  return unary_op(OpId::clamp, UnaryOp::Clamp, a,
                  [](const Saved& s, const Tensor& g) -> Grads {
                    return {masked_grad(g, eq(s.output(), s.input(0)))};  // gradient passes where not clamped
                  },
                  Save::Both, {lo, hi}, false);
}

Tensor clamp(const Tensor& a0, const std::optional<Tensor>& min0, const std::optional<Tensor>& max0) {
  HG_CHECK(min0 || max0, "clamp: at least one of min and max must be given");
  ops::check_defined("clamp", {{"input", &a0}});
  if (min0) ops::check_defined("clamp", {{"min", &*min0}});
  if (max0) ops::check_defined("clamp", {{"max", &*max0}});
  DType dt = a0.dtype();
  if (min0) dt = promote_types(dt, min0->dtype());
  if (max0) dt = promote_types(dt, max0->dtype());
  HG_CHECK(dt != DType::Bool, "clamp: bool input {} is not supported; cast it first", a0.describe());
  const bool has_min = min0.has_value(), has_max = max0.has_value();
  std::vector<Tensor> inputs{a0.to(dt)};
  Shape shape = a0.shape();
  if (has_min) {
    inputs.push_back(min0->to(dt));
    shape = ops::broadcast_shapes("clamp", shape, min0->shape());
  }
  if (has_max) {
    inputs.push_back(max0->to(dt));
    shape = ops::broadcast_shapes("clamp", shape, max0->shape());
  }
  return dispatch::call(
      OpId::clamp, inputs,
      [has_min, has_max, shape](const std::vector<Tensor>& in) {
        // minimum(maximum(x, min), max): a NaN anywhere propagates
        Tensor t = ops::broadcast_to(in[0], shape);
        if (has_min) t = binary_kernel(BinaryOp::Maximum, t, in[1], shape);
        if (has_max) t = binary_kernel(BinaryOp::Minimum, t, in[has_min ? 2 : 1], shape);
        const MemoryFormat f = ops::output_format(shape, {&in[0]});
        return t.is_contiguous(f) ? t : t.contiguous(f);
      },
      [has_min, has_max](const Saved& s, const Tensor& g) -> Grads {
        // PyTorch's clamp_backward / clamp_backward_min_max
        const Tensor& x = s.input(0);
        const Tensor lo = has_min ? s.input(1) : Tensor();
        const Tensor hi = has_max ? s.input(has_min ? 2 : 1) : Tensor();
        Grads out;
        if (has_min && has_max) {
          out.push_back(sum_to(masked_grad(g, ops::broadcast_to(logical_and(ge(x, lo), le(x, hi)), g.shape())),
                               x.shape()));
          out.push_back(sum_to(masked_grad(g, ops::broadcast_to(logical_and(lt(x, lo), lt(lo, hi)), g.shape())),
                               lo.shape()));
          out.push_back(sum_to(masked_grad(g, ops::broadcast_to(logical_or(gt(x, hi), lt(hi, lo)), g.shape())),
                               hi.shape()));
        } else if (has_min) {
          out.push_back(sum_to(masked_grad(g, ops::broadcast_to(ge(x, lo), g.shape())), x.shape()));
          out.push_back(sum_to(masked_grad(g, ops::broadcast_to(lt(x, lo), g.shape())), lo.shape()));
        } else {
          out.push_back(sum_to(masked_grad(g, ops::broadcast_to(le(x, hi), g.shape())), x.shape()));
          out.push_back(sum_to(masked_grad(g, ops::broadcast_to(gt(x, hi), g.shape())), hi.shape()));
        }
        return out;
      },
      Save::Inputs);
}

Tensor clamp_min(const Tensor& a, double min) { return clamp(a, min, std::nullopt); }
Tensor clamp_max(const Tensor& a, double max) { return clamp(a, std::nullopt, max); }
Tensor clamp_min(const Tensor& a, const Tensor& min) { return clamp(a, std::optional<Tensor>(min), std::nullopt); }
Tensor clamp_max(const Tensor& a, const Tensor& max) { return clamp(a, std::nullopt, std::optional<Tensor>(max)); }

Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const {
  return halfgrad::clamp(*this, min, max);
}
Tensor Tensor::clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max) const {
  return halfgrad::clamp(*this, min, max);
}
Tensor Tensor::clamp_min(double min) const { return halfgrad::clamp_min(*this, min); }
Tensor Tensor::clamp_min(const Tensor& min) const { return halfgrad::clamp_min(*this, min); }
Tensor Tensor::clamp_max(double max) const { return halfgrad::clamp_max(*this, max); }
Tensor Tensor::clamp_max(const Tensor& max) const { return halfgrad::clamp_max(*this, max); }
Tensor Tensor::remainder(const Tensor& other) const { return halfgrad::remainder(*this, other); }
Tensor Tensor::remainder(double other) const { return halfgrad::remainder(*this, other); }
Tensor Tensor::fmod(const Tensor& other) const { return halfgrad::fmod(*this, other); }
Tensor Tensor::fmod(double other) const { return halfgrad::fmod(*this, other); }

// ---- comparisons and where --------------------------------------------------------------
Tensor eq(const Tensor& a, const Tensor& b) { return compare_op(OpId::eq, BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_op(OpId::ne, BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_op(OpId::lt, BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_op(OpId::le, BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_op(OpId::gt, BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_op(OpId::ge, BinaryOp::Ge, a, b); }
Tensor eq(const Tensor& a, double b) { return eq(a, scalar_like(a, b)); }
Tensor ne(const Tensor& a, double b) { return ne(a, scalar_like(a, b)); }
Tensor lt(const Tensor& a, double b) { return lt(a, scalar_like(a, b)); }
Tensor le(const Tensor& a, double b) { return le(a, scalar_like(a, b)); }
Tensor gt(const Tensor& a, double b) { return gt(a, scalar_like(a, b)); }
Tensor ge(const Tensor& a, double b) { return ge(a, scalar_like(a, b)); }

Tensor where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  HG_CHECK(cond.dtype() == DType::Bool, "where: condition must be bool, got {}", cond.describe());
  auto [a, b] = promoted(a0, b0, false);
  const Shape shape =
      ops::broadcast_shapes("where", cond.shape(), ops::broadcast_shapes("where", a.shape(), b.shape()));
  const Shape sa = a.shape(), sb = b.shape();
  return dispatch::call(
      OpId::where, {cond, a, b},
      [shape](const std::vector<Tensor>& in) {
        Tensor out = make_tensor(shape, in[1].options(), ops::output_format(shape, {&in[1], &in[2], &in[0]}));
        kernels::where(ops::broadcast_to(in[0], shape), ops::broadcast_to(in[1], shape),
                       ops::broadcast_to(in[2], shape), out);
        return out;
      },
      [sa, sb](const Saved& s, const Tensor& g) -> Grads {
        const Tensor& c = s.input(0);
        return {Tensor(), sum_to(masked_grad(g, ops::broadcast_to(c, g.shape())), sa),
                sum_to(masked_grad(g, ops::broadcast_to(eq(c, 0.0), g.shape())), sb)};
      },
      Save::Inputs);
}

}  // namespace halfgrad
