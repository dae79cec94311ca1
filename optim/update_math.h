#pragma once
// The per-element optimizer updates, written once for the fused CPU loops
// (optim/fused_cpu.cpp) and the fused CUDA kernels. Each function reads one
// element's gradient, unscales it (inv_scale = 1 / loss scale, or 1), writes
// the unscaled gradient back, and updates the parameter and its state in
// place: one pass over memory instead of one per tensor op.
#include <cmath>

#include <halfgrad/core/macros.h>

namespace halfgrad::optim::math {

// One IEEE operation, rounded on its own, on the host and on the device.
// nvcc contracts `a * b + c` into one fma (one rounding instead of two) where
// g++ in ISO mode does not, so without these the CUDA kernels would drift
// from the CPU loops in the last bit and the CPU tests would not check the
// GPU's arithmetic. The updates are memory-bound: the lost fma costs nothing.
HG_INLINE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
HG_INLINE float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
HG_INLINE float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
// Correctly rounded even under --use_fast_math.
HG_INLINE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
HG_INLINE float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

struct SGDHyper {
  float lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first_step;  // first_step: the momentum buffer starts as d_p
};

HG_INLINE void sgd_element(float& p, float& g, float* buf, float inv_scale, const SGDHyper& h) {
  const float grad = mul_rn(g, inv_scale);
  g = grad;
  float d = h.weight_decay != 0.f ? add_rn(grad, mul_rn(h.weight_decay, p)) : grad;
  if (buf != nullptr) {
    const float b = h.first_step ? d : add_rn(mul_rn(h.momentum, *buf), mul_rn(h.one_minus_dampening, d));
    *buf = b;
    d = h.nesterov ? add_rn(d, mul_rn(h.momentum, b)) : b;
  }
  p = sub_rn(p, mul_rn(h.lr, d));
}

// Differences like 1 - beta2 are computed in double by the caller: in float,
// 1 - 0.999f is off by 1e-5 relative (cancellation), enough to drift Adam.
struct AdamHyper {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
  float decay;                  // AdamW: 1 - lr * weight_decay
  float step_size;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  bool amsgrad, decoupled;      // decoupled: AdamW's weight decay
};

// The step-dependent part of AdamHyper for step t (counted from 1), in
// float64 and rounded once. The CPU computes it on the host from its step
// counter; the CUDA kernel computes it on the device from a step count that
// lives there (so a skipped step is not counted without the host knowing).
HG_INLINE void adam_bias_corrections(AdamHyper& h, double lr, double beta1, double beta2, double t) {
  h.step_size = static_cast<float>(lr / (1.0 - ::pow(beta1, t)));
  h.bias_correction2_sqrt = static_cast<float>(::sqrt(1.0 - ::pow(beta2, t)));
}

HG_INLINE void adam_element(float& p, float& g, float& m, float& v, float* vmax, float inv_scale,
                            const AdamHyper& h) {
  const float grad = mul_rn(g, inv_scale);
  g = grad;
  float gd = grad;
  if (h.weight_decay != 0.f) {
    if (h.decoupled) p = mul_rn(p, h.decay);
    else gd = add_rn(grad, mul_rn(h.weight_decay, p));
  }
  m = add_rn(mul_rn(h.beta1, m), mul_rn(h.one_minus_beta1, gd));
  v = add_rn(mul_rn(h.beta2, v), mul_rn(mul_rn(h.one_minus_beta2, gd), gd));
  float vv = v;
  if (vmax != nullptr) {
    *vmax = *vmax > v ? *vmax : v;
    vv = *vmax;
  }
  const float denom = add_rn(div_rn(sqrt_rn(vv), h.bias_correction2_sqrt), h.eps);
  p = sub_rn(p, mul_rn(h.step_size, div_rn(m, denom)));
}

}  // namespace halfgrad::optim::math
