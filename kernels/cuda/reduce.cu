// CUDA reductions: sum, mean, max, argmax, min, argmin over any dims, with the contract of
// kernels/cpu/reduce.cpp (float accumulation for float32 and the half types,
// double for float64, int64 for int64; max/argmax/min/argmin: the first NaN
// wins, ties go to the first index).
//
// Strategy: the reduced dims are moved innermost (a copy when the input is not
// already laid out that way), so each output reduces one contiguous row of
// `r` elements:
//  - row kernel: one warp per row when rows are short (r <= 512), else one
//    256-thread block per row; when there are too few rows to fill the GPU
//    (a full reduction, loss.sum()), each row is split into chunks over
//    several blocks, which write float partials, and a second launch of the
//    same kernel reduces the partials (two passes, no atomics: the result is
//    deterministic run to run);
//  - column kernel: the sum over the leading dims of a contiguous tensor
//    (Linear's bias gradient, out[j] = sum_i in[i, j]) reads rows as they lie:
//    a warp takes 32 adjacent columns (coalesced), 8 warps split the rows and
//    meet in shared memory; few columns and many rows split the rows over
//    more blocks the same two-pass way.
// Each thread's share of a sum goes through kernels::CascadeSum (error growing
// with log n), and threads, warps and blocks combine as trees.
#include <algorithm>
#include <cmath>
#include <limits>

#include <halfgrad/kernels/cascade_sum.h>
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>
#include <halfgrad/kernels/reduce_plan.h>
#include <halfgrad/kernels/kernel_ptr.h>

