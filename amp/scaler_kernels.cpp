// The loss-scaler kernels: CPU versions here; CUDA tensors go to the device
// kernels in amp/cuda/ (which never make the host wait).
#include <halfgrad/amp/scaler_kernels.h>

#include <algorithm>
#include <cmath>

#include <halfgrad/core/error.h>
#include <halfgrad/core/macros.h>
#if HALFGRAD_WITH_CUDA
#include <halfgrad/amp/cuda/scaler_kernels_cuda.h>
#endif

namespace halfgrad::amp {

namespace {
// The CPU kernels read these tensors with the host's loads.
void require_cpu(const char* op, const Tensor& t) {
#if HALFGRAD_WITH_CUDA
  HG_CHECK(t.device().is_cpu(),
           "{}: {} is on {} but the scaler's other tensors are on the CPU; the scale, the flags and the gradients "
           "must share one device",
           op, t.describe(), t.device().str());
#else
  HG_CHECK(t.device().is_cpu(),
           "{}: {} is a CUDA tensor but this halfgrad was built without CUDA (HALFGRAD_CUDA=OFF or no nvcc at "
           "configure time)",
           op, t.describe());
#endif
}

// Gradients on another device than the scaler's flag: one scaler per device.
void require_device(const char* op, const Tensor& g, const Tensor& found_inf) {
  HG_CHECK(g.device() == found_inf.device(),
           "{}: gradient {} is on {} but the scaler's found_inf flag is on {}; use one GradScaler per device", op,
           g.describe(), g.device().str(), found_inf.device().str());
}

// Check and scale in one pass over a contiguous grad (AccumulateGrad makes
// them so). `v - v` is 0 for every finite v and NaN for inf and NaN: a test
// the compiler vectorises, unlike std::isfinite.
// The float32 check alone (step() without unscale_: the optimizer unscales as
// it updates), the hot case, compiled for AVX-512/AVX2 and picked at load time.
HG_TARGET_CLONES int any_non_finite(const float* p, int64_t n) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= (p[i] - p[i]) != 0.0f;
  return bad;
}

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
  } else if constexpr (std::is_same_v<T, float>) {
    constexpr int64_t kChunk = 16384;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for reduction(| : bad) if (n > 65536)
    for (int64_t c = 0; c < chunks; ++c) bad |= any_non_finite(p + c * kChunk, std::min(kChunk, n - c * kChunk));
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
  for (const Tensor& g : grads)
    if (g.defined()) require_device("unscale_and_check", g, found_inf);
#if HALFGRAD_WITH_CUDA
  if (found_inf.device().is_cuda()) return cuda_kernels::unscale_and_check(grads, found_inf, inv_scale);
#endif
  require_cpu("unscale_and_check", found_inf);
  if (inv_scale.defined()) require_cpu("unscale_and_check", inv_scale);
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
      if (apply) g.bump_version();
      continue;
    }
    bad |= HG_DISPATCH_FLOATING(g.dtype(), "unscale_and_check", [&] { return unscale_one<scalar_t>(g, inv, apply && inv != 1.0f); });
    if (apply) g.bump_version();
  }
  if (bad) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval) {
#if HALFGRAD_WITH_CUDA
  if (scale.device().is_cuda())
    return cuda_kernels::update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
#endif
  require_cpu("update_scale", scale);
  require_cpu("update_scale", growth_tracker);
  require_cpu("update_scale", found_inf);
  float& s = *static_cast<float*>(scale.data_ptr());
  int64_t& tracker = *static_cast<int64_t*>(growth_tracker.data_ptr());
  const float inf = *static_cast<const float*>(found_inf.data_ptr());
  if (inf != 0.0f) {
    s = static_cast<float>(static_cast<double>(s) * backoff_factor);  // in double, rounded once, as PyTorch
    tracker = 0;
    return;
  }
  const int64_t successful = tracker + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(s) * growth_factor);
    if (std::isfinite(grown)) s = grown;
    tracker = 0;
  } else {
    tracker = successful;
  }
}

void reciprocal_scale(const Tensor& scale, const Tensor& out) {
#if HALFGRAD_WITH_CUDA
  if (scale.device().is_cuda()) return cuda_kernels::reciprocal_scale(scale, out);
#endif
  require_cpu("reciprocal_scale", scale);
  require_cpu("reciprocal_scale", out);
  HG_CHECK(scale.dtype() == DType::Float32 && out.dtype() == DType::Float32 && scale.numel() == 1 &&
               out.numel() == 1,
           "reciprocal_scale: expected two one-element float32 tensors, got {} and {}", scale.describe(),
           out.describe());
  *static_cast<float*>(out.data_ptr()) =
      static_cast<float>(1.0 / static_cast<double>(*static_cast<const float*>(scale.data_ptr())));
  out.bump_version();
}

}  // namespace halfgrad::amp
