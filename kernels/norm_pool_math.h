#pragma once
// Per-element math of batch norm and 2-d pooling shared by the CPU loops
// (kernels/cpu/batch_norm.cpp, kernels/cpu/pool.cpp) and the CUDA kernels (kernels/cuda/batch_norm.cu,
// kernels/cuda/pool.cu): window bounds, divisors and the normalisation formulas,
// HG_HOST_DEVICE so the CPU tests check the arithmetic the GPU runs.
// Internal (not installed).
#include <cmath>
#include <cstdint>

#include <halfgrad/core/dtype.h>
#include <halfgrad/core/macros.h>
#include <halfgrad/kernels/kernels.h>

namespace halfgrad::math {

// What batch norm's statistics and pooling's sums run in: the dtype's compute
// type (core/dtype.h), float64 for float64 data and float32 for the others.
template <typename T>
using stat_t = acc_t<T>;

// ---- batch norm (A: float or double) ---------------------------------------------------------
// y = (x - mean) * invstd * w + b, in that order (as PyTorch's CPU kernel rounds it).
template <typename A>
HG_INLINE A bn_forward(A x, A mean, A invstd, A w, A b) {
  return (x - mean) * invstd * w + b;
}
// The training backward of one element: w * invstd * (g - mean_g - (x - mean) * k)
// with mean_g = sum(g) / n and k = invstd^2 * sum(g * (x - mean)) / n.
template <typename A>
HG_INLINE A bn_backward_train(A g, A x, A mean, A invstd, A w, A mean_g, A k) {
  return (g - mean_g - (x - mean) * k) * invstd * w;
}
template <typename A>
HG_INLINE A bn_backward_eval(A g, A invstd, A w) {
  return g * invstd * w;
}

// Batch norm's view of x, [N, C, S] (S: the product of the spatial dims). A
// channels-last x (the op gives dense row-major or channels-last) is the
// row-major [N * S, C, 1]: the same loops, each channel's elements C apart.
struct BatchNormDims {
  int64_t n, c, s;
};
inline BatchNormDims batch_norm_dims(const Tensor& x) {
  const int64_t n = x.shape()[0], c = x.shape()[1];
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.shape()[d];
  if (!x.is_contiguous()) return {n * s, c, 1};
  return {n, c, s};
}

// ---- pooling ---------------------------------------------------------------------------------
// Where element k (= h * W + w) of plane p (= n * C + c) of [P, H, W] planes
// lies: row-major planes (p * HW + k), or channels-last [N, H, W, C] memory.
struct PlaneLayout {
  int64_t hw = 0, c = 1;
  bool channels_last = false;
  HG_INLINE int64_t at(int64_t p, int64_t k) const {
    return channels_last ? (p / c) * hw * c + k * c + p % c : p * hw + k;
  }
  // The inverse: the plane and element at memory offset e (so a GPU thread per
  // offset walks memory in order in either layout).
  HG_INLINE void locate(int64_t e, int64_t& p, int64_t& k) const {
    if (channels_last) {
      const int64_t rest = e / c;
      k = rest % hw;
      p = (rest / hw) * c + e % c;
    } else {
      p = e / hw;
      k = e % hw;
    }
  }
};
HG_INLINE int64_t min_i(int64_t a, int64_t b) { return a < b ? a : b; }
HG_INLINE int64_t max_i(int64_t a, int64_t b) { return a > b ? a : b; }

// The planes of a pool's input and output ([P, H, W] and [P, OH, OW]) and where
// their elements lie: both row-major, or both channels-last (the op gives one layout).
struct PoolPlanes {
  int64_t p, h, w, oh, ow;
  PlaneLayout in, out;
};
inline PoolPlanes pool_planes(const Tensor& in, const Tensor& out) {
  const int64_t h = in.shape()[in.dim() - 2], w = in.shape()[in.dim() - 1];
  const int64_t oh = out.shape()[out.dim() - 2], ow = out.shape()[out.dim() - 1];
  const bool cl = in.dim() == 4 && (!in.is_contiguous() || !out.is_contiguous());
  const int64_t c = in.dim() == 4 ? in.shape()[1] : 1;
  return {h * w == 0 ? 0 : in.numel() / (h * w), h, w, oh, ow, {h * w, c, cl}, {oh * ow, c, cl}};
}

// The taps a in [lo, hi) of a window starting at `start` (possibly negative) whose
// positions start + a * dilation lie inside [0, size).
struct TapRange {
  int64_t lo, hi;
};
HG_INLINE TapRange taps_inside(int64_t start, int64_t size, int64_t kernel, int64_t dilation) {
  const int64_t lo = start < 0 ? (-start + dilation - 1) / dilation : 0;
  const int64_t hi = size - start <= 0 ? 0 : min_i(kernel, (size - start + dilation - 1) / dilation);
  return TapRange{lo, hi};
}

// The max over window (oh, ow) of a [H, W] plane read through load(flat index), in A:
// a NaN wins (the first NaN, and the scan stops there), ties keep the first tap in
// row-major order. A window with no tap inside the plane gives -inf and index -1.
template <typename A, typename Load>
HG_INLINE void max_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const kernels::Pool2dGeometry& g,
                          const Load& load, A& best, int64_t& arg) {
  const int64_t h0 = oh * g.stride[0] - g.padding[0], w0 = ow * g.stride[1] - g.padding[1];
  const TapRange ra = taps_inside(h0, H, g.kernel[0], g.dilation[0]);
  const TapRange rb = taps_inside(w0, W, g.kernel[1], g.dilation[1]);
  best = -A(INFINITY);
  arg = -1;
  if (ra.lo >= ra.hi || rb.lo >= rb.hi) return;
  arg = (h0 + ra.lo * g.dilation[0]) * W + (w0 + rb.lo * g.dilation[1]);
  best = load(arg);
  if (best != best) return;
  for (int64_t a = ra.lo; a < ra.hi; ++a) {
    const int64_t row = (h0 + a * g.dilation[0]) * W;
    for (int64_t b = rb.lo; b < rb.hi; ++b) {
      const int64_t i = row + w0 + b * g.dilation[1];
      const A v = load(i);
      if (!(v <= best)) {  // larger, or NaN (best is not NaN here)
        best = v;
        arg = i;
        if (v != v) return;
      }
    }
  }
}

