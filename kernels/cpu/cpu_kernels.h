#pragma once
// The CPU backend: one function per entry of kernels/kernel_list.h (same contracts).
#include <halfgrad/kernels/kernels.h>

namespace halfgrad::kernels::cpu {

#define HG_KERNEL(ret, name, params, args, device_of) ret name params;
#define HG_DEFAULT(...) = __VA_ARGS__
#include <halfgrad/kernels/kernel_list.h>
#undef HG_DEFAULT
#undef HG_KERNEL

// gemm with ReLU applied to each output as it is written (linear_act's ReLU).
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta, bool relu);
// linear_act_backward's two halves around its dx GEMM: gz = g * act'(.) (g itself
// for no activation), then dw = gz^T @ x2 and db = sum(gz, 0) (each undefined: not wanted).
Tensor activation_backward(const Tensor& g, kernels::Activation act, const Tensor& saved);
void linear_param_grads(const Tensor& gz, const Tensor& x2, const Tensor& dw, const Tensor& db);

// The counters of one draw of n elements: from `generator`, or (null) from the
// global CPU generator (core/random.h).
inline rng::PhiloxState reserve(uint64_t n, Generator* generator) {
  return generator != nullptr ? generator->reserve(n) : rng::cpu_reserve(n);
}

// Element conversion as in PyTorch: through the compute type, bool is x != 0,
// float to int64 by float_to_int64 (core/dtype.h).
template <typename D, typename S>
inline D convert(S x) {
  if constexpr (std::is_same_v<D, S>) {
    return x;
  } else if constexpr (std::is_same_v<D, bool>) {
    return static_cast<acc_t<S>>(x) != acc_t<S>(0);
  } else if constexpr (std::is_same_v<acc_t<D>, float> && !std::is_same_v<D, float>) {  // half and fp8 types
    return D(static_cast<float>(static_cast<acc_t<S>>(x)));
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<acc_t<S>>) {
    return float_to_int64(static_cast<acc_t<S>>(x));  // D is int64: NaN, inf, 1e30 are defined too
  } else {
    return static_cast<D>(static_cast<acc_t<S>>(x));
  }
}

}  // namespace halfgrad::kernels::cpu
