// CUDA 2-d pooling (contracts in kernels/kernels.h), with the window arithmetic of
// kernels/norm_pool_math.h. Forward: one thread per output element. Backward: one
// thread per input element, gathering from every output window that contains
// it (no atomics, deterministic): max pooling adds the gradients of the windows
// whose saved index is this element, average pooling each window's share
// g / divisor. Half types compute in float32, float64 in float64.
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>
#include <halfgrad/kernels/norm_pool_math.h>
#include <halfgrad/kernels/kernel_ptr.h>

namespace halfgrad::kernels::cuda {

namespace {

using math::stat_t;

// Reads element i of plane pl in the compute type (max_window's loader).
template <typename T>
struct PlaneLoad {
  const storage_t<T>* p;
  math::PlaneLayout layout;
  int64_t pl;
  __device__ __forceinline__ stat_t<T> operator()(int64_t i) const { return ld_stat<T>(p, layout.at(pl, i)); }
};

// Threads index memory offsets of the output (forward) or input (backward):
// coalesced in either layout.
using Dims = math::PoolPlanes;

#define HG_GRID_STRIDE(e, total)                                                                  \
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < (total); \
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_pool_kernel(const storage_t<T>* __restrict__ x, storage_t<T>* __restrict__ y, int64_t* __restrict__ idx,
                    Dims d, kernels::Pool2dGeometry g) {
  using A = stat_t<T>;
  HG_GRID_STRIDE(o, d.p * d.oh * d.ow) {
    int64_t pl, k;
    d.out.locate(o, pl, k);
    const int64_t j = k % d.ow, i = k / d.ow;
    A best;
    int64_t arg;
    math::max_window<A>(i, j, d.h, d.w, g, PlaneLoad<T>{x, d.in, pl}, best, arg);
    y[o] = st_stat<T>(best);
    idx[o] = arg;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_pool_backward_kernel(const storage_t<T>* __restrict__ g, const int64_t* __restrict__ idx,
                             storage_t<T>* __restrict__ dx, Dims d, kernels::Pool2dGeometry geo) {
  using A = stat_t<T>;
  HG_GRID_STRIDE(e, d.p * d.h * d.w) {
    int64_t pl, self;
    d.in.locate(e, pl, self);
    auto grad = [&](int64_t k) { return ld_stat<T>(g, d.out.at(pl, k)); };
    auto index = [&](int64_t k) { return idx[d.out.at(pl, k)]; };
    dx[e] = st_stat<T>(math::max_pool_grad_at<A>(self / d.w, self % d.w, d.w, d.oh, d.ow, geo, grad, index));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    avg_pool_kernel(const storage_t<T>* __restrict__ x, storage_t<T>* __restrict__ y, Dims d,
                    kernels::Pool2dGeometry g) {
  using A = stat_t<T>;
  HG_GRID_STRIDE(o, d.p * d.oh * d.ow) {
    int64_t pl, k;
    d.out.locate(o, pl, k);
    y[o] = st_stat<T>(math::avg_pool_at<A>(k / d.ow, k % d.ow, d.h, d.w, g, PlaneLoad<T>{x, d.in, pl}));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    avg_pool_backward_kernel(const storage_t<T>* __restrict__ g, storage_t<T>* __restrict__ dx, Dims d,
                             kernels::Pool2dGeometry geo) {
  using A = stat_t<T>;
  HG_GRID_STRIDE(e, d.p * d.h * d.w) {
    int64_t pl, k;
    d.in.locate(e, pl, k);
    auto grad = [&](int64_t o) { return ld_stat<T>(g, d.out.at(pl, o)); };
    dx[e] = st_stat<T>(math::avg_pool_grad_at<A>(k / d.w, k % d.w, d.h, d.w, d.oh, d.ow, geo, grad));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    adaptive_kernel(const storage_t<T>* __restrict__ x, storage_t<T>* __restrict__ y, Dims d) {
  using A = stat_t<T>;
  HG_GRID_STRIDE(o, d.p * d.oh * d.ow) {
    int64_t pl, k;
    d.out.locate(o, pl, k);
    y[o] = st_stat<T>(math::adaptive_avg_at<A>(k / d.ow, k % d.ow, d.h, d.w, d.oh, d.ow, PlaneLoad<T>{x, d.in, pl}));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    adaptive_backward_kernel(const storage_t<T>* __restrict__ g, storage_t<T>* __restrict__ dx, Dims d) {
  using A = stat_t<T>;
  HG_GRID_STRIDE(e, d.p * d.h * d.w) {
    int64_t pl, k;
    d.in.locate(e, pl, k);
    auto grad = [&](int64_t o) { return ld_stat<T>(g, d.out.at(pl, o)); };
    const math::AdaptiveAxisMath ah{d.h, d.oh}, aw{d.w, d.ow};
    dx[e] = st_stat<T>(math::adaptive_avg_grad_at<A>(k / d.w, k % d.w, ah, aw, d.ow, grad));
  }
}

#undef HG_GRID_STRIDE

Dims dims(const Tensor& in, const Tensor& out) { return math::pool_planes(in, out); }

}  // namespace

void max_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y, const Tensor& indices) {
  const int device = common_device("max_pool2d", {&x, &y, &indices});
  const Dims d = dims(x, y);
  const int64_t total = d.p * d.oh * d.ow;
  if (total == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&] {
    max_pool_kernel<scalar_t><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(x), kernel_ptr<storage_t<scalar_t>>(y), kernel_ptr<int64_t>(indices), d, g);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void max_pool2d_backward(const Tensor& g, const Tensor& indices, const kernels::Pool2dGeometry& geo,
                         const Tensor& dx) {
  const int device = common_device("max_pool2d_backward", {&g, &indices, &dx});
  const Dims d = dims(dx, g);
  const int64_t total = d.p * d.h * d.w;
  if (total == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(dx.dtype(), "max_pool2d_backward", [&] {
    max_pool_backward_kernel<scalar_t><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(g), kernel_ptr<int64_t>(indices), kernel_ptr<storage_t<scalar_t>>(dx), d, geo);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void avg_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y) {
  const int device = common_device("avg_pool2d", {&x, &y});
  const Dims d = dims(x, y);
  const int64_t total = d.p * d.oh * d.ow;
  if (total == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(x.dtype(), "avg_pool2d", [&] {
    avg_pool_kernel<scalar_t><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(x), kernel_ptr<storage_t<scalar_t>>(y), d, g);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void avg_pool2d_backward(const Tensor& g, const kernels::Pool2dGeometry& geo, const Tensor& dx) {
  const int device = common_device("avg_pool2d_backward", {&g, &dx});
  const Dims d = dims(dx, g);
  const int64_t total = d.p * d.h * d.w;
  if (total == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(dx.dtype(), "avg_pool2d_backward", [&] {
    avg_pool_backward_kernel<scalar_t><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(g), kernel_ptr<storage_t<scalar_t>>(dx), d, geo);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void adaptive_avg_pool2d(const Tensor& x, const Tensor& y) {
  const int device = common_device("adaptive_avg_pool2d", {&x, &y});
  const Dims d = dims(x, y);
  const int64_t total = d.p * d.oh * d.ow;
  if (total == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(x.dtype(), "adaptive_avg_pool2d", [&] {
    adaptive_kernel<scalar_t><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(x), kernel_ptr<storage_t<scalar_t>>(y), d);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void adaptive_avg_pool2d_backward(const Tensor& g, const Tensor& dx) {
  const int device = common_device("adaptive_avg_pool2d_backward", {&g, &dx});
  const Dims d = dims(dx, g);
  const int64_t total = d.p * d.h * d.w;
  if (total == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(dx.dtype(), "adaptive_avg_pool2d_backward", [&] {
    adaptive_backward_kernel<scalar_t><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(g), kernel_ptr<storage_t<scalar_t>>(dx), d);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace halfgrad::kernels::cuda