// The average-pooling window of output (oh, ow), clipped to the input, and its divisor
// (PyTorch's avg_pool2d: the size within the padded input with count_include_pad, the
// clipped size without, or divisor_override). An empty window (only possible in ceil
// mode) has divisor 0 and gives 0.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  int64_t divisor;
};
HG_INLINE AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const kernels::Pool2dGeometry& g) {
  int64_t h0 = oh * g.stride[0] - g.padding[0], w0 = ow * g.stride[1] - g.padding[1];
  int64_t h1 = min_i(h0 + g.kernel[0], H + g.padding[0]), w1 = min_i(w0 + g.kernel[1], W + g.padding[1]);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = max_i(h0, 0);
  w0 = max_i(w0, 0);
  h1 = min_i(h1, H);
  w1 = min_i(w1, W);
  AvgWindow r{h0, h1, w0, w1, 0};
  if (h0 >= h1 || w0 >= w1) return r;
  r.divisor = g.divisor_override != 0 ? g.divisor_override : g.count_include_pad ? padded : (h1 - h0) * (w1 - w0);
  return r;
}

// Adaptive pooling: output i of `out` covers [start, end) of `in` (PyTorch's rule).
HG_INLINE int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
HG_INLINE int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// The outputs whose windows may contain input row/column i: [lo, hi] (inclusive,
// clipped to [0, out - 1]; empty when lo > hi). Used by the gather backward:
// windows start at o * stride - pad and span (kernel - 1) * dilation + 1.
struct OutRange {
  int64_t lo, hi;
};
HG_INLINE OutRange windows_containing(int64_t i, int64_t out, int64_t kernel, int64_t stride, int64_t pad,
                                      int64_t dilation) {
  const int64_t span = (kernel - 1) * dilation + 1;
  // o * stride - pad <= i  and  o * stride - pad + span > i
  const int64_t top = i + pad;  // >= 0
  const int64_t lo_num = top - span + 1;
  const int64_t lo = lo_num <= 0 ? 0 : (lo_num + stride - 1) / stride;
  return OutRange{lo, min_i(top / stride, out - 1)};
}
HG_INLINE OutRange adaptive_containing(int64_t i, int64_t in, int64_t out) {
  // start(o) <= i  <=>  o <= ceil((i + 1) * out / in) - 1;  end(o) > i  <=>  o >= floor(i * out / in)
  return OutRange{(i * out) / in, min_i(((i + 1) * out + in - 1) / in - 1, out - 1)};
}

// ---- the window walks: one per family, forward and backward --------------------------------
// The CPU loops (kernels/cpu/pool.cpp) and the CUDA kernels (kernels/cuda/pool.cu)
// both call these for each output (forward) or input element (backward) of a
// plane; x(k) and grad(k) read element k (row-major within the plane) of the
// plane's input or output gradient in A: the only part that differs between
// the backends. The backward is a gather (each input element adds up its
// windows' shares: no atomics, the same order on both). max_window above is
// max pooling's forward.

