// Fused multi-tensor SGD and Adam/AdamW kernels (see fused_optim_cuda.h).
// Launch layout and metadata passing: amp/cuda/multi_tensor.cuh.
#include <cuda_runtime.h>

#include <string>

#include <halfgrad/amp/cuda/multi_tensor.cuh>
#include <halfgrad/core/error.h>
#include <halfgrad/optim/cuda/fused_optim_cuda.h>
#include <halfgrad/optim/update_math.h>

namespace halfgrad::optim::cuda_fused {
namespace {

using cuda_mt::kChunk;
using cuda_mt::kThreads;
using F4 = cuda_mt::Pack<float>;

// Tensors per launch, as many as fit in the 4 KB of kernel parameters.
constexpr int kSgdTensors = 64;
constexpr int kAdamTensors = 48;
constexpr int kCountTensors = 256;

struct SGDArgs {
  float* param[kSgdTensors];
  float* grad[kSgdTensors];
  float* buf[kSgdTensors];          // momentum buffers (unused without momentum)
  const float* step[kSgdTensors];   // applied-step counts (unused without momentum)
  int64_t numel[kSgdTensors];
  int32_t chunk_begin[kSgdTensors + 1];
  uint8_t vec[kSgdTensors];  // every array of the tensor 16-byte aligned: float4 loads
  int32_t count;
  math::SGDHyper h;
  const float* found_inf;  // nullptr: no scaler
  const float* inv_scale;  // nullptr: grads already unscaled
};
static_assert(sizeof(SGDArgs) <= cuda_mt::kMaxParamBytes, "SGDArgs must fit in the kernel parameters");

struct AdamArgs {
  float* param[kAdamTensors];
  float* grad[kAdamTensors];
  float* exp_avg[kAdamTensors];
  float* exp_avg_sq[kAdamTensors];
  float* max_exp_avg_sq[kAdamTensors];  // amsgrad only
  const float* step[kAdamTensors];
  int64_t numel[kAdamTensors];
  int32_t chunk_begin[kAdamTensors + 1];
  uint8_t vec[kAdamTensors];
  int32_t count;
  math::AdamHyper h;  // step_size and bias_correction2_sqrt are filled in per block
  double lr, beta1, beta2;
  const float* found_inf;
  const float* inv_scale;
};
static_assert(sizeof(AdamArgs) <= cuda_mt::kMaxParamBytes, "AdamArgs must fit in the kernel parameters");

struct CountArgs {
  float* step[kCountTensors];
  int32_t count;
  const float* found_inf;
};
static_assert(sizeof(CountArgs) <= cuda_mt::kMaxParamBytes, "CountArgs must fit in the kernel parameters");

// The skip: found_inf is written by earlier kernels on this stream and read
// by every block before it touches memory; it is the same for every thread,
// so a block either returns whole or runs whole.
__device__ __forceinline__ bool skipped(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

__device__ __forceinline__ F4 load4(const float* p) { return *reinterpret_cast<const F4*>(p); }
__device__ __forceinline__ void store4(float* p, const F4& v) { *reinterpret_cast<F4*>(p) = v; }

// One more applied step for each parameter, unless the step is skipped.
__global__ void count_step_kernel(const __grid_constant__ CountArgs a) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < a.count && !skipped(a.found_inf)) *a.step[i] += 1.0f;
}

template <bool kMomentum>
__global__ void __launch_bounds__(kThreads) sgd_kernel(const __grid_constant__ SGDArgs a) {
  if (skipped(a.found_inf)) return;
  const auto [t, begin, end] = cuda_mt::block_chunk(a);
  const float inv = a.inv_scale != nullptr ? *a.inv_scale : 1.0f;
  const bool write_grad = a.inv_scale != nullptr;  // else .grad already holds the unscaled value
  math::SGDHyper h = a.h;
  // The count was advanced just before this kernel: 1 means this is the
  // buffer's first applied step (earlier skipped steps never wrote it).
  h.first_step = kMomentum && *a.step[t] == 1.0f;
  float* p = a.param[t];
  float* g = a.grad[t];
  float* b = kMomentum ? a.buf[t] : nullptr;

  cuda_mt::for_each_pack<float>(
      begin, end, a.vec[t] != 0,
      [&](int64_t i) {
        F4 pv = load4(p + i), gv = load4(g + i), bv;
        if constexpr (kMomentum) bv = load4(b + i);
#pragma unroll
        for (int j = 0; j < 4; ++j) math::sgd_element(pv.v[j], gv.v[j], kMomentum ? &bv.v[j] : nullptr, inv, h);
        store4(p + i, pv);
        if (write_grad) store4(g + i, gv);
        if constexpr (kMomentum) store4(b + i, bv);
      },
      [&](int64_t i) {
        float pv = p[i], gv = g[i], bv = 0.0f;
        if constexpr (kMomentum) bv = b[i];
        math::sgd_element(pv, gv, kMomentum ? &bv : nullptr, inv, h);
        p[i] = pv;
        if (write_grad) g[i] = gv;
        if constexpr (kMomentum) b[i] = bv;
      });
}

template <bool kAmsgrad>
__global__ void __launch_bounds__(kThreads) adam_kernel(const __grid_constant__ AdamArgs a) {
  if (skipped(a.found_inf)) return;
  const auto [t, begin, end] = cuda_mt::block_chunk(a);
  const float inv = a.inv_scale != nullptr ? *a.inv_scale : 1.0f;
  const bool write_grad = a.inv_scale != nullptr;
  // Bias corrections from the device-side step count (already advanced for
  // this step), in float64 like the CPU: once per block, not per thread.
  __shared__ math::AdamHyper shared_h;
  if (threadIdx.x == 0) {
    math::AdamHyper h = a.h;
    math::adam_bias_corrections(h, a.lr, a.beta1, a.beta2, static_cast<double>(*a.step[t]));
    shared_h = h;
  }
  __syncthreads();
  const math::AdamHyper h = shared_h;
  float* p = a.param[t];
  float* g = a.grad[t];
  float* m = a.exp_avg[t];
  float* v = a.exp_avg_sq[t];
  float* x = kAmsgrad ? a.max_exp_avg_sq[t] : nullptr;

  cuda_mt::for_each_pack<float>(
      begin, end, a.vec[t] != 0,
      [&](int64_t i) {
        F4 pv = load4(p + i), gv = load4(g + i), mv = load4(m + i), vv = load4(v + i), xv;
        if constexpr (kAmsgrad) xv = load4(x + i);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          math::adam_element(pv.v[j], gv.v[j], mv.v[j], vv.v[j], kAmsgrad ? &xv.v[j] : nullptr, inv, h);
        store4(p + i, pv);
        if (write_grad) store4(g + i, gv);
        store4(m + i, mv);
        store4(v + i, vv);
        if constexpr (kAmsgrad) store4(x + i, xv);
      },
      [&](int64_t i) {
        float pv = p[i], gv = g[i], mv = m[i], vv = v[i], xv = 0.0f;
        if constexpr (kAmsgrad) xv = x[i];
        math::adam_element(pv, gv, mv, vv, kAmsgrad ? &xv : nullptr, inv, h);
        p[i] = pv;
        if (write_grad) g[i] = gv;
        m[i] = mv;
        v[i] = vv;
        if constexpr (kAmsgrad) x[i] = xv;
      });
}

// ---- host side: checks, packing, launches -----------------------------------------

float* f32(const Tensor& t) { return static_cast<float*>(t.data_ptr()); }

// A one-element float32 tensor on `device`, or undefined.
const float* scalar_ptr(const char* op, const char* what, const Tensor& t, Device device) {
  if (!t.defined()) return nullptr;
  HG_CHECK(t.dtype() == DType::Float32 && t.numel() == 1 && t.device() == device,
           "{}: {} must be a one-element float32 tensor on {} (the parameters' device), got {}", op, what,
           device.str(), t.describe());
  return static_cast<const float*>(t.data_ptr());
}

// `list` holds n float32 contiguous tensors shaped like the parameters.
void check_list(const char* op, const char* what, const std::vector<Tensor>& list,
                const std::vector<Tensor>& params) {
  HG_CHECK(list.size() == params.size(), "{}: {} {} for {} parameters", op, list.size(), what, params.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    const Tensor& p = params[i];
    HG_CHECK(t.defined() && t.device() == p.device() && t.dtype() == DType::Float32 && t.is_contiguous() &&
                 t.shape() == p.shape(),
             "{}: {} {} of parameter {} ({}) must be a contiguous float32 tensor of its shape on its device", op,
             what, t.defined() ? t.describe() : std::string("(undefined)"), i, p.describe());
  }
}

void check_params(const char* op, const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HG_CHECK(!params.empty(), "{}: no parameters", op);
  const Device device = params[0].device();
  HG_CHECK(device.is_cuda(), "{}: parameter {} is not on a CUDA device", op, params[0].describe());
  for (const Tensor& p : params)
    HG_CHECK(p.device() == device && p.dtype() == DType::Float32 && p.is_contiguous(),
             "{}: parameter {} must be a contiguous float32 tensor on {} (one launch covers one device)", op,
             p.describe(), device.str());
  check_list(op, "gradient", grads, params);
}

bool all_aligned(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t != nullptr && !cuda_mt::aligned16(t->data_ptr())) return false;
  return true;
}

