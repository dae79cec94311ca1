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

template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;


template <typename T>
__device__ __forceinline__ stat_t<T> ld(const storage_t<T>* p, int64_t i) {
  return static_cast<stat_t<T>>(Elem<T>::load(p[i]));
}
template <typename T>
__device__ __forceinline__ storage_t<T> st(stat_t<T> v) {
  return Elem<T>::store(static_cast<acc_t<T>>(v));
}

// Reads element i of plane pl in the compute type (max_window's loader).
template <typename T>
struct PlaneLoad {
  const storage_t<T>* p;
  math::PlaneLayout layout;
  int64_t pl;
  __device__ __forceinline__ stat_t<T> operator()(int64_t i) const { return ld<T>(p, layout.at(pl, i)); }
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
    y[o] = st<T>(best);
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
    const int64_t iw = self % d.w, ih = self / d.w;
    const math::OutRange rh =
        math::windows_containing(ih, d.oh, geo.kernel[0], geo.stride[0], geo.padding[0], geo.dilation[0]);
    const math::OutRange rw =
        math::windows_containing(iw, d.ow, geo.kernel[1], geo.stride[1], geo.padding[1], geo.dilation[1]);
    A acc = 0;
    for (int64_t i = rh.lo; i <= rh.hi; ++i)
      for (int64_t j = rw.lo; j <= rw.hi; ++j) {
        const int64_t o = d.out.at(pl, i * d.ow + j);
        if (idx[o] == self) acc += ld<T>(g, o);
      }
    dx[e] = st<T>(acc);
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
    const int64_t j = k % d.ow, i = k / d.ow;
    const math::AvgWindow win = math::avg_window(i, j, d.h, d.w, g);
    A sum = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += ld<T>(x, d.in.at(pl, ih * d.w + iw));
    y[o] = st<T>(win.divisor == 0 ? A(0) : sum / static_cast<A>(win.divisor));
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
    const int64_t iw = k % d.w, ih = k / d.w;
    const math::OutRange rh = math::windows_containing(ih, d.oh, geo.kernel[0], geo.stride[0], geo.padding[0], 1);
    const math::OutRange rw = math::windows_containing(iw, d.ow, geo.kernel[1], geo.stride[1], geo.padding[1], 1);
    A acc = 0;
    for (int64_t i = rh.lo; i <= rh.hi; ++i)
      for (int64_t j = rw.lo; j <= rw.hi; ++j) {
        const math::AvgWindow win = math::avg_window(i, j, d.h, d.w, geo);
        if (win.divisor == 0 || ih < win.h0 || ih >= win.h1 || iw < win.w0 || iw >= win.w1) continue;
        acc += ld<T>(g, d.out.at(pl, i * d.ow + j)) / static_cast<A>(win.divisor);
      }
    dx[e] = st<T>(acc);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    adaptive_kernel(const storage_t<T>* __restrict__ x, storage_t<T>* __restrict__ y, Dims d) {
  using A = stat_t<T>;
  HG_GRID_STRIDE(o, d.p * d.oh * d.ow) {
    int64_t pl, k;
    d.out.locate(o, pl, k);
    const int64_t j = k % d.ow, i = k / d.ow;
    const int64_t h0 = math::adaptive_start(i, d.h, d.oh), h1 = math::adaptive_end(i, d.h, d.oh);
    const int64_t w0 = math::adaptive_start(j, d.w, d.ow), w1 = math::adaptive_end(j, d.w, d.ow);
    A sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += ld<T>(x, d.in.at(pl, ih * d.w + iw));
    y[o] = st<T>(sum / static_cast<A>((h1 - h0) * (w1 - w0)));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    adaptive_backward_kernel(const storage_t<T>* __restrict__ g, storage_t<T>* __restrict__ dx, Dims d) {
  using A = stat_t<T>;
  HG_GRID_STRIDE(e, d.p * d.h * d.w) {
    int64_t pl, k;
    d.in.locate(e, pl, k);
    const int64_t iw = k % d.w, ih = k / d.w;
    A acc = 0;
    if (d.oh > 0 && d.ow > 0) {
      const math::OutRange rh = math::adaptive_containing(ih, d.h, d.oh);
      const math::OutRange rw = math::adaptive_containing(iw, d.w, d.ow);
      for (int64_t i = rh.lo; i <= rh.hi; ++i) {
        const int64_t h0 = math::adaptive_start(i, d.h, d.oh), h1 = math::adaptive_end(i, d.h, d.oh);
        for (int64_t j = rw.lo; j <= rw.hi; ++j) {
          const int64_t w0 = math::adaptive_start(j, d.w, d.ow), w1 = math::adaptive_end(j, d.w, d.ow);
          if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1) continue;
          acc += ld<T>(g, d.out.at(pl, i * d.ow + j)) / static_cast<A>((h1 - h0) * (w1 - w0));
        }
      }
    }
    dx[e] = st<T>(acc);
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
