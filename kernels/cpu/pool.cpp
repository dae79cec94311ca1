// CPU 2-d pooling (contracts in kernels/kernels.h), with the window arithmetic of
// kernels/norm_pool_math.h: one [H, W] plane per OpenMP iteration, in either
// layout (math::PlaneLayout), the backward gathering (as on CUDA) from the
// windows that hold each input element; the global average pool has its own
// loops. Half types compute in float32, float64 in float64.
#include <algorithm>
#include <vector>

#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/norm_pool_util.h>
#include <halfgrad/kernels/cpu/parallel.h>
#include <halfgrad/kernels/norm_pool_math.h>

namespace halfgrad::kernels::cpu {

// ---- pooling ---------------------------------------------------------------------------------

namespace {
using Planes = math::PoolPlanes;
Planes planes(const Tensor& in, const Tensor& out) { return math::pool_planes(in, out); }
}  // namespace

void max_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y, const Tensor& indices) {
  const Planes pp = planes(x, y);  // not a structured binding: clang < 16 cannot capture one in a lambda
  const int64_t p = pp.p, h = pp.h, w = pp.w, oh = pp.oh, ow = pp.ow;
  const math::PlaneLayout li = pp.in, lo = pp.out;
  HG_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = kernel_ptr<const scalar_t>(x);
    scalar_t* yp = kernel_ptr<scalar_t>(y);
    int64_t* ip = kernel_ptr<int64_t>(indices);
    const int64_t work = p * oh * ow * g.kernel[0] * g.kernel[1];
    parallel_for(p, work > kNormPoolParallelWork, [&](int64_t pl) {
      auto load = [xp, pl, li](int64_t i) { return static_cast<A>(xp[li.at(pl, i)]); };
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          A best;
          int64_t arg;
          math::max_window<A>(i, j, h, w, g, load, best, arg);
          const int64_t o = lo.at(pl, i * ow + j);
          yp[o] = static_cast<scalar_t>(best);
          ip[o] = arg;
        }
      }
    });
  });
}

// The backwards gather, like the CUDA kernels (the same window arithmetic of
// kernels/norm_pool_math.h, so these tests check it): each input element adds up the
// gradients of the windows that contain it, in float32 (float64), rounding once.
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const kernels::Pool2dGeometry& geo,
                         const Tensor& dx) {
  const Planes pp = planes(dx, g);
  const int64_t p = pp.p, h = pp.h, w = pp.w, oh = pp.oh, ow = pp.ow;
  const math::PlaneLayout li = pp.in, lo = pp.out;
  HG_DISPATCH_FLOATING(dx.dtype(), "max_pool2d_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* gp = kernel_ptr<const scalar_t>(g);
    const int64_t* ip = kernel_ptr<const int64_t>(indices);
    scalar_t* dp = kernel_ptr<scalar_t>(dx);
    parallel_for(p, p * h * w > kNormPoolParallelWork, [&](int64_t pl) {
      auto grad = [gp, pl, lo](int64_t k) { return static_cast<A>(gp[lo.at(pl, k)]); };
      auto index = [ip, pl, lo](int64_t k) { return ip[lo.at(pl, k)]; };
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t iw = 0; iw < w; ++iw)
          dp[li.at(pl, ih * w + iw)] =
              static_cast<scalar_t>(math::max_pool_grad_at<A>(ih, iw, w, oh, ow, geo, grad, index));
    });
  });
}

void avg_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y) {
  const Planes pp = planes(x, y);
  const int64_t p = pp.p, h = pp.h, w = pp.w, oh = pp.oh, ow = pp.ow;
  const math::PlaneLayout li = pp.in, lo = pp.out;
  HG_DISPATCH_FLOATING(x.dtype(), "avg_pool2d", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = kernel_ptr<const scalar_t>(x);
    scalar_t* yp = kernel_ptr<scalar_t>(y);
    const int64_t work = p * oh * ow * g.kernel[0] * g.kernel[1];
    parallel_for(p, work > kNormPoolParallelWork, [&](int64_t pl) {
      auto load = [xp, pl, li](int64_t k) { return static_cast<A>(xp[li.at(pl, k)]); };
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          yp[lo.at(pl, i * ow + j)] = static_cast<scalar_t>(math::avg_pool_at<A>(i, j, h, w, g, load));
    });
  });
}

void avg_pool2d_backward(const Tensor& g, const kernels::Pool2dGeometry& geo, const Tensor& dx) {
  const Planes pp = planes(dx, g);
  const int64_t p = pp.p, h = pp.h, w = pp.w, oh = pp.oh, ow = pp.ow;
  const math::PlaneLayout li = pp.in, lo = pp.out;
  HG_DISPATCH_FLOATING(dx.dtype(), "avg_pool2d_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* gp = kernel_ptr<const scalar_t>(g);
    scalar_t* dp = kernel_ptr<scalar_t>(dx);
    parallel_for(p, p * h * w > kNormPoolParallelWork, [&](int64_t pl) {
      auto grad = [gp, pl, lo](int64_t k) { return static_cast<A>(gp[lo.at(pl, k)]); };
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t iw = 0; iw < w; ++iw)
          dp[li.at(pl, ih * w + iw)] =
              static_cast<scalar_t>(math::avg_pool_grad_at<A>(ih, iw, h, w, oh, ow, geo, grad));
    });
  });
}