// Advance the step counts of the parameters (skipped steps do not count).
void count_steps(const std::vector<Tensor>& steps, const float* found_inf) {
  CountArgs args{};
  args.found_inf = found_inf;
  for (size_t first = 0; first < steps.size(); first += kCountTensors) {
    const size_t n = std::min<size_t>(kCountTensors, steps.size() - first);
    for (size_t i = 0; i < n; ++i) args.step[i] = f32(steps[first + i]);
    args.count = static_cast<int32_t>(n);
    const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    count_step_kernel<<<blocks, kThreads, 0, cuda_mt::stream()>>>(args);
    HG_CUDA_CHECK(cudaGetLastError());
  }
  for (const Tensor& s : steps) s.bump_version();
}

void bump(const std::vector<Tensor>& list) {
  for (const Tensor& t : list) t.bump_version();
}

}  // namespace

void sgd(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
         const std::vector<Tensor>& momentum_buffers, const std::vector<Tensor>& step_counts,
         const math::SGDHyper& h, const Tensor& found_inf, const Tensor& inv_scale) {
  constexpr const char* op = "SGD.step (fused CUDA)";
  check_params(op, params, grads);
  const bool momentum = h.momentum != 0.0f;
  if (momentum) {
    check_list(op, "momentum buffer", momentum_buffers, params);
    HG_CHECK(step_counts.size() == params.size(), "{}: {} step counts for {} parameters", op, step_counts.size(),
             params.size());
    for (const Tensor& s : step_counts) scalar_ptr(op, "a step count", s, params[0].device());
  }
  const Device device = params[0].device();
  cuda_mt::DeviceGuard guard(device.index());
  SGDArgs args{};
  args.h = h;
  args.found_inf = scalar_ptr(op, "found_inf", found_inf, device);
  args.inv_scale = scalar_ptr(op, "inv_scale", inv_scale, device);
  if (momentum) count_steps(step_counts, args.found_inf);
  cuda_mt::pack_launches<kSgdTensors>(
      args, params.size(), [&](size_t i) { return params[i].numel(); },
      [&](SGDArgs& a, int slot, size_t i) {
        a.param[slot] = f32(params[i]);
        a.grad[slot] = f32(grads[i]);
        a.buf[slot] = momentum ? f32(momentum_buffers[i]) : nullptr;
        a.step[slot] = momentum ? f32(step_counts[i]) : nullptr;
        a.numel[slot] = params[i].numel();
        a.vec[slot] = all_aligned({&params[i], &grads[i], momentum ? &momentum_buffers[i] : nullptr});
      },
      [&](const SGDArgs& a, unsigned blocks) {
        if (momentum) sgd_kernel<true><<<blocks, kThreads, 0, cuda_mt::stream()>>>(a);
        else sgd_kernel<false><<<blocks, kThreads, 0, cuda_mt::stream()>>>(a);
        HG_CUDA_CHECK(cudaGetLastError());
      });
  bump(params);
  if (inv_scale.defined()) bump(grads);
  if (momentum) bump(momentum_buffers);
}

