#include "optim/fused_cpu.h"

namespace halfgrad::optim::fused {

namespace {
constexpr int64_t kParallel = 65536;
float* f32(const Tensor& t) { return t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr; }
}  // namespace

bool applies(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!t->device().is_cpu() || t->dtype() != DType::Float32 || !t->is_contiguous()) return false;
  }
  return true;
}

float inv_scale_value(const Tensor& inv_scale) {
  return inv_scale.defined() ? *static_cast<const float*>(inv_scale.data_ptr()) : 1.0f;
}

void sgd(const Tensor& p, const Tensor& g, const Tensor& buf, float inv, const math::SGDHyper& h) {
  float *pp = f32(p), *gp = f32(g), *bp = f32(buf);
  const int64_t n = p.numel();
#pragma omp parallel for simd if (n > kParallel)
  for (int64_t i = 0; i < n; ++i) math::sgd_element(pp[i], gp[i], bp ? bp + i : nullptr, inv, h);
  p.bump_version();
  g.bump_version();
  if (buf.defined()) buf.bump_version();
}

void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax, float inv,
          const math::AdamHyper& h) {
  float *pp = f32(p), *gp = f32(g), *mp = f32(m), *vp = f32(v), *xp = f32(vmax);
  const int64_t n = p.numel();
#pragma omp parallel for simd if (n > kParallel)
  for (int64_t i = 0; i < n; ++i) math::adam_element(pp[i], gp[i], mp[i], vp[i], xp ? xp + i : nullptr, inv, h);
  for (const Tensor* t : {&p, &g, &m, &v, &vmax})
    if (t->defined()) t->bump_version();
}

}  // namespace halfgrad::optim::fused
