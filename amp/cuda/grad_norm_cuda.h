#pragma once
// The gradient norm and clip kernels on CUDA (contracts in amp/grad_norm.h).
// A plain C++ header: amp/grad_norm.cpp routes CUDA tensors here. The grads
// are contiguous floating tensors on one CUDA device (the caller checked);
// everything is queued on cuda::current_stream() and nothing waits.
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::amp::cuda_kernels {

// One launch per 128 tensors writes a float64 partial per chunk, then one
// block sums the partials in a fixed order and writes the float32 norm.
Tensor multi_tensor_norm(const std::vector<Tensor>& grads, double norm_type);

// One launch per 128 tensors; each block reads the total norm on the device
// and returns at once when the coefficient is 1.
void multi_tensor_clip(const std::vector<Tensor>& grads, const Tensor& total_norm, double max_norm);

}  // namespace halfgrad::amp::cuda_kernels
