// The gradient norm and clip kernels (amp/cuda/grad_norm_cuda.h), on the
// multi-tensor launches of amp/cuda/multi_tensor.cuh. The per-element term,
// the finish and the clip coefficient are amp/grad_norm.h's, as on the CPU.
#include <cuda_runtime.h>

#include <type_traits>

#include <halfgrad/amp/cuda/grad_norm_cuda.h>
#include <halfgrad/amp/cuda/multi_tensor.cuh>
#include <halfgrad/amp/grad_norm.h>
#include <halfgrad/core/error.h>
#include <halfgrad/core/half.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::amp::cuda_kernels {
namespace {

using cuda_mt::kChunk;
using cuda_mt::kThreads;
using cuda_mt::for_each_pack;
using cuda_mt::Pack;
using grad_norm::Mode;

constexpr int kMaxTensors = 128;

using cuda_mt::FloatKind;
using TensorList = cuda_mt::FloatTensorList<kMaxTensors>;

struct NormArgs : TensorList {
  double* partials;  // one per block of this launch
  double p;
  int mode;
};
static_assert(sizeof(NormArgs) <= cuda_mt::kMaxParamBytes, "NormArgs must fit in the kernel parameters");

struct ClipArgs : TensorList {
  const float* total;
  float max_norm;
};
static_assert(sizeof(ClipArgs) <= cuda_mt::kMaxParamBytes, "ClipArgs must fit in the kernel parameters");

// Block-wide sum (or max) in double; every thread gets the result.
__device__ double block_reduce(double v, bool is_max) {
  __shared__ double shared[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    const double w = __shfl_down_sync(0xffffffffu, v, o);
    v = is_max ? (w > v ? w : v) : v + w;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? shared[threadIdx.x] : 0.0;
  if (warp == 0)
    for (int o = 16; o > 0; o /= 2) {
      const double w = __shfl_down_sync(0xffffffffu, v, o);
      v = is_max ? (w > v ? w : v) : v + w;
    }
  return v;  // valid in thread 0
}

// One thread's terms over its elements of [begin, end), accumulated in A.
template <typename T>
__device__ void norm_range(const T* p, int64_t begin, int64_t end, bool vec, Mode mode, double pw, double& out,
                           bool& nan) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const A pa = static_cast<A>(pw);
  A acc = 0;
  auto add = [&](A v) {
    if (mode == grad_norm::kInf) {
      const A a = v < A(0) ? -v : v;
      nan |= v != v;
      acc = a > acc ? a : acc;
    } else {
      acc += grad_norm::term(v, mode, pa);
    }
  };
  for_each_pack<T>(
      begin, end, vec,
      [&](int64_t i) {
        const Pack<T> pk = *reinterpret_cast<const Pack<T>*>(p + i);
#pragma unroll
        for (int j = 0; j < Pack<T>::kSize; ++j) add(static_cast<A>(pk.v[j]));
      },
      [&](int64_t i) { add(static_cast<A>(p[i])); });
  out = static_cast<double>(acc);
}

__global__ void __launch_bounds__(kThreads) norm_kernel(const __grid_constant__ NormArgs a) {
  const auto [t, begin, end] = cuda_mt::block_chunk(a);
  const Mode mode = static_cast<Mode>(a.mode);
  const bool vec = a.vec[t] != 0;
  double acc = 0.0;
  bool nan = false;
  switch (static_cast<FloatKind>(a.kind[t])) {  // the same for the whole block: no divergence
    case FloatKind::F32: norm_range(static_cast<const float*>(a.data[t]), begin, end, vec, mode, a.p, acc, nan); break;
    case FloatKind::F16: norm_range(static_cast<const Half*>(a.data[t]), begin, end, vec, mode, a.p, acc, nan); break;
    case FloatKind::BF16: norm_range(static_cast<const BFloat16*>(a.data[t]), begin, end, vec, mode, a.p, acc, nan); break;
    case FloatKind::F64: norm_range(static_cast<const double*>(a.data[t]), begin, end, vec, mode, a.p, acc, nan); break;
  }
  const bool any_nan = __syncthreads_or(nan);
  const double r = block_reduce(acc, mode == grad_norm::kInf);
  if (threadIdx.x == 0) a.partials[blockIdx.x] = any_nan ? __longlong_as_double(0x7ff8000000000000LL) : r;
}

// One block: the partials in a fixed order (thread t takes t, t + 256, ...),
// then the norm, in double, stored as float32.
__global__ void __launch_bounds__(kThreads) finish_kernel(const double* partials, int64_t n, int mode, double p,
                                                          float* total) {
  const bool is_max = mode == grad_norm::kInf;
  double acc = 0.0;
  bool nan = false;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double v = partials[i];
    nan |= v != v;
    acc = is_max ? (v > acc ? v : acc) : acc + v;
  }
  const bool any_nan = __syncthreads_or(nan);
  const double r = block_reduce(acc, is_max);
  if (threadIdx.x == 0)
    *total = any_nan ? __int_as_float(0x7fc00000) : static_cast<float>(grad_norm::finish(r, static_cast<Mode>(mode), p));
}

