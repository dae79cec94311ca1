#pragma once
// The CPU matrix multiply, at the level of pointers and strides (no Tensor):
//
//   C[b][i][j] = sum_p A[b][i][p] * B[b][p][j]  (+ bias[j])  (+ beta * C_old[b][i][j])
//
// float32 and bfloat16 run on oneDNN's matmul (bf16 accumulates in float32
// inside oneDNN); float16 converts its inputs to float32, runs that path and
// rounds once to half (so does bfloat16 on CPUs without AVX-512, where oneDNN
// 2.6 has no bf16 matmul); float64 is a cache-blocked loop of our own that
// accumulates in double.
//
// A and B may have any strides: transposed views (row stride 1) and padded
// rows go straight to oneDNN; a batch stride of 0 broadcasts one matrix over
// the batch; anything oneDNN cannot describe (e.g. a column stride of 2, or
// overlapping strides) is first copied to a contiguous scratch buffer. C must
// be a non-overlapping layout whose rows are contiguous.
//
// Thread-safe: may be called from several threads at once.
#include <cstdint>

#include <halfgrad/core/dtype.h>

namespace halfgrad::kernels::cpu {

struct GemmArgs {
  DType dtype;  // dtype of A, B, C and bias (all the same): Float32, Float64, Float16, BFloat16
  int64_t batch = 1, m = 0, n = 0, k = 0;
  // Strides are in elements: batch stride, row stride, column stride.
  const void* a = nullptr;
  int64_t a_bs = 0, a_rs = 0, a_cs = 0;
  const void* b = nullptr;
  int64_t b_bs = 0, b_rs = 0, b_cs = 0;
  void* c = nullptr;  // C rows are contiguous (column stride 1)
  int64_t c_bs = 0, c_rs = 0;
  const void* bias = nullptr;  // optional: n contiguous elements of `dtype`
  float beta = 0.f;            // 0: C is overwritten and never read; 1: accumulate into C
  bool relu = false;           // C = max(0, A @ B + bias + beta * C_old): Linear+ReLU in one pass
  // A and B in `dtype` (bfloat16 or float16), C in float32: the float32 sums
  // are written as they are, not rounded to `dtype` (AMP's weight gradients,
  // whose cast back to the float32 master weights this saves). No bias, no relu.
  bool c_float32 = false;
};

// Runs one (batched) GEMM as described above. m, n or k may be 0: with k == 0
// C becomes bias (or 0) plus beta * C_old. Bad arguments throw halfgrad::Error.
void gemm(const GemmArgs& args);

}  // namespace halfgrad::kernels::cpu
