#pragma once
// Fused multi-tensor SGD and Adam/AdamW on CUDA. A plain C++ header (no CUDA
// includes): optim/sgd.cpp and optim/adam.cpp, built by g++, call these.
//
// Every tensor is float32, contiguous, on one CUDA device; a parameter group
// is updated in one launch per 48-64 tensors, whatever their sizes. The per-
// element math is optim/update_math.h, the same code the CPU loops run.
//
// The loss-scaler hand-shake happens on the device, so nothing here waits
// for it:
//  - found_inf (float32 scalar, may be undefined): every block reads it first
//    and returns at once when it is nonzero, so a skipped step writes nothing
//    (parameters, gradients and state stay bit-identical);
//  - inv_scale (float32 scalar, may be undefined): each gradient is multiplied
//    by it and the unscaled gradient is written back to .grad (PyTorch's fused
//    optimizers do the same); undefined: the gradients are already unscaled
//    and are left as they are.
//  - step_counts (float32 scalars, one per parameter, as PyTorch's fused Adam
//    keeps them): a first tiny kernel adds 1 to each when found_inf is zero
//    (a skipped step is not counted), then the update kernel reads them:
//    Adam computes its bias corrections from them, SGD knows from a count of
//    1 that the momentum buffer starts as d_p. Two launches, because one
//    kernel cannot both read a count in every block and advance it.
#include <vector>

#include <halfgrad/core/tensor.h>
#include <halfgrad/optim/low_precision.h>
#include <halfgrad/optim/low_precision_math.h>
#include <halfgrad/optim/update_math.h>

namespace halfgrad::optim::cuda_fused {

// momentum_buffers and step_counts: one per parameter when h.momentum != 0,
// else empty. h.first_step is ignored: the counts say which step is first.
void sgd(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
         const std::vector<Tensor>& momentum_buffers, const std::vector<Tensor>& step_counts,
         const math::SGDHyper& h, const Tensor& found_inf, const Tensor& inv_scale);

struct AdamConfig {
  // Everything but step_size and bias_correction2_sqrt, which each block
  // derives on the device from its parameter's step count.
  math::AdamHyper hyper;
  double lr, beta1, beta2;
};

// max_exp_avg_sqs: one per parameter when hyper.amsgrad, else empty.
void adam(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
          const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& max_exp_avg_sqs,
          const std::vector<Tensor>& step_counts, const AdamConfig& config, const Tensor& found_inf,
          const Tensor& inv_scale);

// bfloat16/float16 parameters under the low-precision options
// (optim/low_precision.h; kernels in fused_optim_lp.cu): per parameter its
// gradient (its dtype), float32 master copy (Rounding::Master) and SR stream
// (Rounding::Stochastic: seed, index and a float32 applied-step count on the
// device, advanced by the launch unless found_inf is set). The state
// buffers are float32 or the parameter's dtype, one dtype per launch group.
struct LowPrecisionList {
  math::Rounding rounding = math::Rounding::Nearest;
  std::vector<Tensor> params, grads, masters, sr_steps;
  std::vector<uint64_t> seeds;
  std::vector<uint32_t> indices;
  void add(const Tensor& p, const Tensor& g, const LowPrecisionState& s) {
    params.push_back(p);
    grads.push_back(g);
    if (rounding == math::Rounding::Master) masters.push_back(s.master_param);
    if (rounding == math::Rounding::Stochastic) sr_steps.push_back(s.device_sr_step);
    seeds.push_back(s.sr_seed.value_or(0));
    indices.push_back(static_cast<uint32_t>(s.param_index));
  }
};

// momentum_buffers and step_counts: as for sgd() above.
void sgd_low_precision(const LowPrecisionList& list, const std::vector<Tensor>& momentum_buffers,
                       const std::vector<Tensor>& step_counts, const math::SGDHyper& h, const Tensor& found_inf,
                       const Tensor& inv_scale);
void adam_low_precision(const LowPrecisionList& list, const std::vector<Tensor>& exp_avgs,
                        const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& max_exp_avg_sqs,
                        const std::vector<Tensor>& step_counts, const AdamConfig& config, const Tensor& found_inf,
                        const Tensor& inv_scale);

}  // namespace halfgrad::optim::cuda_fused
