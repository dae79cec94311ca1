// CUDA sort, the scatter of sort/topk's backward, cumsum and randperm: the one
// file that includes CUB (compile time).
//
// Sort: every element becomes an unsigned integer key whose order is the
// order of kernels/cpu/sort.cpp (the IEEE bit trick: flip all bits of negatives,
// set the sign bit of positives; -0.0 becomes +0.0 and every NaN the largest
// key, so NaNs are equal to each other and above +inf), and CUB sorts
// (key, position) pairs with a stable radix sort: one row by
// DeviceRadixSort::SortPairs (onesweep), several rows by
// DeviceSegmentedSort::StableSortPairs(Descending). Stable in both directions,
// so ties keep their original order and the indices equal the CPU's. The
// values are then gathered from the input by the sorted positions (bit for
// bit). Key types: uint16 (float16, bfloat16, bool), uint32 (float32), uint64
// (float64, int64): three key types, two directions, two CUB algorithms.
// Temporary storage (keys, CUB's workspace) comes from the stream-ordered
// pool; everything runs on the current stream without a host sync.
//
// Cumsum: one block per row (grid-stride over rows), the row walked in tiles
// of kScanThreads * kScanItems elements with cub::BlockScan and a running
// carry: rows of any length, float32 accumulation for float32 and the half
// types (one rounding per output), float64 and int64 in themselves.
//
// Randperm: n random 64-bit keys from the device's generator (cuda::randint,
// no host sync), then the positions sorted by key (stable: equal keys, which
// have probability about n^2 / 2^65, keep their order, so the result is always a
// permutation). Not the CPU's Fisher-Yates permutation for the same seed.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <cstring>
#include <limits>

#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>

namespace halfgrad::kernels::cuda {

namespace {

template <typename T>
struct KeyOf {
  using type = uint16_t;  // Half, BFloat16, bool
};
template <>
struct KeyOf<float> {
  using type = uint32_t;
};
template <>
struct KeyOf<double> {
  using type = uint64_t;
};
template <>
struct KeyOf<int64_t> {
  using type = uint64_t;
};
template <typename T>
using key_t = typename KeyOf<T>::type;

// The order-preserving key of one stored element.
template <typename T>
__device__ __forceinline__ key_t<T> to_key(storage_t<T> x) {
  using U = key_t<T>;
  if constexpr (std::is_same_v<T, bool>) {
    return x ? U{1} : U{0};
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<U>(x) ^ (U{1} << 63);
  } else {
    U u;
    U inf;  // the bits of +inf: anything above it (sign cleared) is a NaN
    if constexpr (std::is_same_v<T, float>) {
      u = __float_as_uint(x);
      inf = 0x7f800000u;
    } else if constexpr (std::is_same_v<T, double>) {
      u = static_cast<U>(__double_as_longlong(x));
      inf = 0x7ff0000000000000ull;
    } else if constexpr (std::is_same_v<T, Half>) {
      u = x;
      inf = 0x7c00u;
    } else {
      u = x;
      inf = 0x7f80u;
    }
    constexpr U sign = U{1} << (sizeof(U) * 8 - 1);
    if (static_cast<U>(u & static_cast<U>(~sign)) > inf) return static_cast<U>(~U{0});  // NaN: the largest key
    if (u == sign) u = 0;                                                                 // -0.0 sorts as +0.0
    return (u & sign) ? static_cast<U>(~u) : static_cast<U>(u | sign);
  }
}

template <typename T>
__global__ void keys_kernel(const storage_t<T>* __restrict__ in, key_t<T>* __restrict__ keys,
                            int64_t* __restrict__ pos, int64_t total, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    keys[i] = to_key<T>(in[i]);
    pos[i] = i % n;
  }
}

__global__ void offsets_kernel(int64_t* off, int64_t rows, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i <= rows; i += stride) off[i] = i * n;
}

// out[r, j] = in[r, idx[r, j]] (idx from the sort: always in [0, n); clamped anyway).
template <typename S>
__global__ void gather_kernel(const S* __restrict__ in, const int64_t* __restrict__ idx, S* __restrict__ out,
                              int64_t total, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t j = ::min(::max(idx[i], int64_t{0}), n - 1);  // CUDA's min/max, not the tensor ops
    out[i] = in[(i / n) * n + j];
  }
}

