#pragma once
// The log2 histogram's CUDA kernel (contract in amp/numerics.h). A plain C++
// header: amp/numerics.cpp routes CUDA tensors here.
#include <halfgrad/core/tensor.h>

namespace halfgrad::amp::cuda_kernels {

// t dense (float32, float16, bfloat16, float64; its numel() elements from
// data_ptr()), counts int64 [60] on t's device. Only queues kernels.
void accumulate_log2_histogram(const Tensor& t, const Tensor& counts);

}  // namespace halfgrad::amp::cuda_kernels
