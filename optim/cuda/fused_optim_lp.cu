// Fused multi-tensor SGD and Adam/AdamW for bfloat16/float16 parameters under
// the low-precision options (fused_optim_cuda.h, optim/low_precision.h). The
// per-element math is optim/low_precision_math.h, the code the CPU loops run,
// and the stochastic-rounding bits are the same Philox words
// (optim/stochastic_rounding.h), so CPU and CUDA give the same bits.
// Launch layout: amp/cuda/multi_tensor.cuh. One element per thread step (no
// 16-byte packs: 2-byte parameters, and the Philox call dominates anyway).
#include <cuda_runtime.h>

#include <halfgrad/amp/cuda/multi_tensor.cuh>
#include <halfgrad/core/error.h>
#include <halfgrad/optim/cuda/fused_optim_cuda.h>
#include <halfgrad/optim/low_precision_math.h>

namespace halfgrad::optim::cuda_fused {
namespace {

using cuda_mt::kThreads;
using math::Rounding;

constexpr int kLpTensors = 32;  // tensors per launch: as many as fit in the 4 KB of kernel parameters
constexpr int kCountTensors = 256;

struct LpArgs {
  void* param[kLpTensors];
  void* grad[kLpTensors];
  float* master[kLpTensors];       // Rounding::Master only
  void* state[3][kLpTensors];      // SGD: momentum buffer; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq
  const float* step[kLpTensors];   // SGD with momentum, Adam: applied-step counts
  const float* sr_step[kLpTensors];  // Rounding::Stochastic: the SR stream's step
  uint64_t seed[kLpTensors];
  uint32_t index[kLpTensors];
  int64_t numel[kLpTensors];
  int32_t chunk_begin[kLpTensors + 1];
  int32_t count;
  Rounding rounding;
  math::SGDHyper sgd;
  math::AdamHyper adam;  // step_size and bias_correction2_sqrt are filled in per block
  double lr, beta1, beta2;
  const float* found_inf;
  const float* inv_scale;
};
static_assert(sizeof(LpArgs) <= cuda_mt::kMaxParamBytes, "LpArgs must fit in the kernel parameters");

struct CountArgs {
  float* step[kCountTensors];
  int32_t count;
  const float* found_inf;
};
static_assert(sizeof(CountArgs) <= cuda_mt::kMaxParamBytes, "CountArgs must fit in the kernel parameters");

__device__ __forceinline__ bool skipped(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

__global__ void count_kernel(const __grid_constant__ CountArgs a) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < a.count && !skipped(a.found_inf)) *a.step[i] += 1.0f;
}

// P: the parameter's storage (BFloat16, Half); S: the state's (float or P).
template <typename P, typename S, bool kAdam>
__global__ void __launch_bounds__(kThreads) lp_kernel(const __grid_constant__ LpArgs a) {
  if (skipped(a.found_inf)) return;
  const auto [t, begin, end] = cuda_mt::block_chunk(a);
  const float inv = a.inv_scale != nullptr ? *a.inv_scale : 1.0f;
  const bool write_grad = a.inv_scale != nullptr;
  P* p = static_cast<P*>(a.param[t]);
  P* g = static_cast<P*>(a.grad[t]);
  float* master = a.master[t];
  S* s0 = static_cast<S*>(a.state[0][t]);
  S* s1 = static_cast<S*>(a.state[1][t]);
  S* s2 = static_cast<S*>(a.state[2][t]);
  const bool stochastic = a.rounding == Rounding::Stochastic;
  // The count was advanced just before this kernel: it is this step's.
  const sr::Key key{a.seed[t], a.index[t], stochastic ? static_cast<uint32_t>(*a.sr_step[t]) : 0u};
  if constexpr (kAdam) {
    __shared__ math::AdamHyper shared_h;
    if (threadIdx.x == 0) {
      math::AdamHyper h = a.adam;
      math::adam_bias_corrections(h, a.lr, a.beta1, a.beta2, static_cast<double>(*a.step[t]));
      shared_h = h;
    }
    __syncthreads();
    const math::AdamHyper h = shared_h;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      math::adam_lp_element(p, g, master, s0, s1, s2, i, inv, write_grad, h, a.rounding,
                            stochastic ? sr::bits(key, static_cast<uint64_t>(i)) : uint16_t{0});
  } else {
    math::SGDHyper h = a.sgd;
    h.first_step = s0 != nullptr && *a.step[t] == 1.0f;  // the buffer's first applied step
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      math::sgd_lp_element(p, g, master, s0, i, inv, write_grad, h, a.rounding,
                           stochastic ? sr::bits(key, static_cast<uint64_t>(i)) : uint16_t{0});
  }
}

// ---- host side: checks, packing, launches -----------------------------------------

const float* scalar_ptr(const char* op, const char* what, const Tensor& t, Device device) {
  if (!t.defined()) return nullptr;
  HG_CHECK(t.dtype() == DType::Float32 && t.numel() == 1 && t.device() == device,
           "{}: {} must be a one-element float32 tensor on {} (the parameters' device), got {}", op, what,
           device.str(), t.describe());
  return static_cast<const float*>(t.data_ptr());
}

// n contiguous tensors shaped like the parameters on their device, of `dtype`
// (undefined: the parameter's own dtype, or float32 for state).
void check_list(const char* op, const char* what, const std::vector<Tensor>& list, const std::vector<Tensor>& params,
                bool state) {
  HG_CHECK(list.size() == params.size(), "{}: {} {} for {} parameters", op, list.size(), what, params.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    const Tensor& p = params[i];
    const bool dtype_ok = t.defined() && (t.dtype() == p.dtype() || (state && t.dtype() == DType::Float32));
    HG_CHECK(dtype_ok && t.device() == p.device() && t.is_contiguous() && t.shape() == p.shape(),
             "{}: {} {} of parameter {} must be a contiguous tensor of its shape on its device, in its dtype{}", op,
             what, t.defined() ? t.describe() : std::string("(undefined)"), p.describe(),
             state ? " or float32" : "");
  }
}

void check_inputs(const char* op, const LowPrecisionList& l) {
  HG_CHECK(!l.params.empty(), "{}: no parameters", op);
  const Device device = l.params[0].device();
  HG_CHECK(device.is_cuda(), "{}: parameter {} is not on a CUDA device", op, l.params[0].describe());
  for (const Tensor& p : l.params)
    HG_CHECK(p.device() == device && (p.dtype() == DType::BFloat16 || p.dtype() == DType::Float16) &&
                 p.is_contiguous(),
             "{}: parameter {} must be a contiguous bfloat16 or float16 tensor on {}", op, p.describe(),
             device.str());
  check_list(op, "gradient", l.grads, l.params, false);
  HG_CHECK(l.seeds.size() == l.params.size() && l.indices.size() == l.params.size(),
           "{}: {} seeds and {} indices for {} parameters", op, l.seeds.size(), l.indices.size(), l.params.size());
  if (l.rounding == Rounding::Master) {
    HG_CHECK(l.masters.size() == l.params.size(), "{}: {} master copies for {} parameters", op, l.masters.size(),
             l.params.size());
    for (size_t i = 0; i < l.masters.size(); ++i)
      HG_CHECK(l.masters[i].defined() && l.masters[i].dtype() == DType::Float32 && l.masters[i].is_contiguous() &&
                   l.masters[i].shape() == l.params[i].shape() && l.masters[i].device() == device,
               "{}: the master copy of parameter {} must be a contiguous float32 tensor of its shape on {}", op,
               l.params[i].describe(), device.str());
  }
  if (l.rounding == Rounding::Stochastic) {
    HG_CHECK(l.sr_steps.size() == l.params.size(), "{}: {} SR step counts for {} parameters", op,
             l.sr_steps.size(), l.params.size());
    for (const Tensor& s : l.sr_steps) scalar_ptr(op, "an SR step count", s, device);
  }
}

// Advance the counts (skipped steps do not count).
void count_steps(const std::vector<Tensor>& steps, const float* found_inf) {
  CountArgs args{};
  args.found_inf = found_inf;
  for (size_t first = 0; first < steps.size(); first += kCountTensors) {
    const size_t n = std::min<size_t>(kCountTensors, steps.size() - first);
    for (size_t i = 0; i < n; ++i) args.step[i] = static_cast<float*>(steps[first + i].data_ptr());
    args.count = static_cast<int32_t>(n);
    const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    count_kernel<<<blocks, kThreads, 0, cuda_mt::stream()>>>(args);
    HG_CUDA_CHECK(cudaGetLastError());
  }
  for (const Tensor& s : steps) s.bump_version();
}

// One group of launches per (parameter dtype, state dtype) present: each
// kernel is compiled for one pair. `states`: up to three lists (empty ones unused).
template <bool kAdam>
void launch(LpArgs& args, const LowPrecisionList& l, const std::vector<const std::vector<Tensor>*>& states,
            const std::vector<Tensor>& step_counts) {
  const bool stochastic = l.rounding == Rounding::Stochastic;
  auto state_dtype = [&](size_t i) {
    for (const auto* s : states)
      if (!s->empty()) return (*s)[i].dtype();
    return DType::Float32;
  };
  auto run = [&](auto ptag, auto stag, DType pd, DType sd) {
    using P = decltype(ptag);
    using S = decltype(stag);
    std::vector<size_t> idx;
    for (size_t i = 0; i < l.params.size(); ++i)
      if (l.params[i].dtype() == pd && state_dtype(i) == sd) idx.push_back(i);
    if (idx.empty()) return;
    cuda_mt::pack_launches<kLpTensors>(
        args, idx.size(), [&](size_t k) { return l.params[idx[k]].numel(); },
        [&](LpArgs& a, int slot, size_t k) {
          const size_t i = idx[k];
          a.param[slot] = l.params[i].data_ptr();
          a.grad[slot] = l.grads[i].data_ptr();
          a.master[slot] = l.rounding == Rounding::Master ? static_cast<float*>(l.masters[i].data_ptr()) : nullptr;
          for (int s = 0; s < 3; ++s)
            a.state[s][slot] = s < static_cast<int>(states.size()) && !states[s]->empty() ? (*states[s])[i].data_ptr()
                                                                                          : nullptr;
          a.step[slot] = step_counts.empty() ? nullptr : static_cast<const float*>(step_counts[i].data_ptr());
          a.sr_step[slot] = stochastic ? static_cast<const float*>(l.sr_steps[i].data_ptr()) : nullptr;
          a.seed[slot] = l.seeds[i];
          a.index[slot] = l.indices[i];
          a.numel[slot] = l.params[i].numel();
        },
        [&](const LpArgs& a, unsigned blocks) {
          lp_kernel<P, S, kAdam><<<blocks, kThreads, 0, cuda_mt::stream()>>>(a);
          HG_CUDA_CHECK(cudaGetLastError());
        });
  };
  run(BFloat16{}, float{}, DType::BFloat16, DType::Float32);
  run(BFloat16{}, BFloat16{}, DType::BFloat16, DType::BFloat16);
  run(Half{}, float{}, DType::Float16, DType::Float32);
  run(Half{}, Half{}, DType::Float16, DType::Float16);
}

void bump_all(const LowPrecisionList& l, const std::vector<const std::vector<Tensor>*>& states, bool grads) {
  for (const Tensor& t : l.params) t.bump_version();
  if (grads)
    for (const Tensor& t : l.grads) t.bump_version();
  for (const Tensor& t : l.masters) t.bump_version();
  for (const auto* s : states)
    for (const Tensor& t : *s) t.bump_version();
}

}  // namespace

