#pragma once
// Gradient clipping, PyTorch's torch.nn.utils.clip_grad_norm_ and
// clip_grad_value_ (LibTorch's torch::nn::utils). With the AMP loss scaler,
// clip the unscaled gradients:
//
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);
//   hg::nn::utils::clip_grad_norm_(model.parameters(), max_norm);
//   scaler.step(optimizer);  // still skipped after an overflow (unscale_ recorded it)
//   scaler.update();
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::nn::utils {

// Scales the gradients of `parameters` (those that have one) in place so that
// their total norm of order norm_type, over all of them as one vector, is at
// most max_norm: each grad *= min(max_norm / (total_norm + 1e-6), 1). Returns
// the total norm before clipping, as a float32 0-d tensor on the parameters'
// device (0 when no parameter has a gradient). norm_type: any p > 0, or
// INFINITY for the max |x|. The gradients must share one device.
//
// On CUDA this is a few multi-tensor launches for all grads, and the host never
// waits: the norm stays on the device and the clip reads it there. Only
// error_if_nonfinite = true reads it on the host (one wait), to throw an Error
// when it is NaN or inf, before any grad is changed. Otherwise a NaN total
// makes every grad NaN and an inf one makes the finite grads 0, as in PyTorch.
// float16/bfloat16 grads accumulate in float32 (float64 for float64) and are
// multiplied in float32, rounded once.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient of `parameters` to [-clip_value, clip_value] in place
// (NaN stays NaN). clip_value must be >= 0.
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);
void clip_grad_value_(const Tensor& parameter, double clip_value);

}  // namespace halfgrad::nn::utils
