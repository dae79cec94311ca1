// fp8 on the CPU: an exact emulation of what Hopper's tensor cores do.
//
// The fp8 values are decoded to float32 (exactly), multiplied in float32 (a
// product of two fp8 values has at most 8 significant bits: exact too) and
// summed in float32 by the same oneDNN GEMM the float32 path uses; then the
// two dequantisation scales, the bias and one rounding to the output dtype.
// So every fp8 numeric the CUDA path computes is tested on this machine, up
// to the order of the float32 sums.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <halfgrad/core/float8.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/loops.h>

namespace halfgrad::kernels::cpu {

namespace {
float scalar_of(const Tensor& t, const char* op, const char* what) {
  HG_CHECK(t.numel() == 1 && t.dtype() == DType::Float32, "{}: {} must be a one-element float32 tensor, got {}", op,
           what, t.describe());
  return *static_cast<const float*>(t.data_ptr());
}

// max |x| (NaN if x has one).
template <typename T>
float abs_max(const T* x, int64_t n) {
  float m = 0.f;
  bool nan = false;
#pragma omp parallel for reduction(max : m) reduction(|| : nan) if (n >= 4 * kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(static_cast<float>(static_cast<acc_t<T>>(x[i])));
    m = a > m ? a : m;
    nan = nan || a != a;  // OpenMP's max may drop a NaN: kept aside
  }
  return nan ? NAN : m;
}

// One pass: scale, round, count saturations, and max |x| (a NaN wins).
template <typename Fp8, typename T>
void quantize_loop(const T* x, int64_t n, float scale, uint8_t* dst, float& amax, int64_t& saturated) {
  constexpr float kMax = std::is_same_v<Fp8, Float8_e4m3fn> ? kE4M3Max : kE5M2Max;
  float m = 0.f;
  int64_t sat = 0;
  bool nan = false;
#pragma omp parallel for reduction(max : m) reduction(+ : sat) reduction(|| : nan) if (n >= 4 * kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(static_cast<acc_t<T>>(x[i]));
    const float a = std::fabs(v);
    m = a > m ? a : m;
    nan = nan || a != a;  // OpenMP's max may drop a NaN: kept aside
    const float s = v * scale;
    sat += std::fabs(s) > kMax;
    dst[i] = std::is_same_v<Fp8, Float8_e4m3fn> ? float_to_e4m3fn_bits(s) : float_to_e5m2_bits(s, Fp8Overflow::Saturate);
  }
  if (nan) m = NAN;
  amax = (m > amax || std::isnan(m)) ? m : amax;
  saturated += sat;
}

template <typename Fp8>
void quantize_typed(const Tensor& in, float scale, const Tensor& out, float& amax, int64_t& saturated) {
  const Tensor& src = in;
  HG_CHECK(in.is_contiguous() && out.is_contiguous(), "fp8_quantize: expected contiguous tensors, got {} and {}",
           in.describe(), out.describe());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  HG_DISPATCH_FLOATING(src.dtype(), "fp8_quantize", [&] {
    quantize_loop<Fp8>(static_cast<const scalar_t*>(src.data_ptr()), src.numel(), scale, dst, amax, saturated);
  });
}
}  // namespace

void fp8_quantize(const Tensor& in, const Tensor& scale, const Tensor& out, const Tensor& amax,
                  const Tensor& saturated) {
  const float s = scalar_of(scale, "fp8_quantize", "scale");
  scalar_of(amax, "fp8_quantize", "amax");
  float& m = *static_cast<float*>(amax.data_ptr());
  int64_t sat = 0;
  if (out.dtype() == DType::Float8_e4m3fn) quantize_typed<Float8_e4m3fn>(in, s, out, m, sat);
  else if (out.dtype() == DType::Float8_e5m2) quantize_typed<Float8_e5m2>(in, s, out, m, sat);
  else fail("fp8_quantize: the output must be float8_e4m3fn or float8_e5m2, got {}", out.describe());
  if (saturated.defined()) *static_cast<int64_t*>(saturated.data_ptr()) += sat;
}

void fp8_update_scales(const Tensor& history, const Tensor& scale, const Tensor& scale_inv, int64_t first,
                       const std::vector<float>& fp8_max, float margin, bool most_recent) {
  HG_CHECK(history.dim() == 2 && history.is_contiguous() && history.dtype() == DType::Float32,
           "fp8_update_scales: history must be a contiguous [L, n] float32 tensor, got {}", history.describe());
  const int64_t rows = history.size(0), n = history.size(1);
  auto* h = static_cast<float*>(history.data_ptr());
  auto* sc = static_cast<float*>(scale.data_ptr());
  auto* inv = static_cast<float*>(scale_inv.data_ptr());
  for (size_t j = 0; j < fp8_max.size(); ++j) {
    const int64_t c = first + static_cast<int64_t>(j);
    float amax = h[c];
    if (!most_recent)
      for (int64_t r = 1; r < rows; ++r) amax = (h[r * n + c] > amax || std::isnan(h[r * n + c])) ? h[r * n + c] : amax;
    const float candidate = fp8_max[j] / amax / std::exp2(margin);
    if (std::isfinite(amax) && amax > 0.f && std::isfinite(candidate)) sc[c] = candidate;
    inv[c] = 1.0f / sc[c];
    for (int64_t r = rows - 1; r > 0; --r) h[r * n + c] = h[(r - 1) * n + c];
    h[c] = 0.f;
  }
}

void scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, const Tensor& bias,
               const Tensor& out, const Tensor& amax_out) {
  const float sa = scalar_of(scale_a, "scaled_mm", "scale_a"), sb = scalar_of(scale_b, "scaled_mm", "scale_b");
  const Tensor af = make_tensor(a.shape(), TensorOptions(DType::Float32));
  const Tensor bf = make_tensor(b.shape(), TensorOptions(DType::Float32));
  copy(af, a);  // exact: every fp8 value is a float32
  copy(bf, b);
  const bool f32 = out.dtype() == DType::Float32;
  const Tensor acc = f32 ? out : make_tensor(out.shape(), TensorOptions(DType::Float32));
  gemm(af, bf, acc, Tensor(), 0.f);
  // The scales multiply the float32 sums, as cuBLASLt's alpha * scale_a * scale_b does.
  const float s = sa * sb;
  auto* d = static_cast<float*>(acc.data_ptr());
  const int64_t m = out.size(0), n = out.size(1);
  Tensor bias32;
  if (bias.defined()) {
    bias32 = make_tensor(bias.shape(), TensorOptions(DType::Float32));
    copy(bias32, bias);
  }
  const float* bp = bias.defined() ? static_cast<const float*>(bias32.data_ptr()) : nullptr;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) d[i * n + j] = d[i * n + j] * s + (bp ? bp[j] : 0.f);
  if (!f32) copy(out, acc);
  if (amax_out.defined()) {  // of the output as stored (after its rounding), as cuBLASLt's AMAX_D
    *static_cast<float*>(amax_out.data_ptr()) = HG_DISPATCH_FLOATING(out.dtype(), "scaled_mm", [&] {
      return abs_max(static_cast<const scalar_t*>(out.data_ptr()), out.numel());
    });
  }
}

}  // namespace halfgrad::kernels::cpu
