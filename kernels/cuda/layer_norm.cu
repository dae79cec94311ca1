// CUDA layer norm, forward and backward (contracts in kernels/kernel_list.h),
// with the arithmetic of kernels/cpu/layer_norm.cpp: statistics in float32
// (float64 for float64), the mean first and then the squared deviations from
// it, one rounding per output. As softmax.cu: rows of up to 1024 elements get
// one warp each, longer rows one 256-thread block; each pass over a row after
// the first reads it mostly from L1/L2. grad_weight and grad_bias are column
// sums over the rows: a first kernel sums chunks of rows into partial rows
// (32 columns x 8 row lanes a block, combined in shared memory in a fixed
// order), a second adds the chunks in order. No atomics: the same bits on
// every run.
#include <algorithm>
#include <cmath>

#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>
#include <halfgrad/kernels/kernel_ptr.h>
#include <halfgrad/kernels/math.h>

namespace halfgrad::kernels::cuda {

namespace {

template <typename T>
using facc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr int64_t kWarpRowMax = 1024;
constexpr int kRowsPerBlock = kThreads / 32;  // in warp mode
// The column sums: blocks of 32 columns x 8 row lanes, rows in at most
// kMaxChunks chunks of at least kChunkRows (the count fixed by the row count).
constexpr int kColTile = 32, kRowLanes = kThreads / kColTile;
constexpr int64_t kChunkRows = 64;
constexpr int64_t kMaxChunks = 256;

// Which row this warp/block handles first, its lane and the lane count (softmax.cu's).
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
  template <typename A>
  __device__ __forceinline__ A sum(A v, A* smem) const {
    return warp_mode ? warp_allreduce(v, SumOp{}) : block_allreduce(v, SumOp{}, smem);
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_forward_kernel(const storage_t<T>* __restrict__ x, const facc_t<T>* __restrict__ w,
                              const facc_t<T>* __restrict__ b, storage_t<T>* __restrict__ y,
                              facc_t<T>* __restrict__ mean, facc_t<T>* __restrict__ rstd, int64_t rows, int64_t n,
                              double eps, bool warp_mode) {
  using A = facc_t<T>;
  __shared__ A smem[32];
  const RowGroup g(warp_mode);
  for (int64_t row = g.first; row < rows; row += g.step) {
    const storage_t<T>* xr = x + row * n;
    storage_t<T>* yr = y + row * n;
    A s = 0;
    for (int64_t j = g.lane; j < n; j += g.width) s += static_cast<A>(Elem<T>::load(xr[j]));
    const A mu = g.sum(s, smem) / static_cast<A>(n);
    A sq = 0;
    for (int64_t j = g.lane; j < n; j += g.width) {
      const A d = static_cast<A>(Elem<T>::load(xr[j])) - mu;
      sq += d * d;
    }
    const A var = g.sum(sq, smem) / static_cast<A>(n);
    const A rs = A(1) / math::sqrt_(var + static_cast<A>(eps));
    if (g.lane == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
    for (int64_t j = g.lane; j < n; j += g.width) {
      A v = (static_cast<A>(Elem<T>::load(xr[j])) - mu) * rs;
      if (w) v = v * w[j];
      if (b) v = v + b[j];
      yr[j] = Elem<T>::store(static_cast<acc_t<T>>(v));
    }
  }
}

// dx = rs * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * w.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_backward_kernel(const storage_t<T>* __restrict__ go, const storage_t<T>* __restrict__ x,
                               const facc_t<T>* __restrict__ mean, const facc_t<T>* __restrict__ rstd,
                               const facc_t<T>* __restrict__ w, storage_t<T>* __restrict__ dx, int64_t rows,
                               int64_t n, bool warp_mode) {
  using A = facc_t<T>;
  __shared__ A smem[32];
  const RowGroup g(warp_mode);
  for (int64_t row = g.first; row < rows; row += g.step) {
    const int64_t base = row * n;
    const A mu = mean[row], rs = rstd[row];
    A s1 = 0, s2 = 0;
    for (int64_t j = g.lane; j < n; j += g.width) {
      A gw = static_cast<A>(Elem<T>::load(go[base + j]));
      if (w) gw = gw * w[j];
      s1 += gw;
      s2 += gw * (static_cast<A>(Elem<T>::load(x[base + j])) - mu);
    }
    s1 = g.sum(s1, smem);
    s2 = g.sum(s2, smem);
    const A a = s1 / static_cast<A>(n), c = s2 * rs * rs / static_cast<A>(n);
    for (int64_t j = g.lane; j < n; j += g.width) {
      A gw = static_cast<A>(Elem<T>::load(go[base + j]));
      if (w) gw = gw * w[j];
      const A xc = static_cast<A>(Elem<T>::load(x[base + j])) - mu;
      dx[base + j] = Elem<T>::store(static_cast<acc_t<T>>(rs * (gw - a - xc * c)));
    }
  }
}

// Block (column tile, chunk): partial[chunk][col] = sum over the chunk's rows of
// g * xhat (pw) and of g (pb), each thread a column and every 8th row, the 8
// row lanes added in shared memory in order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_colsum_kernel(const storage_t<T>* __restrict__ go, const storage_t<T>* __restrict__ x,
                             const facc_t<T>* __restrict__ mean, const facc_t<T>* __restrict__ rstd,
                             facc_t<T>* __restrict__ pw, facc_t<T>* __restrict__ pb, int64_t rows, int64_t n,
                             int64_t chunks) {
  using A = facc_t<T>;
  __shared__ A sw[kRowLanes][kColTile], sb[kRowLanes][kColTile];
  const int tx = threadIdx.x % kColTile, ty = threadIdx.x / kColTile;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColTile + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = rows * chunk / chunks, r1 = rows * (chunk + 1) / chunks;
  A aw = 0, ab = 0;
  if (col < n)
    for (int64_t r = r0 + ty; r < r1; r += kRowLanes) {
      const A gv = static_cast<A>(Elem<T>::load(go[r * n + col]));
      if (pw) aw += gv * ((static_cast<A>(Elem<T>::load(x[r * n + col])) - mean[r]) * rstd[r]);
      ab += gv;
    }
  sw[ty][tx] = aw;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty != 0 || col >= n) return;
  for (int k = 1; k < kRowLanes; ++k) {
    aw += sw[k][tx];
    ab += sb[k][tx];
  }
  if (pw) pw[chunk * n + col] = aw;
  if (pb) pb[chunk * n + col] = ab;
}

// out[col] = the chunks' partial sums, added in chunk order.
template <typename A>
__global__ void __launch_bounds__(kThreads)
    chunk_sum_kernel(const A* __restrict__ partial, A* __restrict__ out, int64_t chunks, int64_t n) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= n) return;
  A s = partial[col];
  for (int64_t c = 1; c < chunks; ++c) s += partial[c * n + col];
  out[col] = s;
}

