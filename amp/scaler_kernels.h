#pragma once
// The loss scaler's kernels (PyTorch's _amp_foreach_non_finite_check_and_unscale_
// and _amp_update_scale_). Each takes every gradient in one call: one pass
// over all of them, not one launch per tensor. The flags and the scale are
// float32 scalar tensors on the gradients' device, so on CUDA nothing here
// needs the host to wait.
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::amp {

// For every element of every grad: if it is not finite, set found_inf to 1
// (never to 0: the caller zeroes it); then, if inv_scale is defined, multiply
// the grad by it in place. Grads may be float32, float16, bfloat16 or float64.
void unscale_and_check(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale);

// _amp_update_scale_: on found_inf, scale *= backoff and the tracker resets;
// otherwise the tracker counts up and at growth_interval the scale grows (only
// if the grown value is finite) and the tracker resets.
void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval);

// out = 1 / scale, computed in float64 and stored in float32 (PyTorch's
// unscale factor). Both float32 scalars on one device; on CUDA a device
// thread computes it, so the host never reads the scale.
void reciprocal_scale(const Tensor& scale, const Tensor& out);

}  // namespace halfgrad::amp
