// CUDA torch.multinomial (kernels/kernel_list.h), with the arithmetic of
// kernels/multinomial_math.h that the CPU backend runs too, so a seed gives
// the same samples on either device.
//
// With replacement: one block per row, one thread per lane: each thread sums
// its lane in order (the lane-local prefix sums go to a double scratch row),
// thread 0 adds the lanes' totals in order, then the block's threads draw the
// row's samples. Without replacement: one thread per element computes its race
// key (double), a stable descending sort of each row (kernels/cuda/sort.cu)
// orders them, and the first num_samples indices of each row are the result.
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>
#include <halfgrad/kernels/cuda/random.cuh>
#include <halfgrad/kernels/multinomial_math.h>

namespace halfgrad::kernels::cuda {

namespace {
namespace mm = multinomial_math;
using rng::PhiloxState;
static_assert(mm::kLanes <= 1024, "one thread per lane in a block");

template <typename T>
__global__ void __launch_bounds__(mm::kLanes)
    with_replacement_kernel(const storage_t<T>* w, int64_t rows, int64_t n, int64_t k, double* prefix,
                            int64_t* out, PhiloxSource source) {
  __shared__ double start[mm::kLanes + 1];
  __shared__ double lane_total[mm::kLanes];
  const PhiloxState st = source.get();
  const int64_t size = mm::lane_size(n), t = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const storage_t<T>* wr = w + r * n;
    double* pr = prefix + r * n;
    double acc = 0.0;
    const int64_t end = (t + 1) * size < n ? (t + 1) * size : n;
    for (int64_t i = t * size; i < end; ++i) {
      acc += static_cast<double>(Elem<T>::load(wr[i]));
      pr[i] = acc;
    }
    lane_total[t] = acc;
    __syncthreads();
    if (t == 0) {
      start[0] = 0.0;
      for (int64_t l = 0; l < mm::kLanes; ++l) start[l + 1] = start[l] + lane_total[l];
    }
    __syncthreads();  // start and every lane's prefix sums are ready (block-scope memory order)
    for (int64_t j = t; j < k; j += mm::kLanes) {
      const philox::Words words = philox::draw(st.seed, st.offset, static_cast<uint64_t>(r * k + j));
      out[r * k + j] = mm::sample_row(pr, start, n, philox::unit53(words.x[0], words.x[1]));
    }
    __syncthreads();  // start and lane_total are reused by the next row
  }
}

template <typename T>
__global__ void race_keys_kernel(const storage_t<T>* w, int64_t total, double* keys, PhiloxSource source) {
  const PhiloxState st = source.get();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride)
    keys[i] = mm::race_key(static_cast<double>(Elem<T>::load(w[i])), philox::draw(st.seed, st.offset, i));
}

// out[r, j] = sorted[r, j] for j < k (sorted: [rows, n]).
__global__ void first_columns_kernel(const int64_t* sorted, int64_t rows, int64_t n, int64_t k, int64_t* out) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows * k; i += stride)
    out[i] = sorted[(i / k) * n + i % k];
}
}  // namespace

void multinomial(const Tensor& weights, bool replacement, const Tensor& out, Generator* generator) {
  const int device = common_device("multinomial", {&weights, &out});
  const int64_t rows = weights.shape()[0], n = weights.shape()[1], k = out.shape()[1];
  if (rows == 0 || k == 0) return;
  DeviceGuard guard(device);
  auto* o = static_cast<int64_t*>(out.data_ptr());
  const TensorOptions doubles(DType::Float64, weights.device());
  HG_DISPATCH_FLOATING(weights.dtype(), "multinomial", [&] {
    const auto* w = static_cast<const storage_t<scalar_t>*>(weights.data_ptr());
    if (replacement) {
      Tensor prefix = make_tensor({rows, n}, doubles);
      draw_counters("multinomial", device, static_cast<uint64_t>(rows * k), generator, [&](const PhiloxSource& src) {
        with_replacement_kernel<scalar_t><<<grid_for(rows, 1, device), mm::kLanes, 0, stream()>>>(
            w, rows, n, k, static_cast<double*>(prefix.data_ptr()), o, src);
        HG_CUDA_CHECK(cudaGetLastError());
      });
      return;
    }
    Tensor keys = make_tensor({rows, n}, doubles), sorted_keys = make_tensor({rows, n}, doubles);
    Tensor order = make_tensor({rows, n}, TensorOptions(DType::Int64, weights.device()));
    draw_counters("multinomial", device, static_cast<uint64_t>(rows * n), generator, [&](const PhiloxSource& src) {
      race_keys_kernel<scalar_t><<<grid_for(rows * n, kThreads, device), kThreads, 0, stream()>>>(
          w, rows * n, static_cast<double*>(keys.data_ptr()), src);
      HG_CUDA_CHECK(cudaGetLastError());
    });
    sort(keys, sorted_keys, order, /*descending=*/true);
    first_columns_kernel<<<grid_for(rows * k, kThreads, device), kThreads, 0, stream()>>>(
        static_cast<const int64_t*>(order.data_ptr()), rows, n, k, o);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace halfgrad::kernels::cuda
