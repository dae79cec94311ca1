// The log2 histogram on CUDA (amp/cuda/numerics_cuda.h): each block counts its
// grid-stride share of the elements in shared memory (the bin of a value is
// amp/numerics_math.h's, as on the CPU), then adds its 60 counts to the global
// ones with one atomic each. Integer counts: the same result in any order.
#include <cuda_runtime.h>

#include <halfgrad/amp/cuda/numerics_cuda.h>
#include <halfgrad/amp/numerics_math.h>
#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/error.h>
#include <halfgrad/kernels/cuda/loops.cuh>

namespace halfgrad::amp::cuda_kernels {
namespace {

using kernels::cuda::Elem;
using kernels::cuda::storage_t;
constexpr int kBlock = 256;

template <typename T>
__global__ void __launch_bounds__(kBlock)
    histogram_kernel(const storage_t<T>* __restrict__ p, int64_t n, unsigned long long* __restrict__ counts,
                     bool with_max) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  __shared__ unsigned int h[numerics::kBins];
  __shared__ unsigned long long block_max;  // bits of a non-negative double: integer order is value order
  for (int b = threadIdx.x; b < numerics::kBins; b += blockDim.x) h[b] = 0;
  if (threadIdx.x == 0) block_max = 0;
  __syncthreads();
  A m = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const A v = static_cast<A>(Elem<T>::load(p[i]));
    const int b = numerics::log2_bin<A>(v);
    atomicAdd(&h[b], 1u);
    if (b != numerics::kBinNonFinite) m = fmax(m, fabs(v));
  }
  if (with_max && m > A(0))
    atomicMax(&block_max, static_cast<unsigned long long>(__double_as_longlong(static_cast<double>(m))));
  __syncthreads();
  for (int b = threadIdx.x; b < numerics::kBins; b += blockDim.x)
    if (h[b] != 0) atomicAdd(&counts[b], static_cast<unsigned long long>(h[b]));
  if (with_max && threadIdx.x == 0 && block_max != 0) atomicMax(&counts[numerics::kBins], block_max);
}

}  // namespace

void accumulate_log2_histogram(const Tensor& t, const Tensor& counts, bool with_max) {
  const int device = t.device().index();
  cuda::DeviceGuard guard(device);
  const int64_t n = t.numel();
  // a block's shared counts hold up to 2^32 - 1 each: at most 2^31 elements per block
  const unsigned blocks = kernels::cuda::grid_for(n, kBlock, device);
  static_assert(sizeof(unsigned long long) == sizeof(int64_t));
  auto* out = static_cast<unsigned long long*>(counts.data_ptr());
  HG_DISPATCH_FLOATING(t.dtype(), "accumulate_log2_histogram", [&] {
    histogram_kernel<scalar_t><<<blocks, kBlock, 0, cuda::stream()>>>(
        static_cast<const storage_t<scalar_t>*>(t.data_ptr()), n, out, with_max);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace halfgrad::amp::cuda_kernels