namespace halfgrad::kernels::cuda {

using kernels::ReduceOp;

namespace {

template <typename T>
using racc_t = std::conditional_t<std::is_same_v<T, double>, double,
                                  std::conditional_t<std::is_same_v<T, int64_t>, int64_t, float>>;

// A max candidate: the value and its position along the reduced row.
template <typename A>
struct ArgVal {
  A v;
  int64_t i;
};

template <typename A>
__device__ __forceinline__ bool isnan_(A x) {
  return x != x;  // false for integers
}

// Max (kMin: min) with the CPU's order: NaN beats everything (the first NaN
// among NaNs), then the larger (smaller) value, then the smaller index. A
// total order, so the tree reduction may combine in any order and still give
// the CPU's answer.
template <bool kMin>
struct ExtremeOp {
  template <typename A>
  __device__ __forceinline__ ArgVal<A> operator()(ArgVal<A> x, ArgVal<A> y) const {
    bool take_y;
    if (isnan_(x.v)) take_y = isnan_(y.v) && y.i < x.i;
    else if (isnan_(y.v)) take_y = true;
    else take_y = (kMin ? y.v < x.v : y.v > x.v) || (y.v == x.v && y.i < x.i);
    return take_y ? y : x;
  }
};

// Found by argument-dependent lookup from warp_allreduce (loops.cuh).
template <typename A>
__device__ __forceinline__ ArgVal<A> shfl_xor(ArgVal<A> x, int lane_mask) {
  return {__shfl_xor_sync(0xffffffffu, x.v, lane_mask), __shfl_xor_sync(0xffffffffu, x.i, lane_mask)};
}

template <typename A>
__device__ __forceinline__ A lowest() {
  if constexpr (std::is_integral_v<A>) return std::numeric_limits<A>::min();
  else return -static_cast<A>(INFINITY);
}
template <typename A>
__device__ __forceinline__ A highest() {
  if constexpr (std::is_integral_v<A>) return std::numeric_limits<A>::max();
  else return static_cast<A>(INFINITY);
}

// What a row kernel computes: a sum (divided by `divisor`), a max or a min.
enum class Mode : int { Sum, Max, Min };

constexpr int kWarpRowsMax = 512;  // rows up to this length: one warp each
constexpr int kWarpsPerBlock = kThreads / 32;

// Reduces rows of r contiguous elements of `in`, each split into `splits`
// chunks of `chunk`; writes one result per (row, chunk) at row * splits + chunk.
// Sum: out_v = sum / divisor. Max/Min: out_v = the max/min (if given), out_i =
// its position (if given). in_idx (second pass of a split argmax) holds the
// positions of the inputs; else an element's position is its column.
template <typename In, typename Out, Mode kMode>
__global__ void __launch_bounds__(kThreads)
    row_reduce_kernel(const storage_t<In>* __restrict__ in, const int64_t* __restrict__ in_idx,
                      storage_t<Out>* __restrict__ out_v, int64_t* __restrict__ out_i, int64_t rows, int64_t r,
                      int64_t chunk, int64_t splits, acc_t<Out> divisor, bool warp_mode) {
  using A = racc_t<In>;
  static_assert(std::is_same_v<A, racc_t<Out>>, "one accumulator type per reduction");
  constexpr bool kMax = kMode != Mode::Sum;
  using Cmp = ExtremeOp<kMode == Mode::Min>;
  using R = std::conditional_t<kMax, ArgVal<A>, A>;
  __shared__ R smem[32];
  const int64_t tasks = rows * splits;
  const int lane = warp_mode ? (threadIdx.x & 31) : threadIdx.x;
  const int width = warp_mode ? 32 : blockDim.x;
  const int64_t per_block = warp_mode ? kWarpsPerBlock : 1;
  const int64_t first = blockIdx.x * per_block + (warp_mode ? (threadIdx.x >> 5) : 0);
  for (int64_t task = first; task < tasks; task += gridDim.x * per_block) {
    const int64_t row = task / splits, begin = (task % splits) * chunk;
    const int64_t end = std::min(r, begin + chunk);
    const storage_t<In>* p = in + row * r;
    R acc;
    if constexpr (kMax) {
      acc = {kMode == Mode::Min ? highest<A>() : lowest<A>(), std::numeric_limits<int64_t>::max()};
      for (int64_t j = begin + lane; j < end; j += width)
        acc = Cmp{}(acc, ArgVal<A>{static_cast<A>(Elem<In>::load(p[j])), in_idx ? in_idx[row * r + j] : j});
    } else {
      kernels::CascadeSum<A> sum;  // a thread may add thousands of values
      for (int64_t j = begin + lane; j < end; j += width) sum.add(static_cast<A>(Elem<In>::load(p[j])));
      acc = sum.total();
    }
    if constexpr (kMax) acc = warp_mode ? warp_allreduce(acc, Cmp{}) : block_allreduce(acc, Cmp{}, smem);
    else acc = warp_mode ? warp_allreduce(acc, SumOp{}) : block_allreduce(acc, SumOp{}, smem);
    if (lane == 0) {
      if constexpr (kMax) {
        if (out_v) out_v[task] = Elem<Out>::store(static_cast<acc_t<Out>>(acc.v));
        if (out_i) out_i[task] = acc.i;
      } else {
        out_v[task] = Elem<Out>::store(static_cast<acc_t<Out>>(acc / divisor));
      }
    }
  }
}

// out[s * cols + j] = sum of in[i * cols + j] over rows i of split s, / divisor.
// Block (32, 8): x walks 32 adjacent columns, y interleaves the rows.
template <typename In, typename Out>
__global__ void __launch_bounds__(256)
    col_reduce_kernel(const storage_t<In>* __restrict__ in, storage_t<Out>* __restrict__ out, int64_t rows,
                      int64_t cols, int64_t rows_per_split, acc_t<Out> divisor) {
  using A = racc_t<In>;
  __shared__ A part[8][33];  // 33: no bank conflicts on the column reads
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t end = std::min(rows, begin + rows_per_split);
  kernels::CascadeSum<A> sum;
  if (col < cols)
    for (int64_t i = begin + threadIdx.y; i < end; i += 8) sum.add(static_cast<A>(Elem<In>::load(in[i * cols + col])));
  part[threadIdx.y][threadIdx.x] = sum.total();
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    A s = part[0][threadIdx.x];
#pragma unroll
    for (int y = 1; y < 8; ++y) s += part[y][threadIdx.x];
    out[blockIdx.y * cols + col] = Elem<Out>::store(static_cast<acc_t<Out>>(s / divisor));
  }
}


// Sum/mean over the leading dims: in [rows, cols] contiguous -> out [cols].
template <typename T>
void reduce_columns(ReduceOp op, const Tensor& in, int64_t rows, int64_t cols, const Tensor& out, int device) {
  using A = racc_t<T>;
  const A divisor = op == ReduceOp::Mean ? static_cast<A>(rows) : A(1);
  const int64_t col_blocks = (cols + 31) / 32;
  // Enough blocks for ~4 per SM; each split keeps >= 512 rows (64 per thread).
  const int64_t target = int64_t{sm_count(device)} * 4;
  int64_t splits = 1;
  if (col_blocks < target) splits = std::clamp<int64_t>(std::min(target / col_blocks, rows / 512), 1, 65535);
  const int64_t per_split = (rows + splits - 1) / splits;
  splits = (rows + per_split - 1) / per_split;
  const dim3 block(32, 8);
  HG_CHECK(col_blocks <= std::numeric_limits<int32_t>::max(), "sum: {} has too many columns", in.describe());
  if (splits == 1) {
    col_reduce_kernel<T, T><<<dim3(static_cast<unsigned>(col_blocks), 1), block, 0, stream()>>>(
        kernel_ptr<storage_t<T>>(in), kernel_ptr<storage_t<T>>(out), rows, cols, rows, static_cast<acc_t<T>>(divisor));
    HG_CUDA_CHECK(cudaGetLastError());
    return;
  }
  Tensor part = make_tensor({splits, cols}, TensorOptions(dtype_of<A>::value, in.device()));
  col_reduce_kernel<T, A><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits)), block, 0,
                            stream()>>>(kernel_ptr<storage_t<T>>(in), kernel_ptr<A>(part), rows, cols, per_split, A(1));
  HG_CUDA_CHECK(cudaGetLastError());
  col_reduce_kernel<A, T><<<dim3(static_cast<unsigned>(col_blocks), 1), block, 0, stream()>>>(
      kernel_ptr<A>(part), kernel_ptr<storage_t<T>>(out), splits, cols, splits, static_cast<acc_t<T>>(divisor));
  HG_CUDA_CHECK(cudaGetLastError());
}