void adaptive_avg_pool2d(const Tensor& x, const Tensor& y) {
  const Planes pp = planes(x, y);
  const int64_t p = pp.p, h = pp.h, w = pp.w, oh = pp.oh, ow = pp.ow;
  const math::PlaneLayout li = pp.in, lo = pp.out;
  HG_DISPATCH_FLOATING(x.dtype(), "adaptive_avg_pool2d", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = kernel_ptr<const scalar_t>(x);
    scalar_t* yp = kernel_ptr<scalar_t>(y);
    if (oh == 1 && ow == 1 && (li.channels_last || h * w == 1)) {
      // the global average of channels-last images (squeeze-and-excitation's pool):
      // per image, the H * W rows of C added in order, the channel loop vectorised;
      // also 1x1 images, [N, C] in memory in either layout (not one plane at a time)
      const int64_t c = li.c, hw = h * w, images = p / c;
      parallel_for(images, p * hw > kNormPoolParallelWork, [&](int64_t n) {
        std::vector<A> acc(static_cast<size_t>(c), A(0));
        for (int64_t k = 0; k < hw; ++k) {
          const scalar_t* row = xp + (n * hw + k) * c;
          for (int64_t ch = 0; ch < c; ++ch) acc[static_cast<size_t>(ch)] += static_cast<A>(row[ch]);
        }
        for (int64_t ch = 0; ch < c; ++ch)
          yp[n * c + ch] = static_cast<scalar_t>(acc[static_cast<size_t>(ch)] / static_cast<A>(hw));
      });
      return;
    }
    parallel_for(p, p * h * w > kNormPoolParallelWork, [&](int64_t pl) {
      auto load = [xp, pl, li](int64_t k) { return static_cast<A>(xp[li.at(pl, k)]); };
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          yp[lo.at(pl, i * ow + j)] = static_cast<scalar_t>(math::adaptive_avg_at<A>(i, j, h, w, oh, ow, load));
    });
  });
}

namespace {
// One axis of an adaptive pool, looked up instead of recomputed per element
// (each lookup is two or three 64-bit divisions): the windows i in [lo, hi]
// that contain input position p, and each window's [start, end).
struct AdaptiveAxis {
  int64_t in, out;
  std::vector<math::OutRange> containing_;  // per input position
  std::vector<int64_t> start_, end_;         // per window
  AdaptiveAxis(int64_t in_, int64_t out_)
      : in(in_), out(out_), containing_(static_cast<size_t>(in_)), start_(static_cast<size_t>(out_)),
        end_(static_cast<size_t>(out_)) {
    if (out == 0) return;
    const math::AdaptiveAxisMath m{in, out};
    for (int64_t p = 0; p < in; ++p) containing_[static_cast<size_t>(p)] = m.containing(p);
    for (int64_t i = 0; i < out; ++i) {
      start_[static_cast<size_t>(i)] = m.start(i);
      end_[static_cast<size_t>(i)] = m.end(i);
    }
  }
  // math::AdaptiveAxisMath's calls, looked up
  math::OutRange containing(int64_t p) const { return containing_[static_cast<size_t>(p)]; }
  int64_t start(int64_t i) const { return start_[static_cast<size_t>(i)]; }
  int64_t end(int64_t i) const { return end_[static_cast<size_t>(i)]; }
};
}  // namespace

void adaptive_avg_pool2d_backward(const Tensor& g, const Tensor& dx) {
  const Planes pp = planes(dx, g);
  const int64_t p = pp.p, h = pp.h, w = pp.w, oh = pp.oh, ow = pp.ow;
  const math::PlaneLayout li = pp.in, lo = pp.out;
  const AdaptiveAxis ah(h, oh), aw(w, ow);
  HG_DISPATCH_FLOATING(dx.dtype(), "adaptive_avg_pool2d_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* gp = kernel_ptr<const scalar_t>(g);
    scalar_t* dp = kernel_ptr<scalar_t>(dx);
    if (oh == 1 && ow == 1) {
      // a global average: every input element gets its plane's g / (H * W), the
      // value the general gather below computes, written in memory order
      const int64_t hw = h * w;
      std::vector<scalar_t> share(static_cast<size_t>(p));
      for (int64_t pl = 0; pl < p; ++pl)
        share[static_cast<size_t>(pl)] = static_cast<scalar_t>(static_cast<A>(gp[pl]) / static_cast<A>(hw));
      const scalar_t* sh = share.data();
      if (li.channels_last) {
        const int64_t c = li.c, rows = (p / c) * hw;
        parallel_for(rows, p * hw > kNormPoolParallelWork, [&](int64_t r) {
          const scalar_t* src = sh + (r / hw) * c;
          scalar_t* out = dp + r * c;
          for (int64_t ch = 0; ch < c; ++ch) out[ch] = src[ch];
        });
      } else {
        parallel_for(p, p * hw > kNormPoolParallelWork,
                     [&](int64_t pl) { std::fill(dp + pl * hw, dp + (pl + 1) * hw, sh[pl]); });
      }
      return;
    }
    parallel_for(p, p * h * w > kNormPoolParallelWork, [&](int64_t pl) {
      auto grad = [gp, pl, lo](int64_t k) { return static_cast<A>(gp[lo.at(pl, k)]); };
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t iw = 0; iw < w; ++iw)
          dp[li.at(pl, ih * w + iw)] = static_cast<scalar_t>(math::adaptive_avg_grad_at<A>(ih, iw, ah, aw, ow, grad));
    });
  });
}

}  // namespace halfgrad::kernels::cpu
