// CUDA softmax / log-softmax over the last dim and the per-sample NLL that
// cross_entropy builds on, with the arithmetic of kernels/cpu/softmax.cpp: float
// accumulation (double for float64), the row max subtracted before exp, one
// rounding per output. Rows of up to 1024 elements get one warp each, longer
// rows one 256-thread block; a row is read once per pass (max, sum, write),
// the later passes mostly from L1/L2.
#include <cmath>

#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>
#include <halfgrad/kernels/math.h>
#include <halfgrad/kernels/kernel_ptr.h>

namespace halfgrad::kernels::cuda {

namespace {

template <typename T>
using facc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr int64_t kWarpRowMax = 1024;
constexpr int kRowsPerBlock = kThreads / 32;  // in warp mode

struct MaxValOp {  // NaNs are skipped here; they still reach the sum, which makes the row NaN as on the CPU
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return b > a ? b : a;
  }
};

// Which row this warp/block handles first, its lane and the lane count.
struct RowGroup {
  int64_t first, step;
  int lane, width;
  bool warp_mode;
  __device__ __forceinline__ explicit RowGroup(bool warp) : warp_mode(warp) {
    if (warp) {
      first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
      step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
      lane = threadIdx.x & 31;
      width = 32;
    } else {
      first = blockIdx.x;
      step = gridDim.x;
      lane = threadIdx.x;
      width = blockDim.x;
    }
  }
  template <typename A, typename Op>
  __device__ __forceinline__ A allreduce(A v, const Op& op, A* smem) const {
    return warp_mode ? warp_allreduce(v, op) : block_allreduce(v, op, smem);
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_kernel(const storage_t<T>* __restrict__ x, storage_t<T>* __restrict__ y, int64_t rows, int64_t c,
                   bool log, bool warp_mode) {
  using A = facc_t<T>;
  __shared__ A smem[32];
  const RowGroup g(warp_mode);
  for (int64_t row = g.first; row < rows; row += g.step) {
    const storage_t<T>* xr = x + row * c;
    storage_t<T>* yr = y + row * c;
    A mx = -static_cast<A>(INFINITY);
    for (int64_t j = g.lane; j < c; j += g.width) mx = MaxValOp{}(mx, static_cast<A>(Elem<T>::load(xr[j])));
    mx = g.allreduce(mx, MaxValOp{}, smem);
    A sum = 0;
    for (int64_t j = g.lane; j < c; j += g.width) sum += math::exp_(static_cast<A>(Elem<T>::load(xr[j])) - mx);
    sum = g.allreduce(sum, SumOp{}, smem);
    if (log) {
      const A ls = math::log_(sum);  // (x - max) - log(sum), as on the CPU
      for (int64_t j = g.lane; j < c; j += g.width)
        yr[j] = Elem<T>::store(static_cast<acc_t<T>>((static_cast<A>(Elem<T>::load(xr[j])) - mx) - ls));
    } else {
      const A inv = A(1) / sum;
      for (int64_t j = g.lane; j < c; j += g.width)
        yr[j] = Elem<T>::store(static_cast<acc_t<T>>(math::exp_(static_cast<A>(Elem<T>::load(xr[j])) - mx) * inv));
    }
  }
}

// softmax: gi = y * (g - sum(g * y)); log-softmax: gi = g - exp(y) * sum(g).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_backward_kernel(const storage_t<T>* __restrict__ go, const storage_t<T>* __restrict__ y,
                            storage_t<T>* __restrict__ gi, int64_t rows, int64_t c, bool log, bool warp_mode) {
  using A = facc_t<T>;
  __shared__ A smem[32];
  const RowGroup g(warp_mode);
  for (int64_t row = g.first; row < rows; row += g.step) {
    const int64_t base = row * c;
    A dot = 0;
    for (int64_t j = g.lane; j < c; j += g.width) {
      const A gj = static_cast<A>(Elem<T>::load(go[base + j]));
      dot += log ? gj : gj * static_cast<A>(Elem<T>::load(y[base + j]));
    }
    dot = g.allreduce(dot, SumOp{}, smem);
    for (int64_t j = g.lane; j < c; j += g.width) {
      const A gj = static_cast<A>(Elem<T>::load(go[base + j]));
      const A yj = static_cast<A>(Elem<T>::load(y[base + j]));
      gi[base + j] = Elem<T>::store(static_cast<acc_t<T>>(log ? gj - math::exp_(yj) * dot : yj * (gj - dot)));
    }
  }
}

// out[i] = -logp[i, t_i]; 0 where t_i == ignore_index; NaN where t_i is out
// of range (see nll_loss below).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    nll_loss_kernel(const storage_t<T>* __restrict__ logp, const int64_t* __restrict__ target, int64_t t_stride,
                    storage_t<T>* __restrict__ out, int64_t n, int64_t c, int64_t ignore_index) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t t = target[i * t_stride];
    acc_t<T> v;
    if (t == ignore_index) v = acc_t<T>(0);
    else if (t < 0 || t >= c) v = static_cast<acc_t<T>>(NAN);
    else v = -Elem<T>::load(logp[i * c + t]);
    out[i] = Elem<T>::store(v);
  }
}

