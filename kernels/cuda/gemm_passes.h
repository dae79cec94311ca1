#pragma once
// The elementwise passes of the GEMM layer (kernels/cuda/gemm.cu): what cuBLASLt's
// epilogues cannot fuse (exact GELU, activation gradients on their own, bias
// and beta fallbacks when no fused algorithm exists). Internal to kernels/cuda/;
// a plain C++ header.
#include <cstdint>

#include <halfgrad/core/tensor.h>

namespace halfgrad::kernels::cuda::gemm_passes {

enum class Act : uint8_t { Identity, Relu, GeluErf, GeluTanh };

// out = act(scale * src + bias), and pre = scale * src + bias when `pre` is
// defined ([N, F] views of one dtype, bias [F] or undefined; out may be src).
void epilogue_pass(Act act, const Tensor& src, double scale, const Tensor& bias, const Tensor& pre, const Tensor& out);
// t = 0.
void zero(const Tensor& t);
// out = grad * act'(saved) (saved: the output for ReLU, the pre-activation for GELU).
void act_backward_pass(Act act, const Tensor& grad, const Tensor& saved, const Tensor& out);
// out[j] = sum_i m[i, j] (m [N, F], out [F], any stride); N == 0 gives zeros.
void sum_rows(const Tensor& m, const Tensor& out);

}  // namespace halfgrad::kernels::cuda::gemm_passes
