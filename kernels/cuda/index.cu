// Gather and scatter on CUDA (kernels/kernels.h, cuda_kernels.h): one grid-stride
// kernel each over the index's shape (<= 8 dims, any strides, 64-bit offsets).
// Gather and Assign move elements by their size (the bits of any dtype); Add
// uses atomicAdd in float32, float64 or int64 (the op accumulates float16 and
// bfloat16 in a float32 copy and rounds once, so no half atomics are needed).
// No host check of the indices (it would cost a sync): an out-of-range index
// gives NaN (0 for integer and bool dtypes) in gather and is skipped by
// scatter; no memory out of bounds is read or written.
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>
#include <halfgrad/kernels/kernel_ptr.h>

#include <cstring>
#include <limits>

namespace halfgrad::kernels::cuda {

namespace {

constexpr int kIndexMaxDims = 8;

// The index's shape and, per tensor, its strides (the indexed tensor's stride
// along `dim` set to 0: the index supplies that coordinate).
struct Geometry {
  int nd = 0;
  int64_t size[kIndexMaxDims] = {};
  int64_t s_index[kIndexMaxDims] = {};
  int64_t s_a[kIndexMaxDims] = {};
  int64_t s_b[kIndexMaxDims] = {};
};

Geometry geometry(const char* op, const Tensor& index, const Tensor& a, const Tensor& b, int64_t dim) {
  HG_CHECK(index.dim() <= kIndexMaxDims, "{}: the CUDA kernel handles up to {} dims, got index {}; reshape first", op,
           kIndexMaxDims, index.describe());
  Geometry g;
  g.nd = static_cast<int>(index.dim());
  for (int d = 0; d < g.nd; ++d) {
    g.size[d] = index.shape()[d];
    g.s_index[d] = index.strides()[d];
    g.s_a[d] = d == dim ? 0 : a.strides()[d];
    g.s_b[d] = b.strides()[d];
  }
  return g;
}

__device__ inline void offsets(const Geometry& g, int64_t i, int64_t& oi, int64_t& oa, int64_t& ob) {
  oi = oa = ob = 0;
  for (int d = g.nd - 1; d >= 0; --d) {
    const int64_t p = i % g.size[d];
    i /= g.size[d];
    oi += p * g.s_index[d];
    oa += p * g.s_a[d];
    ob += p * g.s_b[d];
  }
}

// out[p] = in[p with p[dim] = index[p]]; `a` = in (dim stride 0), `b` = out.
template <typename U>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const int64_t* __restrict__ index, const U* __restrict__ in, U* __restrict__ out, Geometry g,
                  int64_t n, int64_t step, int64_t size, U fill) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t oi, oa, ob;
    offsets(g, i, oi, oa, ob);
    const int64_t k = index[oi];
    out[ob] = k >= 0 && k < size ? in[oa + k * step] : fill;
  }
}

// self[p with p[dim] = index[p]] = src[p]; `a` = self (dim stride 0), `b` = src.
template <typename U>
__global__ void __launch_bounds__(kThreads)
    assign_kernel(const int64_t* __restrict__ index, U* __restrict__ self, const U* __restrict__ src, Geometry g,
                  int64_t n, int64_t step, int64_t size) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t oi, oa, ob;
    offsets(g, i, oi, oa, ob);
    const int64_t k = index[oi];
    if (k >= 0 && k < size) self[oa + k * step] = src[ob];
  }
}

__device__ inline void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int64_t* p, int64_t v) {
  // two's complement: the unsigned sum has the signed sum's bits
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    add_kernel(const int64_t* __restrict__ index, T* self, const T* __restrict__ src, Geometry g, int64_t n,
               int64_t step, int64_t size) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t oi, oa, ob;
    offsets(g, i, oi, oa, ob);
    const int64_t k = index[oi];
    if (k >= 0 && k < size) atomic_add(self + oa + k * step, src[ob]);
  }
}

