#pragma once
// The CUDA backend: one function per entry of ops/kernels.h, with the same
// contracts as the CPU backend (ops/cpu/cpu_kernels.h). A plain C++ header
// (no CUDA includes): ops/kernels.cpp, built by g++, calls these; the .cu
// files beside it implement them. Every kernel runs on cuda::current_stream(),
// never synchronises, and computes half types in float32 with the shared
// per-element math of ops/math.h.
#include <halfgrad/ops/kernels.h>

namespace halfgrad::cuda_ops {

void unary(kernels::UnaryOp op, const Tensor& in, const Tensor& out, kernels::UnaryParams p);
void binary(kernels::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
void fill(const Tensor& out, double value);              // any strides
void copy(const Tensor& dst, const Tensor& src);         // one device, any dtypes, any strides
void reduce(kernels::ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out,
            const Tensor& indices = Tensor());
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta);
void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const kernels::ConvGeometry& g,
                  const Tensor& y);
void conv_backward_data(const Tensor& dy, const Tensor& w, const kernels::ConvGeometry& g, const Tensor& dx);
void conv_backward_weight(const Tensor& dy, const Tensor& x, const kernels::ConvGeometry& g, const Tensor& dw,
                          const Tensor& db);
// ops/cuda/batch_norm.cu: one block per channel for the statistics and the
// weight/bias gradients (block-wide float32 reductions, no atomics).
// ops/cuda/pool.cu: one thread per output; the backward one thread per input
// element, gathering from the windows that contain it (no atomics). An index
// outside its plane (never produced by max_pool2d) is skipped.
void batch_norm_stats(const Tensor& x, double eps, const Tensor& mean, const Tensor& invstd,
                      const Tensor& running_mean, const Tensor& running_var, double momentum);
void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, const Tensor& y);
void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias);
void max_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y, const Tensor& indices);
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const kernels::Pool2dGeometry& geo,
                         const Tensor& dx);
void avg_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y);
void avg_pool2d_backward(const Tensor& g, const kernels::Pool2dGeometry& geo, const Tensor& dx);
void adaptive_avg_pool2d(const Tensor& x, const Tensor& y);
void adaptive_avg_pool2d_backward(const Tensor& g, const Tensor& dx);
void softmax(const Tensor& in, const Tensor& out, bool log);
void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in, bool log);
// A target out of range (and not ignore_index) cannot throw from a kernel
// without a sync: its loss is written as NaN, which shows in the loss and
// makes the GradScaler skip the step.
void nll_loss(const Tensor& logp, const Tensor& target, const Tensor& out, int64_t ignore_index);
void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& grad_logp, int64_t ignore_index);
void cross_entropy_backward(const Tensor& grad, const Tensor& logp, const Tensor& target, const Tensor& gx,
                            int64_t ignore_index);
// ops/cuda/sort.cu (CUB): segmented radix sort of order-preserving integer
// keys; a row may hold up to 2^31 - 1 elements. randperm sorts 64-bit random
// keys from the device's generator (no host sync).
void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending);
void take_along_dim_backward(const Tensor& g, const Tensor& indices, const Tensor& grad_in);
void cumsum(const Tensor& in, const Tensor& out, bool reverse);
void randperm(const Tensor& out);
// Gather/scatter (ops/cuda/index.cu): an out-of-range index is not checked on
// the host (that would need a sync): gather writes NaN (0 for integer and bool
// dtypes) for it and scatter skips it; memory out of bounds is never touched.
// Add uses atomicAdd (float32, float64, int64; the op passes half types as a
// float32 copy), so its float sums may differ in the last bits from run to run.
void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out);
void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, kernels::ScatterMode mode);
// Random fills of a contiguous `out` from the device's generator (core/random.h):
// the same numbers as the CPU backend's for the same seed and calls.
void uniform(const Tensor& out, double low, double high);
void normal(const Tensor& out, double mean, double std);
void randint(const Tensor& out, int64_t low, int64_t high);

}  // namespace halfgrad::cuda_ops