void sgd_low_precision(const LowPrecisionList& l, const std::vector<Tensor>& momentum_buffers,
                       const std::vector<Tensor>& step_counts, const math::SGDHyper& h, const Tensor& found_inf,
                       const Tensor& inv_scale) {
  constexpr const char* op = "SGD.step (fused CUDA, low precision)";
  check_inputs(op, l);
  const bool momentum = h.momentum != 0.0f;
  const Device device = l.params[0].device();
  if (momentum) {
    check_list(op, "momentum buffer", momentum_buffers, l.params, true);
    HG_CHECK(step_counts.size() == l.params.size(), "{}: {} step counts for {} parameters", op, step_counts.size(),
             l.params.size());
    for (const Tensor& s : step_counts) scalar_ptr(op, "a step count", s, device);
  }
  cuda_mt::DeviceGuard guard(device.index());
  LpArgs args{};
  args.rounding = l.rounding;
  args.sgd = h;
  args.found_inf = scalar_ptr(op, "found_inf", found_inf, device);
  args.inv_scale = scalar_ptr(op, "inv_scale", inv_scale, device);
  std::vector<Tensor> counts = momentum ? step_counts : std::vector<Tensor>{};
  if (l.rounding == Rounding::Stochastic) counts.insert(counts.end(), l.sr_steps.begin(), l.sr_steps.end());
  count_steps(counts, args.found_inf);
  const std::vector<Tensor> none;
  const std::vector<const std::vector<Tensor>*> states{momentum ? &momentum_buffers : &none};
  launch<false>(args, l, states, momentum ? step_counts : none);
  bump_all(l, states, inv_scale.defined());
}

