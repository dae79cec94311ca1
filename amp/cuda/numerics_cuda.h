#pragma once
// The log2 histogram's CUDA kernel (contract in amp/numerics.h). A plain C++
// header: amp/numerics.cpp routes CUDA tensors here.
#include <halfgrad/core/tensor.h>

namespace halfgrad::amp::cuda_kernels {

// t dense (float32, float16, bfloat16, float64; its numel() elements from
// data_ptr()), counts int64 [60] on t's device ([61] with_max: then the last
// one keeps the bits of the largest finite |x| as a double). Only queues kernels.
void accumulate_log2_histogram(const Tensor& t, const Tensor& counts, bool with_max);

}  // namespace halfgrad::amp::cuda_kernels