// grad_logp[i, t_i] = -grad[i] (the rest was zeroed); out-of-range targets
// and ignore_index rows keep a zero gradient.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    nll_loss_backward_kernel(const storage_t<T>* __restrict__ grad, int64_t g_stride,
                             const int64_t* __restrict__ target, int64_t t_stride, storage_t<T>* __restrict__ gl,
                             int64_t n, int64_t c, int64_t ignore_index) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t t = target[i * t_stride];
    if (t == ignore_index || t < 0 || t >= c) continue;
    gl[i * c + t] = Elem<T>::store(-Elem<T>::load(grad[i * g_stride]));
  }
}

// cross_entropy's input gradient, one thread per logit: what the two kernels
// above give (the one-hot row's sum is its one entry -g_i), in one pass.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(const storage_t<T>* __restrict__ grad, int64_t g_stride,
                                  const int64_t* __restrict__ target, int64_t t_stride,
                                  const storage_t<T>* __restrict__ logp, storage_t<T>* __restrict__ gx, int64_t n,
                                  int64_t c, int64_t ignore_index) {
  using A = facc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n * c; k += step) {
    const int64_t i = k / c, j = k - i * c;
    const int64_t t = target[i * t_stride];
    const bool valid = t != ignore_index && t >= 0 && t < c;
    const A dot = valid ? -static_cast<A>(Elem<T>::load(grad[i * g_stride])) : A(0);
    const A gl = valid && j == t ? dot : A(0);
    const A e = math::exp_(static_cast<A>(Elem<T>::load(logp[k])));
    gx[k] = Elem<T>::store(static_cast<acc_t<T>>(gl - e * dot));
  }
}

int64_t last_dim(const Tensor& t) { return t.dim() == 0 ? 1 : t.shape().back(); }

void check_rows(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor& first = **ts.begin();
  for (const Tensor* t : ts) {
    HG_CHECK(t->is_contiguous(), "{}: the CUDA kernel needs contiguous tensors, got {}; call .contiguous() first", op,
             t->describe());
    HG_CHECK(t->shape() == first.shape() && t->dtype() == first.dtype(),
             "{}: {} and {} must have the same shape and dtype", op, first.describe(), t->describe());
  }
}

// Warp per row for short rows, block per row for long ones; a few waves of
// blocks, the kernels loop over the rest.
std::pair<unsigned, bool> row_launch(int64_t rows, int64_t c, int device) {
  const bool warp_mode = c <= kWarpRowMax;
  return {grid_for(rows, warp_mode ? kRowsPerBlock : 1, device), warp_mode};
}


}  // namespace