// avg_pool2d, output (i, j): the window's sum over its divisor.
template <typename A, typename X>
HG_INLINE A avg_pool_at(int64_t i, int64_t j, int64_t H, int64_t W, const kernels::Pool2dGeometry& g, const X& x) {
  const AvgWindow win = avg_window(i, j, H, W, g);
  A sum = 0;
  for (int64_t ih = win.h0; ih < win.h1; ++ih)
    for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += x(ih * W + iw);
  return win.divisor == 0 ? A(0) : sum / static_cast<A>(win.divisor);
}

// max_pool2d's gradient at input (ih, iw): the gradients of the windows whose
// saved argmax, index(k), is this element.
template <typename A, typename Grad, typename Index>
HG_INLINE A max_pool_grad_at(int64_t ih, int64_t iw, int64_t W, int64_t OH, int64_t OW,
                             const kernels::Pool2dGeometry& g, const Grad& grad, const Index& index) {
  const OutRange rh = windows_containing(ih, OH, g.kernel[0], g.stride[0], g.padding[0], g.dilation[0]);
  const OutRange rw = windows_containing(iw, OW, g.kernel[1], g.stride[1], g.padding[1], g.dilation[1]);
  const int64_t self = ih * W + iw;
  A acc = 0;
  for (int64_t i = rh.lo; i <= rh.hi; ++i)
    for (int64_t j = rw.lo; j <= rw.hi; ++j)
      if (index(i * OW + j) == self) acc += grad(i * OW + j);
  return acc;
}

// avg_pool2d's gradient at input (ih, iw): each window holding it gives g / divisor.
template <typename A, typename Grad>
HG_INLINE A avg_pool_grad_at(int64_t ih, int64_t iw, int64_t H, int64_t W, int64_t OH, int64_t OW,
                             const kernels::Pool2dGeometry& g, const Grad& grad) {
  const OutRange rh = windows_containing(ih, OH, g.kernel[0], g.stride[0], g.padding[0], 1);
  const OutRange rw = windows_containing(iw, OW, g.kernel[1], g.stride[1], g.padding[1], 1);
  A acc = 0;
  for (int64_t i = rh.lo; i <= rh.hi; ++i)
    for (int64_t j = rw.lo; j <= rw.hi; ++j) {
      const AvgWindow win = avg_window(i, j, H, W, g);
      if (win.divisor == 0 || ih < win.h0 || ih >= win.h1 || iw < win.w0 || iw >= win.w1) continue;
      acc += grad(i * OW + j) / static_cast<A>(win.divisor);
    }
  return acc;
}

// One axis of an adaptive pool, computed: the windows [lo, hi] that contain
// input position p, and window i's [start, end). The CPU's backward looks the
// same answers up in tables (kernels/cpu/pool.cpp's AdaptiveAxis, the same
// three functions).
struct AdaptiveAxisMath {
  int64_t in, out;
  HG_INLINE OutRange containing(int64_t p) const { return adaptive_containing(p, in, out); }
  HG_INLINE int64_t start(int64_t i) const { return adaptive_start(i, in, out); }
  HG_INLINE int64_t end(int64_t i) const { return adaptive_end(i, in, out); }
};

// adaptive_avg_pool2d, output (i, j): the mean of its window.
template <typename A, typename X>
HG_INLINE A adaptive_avg_at(int64_t i, int64_t j, int64_t H, int64_t W, int64_t OH, int64_t OW, const X& x) {
  const int64_t h0 = adaptive_start(i, H, OH), h1 = adaptive_end(i, H, OH);
  const int64_t w0 = adaptive_start(j, W, OW), w1 = adaptive_end(j, W, OW);
  A sum = 0;
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw) sum += x(ih * W + iw);
  return sum / static_cast<A>((h1 - h0) * (w1 - w0));
}

// adaptive_avg_pool2d's gradient at input (ih, iw): each window holding it
// gives g / its size. ah, aw: an AdaptiveAxisMath or a table with the same calls.
template <typename A, typename AxisH, typename AxisW, typename Grad>
HG_INLINE A adaptive_avg_grad_at(int64_t ih, int64_t iw, const AxisH& ah, const AxisW& aw, int64_t OW,
                                 const Grad& grad) {
  A acc = 0;
  if (ah.out == 0 || aw.out == 0) return acc;
  const OutRange rh = ah.containing(ih);
  const OutRange rw = aw.containing(iw);
  for (int64_t i = rh.lo; i <= rh.hi; ++i) {
    const int64_t h0 = ah.start(i), h1 = ah.end(i);
    for (int64_t j = rw.lo; j <= rw.hi; ++j) {
      const int64_t w0 = aw.start(j), w1 = aw.end(j);
      if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1) continue;
      acc += grad(i * OW + j) / static_cast<A>((h1 - h0) * (w1 - w0));
    }
  }
  return acc;
}

}  // namespace halfgrad::math
