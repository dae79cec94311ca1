// CPU layer norm, forward and backward (contracts in kernels/kernel_list.h): one
// pass of the row kernel per row, rows in blocks on the OpenMP team. A row is
// summed in kLanes independent partial sums, so the sums vectorise (a plain
// float sum is a chain GCC may not reorder), in an order fixed by n alone.
// float16 and bfloat16 rows are widened into a float buffer first and the
// output rounded once from float; float32 and float64 rows are read in place.
// The float32 and bfloat16 bodies are also compiled for AVX-512 and AVX2
// (HG_TARGET_CLONES), as softmax's: the types a float32 or AMP model runs in.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/parallel.h>
#include <halfgrad/kernels/cpu/scratch.h>
#include <halfgrad/kernels/kernel_ptr.h>

namespace halfgrad::kernels::cpu {

namespace {

template <typename T>
using facc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr int kLanes = 16;            // partial sums per row: one AVX-512 vector of floats
constexpr int64_t kBlockElems = 4096;  // about this many elements per task of the forward
// The backward's column sums (grad_weight, grad_bias): rows in chunks of at
// least kChunkRows, at most kMaxChunks chunks, each with its own partial row.
constexpr int64_t kChunkRows = 16;
constexpr int64_t kMaxChunks = 64;

struct LayerNormScratch;  // the tag of this file's per-thread buffer

// sum of f(i) over [0, n): lane k adds the i = k mod kLanes, then the lanes
// are added pairwise.
template <typename A, typename F>
[[gnu::always_inline]] inline A lane_sum(int64_t n, F&& f) {
  A acc[kLanes] = {};
  const int64_t full = n / kLanes * kLanes;
  for (int64_t i = 0; i < full; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += f(i + k);
  for (int64_t i = full; i < n; ++i) acc[i - full] += f(i);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// The row's values in A: in place when T is A, else widened into buf.
template <typename A, typename T>
[[gnu::always_inline]] inline const A* row_in(const T* x, int64_t n, A* buf) {
  if constexpr (std::is_same_v<T, A>) {
    return x;
  } else {
    for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<A>(x[i]);
    return buf;
  }
}

// nr rows of n: mean, rstd and y. buf: 2n values of A when T is not A.
template <typename T, typename A>
[[gnu::always_inline]] inline void forward_rows(const T* x, int64_t nr, int64_t n, A eps, const A* w, const A* b,
                                                T* y, A* mean, A* rstd, A* buf) {
  for (int64_t r = 0; r < nr; ++r) {
    const A* xr = row_in(x + r * n, n, buf);
    const A mu = lane_sum<A>(n, [&](int64_t i) { return xr[i]; }) / static_cast<A>(n);
    const A var = lane_sum<A>(n, [&](int64_t i) {
                    const A d = xr[i] - mu;
                    return d * d;
                  }) /
                  static_cast<A>(n);
    const A rs = A(1) / std::sqrt(var + eps);
    mean[r] = mu;
    rstd[r] = rs;
    A* yr;
    if constexpr (std::is_same_v<T, A>) yr = y + r * n;
    else yr = buf + n;
    if (w && b) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * rs * w[i] + b[i];
    } else if (w) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * rs * w[i];
    } else if (b) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * rs + b[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * rs;
    }
    if constexpr (!std::is_same_v<T, A>)
      for (int64_t i = 0; i < n; ++i) y[r * n + i] = static_cast<T>(yr[i]);
  }
}

// nr rows of the backward (contract in kernel_list.h); dw and db (nullable)
// are this chunk's partial sums, added to. buf: 4n values of A when T is not A.
template <typename T, typename A>
[[gnu::always_inline]] inline void backward_rows(const T* g, const T* x, int64_t nr, int64_t n, const A* mean,
                                                 const A* rstd, const A* w, T* dx, A* dw, A* db, A* buf) {
  const A inv_n = A(1) / static_cast<A>(n);
  for (int64_t r = 0; r < nr; ++r) {
    const A* xr = row_in(x + r * n, n, buf);
    const A* gr = row_in(g + r * n, n, buf + n);
    const A mu = mean[r], rs = rstd[r];
    if (dw)
      for (int64_t i = 0; i < n; ++i) dw[i] += gr[i] * ((xr[i] - mu) * rs);
    if (db)
      for (int64_t i = 0; i < n; ++i) db[i] += gr[i];
    if (!dx) continue;
    // gw = g * w; dx = rs * (gw - mean(gw) - xhat * mean(gw * xhat))
    A* gw = buf + 2 * n;
    const A* gwr = gr;
    if (w) {
      for (int64_t i = 0; i < n; ++i) gw[i] = gr[i] * w[i];
      gwr = gw;
    }
    const A s1 = lane_sum<A>(n, [&](int64_t i) { return gwr[i]; });
    const A s2 = lane_sum<A>(n, [&](int64_t i) { return gwr[i] * (xr[i] - mu); });
    const A a = s1 * inv_n, c = s2 * rs * rs * inv_n;  // mean(gw), mean(gw * xhat) * rs
    A* o;
    if constexpr (std::is_same_v<T, A>) o = dx + r * n;
    else o = buf + 3 * n;
    for (int64_t i = 0; i < n; ++i) o[i] = rs * (gwr[i] - a - (xr[i] - mu) * c);
    if constexpr (!std::is_same_v<T, A>)
      for (int64_t i = 0; i < n; ++i) dx[r * n + i] = static_cast<T>(o[i]);
  }
}

// float32 and bfloat16: the templates above in cloned overloads, which calls
// with those pointer types pick (always_inline makes each clone compile the
// body for its own ISA).
HG_TARGET_CLONES void forward_rows(const float* x, int64_t nr, int64_t n, float eps, const float* w, const float* b,
                                   float* y, float* mean, float* rstd, float* buf) {
  forward_rows<float, float>(x, nr, n, eps, w, b, y, mean, rstd, buf);
}
HG_TARGET_CLONES void forward_rows(const BFloat16* x, int64_t nr, int64_t n, float eps, const float* w,
                                   const float* b, BFloat16* y, float* mean, float* rstd, float* buf) {
  forward_rows<BFloat16, float>(x, nr, n, eps, w, b, y, mean, rstd, buf);
}
HG_TARGET_CLONES void backward_rows(const float* g, const float* x, int64_t nr, int64_t n, const float* mean,
                                    const float* rstd, const float* w, float* dx, float* dw, float* db, float* buf) {
  backward_rows<float, float>(g, x, nr, n, mean, rstd, w, dx, dw, db, buf);
}
HG_TARGET_CLONES void backward_rows(const BFloat16* g, const BFloat16* x, int64_t nr, int64_t n, const float* mean,
                                    const float* rstd, const float* w, BFloat16* dx, float* dw, float* db,
                                    float* buf) {
  backward_rows<BFloat16, float>(g, x, nr, n, mean, rstd, w, dx, dw, db, buf);
}

int64_t row_len(const Tensor& x) { return x.dim() == 0 ? 1 : x.shape().back(); }

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                        const Tensor& mean, const Tensor& rstd) {
  const int64_t n = row_len(x), rows = mean.numel();
  if (rows == 0) return;
  HG_DISPATCH_FLOATING(x.dtype(), "layer_norm", [&] {
    using A = facc_t<scalar_t>;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    scalar_t* yp = static_cast<scalar_t*>(out.data_ptr());
    const A* w = kernel_ptr<const A>(weight);
    const A* b = kernel_ptr<const A>(bias);
    A* mp = static_cast<A*>(mean.data_ptr());
    A* rp = static_cast<A*>(rstd.data_ptr());
    const int64_t per = std::max<int64_t>(1, kBlockElems / std::max<int64_t>(n, 1));
    const int64_t blocks = (rows + per - 1) / per;
    parallel_for(blocks, worth_threads(rows * n), [&](int64_t blk) {
      const int64_t r0 = blk * per, nr = std::min(rows, r0 + per) - r0;
      A* buf = std::is_same_v<scalar_t, A> ? nullptr : thread_scratch<LayerNormScratch, A>(2 * n);
      forward_rows(xp + r0 * n, nr, n, static_cast<A>(eps), w, b, yp + r0 * n, mp + r0, rp + r0, buf);
    });
  });
}

// Rows in chunks (a number fixed by the row count), each chunk's column sums
// in a partial row of its own, added up in chunk order after the parallel
// loop: no two threads write one value, and the bits depend on neither the
// thread count nor the schedule.
void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  const int64_t n = row_len(x), rows = mean.numel();
  HG_DISPATCH_FLOATING(x.dtype(), "layer_norm_backward", [&] {
    using A = facc_t<scalar_t>;
    A* dw = kernel_ptr<A>(grad_weight);
    A* db = kernel_ptr<A>(grad_bias);
    if (rows == 0) {  // empty sums
      if (dw) std::fill(dw, dw + n, A(0));
      if (db) std::fill(db, db + n, A(0));
      return;
    }
    const scalar_t* gp = static_cast<const scalar_t*>(grad_out.data_ptr());
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    const A* mp = static_cast<const A*>(mean.data_ptr());
    const A* rp = static_cast<const A*>(rstd.data_ptr());
    const A* w = kernel_ptr<const A>(weight);
    scalar_t* dx = kernel_ptr<scalar_t>(grad_x);
    const bool sums = dw || db;
    const int64_t chunks = std::clamp<int64_t>(rows / kChunkRows, 1, kMaxChunks);
    // per chunk: [dw partial (n), db partial (n)]
    std::vector<A> partial(sums ? static_cast<size_t>(chunks * 2 * n) : 0, A(0));
    parallel_for(chunks, worth_threads(rows * n), [&](int64_t c) {
      const int64_t r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
      A* buf = thread_scratch<LayerNormScratch, A>(4 * n);
      A* pdw = dw ? partial.data() + c * 2 * n : nullptr;
      A* pdb = db ? partial.data() + c * 2 * n + n : nullptr;
      backward_rows(gp + r0 * n, xp + r0 * n, r1 - r0, n, mp + r0, rp + r0, w, dx ? dx + r0 * n : nullptr, pdw, pdb,
                    buf);
    });
    if (!sums) return;
    for (int k = 0; k < 2; ++k) {
      A* o = k == 0 ? dw : db;
      if (!o) continue;
      std::copy_n(partial.data() + k * n, n, o);
      for (int64_t c = 1; c < chunks; ++c) {
        const A* p = partial.data() + c * 2 * n + k * n;
        for (int64_t i = 0; i < n; ++i) o[i] += p[i];
      }
    }
  });
}

}  // namespace halfgrad::kernels::cpu
