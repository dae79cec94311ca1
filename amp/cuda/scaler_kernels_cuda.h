#pragma once
// The loss scaler's CUDA kernels. A plain C++ header (no CUDA includes):
// amp/scaler_kernels.cpp, built by g++, routes CUDA tensors here; the
// contracts are those of amp/scaler_kernels.h. Everything is queued on
// cuda::current_stream() and nothing waits for the device: the scale, the
// growth tracker and the flags are read and written by device threads only,
// so a whole AMP step can be captured in a CUDA graph.
#include <cstdint>
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::amp::cuda_kernels {

// All grads (float32, float16, bfloat16, float64, contiguous, on found_inf's
// device) in a few launches: one per 128 tensors, any mix of dtypes.
// found_inf is set to 1 if any element is not finite (never cleared); the
// grads are multiplied in place by *inv_scale (read on the device) when
// inv_scale is defined and not 1.
void unscale_and_check(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale);

// PyTorch's _amp_update_scale_ in one device thread. scale float32,
// growth_tracker int64, found_inf float32: scalars on one device.
void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval);

// out = float(1.0 / double(scale)) in one device thread.
void reciprocal_scale(const Tensor& scale, const Tensor& out);

}  // namespace halfgrad::amp::cuda_kernels