void adam(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
          const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& max_exp_avg_sqs,
          const std::vector<Tensor>& step_counts, const AdamConfig& config, const Tensor& found_inf,
          const Tensor& inv_scale) {
  const char* op = config.hyper.decoupled ? "AdamW.step (fused CUDA)" : "Adam.step (fused CUDA)";
  check_params(op, params, grads);
  check_list(op, "exp_avg", exp_avgs, params);
  check_list(op, "exp_avg_sq", exp_avg_sqs, params);
  const bool amsgrad = config.hyper.amsgrad;
  if (amsgrad) check_list(op, "max_exp_avg_sq", max_exp_avg_sqs, params);
  HG_CHECK(step_counts.size() == params.size(), "{}: {} step counts for {} parameters", op, step_counts.size(),
           params.size());
  const Device device = params[0].device();
  for (const Tensor& s : step_counts) scalar_ptr(op, "a step count", s, device);
  cuda_mt::DeviceGuard guard(device.index());
  AdamArgs args{};
  args.h = config.hyper;
  args.lr = config.lr;
  args.beta1 = config.beta1;
  args.beta2 = config.beta2;
  args.found_inf = scalar_ptr(op, "found_inf", found_inf, device);
  args.inv_scale = scalar_ptr(op, "inv_scale", inv_scale, device);
  count_steps(step_counts, args.found_inf);
  cuda_mt::pack_launches<kAdamTensors>(
      args, params.size(), [&](size_t i) { return params[i].numel(); },
      [&](AdamArgs& a, int slot, size_t i) {
        a.param[slot] = f32(params[i]);
        a.grad[slot] = f32(grads[i]);
        a.exp_avg[slot] = f32(exp_avgs[i]);
        a.exp_avg_sq[slot] = f32(exp_avg_sqs[i]);
        a.max_exp_avg_sq[slot] = amsgrad ? f32(max_exp_avg_sqs[i]) : nullptr;
        a.step[slot] = f32(step_counts[i]);
        a.numel[slot] = params[i].numel();
        a.vec[slot] = all_aligned(
            {&params[i], &grads[i], &exp_avgs[i], &exp_avg_sqs[i], amsgrad ? &max_exp_avg_sqs[i] : nullptr});
      },
      [&](const AdamArgs& a, unsigned blocks) {
        if (amsgrad) adam_kernel<true><<<blocks, kThreads, 0, cuda_mt::stream()>>>(a);
        else adam_kernel<false><<<blocks, kThreads, 0, cuda_mt::stream()>>>(a);
        HG_CUDA_CHECK(cudaGetLastError());
      });
  bump(params);
  if (inv_scale.defined()) bump(grads);
  bump(exp_avgs);
  bump(exp_avg_sqs);
  if (amsgrad) bump(max_exp_avg_sqs);
}

}  // namespace halfgrad::optim::cuda_fused