void softmax(const Tensor& in, const Tensor& out, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  const int device = common_device(op, {&in, &out});
  check_rows(op, {&in, &out});
  const int64_t c = last_dim(in);
  const int64_t rows = c == 0 ? 0 : in.numel() / c;
  if (rows == 0) return;
  DeviceGuard guard(device);
  const auto [blocks, warp_mode] = row_launch(rows, c, device);
  HG_DISPATCH_FLOATING(in.dtype(), op, [&] {
    softmax_kernel<scalar_t><<<blocks, kThreads, 0, stream()>>>(kernel_ptr<storage_t<scalar_t>>(in),
                                                                kernel_ptr<storage_t<scalar_t>>(out), rows, c, log,
                                                                warp_mode);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  const int device = common_device(op, {&grad_out, &y, &grad_in});
  check_rows(op, {&y, &grad_out, &grad_in});
  const int64_t c = last_dim(y);
  const int64_t rows = c == 0 ? 0 : y.numel() / c;
  if (rows == 0) return;
  DeviceGuard guard(device);
  const auto [blocks, warp_mode] = row_launch(rows, c, device);
  HG_DISPATCH_FLOATING(y.dtype(), op, [&] {
    softmax_backward_kernel<scalar_t><<<blocks, kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(grad_out), kernel_ptr<storage_t<scalar_t>>(y),
        kernel_ptr<storage_t<scalar_t>>(grad_in), rows, c, log, warp_mode);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

namespace {
void check_nll(const char* op, const Tensor& logp, const Tensor& target, const Tensor& per_sample) {
  HG_CHECK(logp.dim() == 2 && logp.is_contiguous(), "{}: log-probabilities must be a contiguous [N, C] tensor, got {}",
           op, logp.describe());
  HG_CHECK(target.dtype() == DType::Int64 && target.dim() == 1 && target.shape()[0] == logp.shape()[0],
           "{}: target must be int64 [N] for {}, got {}", op, logp.describe(), target.describe());
  HG_CHECK(per_sample.dim() == 1 && per_sample.shape()[0] == logp.shape()[0] && per_sample.dtype() == logp.dtype(),
           "{}: per-sample tensor {} must be [N] of {}'s dtype", op, per_sample.describe(), logp.describe());
}
}  // namespace

// A target outside [0, C) (and not ignore_index) cannot raise an Error here
// without a host sync: its sample's loss is written as NaN (so the loss shows
// it and the GradScaler skips the step) and nll_loss_backward leaves that
// sample's gradient at zero. The CPU backend raises an Error instead.
void nll_loss(const Tensor& logp, const Tensor& target, const Tensor& out, int64_t ignore_index, const char*) {
  const int device = common_device("nll_loss", {&logp, &target, &out});
  check_nll("nll_loss", logp, target, out);
  const int64_t n = logp.shape()[0], c = logp.shape()[1];
  if (n == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(logp.dtype(), "nll_loss", [&] {
    HG_CHECK(out.is_contiguous(), "nll_loss: output {} must be contiguous", out.describe());
    nll_loss_kernel<scalar_t><<<grid_for(n, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(logp), kernel_ptr<int64_t>(target), target.stride(0),
        kernel_ptr<storage_t<scalar_t>>(out), n, c, ignore_index);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& grad_logp, int64_t ignore_index) {
  const int device = common_device("nll_loss_backward", {&grad, &target, &grad_logp});
  check_nll("nll_loss_backward", grad_logp, target, grad);
  const int64_t n = grad_logp.shape()[0], c = grad_logp.shape()[1];
  if (n == 0 || c == 0) return;
  DeviceGuard guard(device);
  HG_CUDA_CHECK(cudaMemsetAsync(grad_logp.data_ptr(), 0, grad_logp.numel() * itemsize(grad_logp.dtype()), stream()));
  HG_DISPATCH_FLOATING(grad_logp.dtype(), "nll_loss_backward", [&] {
    nll_loss_backward_kernel<scalar_t><<<grid_for(n, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(grad), grad.stride(0), kernel_ptr<int64_t>(target), target.stride(0),
        kernel_ptr<storage_t<scalar_t>>(grad_logp), n, c, ignore_index);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void cross_entropy_backward(const Tensor& grad, const Tensor& logp, const Tensor& target, const Tensor& gx,
                            int64_t ignore_index) {
  const int device = common_device("cross_entropy_backward", {&grad, &logp, &target, &gx});
  check_nll("cross_entropy_backward", logp, target, grad);
  HG_CHECK(gx.is_contiguous() && gx.shape() == logp.shape() && gx.dtype() == logp.dtype(),
           "cross_entropy_backward: gradient {} must be contiguous, of {}'s shape and dtype", gx.describe(),
           logp.describe());
  const int64_t n = logp.shape()[0], c = logp.shape()[1];
  if (n == 0 || c == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(logp.dtype(), "cross_entropy_backward", [&] {
    cross_entropy_backward_kernel<scalar_t><<<grid_for(n * c, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(grad), grad.stride(0), kernel_ptr<int64_t>(target), target.stride(0),
        kernel_ptr<storage_t<scalar_t>>(logp), kernel_ptr<storage_t<scalar_t>>(gx), n, c, ignore_index);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace halfgrad::kernels::cuda