template <typename In, typename Out, Mode kMode>
void launch_rows(const storage_t<In>* in, const int64_t* in_idx, storage_t<Out>* out_v, int64_t* out_i,
                 int64_t rows, int64_t r, int64_t chunk, int64_t splits, acc_t<Out> divisor, int device) {
  const bool warp_mode = splits == 1 && r <= kWarpRowsMax;
  const int64_t tasks = rows * splits;
  const unsigned blocks = grid_for(tasks, warp_mode ? kWarpsPerBlock : 1, device);
  row_reduce_kernel<In, Out, kMode><<<blocks, kThreads, 0, stream()>>>(in, in_idx, out_v, out_i, rows, r, chunk,
                                                                      splits, divisor, warp_mode);
  HG_CUDA_CHECK(cudaGetLastError());
}

// in: [rows, r] contiguous -> out [rows] (values, or int64 positions for argmax).
template <typename T>
void reduce_rows(ReduceOp op, const Tensor& in, int64_t rows, int64_t r, const Tensor& out, const Tensor& indices,
                 int device) {
  using A = racc_t<T>;
  const bool is_arg = kernels::is_arg_reduce(op);
  const bool is_min = op == ReduceOp::Min || op == ReduceOp::ArgMin;
  const bool is_max = !kernels::is_sum_reduce(op);
  const A divisor = op == ReduceOp::Mean ? static_cast<A>(r) : A(1);
  const auto* src = kernel_ptr<storage_t<T>>(in);
  storage_t<T>* out_v = is_arg ? nullptr : kernel_ptr<storage_t<T>>(out);
  int64_t* out_i = is_arg ? kernel_ptr<int64_t>(out) : indices.defined() ? kernel_ptr<int64_t>(indices) : nullptr;
  // Split long rows when there are too few of them to fill the GPU; each
  // chunk keeps >= 4096 elements (16 per thread).
  const int64_t target = int64_t{sm_count(device)} * 4;
  int64_t splits = 1;
  if (r > kWarpRowsMax && rows < target) splits = std::clamp<int64_t>(std::min(target / rows, r / 4096), 1, 4096);
  const int64_t chunk = (r + splits - 1) / splits;
  splits = (r + chunk - 1) / chunk;
  if (splits == 1) {
    if (is_min)
      launch_rows<T, T, Mode::Min>(src, nullptr, out_v, out_i, rows, r, r, 1, static_cast<acc_t<T>>(divisor), device);
    else if (is_max)
      launch_rows<T, T, Mode::Max>(src, nullptr, out_v, out_i, rows, r, r, 1, static_cast<acc_t<T>>(divisor), device);
    else
      launch_rows<T, T, Mode::Sum>(src, nullptr, out_v, nullptr, rows, r, r, 1, static_cast<acc_t<T>>(divisor), device);
    return;
  }
  // Pass 1: partials [rows, splits] in the accumulator type (with positions for max).
  Tensor part = make_tensor({rows, splits}, TensorOptions(dtype_of<A>::value, in.device()));
  if (is_max) {
    Tensor part_i = make_tensor({rows, splits}, TensorOptions(DType::Int64, in.device()));
    auto two_pass = [&]<Mode kMode>() {
      launch_rows<T, A, kMode>(src, nullptr, kernel_ptr<A>(part), kernel_ptr<int64_t>(part_i), rows, r, chunk, splits,
                               A(1), device);
      launch_rows<A, T, kMode>(kernel_ptr<A>(part), kernel_ptr<int64_t>(part_i), out_v, out_i, rows, splits, splits, 1,
                               static_cast<acc_t<T>>(divisor), device);
    };
    if (is_min) two_pass.template operator()<Mode::Min>();
    else two_pass.template operator()<Mode::Max>();
  } else {
    launch_rows<T, A, Mode::Sum>(src, nullptr, kernel_ptr<A>(part), nullptr, rows, r, chunk, splits, A(1), device);
    launch_rows<A, T, Mode::Sum>(kernel_ptr<A>(part), nullptr, out_v, nullptr, rows, splits, splits, 1,
                             static_cast<acc_t<T>>(divisor), device);
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out,
            const Tensor& indices) {
  const int device = common_device("reduce", {&in, &out});
  const kernels::ReducePlan p = kernels::plan_reduce(op, in, dims, out, copy);
  if (p.nothing) return;
  HG_CHECK(out.is_contiguous(), "reduce: the output {} must be contiguous", out.describe());
  HG_CHECK(out.dtype() == (kernels::is_arg_reduce(op) ? DType::Int64 : in.dtype()),
           "reduce: output {} has the wrong dtype for input {}", out.describe(), in.describe());
  if (p.empty) return fill(out, kernels::empty_reduction_value(op));
  DeviceGuard guard(device);
  if (p.columns) {  // column sums over the leading dims, no copy
    HG_DISPATCH_NUMERIC(in.dtype(), op == ReduceOp::Sum ? "sum" : "mean",
                        [&] { reduce_columns<scalar_t>(op, in, p.r, p.outer, out, device); });
    return;
  }
  HG_DISPATCH_NUMERIC(in.dtype(), "reduce",
                      [&] { reduce_rows<scalar_t>(op, p.rows, p.outer, p.r, out, indices, device); });
}

}  // namespace halfgrad::kernels::cuda