template <typename U>
void launch_gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out, int device, U fill) {
  const int64_t n = index.numel();
  const Geometry g = geometry("gather", index, in, out, dim);
  gather_kernel<U><<<grid_for(n, kThreads, device), kThreads, 0, stream()>>>(
      kernel_ptr<const int64_t>(index), kernel_ptr<const U>(in), kernel_ptr<U>(out), g, n, in.strides()[dim],
      in.shape()[dim], fill);
  HG_CUDA_CHECK(cudaGetLastError());
}

template <typename U>
void launch_assign(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, int device) {
  const int64_t n = index.numel();
  const Geometry g = geometry("scatter", index, self, src, dim);
  assign_kernel<U><<<grid_for(n, kThreads, device), kThreads, 0, stream()>>>(
      kernel_ptr<const int64_t>(index), kernel_ptr<U>(self), kernel_ptr<const U>(src), g, n, self.strides()[dim],
      self.shape()[dim]);
  HG_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, int device) {
  const int64_t n = index.numel();
  const Geometry g = geometry("scatter_add", index, self, src, dim);
  add_kernel<T><<<grid_for(n, kThreads, device), kThreads, 0, stream()>>>(kernel_ptr<const int64_t>(index),
                                                                          kernel_ptr<T>(self), kernel_ptr<const T>(src),
                                                                          g, n, self.strides()[dim], self.shape()[dim]);
  HG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out, const char*) {
  const int device = common_device("gather", {&in, &index, &out});
  if (index.numel() == 0) return;
  DeviceGuard guard(device);
  switch (in.dtype()) {
    case DType::Float32: {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      uint32_t bits;
      std::memcpy(&bits, &nan, sizeof bits);
      return launch_gather<uint32_t>(in, dim, index, out, device, bits);
    }
    case DType::Float64: {
      const double nan = std::numeric_limits<double>::quiet_NaN();
      uint64_t bits;
      std::memcpy(&bits, &nan, sizeof bits);
      return launch_gather<uint64_t>(in, dim, index, out, device, bits);
    }
    case DType::Float16: return launch_gather<uint16_t>(in, dim, index, out, device, uint16_t{0x7e00});
    case DType::BFloat16: return launch_gather<uint16_t>(in, dim, index, out, device, uint16_t{0x7fc0});
    case DType::Int64: return launch_gather<uint64_t>(in, dim, index, out, device, uint64_t{0});
    case DType::Bool: return launch_gather<uint8_t>(in, dim, index, out, device, uint8_t{0});
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2: return launch_gather<uint8_t>(in, dim, index, out, device, uint8_t{0x7f});  // NaN
  }
  fail("gather: unsupported dtype of {}", in.describe());
}

void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, kernels::ScatterMode mode,
             const char*) {
  const int device = common_device("scatter", {&self, &index, &src});
  if (index.numel() == 0) return;
  DeviceGuard guard(device);
  if (mode == kernels::ScatterMode::Assign) {
    switch (itemsize(self.dtype())) {
      case 1: return launch_assign<uint8_t>(self, dim, index, src, device);
      case 2: return launch_assign<uint16_t>(self, dim, index, src, device);
      case 4: return launch_assign<uint32_t>(self, dim, index, src, device);
      case 8: return launch_assign<uint64_t>(self, dim, index, src, device);
      default: break;
    }
    fail("scatter: unsupported dtype of {}", self.describe());
  }
  switch (self.dtype()) {
    case DType::Float32: return launch_add<float>(self, dim, index, src, device);
    case DType::Float64: return launch_add<double>(self, dim, index, src, device);
    case DType::Int64: return launch_add<int64_t>(self, dim, index, src, device);
    default: break;
  }
  fail("scatter_add: accumulating into {} is not supported by the CUDA kernel (float32, float64, int64)",
       self.describe());
}

}  // namespace halfgrad::kernels::cuda