void adam_low_precision(const LowPrecisionList& l, const std::vector<Tensor>& exp_avgs,
                        const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& max_exp_avg_sqs,
                        const std::vector<Tensor>& step_counts, const AdamConfig& config, const Tensor& found_inf,
                        const Tensor& inv_scale) {
  const char* op = config.hyper.decoupled ? "AdamW.step (fused CUDA, low precision)"
                                          : "Adam.step (fused CUDA, low precision)";
  check_inputs(op, l);
  check_list(op, "exp_avg", exp_avgs, l.params, true);
  check_list(op, "exp_avg_sq", exp_avg_sqs, l.params, true);
  const bool amsgrad = config.hyper.amsgrad;
  if (amsgrad) check_list(op, "max_exp_avg_sq", max_exp_avg_sqs, l.params, true);
  for (size_t i = 0; i < l.params.size(); ++i)
    HG_CHECK(exp_avg_sqs[i].dtype() == exp_avgs[i].dtype() &&
                 (!amsgrad || max_exp_avg_sqs[i].dtype() == exp_avgs[i].dtype()),
             "{}: the state buffers of parameter {} differ in dtype", op, l.params[i].describe());
  HG_CHECK(step_counts.size() == l.params.size(), "{}: {} step counts for {} parameters", op, step_counts.size(),
           l.params.size());
  const Device device = l.params[0].device();
  for (const Tensor& s : step_counts) scalar_ptr(op, "a step count", s, device);
  cuda_mt::DeviceGuard guard(device.index());
  LpArgs args{};
  args.rounding = l.rounding;
  args.adam = config.hyper;
  args.lr = config.lr;
  args.beta1 = config.beta1;
  args.beta2 = config.beta2;
  args.found_inf = scalar_ptr(op, "found_inf", found_inf, device);
  args.inv_scale = scalar_ptr(op, "inv_scale", inv_scale, device);
  std::vector<Tensor> counts = step_counts;
  if (l.rounding == Rounding::Stochastic) counts.insert(counts.end(), l.sr_steps.begin(), l.sr_steps.end());
  count_steps(counts, args.found_inf);
  const std::vector<Tensor> none;
  const std::vector<const std::vector<Tensor>*> states{&exp_avgs, &exp_avg_sqs, amsgrad ? &max_exp_avg_sqs : &none};
  launch<true>(args, l, states, step_counts);
  bump_all(l, states, inv_scale.defined());
}

}  // namespace halfgrad::optim::cuda_fused