int64_t row_len(const Tensor& x) { return x.dim() == 0 ? 1 : x.shape().back(); }

void check_rows(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    HG_CHECK(!t->defined() || t->is_contiguous(),
             "{}: the CUDA kernel needs contiguous tensors, got {}; call .contiguous() first", op, t->describe());
}

// Warp per row for short rows, block per row for long ones (softmax.cu's rule).
std::pair<unsigned, bool> row_launch(int64_t rows, int64_t n, int device) {
  const bool warp_mode = n <= kWarpRowMax;
  return {grid_for(rows, warp_mode ? kRowsPerBlock : 1, device), warp_mode};
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                        const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm";
  const int device = common_device(op, {&x, &out, &mean, &rstd});
  check_rows(op, {&x, &weight, &bias, &out, &mean, &rstd});
  const int64_t n = row_len(x), rows = mean.numel();
  if (rows == 0) return;
  DeviceGuard guard(device);
  const auto [blocks, warp_mode] = row_launch(rows, n, device);
  HG_DISPATCH_FLOATING(x.dtype(), op, [&] {
    using A = facc_t<scalar_t>;
    layer_norm_forward_kernel<scalar_t><<<blocks, kThreads, 0, stream()>>>(
        kernel_ptr<storage_t<scalar_t>>(x), kernel_ptr<A>(weight), kernel_ptr<A>(bias),
        kernel_ptr<storage_t<scalar_t>>(out), kernel_ptr<A>(mean), kernel_ptr<A>(rstd), rows, n, eps, warp_mode);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  const char* op = "layer_norm_backward";
  const int device = common_device(op, {&grad_out, &x, &mean, &rstd});
  check_rows(op, {&grad_out, &x, &mean, &rstd, &weight, &grad_x, &grad_weight, &grad_bias});
  const int64_t n = row_len(x), rows = mean.numel();
  if (n == 0) return;
  DeviceGuard guard(device);
  HG_DISPATCH_FLOATING(x.dtype(), op, [&] {
    using A = facc_t<scalar_t>;
    const auto* gp = kernel_ptr<const storage_t<scalar_t>>(grad_out);
    const auto* xp = kernel_ptr<const storage_t<scalar_t>>(x);
    const A* mp = kernel_ptr<const A>(mean);
    const A* rp = kernel_ptr<const A>(rstd);
    if (grad_x.defined() && rows > 0) {
      const auto [blocks, warp_mode] = row_launch(rows, n, device);
      layer_norm_backward_kernel<scalar_t><<<blocks, kThreads, 0, stream()>>>(
          gp, xp, mp, rp, kernel_ptr<const A>(weight), kernel_ptr<storage_t<scalar_t>>(grad_x), rows, n, warp_mode);
      HG_CUDA_CHECK(cudaGetLastError());
    }
    if (!grad_weight.defined() && !grad_bias.defined()) return;
    if (rows == 0) {  // empty sums
      for (const Tensor* t : {&grad_weight, &grad_bias})
        if (t->defined()) HG_CUDA_CHECK(cudaMemsetAsync(t->data_ptr(), 0, n * sizeof(A), stream()));
      return;
    }
    const int64_t chunks = std::clamp<int64_t>(rows / kChunkRows, 1, kMaxChunks);
    // [2, chunks, n] partial sums, from the pool on this stream
    Tensor partial = make_tensor({2, chunks, n}, TensorOptions(dtype_of<A>::value, x.device()));
    A* pw = grad_weight.defined() ? kernel_ptr<A>(partial) : nullptr;
    A* pb = grad_bias.defined() ? kernel_ptr<A>(partial) + chunks * n : nullptr;
    const dim3 grid(static_cast<unsigned>((n + kColTile - 1) / kColTile), static_cast<unsigned>(chunks));
    layer_norm_colsum_kernel<scalar_t><<<grid, kThreads, 0, stream()>>>(gp, xp, mp, rp, pw, pb, rows, n, chunks);
    HG_CUDA_CHECK(cudaGetLastError());
    const auto cols = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    if (pw) chunk_sum_kernel<A><<<cols, kThreads, 0, stream()>>>(pw, kernel_ptr<A>(grad_weight), chunks, n);
    if (pb) chunk_sum_kernel<A><<<cols, kThreads, 0, stream()>>>(pb, kernel_ptr<A>(grad_bias), chunks, n);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace halfgrad::kernels::cuda
