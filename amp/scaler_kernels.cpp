// CPU versions of the loss-scaler kernels (the CUDA ones live beside them in
// amp/cuda/ once the CUDA backend lands; until then a CUDA tensor is an Error).
#include "amp/scaler_kernels.h"

#include <cmath>

#include "core/error.h"

namespace halfgrad::amp {

namespace {
void require_cpu(const char* op, const Tensor& t) {
  HG_CHECK(t.device().is_cpu(), "{}: no CUDA kernel yet for {} (the CUDA loss-scaler kernels come with the CUDA backend)",
           op, t.describe());
}

// Check and scale in one pass over a contiguous grad (AccumulateGrad makes
// them so). `v - v` is 0 for every finite v and NaN for inf and NaN: a test
// the compiler vectorises, unlike std::isfinite.
template <typename T>
bool unscale_one(const Tensor& g, float inv, bool apply) {
  T* p = static_cast<T*>(g.data_ptr());
  const int64_t n = g.numel();
  int bad = 0;
  if (apply) {
#pragma omp parallel for simd reduction(| : bad) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(p[i]);
      bad |= (v - v) != 0.0f;
      p[i] = static_cast<T>(v * inv);
    }
  } else {
#pragma omp parallel for simd reduction(| : bad) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(p[i]);
      bad |= (v - v) != 0.0f;
    }
  }
  return bad != 0;
}
}  // namespace

void unscale_and_check(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) {
  require_cpu("unscale_and_check", found_inf);
  const bool apply = inv_scale.defined();
  const float inv = apply ? *static_cast<const float*>(inv_scale.data_ptr()) : 1.0f;
  bool bad = false;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    require_cpu("unscale_and_check", g);
    HG_CHECK(g.is_contiguous(), "unscale_and_check: gradient {} is not contiguous", g.describe());
    // float64 grads multiply in double, as PyTorch does
    if (g.dtype() == DType::Float64) {
      double* p = static_cast<double*>(g.data_ptr());
      for (int64_t i = 0; i < g.numel(); ++i) {
        bad |= !std::isfinite(p[i]);
        if (apply) p[i] *= static_cast<double>(inv);
      }
      continue;
    }
    bad |= HG_DISPATCH_FLOATING(g.dtype(), "unscale_and_check", [&] { return unscale_one<scalar_t>(g, inv, apply && inv != 1.0f); });
    if (apply) g.bump_version();
  }
  if (bad) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval) {
  require_cpu("update_scale", scale);
  float& s = *static_cast<float*>(scale.data_ptr());
  int64_t& tracker = *static_cast<int64_t*>(growth_tracker.data_ptr());
  const float inf = *static_cast<const float*>(found_inf.data_ptr());
  if (inf != 0.0f) {
    s *= static_cast<float>(backoff_factor);
    tracker = 0;
    return;
  }
  const int64_t successful = tracker + 1;
  if (successful == growth_interval) {
    const float grown = s * static_cast<float>(growth_factor);
    if (std::isfinite(grown)) s = grown;
    tracker = 0;
  } else {
    tracker = successful;
  }
}

}  // namespace halfgrad::amp