// grad_in[r, idx[r, j]] = g[r, j]; an index outside [0, n) is skipped.
template <typename S>
__global__ void scatter_kernel(const S* __restrict__ g, const int64_t* __restrict__ idx, S* __restrict__ out,
                               int64_t total, int64_t k, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t t = idx[i];
    if (t >= 0 && t < n) out[(i / k) * n + t] = g[i];
  }
}

// Scratch memory from the pool: `bytes` rounded up to whole int64s.
Tensor scratch(size_t bytes, Device device) {
  const int64_t words = static_cast<int64_t>((bytes + 7) / 8);
  return make_tensor({std::max<int64_t>(words, 1)}, TensorOptions(DType::Int64, device));
}

int64_t row_len(const Tensor& t) { return t.dim() == 0 ? 1 : t.shape().back(); }

// indices[r, :] = the stable sort order of row r of `in` (contiguous [rows, n]).
template <typename T>
void sort_positions(const Tensor& in, const Tensor& indices, bool descending, int device) {
  using K = key_t<T>;
  const int64_t total = in.numel(), n = row_len(in), rows = total / n;
  const cudaStream_t s = stream();
  const Device dev = in.device();
  Tensor keys = scratch(static_cast<size_t>(total) * sizeof(K), dev);
  Tensor keys_sorted = scratch(static_cast<size_t>(total) * sizeof(K), dev);
  Tensor pos = make_tensor({total}, TensorOptions(DType::Int64, dev));
  auto* k_in = static_cast<K*>(keys.data_ptr());
  auto* k_out = static_cast<K*>(keys_sorted.data_ptr());
  auto* p_in = static_cast<int64_t*>(pos.data_ptr());
  auto* p_out = static_cast<int64_t*>(indices.data_ptr());
  keys_kernel<T><<<grid_for(total, kThreads, device), kThreads, 0, s>>>(
      static_cast<const storage_t<T>*>(in.data_ptr()), k_in, p_in, total, n);
  HG_CUDA_CHECK(cudaGetLastError());
  size_t temp_bytes = 0;
  if (rows == 1) {
    auto run = [&](void* temp) {
      return descending ? cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, k_in, k_out, p_in, p_out, total,
                                                                    0, static_cast<int>(sizeof(K) * 8), s)
                        : cub::DeviceRadixSort::SortPairs(temp, temp_bytes, k_in, k_out, p_in, p_out, total, 0,
                                                          static_cast<int>(sizeof(K) * 8), s);
    };
    HG_CUDA_CHECK(run(nullptr));
    Tensor temp = scratch(temp_bytes, dev);
    HG_CUDA_CHECK(run(temp.data_ptr()));
    return;
  }
  HG_CHECK(n <= std::numeric_limits<int32_t>::max(),
           "sort: rows of {} elements are too long for the CUDA segmented sort (at most 2^31 - 1 per row when "
           "sorting several rows); sort a flattened view or on the CPU",
           n);
  Tensor offsets = make_tensor({rows + 1}, TensorOptions(DType::Int64, dev));
  auto* off = static_cast<int64_t*>(offsets.data_ptr());
  offsets_kernel<<<grid_for(rows + 1, kThreads, device), kThreads, 0, s>>>(off, rows, n);
  HG_CUDA_CHECK(cudaGetLastError());
  auto run = [&](void* temp) {
    return descending ? cub::DeviceSegmentedSort::StableSortPairsDescending(temp, temp_bytes, k_in, k_out, p_in,
                                                                            p_out, total, rows, off, off + 1, s)
                      : cub::DeviceSegmentedSort::StableSortPairs(temp, temp_bytes, k_in, k_out, p_in, p_out, total,
                                                                  rows, off, off + 1, s);
  };
  HG_CUDA_CHECK(run(nullptr));
  Tensor temp = scratch(temp_bytes, dev);
  HG_CUDA_CHECK(run(temp.data_ptr()));
}

