#pragma once
// The per-element updates of a bfloat16/float16 parameter under the
// low-precision options (master_weights, stochastic_rounding, state_dtype;
// optim/low_precision.h), shared by the CPU loops and the CUDA kernels. Each
// reads the element in float32 (from the float32 master copy when there is
// one), runs the float32 update of optim/update_math.h, and writes back:
// the state in its dtype (round to nearest), the parameter by `Rounding`.
#include <cstdint>

#include <halfgrad/optim/stochastic_rounding.h>
#include <halfgrad/optim/update_math.h>

namespace halfgrad::optim::math {

enum class Rounding : uint8_t {
  Nearest,     // p = RTN(p + update): PyTorch's behaviour; updates under half an ulp are lost
  Stochastic,  // p = SR(p + update)
  Master,      // master += update (float32), p = RTN(master)
};

// P: the parameter's storage (BFloat16 or Half); S: the state's (float, or P).
// `random`: the element's 16 bits (used by Rounding::Stochastic only).
template <typename P>
HG_INLINE void store_param(P* p, float* master, int64_t i, float value, Rounding r, uint16_t random) {
  if (master != nullptr) master[i] = value;
  p[i] = r == Rounding::Stochastic ? sr::round<P>(value, random) : P(value);
}

template <typename P, typename S>
HG_INLINE void sgd_lp_element(P* p, P* g, float* master, S* buf, int64_t i, float inv, bool write_grad,
                              const SGDHyper& h, Rounding r, uint16_t random) {
  float pf = master != nullptr ? master[i] : static_cast<float>(p[i]);
  float gf = static_cast<float>(g[i]);
  float bf = buf != nullptr ? static_cast<float>(buf[i]) : 0.0f;
  sgd_element(pf, gf, buf != nullptr ? &bf : nullptr, inv, h);
  if (write_grad) g[i] = P(gf);
  if (buf != nullptr) buf[i] = S(bf);
  store_param(p, master, i, pf, r, random);
}

template <typename P, typename S>
HG_INLINE void adam_lp_element(P* p, P* g, float* master, S* m, S* v, S* vmax, int64_t i, float inv,
                               bool write_grad, const AdamHyper& h, Rounding r, uint16_t random) {
  float pf = master != nullptr ? master[i] : static_cast<float>(p[i]);
  float gf = static_cast<float>(g[i]);
  float mf = static_cast<float>(m[i]), vf = static_cast<float>(v[i]);
  float xf = vmax != nullptr ? static_cast<float>(vmax[i]) : 0.0f;
  adam_element(pf, gf, mf, vf, vmax != nullptr ? &xf : nullptr, inv, h);
  if (write_grad) g[i] = P(gf);
  m[i] = S(mf);
  v[i] = S(vf);
  if (vmax != nullptr) vmax[i] = S(xf);
  store_param(p, master, i, pf, r, random);
}

}  // namespace halfgrad::optim::math
