#pragma once
// The per-element optimizer updates, written once for the fused CPU loops
// (optim/fused_cpu.cpp) and the fused CUDA kernels. Each function reads one
// element's gradient, unscales it (inv_scale = 1 / loss scale, or 1), writes
// the unscaled gradient back, and updates the parameter and its state in
// place: one pass over memory instead of one per tensor op.
#include <cmath>

#include "core/macros.h"

namespace halfgrad::optim::math {

struct SGDHyper {
  float lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first_step;  // first_step: the momentum buffer starts as d_p
};

HG_INLINE void sgd_element(float& p, float& g, float* buf, float inv_scale, const SGDHyper& h) {
  const float grad = g * inv_scale;
  g = grad;
  float d = h.weight_decay != 0.f ? grad + h.weight_decay * p : grad;
  if (buf != nullptr) {
    const float b = h.first_step ? d : h.momentum * *buf + h.one_minus_dampening * d;
    *buf = b;
    d = h.nesterov ? d + h.momentum * b : b;
  }
  p -= h.lr * d;
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

HG_INLINE void adam_element(float& p, float& g, float& m, float& v, float* vmax, float inv_scale,
                            const AdamHyper& h) {
  const float grad = g * inv_scale;
  g = grad;
  float gd = grad;
  if (h.weight_decay != 0.f) {
    if (h.decoupled) p *= h.decay;
    else gd = grad + h.weight_decay * p;
  }
  m = h.beta1 * m + h.one_minus_beta1 * gd;
  v = h.beta2 * v + h.one_minus_beta2 * gd * gd;
  float vv = v;
  if (vmax != nullptr) {
    *vmax = *vmax > v ? *vmax : v;
    vv = *vmax;
  }
  const float denom = sqrtf(vv) / h.bias_correction2_sqrt + h.eps;
  p -= h.step_size * (m / denom);
}

}  // namespace halfgrad::optim::math
