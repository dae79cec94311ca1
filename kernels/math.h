#pragma once
// Per-element math shared by the CPU backend and the CUDA kernels: every
// functor is HG_HOST_DEVICE and works on the compute type (float for the half
// types, double for float64, int64 for int64), so the CPU tests check the
// same arithmetic that runs on the GPU.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <halfgrad/core/macros.h>
#include <halfgrad/kernels/kernels.h>

namespace halfgrad::math {

// Overloads with one spelling for float and double on host and device.
#define HG_MATH_FN(name, f32, f64)                  \
  HG_INLINE float name(float x) { return f32(x); }  \
  HG_INLINE double name(double x) { return f64(x); }
HG_MATH_FN(exp_, expf, ::exp)
HG_MATH_FN(log_, logf, ::log)
HG_MATH_FN(sqrt_, sqrtf, ::sqrt)
HG_MATH_FN(tanh_, tanhf, ::tanh)
HG_MATH_FN(erf_, erff, ::erf)
HG_MATH_FN(fabs_, fabsf, ::fabs)
HG_MATH_FN(sin_, sinf, ::sin)
HG_MATH_FN(cos_, cosf, ::cos)
HG_MATH_FN(floor_, floorf, ::floor)
HG_MATH_FN(rint_, rintf, ::rint)  // round half to even in the default rounding mode
#undef HG_MATH_FN
HG_INLINE float fmod_(float x, float y) { return fmodf(x, y); }
HG_INLINE double fmod_(double x, double y) { return ::fmod(x, y); }
// Integer fmod without undefined behaviour: a divisor of 0 gives 0 (the CPU op
// reports it as an Error before the kernel runs; CUDA kernels cannot throw), and
// -1 gives 0 (INT64_MIN % -1 overflows in C++).
HG_INLINE int64_t fmod_(int64_t x, int64_t y) { return (y == 0 || y == -1) ? 0 : x % y; }
// Python's %: fmod, moved to the divisor's sign (PyTorch's remainder kernel).
template <typename T> HG_INLINE T remainder_(T x, T y) {
  T r = fmod_(x, y);
  if (r != T(0) && ((r < T(0)) != (y < T(0)))) r += y;
  return r;
}
HG_INLINE float pow_(float x, float y) { return powf(x, y); }
HG_INLINE double pow_(double x, double y) { return ::pow(x, y); }
// PyTorch's powi: squaring in unsigned arithmetic, so overflow wraps around
// (as PyTorch's results do) instead of being undefined; a negative exponent
// gives 1 for 1, +-1 for -1 and 0 otherwise.
HG_INLINE int64_t pow_(int64_t x, int64_t y) {
  if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
  uint64_t r = 1, base = static_cast<uint64_t>(x);
  for (uint64_t e = static_cast<uint64_t>(y); e != 0; e >>= 1) {
    if (e & 1) r *= base;
    base *= base;
  }
  return static_cast<int64_t>(r);
}

template <typename T> HG_INLINE bool isnan_(T x) { return x != x; }

// x ^ a for a scalar exponent, as PyTorch's pow_tensor_scalar: the exponents
// 0.5, -0.5, 2, 3, -1 and -2 are sqrt, 1/sqrt and products (so pow(-inf, 0.5)
// is NaN like sqrt(-inf), where C's pow gives inf); others are pow.
template <typename T> HG_INLINE T pow_scalar(T x, T a) {
  if constexpr (std::is_integral_v<T>) {
    return pow_(x, a);
  } else {
    if (a == T(0.5)) return sqrt_(x);
    if (a == T(-0.5)) return T(1) / sqrt_(x);
    if (a == T(2)) return x * x;
    if (a == T(3)) return x * x * x;
    if (a == T(-1)) return T(1) / x;
    if (a == T(-2)) return T(1) / (x * x);
    return pow_(x, a);
  }
}
// A compile-time false that names the op: an enum value without an arm below
// fails to compile instead of computing the identity.
template <auto Op> inline constexpr bool kNoArmFor = false;

// Exact GELU (PyTorch's default, approximate='none'): x * Phi(x).
template <typename T> HG_INLINE T gelu(T x) {
  return T(0.5) * x * (T(1) + erf_(x * T(0.70710678118654752440)));
}
template <typename T> HG_INLINE T gelu_grad(T x) {
  const T cdf = T(0.5) * (T(1) + erf_(x * T(0.70710678118654752440)));
  const T pdf = exp_(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}
// PyTorch's gelu(approximate='tanh'), written as its CPU kernel writes it so
// the CPU, our CUDA kernels and the GEMM layer's fallback passes round alike.
// (cuBLASLt's fused GELU epilogues compute the same formula their own way.)
constexpr double kGeluTanhBeta = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluTanhKappa = 0.044715;
template <typename T> HG_INLINE T gelu_tanh(T x) {
  const T inner = T(kGeluTanhBeta) * (x + T(kGeluTanhKappa) * (x * x * x));
  return T(0.5) * x * (T(1) + tanh_(inner));
}
// d gelu_tanh / dx: PyTorch's GeluBackward, tanh branch.
template <typename T> HG_INLINE T gelu_tanh_grad(T x) {
  const T x_sq = x * x;
  const T inner = T(kGeluTanhBeta) * (x + T(kGeluTanhKappa) * (x_sq * x));
  const T t = tanh_(inner);
  const T left_derivative = T(0.5) * (T(1) + t);
  const T inner_derivative = T(kGeluTanhBeta) * (T(1) + T(3) * T(kGeluTanhKappa) * x_sq);
  return left_derivative + T(0.5) * x * (T(1) - t * t) * inner_derivative;
}
template <typename T> HG_INLINE T sigmoid(T x) { return T(1) / (T(1) + exp_(-x)); }

// MobileNetV3's activations, as PyTorch's CPU kernels write them (a NaN stays
// NaN: comparisons with NaN are false, so neither bound replaces it).
template <typename T> HG_INLINE T relu6(T x) {
  T y = x;
  if (y < T(0)) y = T(0);
  if (y > T(6)) y = T(6);
  return y;
}
template <typename T> HG_INLINE T hardsigmoid(T x) { return relu6(x + T(3)) / T(6); }
template <typename T> HG_INLINE T hardswish(T x) { return x * relu6(x + T(3)) / T(6); }
// g * hardswish'(x). At the kinks PyTorch 1.13's CPU scalar loop and CUDA kernel
// give -0.5 at x = -3 and 1.5 at x = 3 (x / 3 + 0.5 on the closed interval) and
// pass g for a NaN input; its vectorised CPU loop gives 1 at x = 3 and NaN for
// NaN. We take the scalar/CUDA definition everywhere.
template <typename T> HG_INLINE T hardswish_backward(T g, T x) {
  if (x < T(-3)) return T(0);
  if (x <= T(3)) return g * (x / T(3) + T(0.5));
  return g;
}
// g / 6 strictly inside (-3, 3), else 0 (0 at the kinks and for NaN), as PyTorch.
template <typename T> HG_INLINE T hardsigmoid_backward(T g, T x) {
  return (x > T(-3) && x < T(3)) ? g * T(1.0 / 6.0) : T(0);
}
// hardtanh_backward(0, 6): 0 at and beyond the kinks; a NaN input passes g
// (PyTorch's scalar and CUDA kernels; its vectorised CPU loop gives 0).
template <typename T> HG_INLINE T relu6_backward(T g, T x) { return (x <= T(0) || x >= T(6)) ? T(0) : g; }

// The per-element functions, one instantiation per op (a compile-time op, so
// the loops the backends wrap around them vectorise without a switch inside).
template <kernels::UnaryOp Op, typename T>
HG_INLINE T unary_fn(T x, T a, T b) {
  using kernels::UnaryOp;
  if constexpr (Op == UnaryOp::Neg) return -x;
  else if constexpr (Op == UnaryOp::Abs) return x < T(0) ? -x : x;
  else if constexpr (Op == UnaryOp::Relu) return x > T(0) ? x : (isnan_(x) ? x : T(0));
  else if constexpr (Op == UnaryOp::Sign) return T((x > T(0)) - (x < T(0)));
  else if constexpr (Op == UnaryOp::Clamp) {
    if (isnan_(x)) return x;
    T y = x;
    if (!isnan_(a) && y < a) y = a;  // NaN bounds mean "no bound"
    if (!isnan_(b) && y > b) y = b;
    return y;
  } else if constexpr (Op == UnaryOp::PowScalar) return pow_scalar(x, a);
  else if constexpr (Op == UnaryOp::Exp) return exp_(x);
  else if constexpr (Op == UnaryOp::Log) return log_(x);
  else if constexpr (Op == UnaryOp::Sqrt) return sqrt_(x);
  else if constexpr (Op == UnaryOp::Gelu) return gelu(x);
  else if constexpr (Op == UnaryOp::GeluTanh) return gelu_tanh(x);
  else if constexpr (Op == UnaryOp::Sigmoid) return sigmoid(x);
  else if constexpr (Op == UnaryOp::Tanh) return tanh_(x);
  else if constexpr (Op == UnaryOp::Hardswish) return hardswish(x);
  else if constexpr (Op == UnaryOp::Hardsigmoid) return hardsigmoid(x);
  else if constexpr (Op == UnaryOp::Relu6) return relu6(x);
  else if constexpr (Op == UnaryOp::Sin) return sin_(x);
  else if constexpr (Op == UnaryOp::Cos) return cos_(x);
  else if constexpr (Op == UnaryOp::Erf) return erf_(x);
  else if constexpr (Op == UnaryOp::Floor) {
    if constexpr (std::is_integral_v<T>) return x;
    else return floor_(x);
  } else if constexpr (Op == UnaryOp::Round) {
    if constexpr (std::is_integral_v<T>) return x;
    else return rint_(x);
  }
  else static_assert(kNoArmFor<Op>, "unary_fn: this UnaryOp has no arm");
}

template <kernels::BinaryOp Op, typename T>
HG_INLINE T binary_fn(T x, T y, T alpha) {
  using kernels::BinaryOp;
  if constexpr (Op == BinaryOp::Add) return x + alpha * y;
  else if constexpr (Op == BinaryOp::Sub) return x - alpha * y;
  else if constexpr (Op == BinaryOp::Mul) return x * y;
  else if constexpr (Op == BinaryOp::Div) return x / y;  // integers never get here: div promotes to float
  else if constexpr (Op == BinaryOp::Pow) return pow_(x, y);
  else if constexpr (Op == BinaryOp::Maximum) return (isnan_(x) || x > y) ? x : y;
  else if constexpr (Op == BinaryOp::Minimum) return (isnan_(x) || x < y) ? x : y;
  // The backward formulas (x: the gradient), each computed in T and rounded
  // once by the caller, as PyTorch's threshold/sigmoid/tanh/gelu_backward.
  else if constexpr (Op == BinaryOp::ReluBackward) return y <= T(0) ? T(0) : x;
  else if constexpr (Op == BinaryOp::SigmoidBackward) return x * (T(1) - y) * y;
  else if constexpr (Op == BinaryOp::TanhBackward) return x * (T(1) - y * y);
  else if constexpr (Op == BinaryOp::GeluBackward) return x * gelu_grad(y);
  else if constexpr (Op == BinaryOp::GeluTanhBackward) return x * gelu_tanh_grad(y);
  else if constexpr (Op == BinaryOp::HardswishBackward) return hardswish_backward(x, y);
  else if constexpr (Op == BinaryOp::HardsigmoidBackward) return hardsigmoid_backward(x, y);
  else if constexpr (Op == BinaryOp::Relu6Backward) return relu6_backward(x, y);
  else if constexpr (Op == BinaryOp::Prelu) return x > T(0) ? x : y * x;
  else if constexpr (Op == BinaryOp::Remainder) return remainder_(x, y);
  else if constexpr (Op == BinaryOp::Fmod) return fmod_(x, y);
  else static_assert(kNoArmFor<Op>, "binary_fn: this arithmetic BinaryOp has no arm");
}

template <kernels::BinaryOp Op, typename T>
HG_INLINE bool compare_fn(T x, T y) {
  using kernels::BinaryOp;
  if constexpr (Op == BinaryOp::Eq) return x == y;
  else if constexpr (Op == BinaryOp::Ne) return x != y;
  else if constexpr (Op == BinaryOp::Lt) return x < y;
  else if constexpr (Op == BinaryOp::Le) return x <= y;
  else if constexpr (Op == BinaryOp::Gt) return x > y;
  else if constexpr (Op == BinaryOp::Ge) return x >= y;
  else static_assert(kNoArmFor<Op>, "compare_fn: this comparison BinaryOp has no arm");
}

// Binary ops whose kernels take floats only (ops promote integers first; the
// backward formulas only ever see floating gradients).
constexpr bool binary_needs_float(kernels::BinaryOp op) {
  using kernels::BinaryOp;
  return op == BinaryOp::Div || op == BinaryOp::Pow || op == BinaryOp::SigmoidBackward ||
         op == BinaryOp::TanhBackward || op == BinaryOp::GeluBackward || op == BinaryOp::GeluTanhBackward ||
         op == BinaryOp::HardswishBackward || op == BinaryOp::HardsigmoidBackward || op == BinaryOp::Relu6Backward ||
         op == BinaryOp::Prelu;
}

// Which ops are defined for integer tensors (the rest need floats).
constexpr bool unary_supports_int(kernels::UnaryOp op) {
  using kernels::UnaryOp;
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu || op == UnaryOp::Sign ||
         op == UnaryOp::Clamp || op == UnaryOp::PowScalar || op == UnaryOp::Relu6 || op == UnaryOp::Floor ||
         op == UnaryOp::Round;
}

}  // namespace halfgrad::math

// HG_UNARY_OP_SWITCH(op, F): call F.template operator()<UnaryOp::X>() for the runtime op.
#define HG_UNARY_CASE(X, F) case ::halfgrad::kernels::UnaryOp::X: return F.template operator()<::halfgrad::kernels::UnaryOp::X>();
#define HG_UNARY_OP_SWITCH(op, F)                                                                        \
  switch (op) {                                                                                        \
    HG_UNARY_CASE(Neg, F) HG_UNARY_CASE(Exp, F) HG_UNARY_CASE(Log, F) HG_UNARY_CASE(Sqrt, F)          \
    HG_UNARY_CASE(Abs, F) HG_UNARY_CASE(Relu, F) HG_UNARY_CASE(Gelu, F) HG_UNARY_CASE(Sigmoid, F)     \
    HG_UNARY_CASE(Tanh, F) HG_UNARY_CASE(Clamp, F) HG_UNARY_CASE(PowScalar, F)                        \
    HG_UNARY_CASE(Sign, F) HG_UNARY_CASE(GeluTanh, F) HG_UNARY_CASE(Hardswish, F)                      \
    HG_UNARY_CASE(Hardsigmoid, F) HG_UNARY_CASE(Relu6, F) HG_UNARY_CASE(Sin, F) HG_UNARY_CASE(Cos, F)   \
    HG_UNARY_CASE(Erf, F) HG_UNARY_CASE(Floor, F) HG_UNARY_CASE(Round, F)                             \
  }
// Both binary switches name every BinaryOp (no default:), so -Werror=switch
// makes a new op that is in neither list a compile error.
#define HG_BOP(X) case ::halfgrad::kernels::BinaryOp::X:
#define HG_COMPARE_OPS_SKIPPED HG_BOP(Eq) HG_BOP(Ne) HG_BOP(Lt) HG_BOP(Le) HG_BOP(Gt) HG_BOP(Ge) break;
#define HG_ARITH_OPS_SKIPPED                                                                             \
  HG_BOP(Add) HG_BOP(Sub) HG_BOP(Mul) HG_BOP(Div) HG_BOP(Pow) HG_BOP(Maximum) HG_BOP(Minimum)            \
  HG_BOP(ReluBackward) HG_BOP(SigmoidBackward) HG_BOP(TanhBackward) HG_BOP(GeluBackward)                 \
  HG_BOP(GeluTanhBackward) HG_BOP(HardswishBackward) HG_BOP(HardsigmoidBackward) HG_BOP(Relu6Backward)    \
  HG_BOP(Prelu) HG_BOP(Remainder) HG_BOP(Fmod) break;
#define HG_BINARY_CASE(X, F) case ::halfgrad::kernels::BinaryOp::X: return F.template operator()<::halfgrad::kernels::BinaryOp::X>();
#define HG_ARITH_OP_SWITCH(op, F)                                                                        \
  switch (op) {                                                                                        \
    HG_BINARY_CASE(Add, F) HG_BINARY_CASE(Sub, F) HG_BINARY_CASE(Mul, F) HG_BINARY_CASE(Div, F)       \
    HG_BINARY_CASE(Pow, F) HG_BINARY_CASE(Maximum, F) HG_BINARY_CASE(Minimum, F)                      \
    HG_BINARY_CASE(ReluBackward, F) HG_BINARY_CASE(SigmoidBackward, F) HG_BINARY_CASE(TanhBackward, F) \
    HG_BINARY_CASE(GeluBackward, F) HG_BINARY_CASE(GeluTanhBackward, F)                               \
    HG_BINARY_CASE(HardswishBackward, F) HG_BINARY_CASE(HardsigmoidBackward, F)                       \
    HG_BINARY_CASE(Relu6Backward, F) HG_BINARY_CASE(Prelu, F)                                         \
    HG_BINARY_CASE(Remainder, F) HG_BINARY_CASE(Fmod, F)                                               \
    HG_COMPARE_OPS_SKIPPED                                                                             \
  }
#define HG_COMPARE_OP_SWITCH(op, F)                                                                      \
  switch (op) {                                                                                        \
    HG_BINARY_CASE(Eq, F) HG_BINARY_CASE(Ne, F) HG_BINARY_CASE(Lt, F) HG_BINARY_CASE(Le, F)           \
    HG_BINARY_CASE(Gt, F) HG_BINARY_CASE(Ge, F)                                                       \
    HG_ARITH_OPS_SKIPPED                                                                               \
  }
