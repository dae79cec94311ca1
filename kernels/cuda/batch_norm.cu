// CUDA batch norm (contracts in kernels/kernels.h), with the per-element math of
// kernels/norm_pool_math.h. The statistics and the weight/bias gradients take one
// 256-thread block per channel: each thread sums its share of the channel's
// N * S elements in the statistics type (float32; float64 for float64) and a
// block-wide reduction combines them, in a fixed order (no atomics, the same
// bits on every run). Channels-last tensors run as [N * S, C, 1] (strided
// reads of each channel: correct, not yet tuned for NHWC). The mean is reduced first, then the squared deviations
// from it (two passes over the channel, the second mostly from L2). The
// elementwise passes are grid-stride loops over N * C * S.
#include <cmath>

#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>
#include <halfgrad/kernels/math.h>
#include <halfgrad/kernels/norm_pool_math.h>
#include <halfgrad/kernels/kernel_ptr.h>

namespace halfgrad::kernels::cuda {

namespace {

using math::stat_t;

// Calls f(offset) for this thread's share of channel ch's elements of [N, C, S]:
// along each row when rows are long, else over the flattened N * S elements.
template <typename F>
__device__ __forceinline__ void for_channel(int64_t n, int64_t c, int64_t s, int64_t ch, const F& f) {
  if (s >= blockDim.x) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t base = (i * c + ch) * s;
      for (int64_t j = threadIdx.x; j < s; j += blockDim.x) f(base + j);
    }
  } else {
    for (int64_t e = threadIdx.x; e < n * s; e += blockDim.x) {
      const int64_t i = e / s;
      f((i * c + ch) * s + (e - i * s));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    stats_kernel(const storage_t<T>* __restrict__ x, int64_t n, int64_t c, int64_t s, double eps,
                 stat_t<T>* __restrict__ mean, stat_t<T>* __restrict__ invstd, stat_t<T>* __restrict__ rm,
                 stat_t<T>* __restrict__ rv, double momentum) {
  using A = stat_t<T>;
  __shared__ A smem[32];
  const int64_t ch = blockIdx.x;
  const A count = static_cast<A>(n * s);
  A sum = 0;
  for_channel(n, c, s, ch, [&](int64_t o) { sum += ld_stat<T>(x, o); });
  const A m = block_allreduce(sum, SumOp{}, smem) / count;
  A sq = 0;
  for_channel(n, c, s, ch, [&](int64_t o) {
    const A d = ld_stat<T>(x, o) - m;
    sq += d * d;
  });
  const A var = block_allreduce(sq, SumOp{}, smem) / count;
  if (threadIdx.x != 0) return;
  mean[ch] = m;
  invstd[ch] = A(1) / math::sqrt_(var + static_cast<A>(eps));
  if (rm != nullptr) {
    const A unbiased = n * s > 1 ? var * count / (count - A(1)) : var;
    const A mom = static_cast<A>(momentum);
    rm[ch] = (A(1) - mom) * rm[ch] + mom * m;
    rv[ch] = (A(1) - mom) * rv[ch] + mom * unbiased;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const storage_t<T>* __restrict__ x, storage_t<T>* __restrict__ y, int64_t total, int64_t c,
                   int64_t s, const stat_t<T>* __restrict__ mean, const stat_t<T>* __restrict__ invstd,
                   const stat_t<T>* __restrict__ w, const stat_t<T>* __restrict__ b) {
  using A = stat_t<T>;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = (e / s) % c;
    const A r = math::bn_forward<A>(ld_stat<T>(x, e), mean[ch], invstd[ch], w ? w[ch] : A(1), b ? b[ch] : A(0));
    y[e] = Elem<T>::store(static_cast<acc_t<T>>(r));
  }
}

// Per channel: sums[ch] = sum g, sums[c + ch] = sum g * (x - mean); dweight, dbias when wanted.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_reduce_kernel(const storage_t<T>* __restrict__ g, const storage_t<T>* __restrict__ x, int64_t n,
                           int64_t c, int64_t s, const stat_t<T>* __restrict__ mean,
                           const stat_t<T>* __restrict__ invstd, stat_t<T>* __restrict__ sums,
                           stat_t<T>* __restrict__ dw, stat_t<T>* __restrict__ db) {
  using A = stat_t<T>;
  __shared__ A smem[32];
  const int64_t ch = blockIdx.x;
  const A m = mean[ch];
  A sg = 0, sgx = 0;
  for_channel(n, c, s, ch, [&](int64_t o) {
    const A gv = ld_stat<T>(g, o);
    sg += gv;
    sgx += gv * (ld_stat<T>(x, o) - m);
  });
  sg = block_allreduce(sg, SumOp{}, smem);
  sgx = block_allreduce(sgx, SumOp{}, smem);
  if (threadIdx.x != 0) return;
  sums[ch] = sg;
  sums[c + ch] = sgx;
  if (db) db[ch] = sg;
  if (dw) dw[ch] = sgx * invstd[ch];
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_dx_kernel(const storage_t<T>* __restrict__ g, const storage_t<T>* __restrict__ x,
                       storage_t<T>* __restrict__ dx, int64_t total, int64_t c, int64_t s, int64_t count,
                       const stat_t<T>* __restrict__ mean, const stat_t<T>* __restrict__ invstd,
                       const stat_t<T>* __restrict__ w, const stat_t<T>* __restrict__ sums, bool training) {
  using A = stat_t<T>;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = (e / s) % c;
    const A inv = invstd[ch], wv = w ? w[ch] : A(1);
    A r;
    if (training) {
      const A cnt = static_cast<A>(count);
      const A mean_g = sums[ch] / cnt;
      const A k = sums[c + ch] / cnt * inv * inv;
      r = math::bn_backward_train<A>(ld_stat<T>(g, e), ld_stat<T>(x, e), mean[ch], inv, wv, mean_g, k);
    } else {
      r = math::bn_backward_eval<A>(ld_stat<T>(g, e), inv, wv);
    }
    dx[e] = Elem<T>::store(static_cast<acc_t<T>>(r));
  }
}

math::BatchNormDims ncs(const Tensor& x) { return math::batch_norm_dims(x); }

}  // namespace

void batch_norm_stats(const Tensor& x, double eps, const Tensor& mean, const Tensor& invstd,
                      const Tensor& running_mean, const Tensor& running_var, double momentum) {
  const int device = common_device("batch_norm", {&x, &mean, &invstd});
  const auto [n, c, s] = ncs(x);
  if (n * s == 0 || c == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using A = stat_t<scalar_t>;
    stats_kernel<scalar_t><<<static_cast<unsigned>(c), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(x), n, c, s, eps, kernel_ptr<A>(mean), kernel_ptr<A>(invstd),
        kernel_ptr<A>(running_mean), kernel_ptr<A>(running_var), momentum);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, const Tensor& y) {
  const int device = common_device("batch_norm", {&x, &mean, &invstd, &y});
  const auto [n, c, s] = ncs(x);
  const int64_t total = n * c * s;
  if (total == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using A = stat_t<scalar_t>;
    forward_kernel<scalar_t><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(x), kernel_ptr<storage_t<scalar_t>>(y), total, c, s, kernel_ptr<A>(mean),
        kernel_ptr<A>(invstd), kernel_ptr<A>(weight), kernel_ptr<A>(bias));
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias) {
  const int device = common_device("batch_norm_backward", {&g, &x, &mean, &invstd});
  const auto [n, c, s] = ncs(x);
  if (c == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward", [&] {
    using A = stat_t<scalar_t>;
    const bool need_sums = dweight.defined() || dbias.defined() || (dx.defined() && training);
    Tensor sums;
    if (need_sums) {
      sums = make_tensor({2 * c}, mean.options());  // from the pool, on this stream
      backward_reduce_kernel<scalar_t><<<static_cast<unsigned>(c), kThreads, 0, stream()>>>(
          kernel_ptr<storage_t<scalar_t>>(g), kernel_ptr<storage_t<scalar_t>>(x), n, c, s, kernel_ptr<A>(mean),
          kernel_ptr<A>(invstd), kernel_ptr<A>(sums), kernel_ptr<A>(dweight), kernel_ptr<A>(dbias));
      HG_CUDA_CHECK(cudaGetLastError());
    }
    const int64_t total = n * c * s;
    if (!dx.defined() || total == 0) return;
    backward_dx_kernel<scalar_t><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(g), kernel_ptr<storage_t<scalar_t>>(x), kernel_ptr<storage_t<scalar_t>>(dx),
        total, c, s, n * s, kernel_ptr<A>(mean), kernel_ptr<A>(invstd), kernel_ptr<A>(weight), kernel_ptr<A>(sums),
        training);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace halfgrad::kernels::cuda
