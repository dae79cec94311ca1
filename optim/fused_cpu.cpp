#include <halfgrad/optim/fused_cpu.h>

#include <algorithm>
#include <type_traits>

#include <halfgrad/core/macros.h>
#include <halfgrad/kernels/cpu/parallel.h>

namespace halfgrad::optim::fused {

namespace {
constexpr int64_t kChunk = 16384;  // elements per OpenMP task
float* f32(const Tensor& t) { return t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr; }

// The loops over one chunk, compiled for AVX-512, AVX2 and the baseline and
// picked at load time; the branches on the optional buffer and on whether
// the gradient is scaled sit outside the loop. An unscaled gradient (no
// scaler, or after unscale_) is read only: the copy in a register takes the
// write-back, so .grad is not rewritten with the same values.
HG_TARGET_CLONES void sgd_range(float* p, float* g, float* buf, int64_t n,
                                                                          float inv, math::SGDHyper h) {
  auto run = [&](auto with_buf, auto scaled) {
    for (int64_t i = 0; i < n; ++i) {
      float gi = g[i];
      math::sgd_element(p[i], scaled ? g[i] : gi, with_buf ? buf + i : nullptr, inv, h);
    }
  };
  const bool scaled = inv != 1.f;
  if (buf) {
    scaled ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
  } else {
    scaled ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
  }
}

HG_TARGET_CLONES void adam_range(float* p, float* g, float* m, float* v,
                                                                           float* vmax, int64_t n, float inv,
                                                                           math::AdamHyper h) {
  auto run = [&](auto with_max, auto scaled) {
    for (int64_t i = 0; i < n; ++i) {
      float gi = g[i];
      math::adam_element(p[i], scaled ? g[i] : gi, m[i], v[i], with_max ? vmax + i : nullptr, inv, h);
    }
  };
  const bool scaled = inv != 1.f;
  if (vmax) {
    scaled ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
  } else {
    scaled ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
  }
}

// Run `range(begin, count)` over [0, n) in chunks, in parallel when it pays.
template <typename Range>
void chunked(int64_t n, Range range) {
  kernels::cpu::for_chunks(n, kChunk, n > 4 * kChunk, range);
}
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
  chunked(p.numel(), [&](int64_t i, int64_t k) { sgd_range(pp + i, gp + i, bp ? bp + i : nullptr, k, inv, h); });
  p.bump_version();
  g.bump_version();
  if (buf.defined()) buf.bump_version();
}

void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax, float inv,
          const math::AdamHyper& h) {
  float *pp = f32(p), *gp = f32(g), *mp = f32(m), *vp = f32(v), *xp = f32(vmax);
  chunked(p.numel(), [&](int64_t i, int64_t k) {
    adam_range(pp + i, gp + i, mp + i, vp + i, xp ? xp + i : nullptr, k, inv, h);
  });
  for (const Tensor* t : {&p, &g, &m, &v, &vmax})
    if (t->defined()) t->bump_version();
}

}  // namespace halfgrad::optim::fused
