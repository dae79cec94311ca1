// CUDA versions of the loss-scaler kernels (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_), plus
// the 1/scale that the unscale multiplies by. See scaler_kernels_cuda.h.
#include <cuda_runtime.h>

#include <type_traits>

#include <halfgrad/amp/cuda/multi_tensor.cuh>
#include <halfgrad/amp/cuda/scaler_kernels_cuda.h>
#include <halfgrad/core/error.h>
#include <halfgrad/core/half.h>

namespace halfgrad::amp::cuda_kernels {
namespace {

using cuda_mt::kChunk;
using cuda_mt::kThreads;
using cuda_mt::for_each_pack;
using cuda_mt::Pack;

// 128 tensors of any floating dtype per launch: a model with up to 128
// parameters is checked and unscaled by one kernel.
constexpr int kMaxTensors = 128;

using cuda_mt::FloatKind;

struct UnscaleArgs : cuda_mt::FloatTensorList<kMaxTensors> {
  float* found_inf;
  const float* inv_scale;  // nullptr: check only
};
static_assert(sizeof(UnscaleArgs) <= cuda_mt::kMaxParamBytes, "UnscaleArgs must fit in the kernel parameters");

// Check and (when `apply`) unscale elements [begin, end) of one tensor.
// Half types compute in float32 and round once (core/half.h, the CPU's
// rounding); float64 multiplies in float64, as on the CPU and in PyTorch.
template <typename T>
__device__ bool unscale_range(T* p, int64_t begin, int64_t end, bool vec, float inv, bool apply) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Acc factor = static_cast<Acc>(inv);
  bool bad = false;
  for_each_pack<T>(
      begin, end, vec,
      [&](int64_t i) {
        Pack<T> pk = *reinterpret_cast<const Pack<T>*>(p + i);
#pragma unroll
        for (int j = 0; j < Pack<T>::kSize; ++j) {
          const Acc v = static_cast<Acc>(pk.v[j]);
          bad |= !isfinite(v);
          if (apply) pk.v[j] = static_cast<T>(v * factor);
        }
        if (apply) *reinterpret_cast<Pack<T>*>(p + i) = pk;
      },
      [&](int64_t i) {
        const Acc v = static_cast<Acc>(p[i]);
        bad |= !isfinite(v);
        if (apply) p[i] = static_cast<T>(v * factor);
      });
  return bad;
}

__global__ void __launch_bounds__(kThreads) unscale_and_check_kernel(const __grid_constant__ UnscaleArgs a) {
  const auto [t, begin, end] = cuda_mt::block_chunk(a);
  // The factor is read here, on the device: the host never learns the scale.
  const float inv = a.inv_scale != nullptr ? *a.inv_scale : 1.0f;
  const bool apply = a.inv_scale != nullptr && inv != 1.0f;  // x * 1 == x: save the stores
  const bool vec = a.vec[t] != 0;
  bool bad = false;
  switch (static_cast<FloatKind>(a.kind[t])) {  // the same for the whole block: no divergence
    case FloatKind::F32: bad = unscale_range(static_cast<float*>(a.data[t]), begin, end, vec, inv, apply); break;
    case FloatKind::F16: bad = unscale_range(static_cast<Half*>(a.data[t]), begin, end, vec, inv, apply); break;
    case FloatKind::BF16: bad = unscale_range(static_cast<BFloat16*>(a.data[t]), begin, end, vec, inv, apply); break;
    case FloatKind::F64: bad = unscale_range(static_cast<double*>(a.data[t]), begin, end, vec, inv, apply); break;
  }
  // One store per block that saw an inf/NaN; every writer writes 1, so the
  // race between blocks is benign. Never writes 0: the caller zeroes the flag.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *a.found_inf = 1.0f;
}

// _amp_update_scale_, one thread. As in PyTorch the factors stay double: the
// product float * double is formed in double and rounded to float32 once
// (rounding a factor like 0.9 or 1.001 to float32 first can give another
// scale; 2.0 and 0.5 are exact either way).
__global__ void update_scale_kernel(float* scale, int64_t* tracker, const float* found_inf, double growth_factor,
                                    double backoff_factor, int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(static_cast<double>(*scale) * backoff_factor);
    *tracker = 0;
    return;
  }
  const int64_t successful = *tracker + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(*scale) * growth_factor);
    if (isfinite(grown)) *scale = grown;  // no growth past float32's range
    *tracker = 0;
  } else {
    *tracker = successful;
  }
}