template <typename T>
__device__ void scale_range(T* p, int64_t begin, int64_t end, bool vec, float coef) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const A c = static_cast<A>(coef);
  for_each_pack<T>(
      begin, end, vec,
      [&](int64_t i) {
        Pack<T> pk = *reinterpret_cast<const Pack<T>*>(p + i);
#pragma unroll
        for (int j = 0; j < Pack<T>::kSize; ++j) pk.v[j] = static_cast<T>(static_cast<A>(pk.v[j]) * c);
        *reinterpret_cast<Pack<T>*>(p + i) = pk;
      },
      [&](int64_t i) { p[i] = static_cast<T>(static_cast<A>(p[i]) * c); });
}

__global__ void __launch_bounds__(kThreads) clip_kernel(const __grid_constant__ ClipArgs a) {
  // The coefficient is computed here, on the device: the host never reads the norm.
  const float coef = grad_norm::clip_coef(*a.total, a.max_norm);
  if (coef == 1.0f) return;  // x * 1 == x: save the stores
  const auto [t, begin, end] = cuda_mt::block_chunk(a);
  const bool vec = a.vec[t] != 0;
  switch (static_cast<FloatKind>(a.kind[t])) {
    case FloatKind::F32: scale_range(static_cast<float*>(a.data[t]), begin, end, vec, coef); break;
    case FloatKind::F16: scale_range(static_cast<Half*>(a.data[t]), begin, end, vec, coef); break;
    case FloatKind::BF16: scale_range(static_cast<BFloat16*>(a.data[t]), begin, end, vec, coef); break;
    case FloatKind::F64: scale_range(static_cast<double*>(a.data[t]), begin, end, vec, coef); break;
  }
}

void check_list(const char* op, const std::vector<Tensor>& grads) {
  for (const Tensor& g : grads) {
    HG_CHECK(g.device().is_cuda() && g.device() == grads[0].device() && g.is_contiguous(),
             "{}: gradient {} must be a contiguous tensor on {}", op, g.describe(), grads[0].device().str());
    cuda_mt::float_kind(g, op);
  }
}

int64_t total_chunks(const std::vector<Tensor>& grads) {
  int64_t n = 0;
  for (const Tensor& g : grads) n += (g.numel() + kChunk - 1) / kChunk;
  return n;
}

}  // namespace

Tensor multi_tensor_norm(const std::vector<Tensor>& grads, double norm_type) {
  constexpr const char* op = "clip_grad_norm_ (multi_tensor_norm)";
  check_list(op, grads);
  const Device device = grads[0].device();
  cuda_mt::DeviceGuard guard(device.index());
  const int64_t chunks = total_chunks(grads);
  // one float64 partial per chunk, from the pool on the current stream
  Tensor partials = empty({chunks > 0 ? chunks : 1}, TensorOptions(DType::Float64, device));
  Tensor total = empty({}, TensorOptions(DType::Float32, device));
  const Mode mode = grad_norm::mode_of(norm_type);
  NormArgs args{};
  args.p = norm_type;
  args.mode = mode;
  double* next = static_cast<double*>(partials.data_ptr());
  cuda_mt::pack_launches<kMaxTensors>(
      args, grads.size(), [&](size_t i) { return grads[i].numel(); },
      [&](NormArgs& a, int slot, size_t i) { cuda_mt::set_slot(a, slot, grads[i], op); },
      [&](NormArgs& a, unsigned blocks) {
        a.partials = next;
        norm_kernel<<<blocks, kThreads, 0, cuda_mt::stream()>>>(a);
        HG_CUDA_CHECK(cudaGetLastError());
        next += blocks;
      });
  finish_kernel<<<1, kThreads, 0, cuda_mt::stream()>>>(static_cast<const double*>(partials.data_ptr()), chunks,
                                                        mode, norm_type, static_cast<float*>(total.data_ptr()));
  HG_CUDA_CHECK(cudaGetLastError());
  return total;
}

void multi_tensor_clip(const std::vector<Tensor>& grads, const Tensor& total_norm, double max_norm) {
  constexpr const char* op = "clip_grad_norm_ (multi_tensor_clip)";
  check_list(op, grads);
  cuda_mt::DeviceGuard guard(grads[0].device().index());
  ClipArgs args{};
  args.total = static_cast<const float*>(total_norm.data_ptr());
  args.max_norm = static_cast<float>(max_norm);
  cuda_mt::pack_launches<kMaxTensors>(
      args, grads.size(), [&](size_t i) { return grads[i].numel(); },
      [&](ClipArgs& a, int slot, size_t i) { cuda_mt::set_slot(a, slot, grads[i], op); },
      [&](const ClipArgs& a, unsigned blocks) {
        clip_kernel<<<blocks, kThreads, 0, cuda_mt::stream()>>>(a);
        HG_CUDA_CHECK(cudaGetLastError());
      });
  for (const Tensor& g : grads) g.bump_version();
}

}  // namespace halfgrad::amp::cuda_kernels