// ---- cumsum -------------------------------------------------------------------------------------
template <typename T>
using scan_acc_t = std::conditional_t<std::is_same_v<T, double>, double,
                                      std::conditional_t<std::is_same_v<T, int64_t>, int64_t, float>>;

constexpr int kScanThreads = 256;
constexpr int kScanItems = 4;

template <typename T>
__global__ void __launch_bounds__(kScanThreads)
    cumsum_kernel(const storage_t<T>* __restrict__ in, storage_t<T>* __restrict__ out, int64_t rows, int64_t n,
                  bool reverse) {
  using A = scan_acc_t<T>;
  using Scan = cub::BlockScan<A, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  constexpr int64_t kTile = int64_t{kScanThreads} * kScanItems;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const storage_t<T>* x = in + row * n;
    storage_t<T>* o = out + row * n;
    A carry = 0;
    for (int64_t base = 0; base < n; base += kTile) {
      A items[kScanItems];
#pragma unroll
      for (int q = 0; q < kScanItems; ++q) {
        const int64_t jj = base + int64_t{threadIdx.x} * kScanItems + q;
        const int64_t j = reverse ? n - 1 - jj : jj;
        items[q] = jj < n ? static_cast<A>(Elem<T>::load(x[j])) : A(0);
      }
      A tile_total;
      Scan(temp).InclusiveSum(items, items, tile_total);
#pragma unroll
      for (int q = 0; q < kScanItems; ++q) {
        const int64_t jj = base + int64_t{threadIdx.x} * kScanItems + q;
        const int64_t j = reverse ? n - 1 - jj : jj;
        if (jj < n) o[j] = Elem<T>::store(static_cast<acc_t<T>>(carry + items[q]));
      }
      carry += tile_total;
      __syncthreads();  // temp is reused by the next tile
    }
  }
}

}  // namespace

void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending) {
  const int device = common_device("sort", {&in, &values, &indices});
  if (in.numel() == 0) return;
  DeviceGuard guard(device);
  const int64_t total = in.numel(), n = row_len(in);
  HG_DISPATCH_ALL(in.dtype(), "sort", [&] {
    sort_positions<scalar_t>(in, indices, descending, device);
    using S = storage_t<scalar_t>;
    gather_kernel<S><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        static_cast<const S*>(in.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()),
        static_cast<S*>(values.data_ptr()), total, n);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void take_along_dim_backward(const Tensor& g, const Tensor& indices, const Tensor& grad_in) {
  const int device = common_device("take_along_dim_backward", {&g, &indices, &grad_in});
  if (g.numel() == 0) return;
  DeviceGuard guard(device);
  const int64_t total = g.numel(), k = row_len(g), n = row_len(grad_in);
  HG_DISPATCH_FLOATING(g.dtype(), "take_along_dim_backward", [&] {
    using S = storage_t<scalar_t>;
    scatter_kernel<S><<<grid_for(total, kThreads, device), kThreads, 0, stream()>>>(
        static_cast<const S*>(g.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()),
        static_cast<S*>(grad_in.data_ptr()), total, k, n);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void cumsum(const Tensor& in, const Tensor& out, bool reverse) {
  const int device = common_device("cumsum", {&in, &out});
  if (in.numel() == 0) return;
  DeviceGuard guard(device);
  const int64_t n = row_len(in), rows = in.numel() / n;
  HG_DISPATCH_NUMERIC(in.dtype(), "cumsum", [&] {
    using S = storage_t<scalar_t>;
    cumsum_kernel<scalar_t><<<grid_for(rows, 1, device), kScanThreads, 0, stream()>>>(
        static_cast<const S*>(in.data_ptr()), static_cast<S*>(out.data_ptr()), rows, n, reverse);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void randperm(const Tensor& out, Generator* generator) {
  const int device = common_device("randperm", {&out});
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(device);
  Tensor keys = make_tensor({n}, TensorOptions(DType::Int64, out.device()));
  randint(keys, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), generator);
  sort_positions<int64_t>(keys, out, false, device);
}

}  // namespace halfgrad::kernels::cuda