// 1/S in float64, stored as float32 (PyTorch's unscale factor).
__global__ void reciprocal_scale_kernel(const float* scale, float* out) {
  *out = static_cast<float>(1.0 / static_cast<double>(*scale));
}

// A one-element tensor of `dtype` on CUDA: the scale, the tracker, a flag.
void check_scalar(const char* op, const char* what, const Tensor& t, DType dtype) {
  HG_CHECK(t.defined() && t.device().is_cuda() && t.dtype() == dtype && t.numel() == 1,
           "{}: {} must be a one-element {} tensor on a CUDA device, got {}", op, what, dtype_name(dtype),
           t.defined() ? t.describe() : std::string("an undefined tensor"));
}

void check_same_device(const char* op, const Tensor& t, const Tensor& ref) {
  HG_CHECK(t.device() == ref.device(),
           "{}: {} is on {} but {} is on {}; the scaler's tensors and the gradients must share one device", op,
           t.describe(), t.device().str(), ref.describe(), ref.device().str());
}

}  // namespace

void unscale_and_check(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) {
  constexpr const char* op = "GradScaler (unscale_and_check)";
  check_scalar(op, "found_inf", found_inf, DType::Float32);
  if (inv_scale.defined()) {
    check_scalar(op, "inv_scale", inv_scale, DType::Float32);
    check_same_device(op, inv_scale, found_inf);
  }
  std::vector<const Tensor*> list;
  list.reserve(grads.size());
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    check_same_device(op, g, found_inf);
    HG_CHECK(g.is_contiguous(), "{}: gradient {} is not contiguous", op, g.describe());
    cuda_mt::float_kind(g, op);  // rejects non-floating grads before anything is launched
    list.push_back(&g);
  }
  if (list.empty()) return;

  cuda_mt::DeviceGuard guard(found_inf.device().index());
  UnscaleArgs args{};
  args.found_inf = static_cast<float*>(found_inf.data_ptr());
  args.inv_scale = inv_scale.defined() ? static_cast<const float*>(inv_scale.data_ptr()) : nullptr;
  cuda_mt::pack_launches<kMaxTensors>(
      args, list.size(), [&](size_t i) { return list[i]->numel(); },
      [&](UnscaleArgs& a, int slot, size_t i) { cuda_mt::set_slot(a, slot, *list[i], op); },
      [&](const UnscaleArgs& a, unsigned blocks) {
        unscale_and_check_kernel<<<blocks, kThreads, 0, cuda_mt::stream()>>>(a);
        HG_CUDA_CHECK(cudaGetLastError());
      });
  if (inv_scale.defined())
    for (const Tensor* g : list) g->bump_version();
}

void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval) {
  constexpr const char* op = "GradScaler.update (update_scale)";
  check_scalar(op, "the scale", scale, DType::Float32);
  check_scalar(op, "the growth tracker", growth_tracker, DType::Int64);
  check_scalar(op, "found_inf", found_inf, DType::Float32);
  check_same_device(op, growth_tracker, scale);
  check_same_device(op, found_inf, scale);
  cuda_mt::DeviceGuard guard(scale.device().index());
  update_scale_kernel<<<1, 1, 0, cuda_mt::stream()>>>(
      static_cast<float*>(scale.data_ptr()), static_cast<int64_t*>(growth_tracker.data_ptr()),
      static_cast<const float*>(found_inf.data_ptr()), growth_factor, backoff_factor, growth_interval);
  HG_CUDA_CHECK(cudaGetLastError());
  scale.bump_version();
  growth_tracker.bump_version();
}

void reciprocal_scale(const Tensor& scale, const Tensor& out) {
  constexpr const char* op = "GradScaler (reciprocal_scale)";
  check_scalar(op, "the scale", scale, DType::Float32);
  check_scalar(op, "the output", out, DType::Float32);
  check_same_device(op, out, scale);
  cuda_mt::DeviceGuard guard(scale.device().index());
  reciprocal_scale_kernel<<<1, 1, 0, cuda_mt::stream()>>>(static_cast<const float*>(scale.data_ptr()),
                                                          static_cast<float*>(out.data_ptr()));
  HG_CUDA_CHECK(cudaGetLastError());
  out.bump_version();
}

}  // namespace halfgrad::amp::cuda_kernels
