// CPU batch norm and 2-d pooling (contracts in ops/kernels.h), with the shared
// per-element math of ops/norm_pool_math.h. Batch norm runs one channel per
// OpenMP iteration for its statistics (each row of S elements summed in the
// statistics type, the rows added up in double) and one (n, c) row per
// iteration for the elementwise passes; pooling runs one [H, W] plane per
// iteration, its backward gathering (as on CUDA) from the windows that hold
// each input element. Half types compute in float32, float64 in float64.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <halfgrad/ops/cpu/cpu_kernels.h>
#include <halfgrad/ops/norm_pool_math.h>

namespace halfgrad::cpu {

namespace {

template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
const T* cptr(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <typename T>
T* mptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
template <typename T>
T* opt_ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

struct NCS {
  int64_t n, c, s;
};
NCS ncs(const Tensor& x) {
  const int64_t n = x.shape()[0], c = x.shape()[1];
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.shape()[d];
  return {n, c, s};
}

constexpr int64_t kParallelWork = 32768;

// Row sums in kLanes running sums that the compiler keeps in one vector
// register (each lane adds its own elements in order, so no reassociation is
// needed to vectorise, and the result does not depend on the ISA), the lanes
// then added pairwise: a single running float sum does not vectorise under
// -ffp-contract=off without -ffast-math, and was most of batch norm's time.
constexpr int kLanes = 16;

template <typename A>
A add_lanes(A (&lanes)[kLanes], A tail) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
  return lanes[0] + tail;
}

// sum of f(j) for j in [0, s)
template <typename A, typename F>
A lane_sum(int64_t s, const F& f) {
  A lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= s; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += f(j + l);
  A tail = 0;
  for (; j < s; ++j) tail += f(j);
  return add_lanes(lanes, tail);
}

}  // namespace

void batch_norm_stats(const Tensor& x, double eps, const Tensor& mean, const Tensor& invstd,
                      const Tensor& running_mean, const Tensor& running_var, double momentum) {
  const auto [n, c, s] = ncs(x);
  const int64_t count = n * s;
  if (count == 0) return;
  HG_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = cptr<scalar_t>(x);
    A* mp = mptr<A>(mean);
    A* ip = mptr<A>(invstd);
    A* rm = opt_ptr<A>(running_mean);
    A* rv = opt_ptr<A>(running_var);
    _Pragma("omp parallel for if (c > 1 && n * c * s > kParallelWork)")
    for (int64_t ch = 0; ch < c; ++ch) {
      double total = 0;
      for (int64_t i = 0; i < n; ++i) {
        const scalar_t* row = xp + (i * c + ch) * s;
        total += static_cast<double>(lane_sum<A>(s, [row](int64_t j) { return static_cast<A>(row[j]); }));
      }
      const double m = total / static_cast<double>(count);
      const A ma = static_cast<A>(m);
      double sq = 0;
      for (int64_t i = 0; i < n; ++i) {
        const scalar_t* row = xp + (i * c + ch) * s;
        sq += static_cast<double>(lane_sum<A>(s, [row, ma](int64_t j) {
          const A d = static_cast<A>(row[j]) - ma;
          return d * d;
        }));
      }
      const double var = sq / static_cast<double>(count);
      mp[ch] = ma;
      ip[ch] = static_cast<A>(1.0 / std::sqrt(var + eps));
      if (rm) {
        const double unbiased = count > 1 ? var * static_cast<double>(count) / static_cast<double>(count - 1) : var;
        rm[ch] = static_cast<A>((1.0 - momentum) * static_cast<double>(rm[ch]) + momentum * m);
        rv[ch] = static_cast<A>((1.0 - momentum) * static_cast<double>(rv[ch]) + momentum * unbiased);
      }
    }
  });
}

void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, const Tensor& y) {
  const auto [n, c, s] = ncs(x);
  if (n * c * s == 0) return;
  HG_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = cptr<scalar_t>(x);
    scalar_t* yp = mptr<scalar_t>(y);
    const A* mp = cptr<A>(mean);
    const A* ip = cptr<A>(invstd);
    const A* wp = weight.defined() ? cptr<A>(weight) : nullptr;
    const A* bp = bias.defined() ? cptr<A>(bias) : nullptr;
    const int64_t rows = n * c;
    _Pragma("omp parallel for if (rows > 1 && rows * s > kParallelWork)")
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t ch = r % c;
      const A m = mp[ch], inv = ip[ch], w = wp ? wp[ch] : A(1), b = bp ? bp[ch] : A(0);
      const scalar_t* xr = xp + r * s;
      scalar_t* yr = yp + r * s;
      for (int64_t j = 0; j < s; ++j) yr[j] = static_cast<scalar_t>(math::bn_forward<A>(static_cast<A>(xr[j]), m, inv, w, b));
    }
  });
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias) {
  const auto [n, c, s] = ncs(x);
  const int64_t count = n * s;
  HG_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = cptr<scalar_t>(x);
    const scalar_t* gp = cptr<scalar_t>(g);
    const A* mp = cptr<A>(mean);
    const A* ip = cptr<A>(invstd);
    const A* wp = weight.defined() ? cptr<A>(weight) : nullptr;
    A* dwp = opt_ptr<A>(dweight);
    A* dbp = opt_ptr<A>(dbias);
    const bool need_sums = dwp || dbp || (dx.defined() && training);
    std::vector<double> sum_g(static_cast<size_t>(c), 0.0), sum_gx(static_cast<size_t>(c), 0.0);
    if (need_sums) {
      _Pragma("omp parallel for if (c > 1 && n * c * s > kParallelWork)")
      for (int64_t ch = 0; ch < c; ++ch) {
        const A m = mp[ch];
        double tg = 0, tgx = 0;
        for (int64_t i = 0; i < n; ++i) {
          const scalar_t* xr = xp + (i * c + ch) * s;
          const scalar_t* gr = gp + (i * c + ch) * s;
          // both sums in one pass, each in its own lanes (lane_sum's scheme)
          A lg[kLanes] = {}, lgx[kLanes] = {};
          int64_t j = 0;
          for (; j + kLanes <= s; j += kLanes)
            for (int l = 0; l < kLanes; ++l) {
              const A gv = static_cast<A>(gr[j + l]);
              lg[l] += gv;
              lgx[l] += gv * (static_cast<A>(xr[j + l]) - m);
            }
          A tail_g = 0, tail_gx = 0;
          for (; j < s; ++j) {
            const A gv = static_cast<A>(gr[j]);
            tail_g += gv;
            tail_gx += gv * (static_cast<A>(xr[j]) - m);
          }
          tg += static_cast<double>(add_lanes(lg, tail_g));
          tgx += static_cast<double>(add_lanes(lgx, tail_gx));
        }
        sum_g[static_cast<size_t>(ch)] = tg;
        sum_gx[static_cast<size_t>(ch)] = tgx;
        if (dbp) dbp[ch] = static_cast<A>(tg);
        if (dwp) dwp[ch] = static_cast<A>(tgx * static_cast<double>(ip[ch]));
      }
    }
    if (!dx.defined() || count == 0) return;
    scalar_t* dxp = mptr<scalar_t>(dx);
    const int64_t rows = n * c;
    _Pragma("omp parallel for if (rows > 1 && rows * s > kParallelWork)")
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t ch = r % c;
      const A m = mp[ch], inv = ip[ch], w = wp ? wp[ch] : A(1);
      const scalar_t* xr = xp + r * s;
      const scalar_t* gr = gp + r * s;
      scalar_t* out = dxp + r * s;
      if (training) {
        const double cnt = static_cast<double>(count);
        const A mean_g = static_cast<A>(sum_g[static_cast<size_t>(ch)] / cnt);
        const A k = static_cast<A>(sum_gx[static_cast<size_t>(ch)] / cnt * static_cast<double>(inv) *
                                   static_cast<double>(inv));
        for (int64_t j = 0; j < s; ++j)
          out[j] = static_cast<scalar_t>(
              math::bn_backward_train<A>(static_cast<A>(gr[j]), static_cast<A>(xr[j]), m, inv, w, mean_g, k));
      } else {
        for (int64_t j = 0; j < s; ++j)
          out[j] = static_cast<scalar_t>(math::bn_backward_eval<A>(static_cast<A>(gr[j]), inv, w));
      }
    }
  });
}

// ---- pooling ---------------------------------------------------------------------------------

namespace {
struct Planes {
  int64_t p, h, w, oh, ow;
};
Planes planes(const Tensor& in, const Tensor& out) {
  const int64_t h = in.shape()[in.dim() - 2], w = in.shape()[in.dim() - 1];
  const int64_t oh = out.shape()[out.dim() - 2], ow = out.shape()[out.dim() - 1];
  const int64_t p = h * w == 0 ? 0 : in.numel() / (h * w);
  return {p, h, w, oh, ow};
}
}  // namespace

void max_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y, const Tensor& indices) {
  const auto [p, h, w, oh, ow] = planes(x, y);
  HG_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = cptr<scalar_t>(x);
    scalar_t* yp = mptr<scalar_t>(y);
    int64_t* ip = mptr<int64_t>(indices);
    const int64_t work = p * oh * ow * g.kernel[0] * g.kernel[1];
    _Pragma("omp parallel for if (p > 1 && work > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
      const scalar_t* xpl = xp + pl * h * w;
      auto load = [xpl](int64_t i) { return static_cast<A>(xpl[i]); };
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          A best;
          int64_t arg;
          math::max_window<A>(i, j, h, w, g, load, best, arg);
          const int64_t o = (pl * oh + i) * ow + j;
          yp[o] = static_cast<scalar_t>(best);
          ip[o] = arg;
        }
      }
    }
  });
}

// The backwards gather, like the CUDA kernels (the same window arithmetic of
// ops/norm_pool_math.h, so these tests check it): each input element adds up the
// gradients of the windows that contain it, in float32 (float64), rounding once.
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const kernels::Pool2dGeometry& geo,
                         const Tensor& dx) {
  const auto [p, h, w, oh, ow] = planes(dx, g);
  HG_DISPATCH_FLOATING(dx.dtype(), "max_pool2d_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* gp = cptr<scalar_t>(g);
    const int64_t* ip = cptr<int64_t>(indices);
    scalar_t* dp = mptr<scalar_t>(dx);
    _Pragma("omp parallel for if (p > 1 && p * h * w > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
      const int64_t base = pl * oh * ow;
      for (int64_t ih = 0; ih < h; ++ih) {
        const math::OutRange rh =
            math::windows_containing(ih, oh, geo.kernel[0], geo.stride[0], geo.padding[0], geo.dilation[0]);
        for (int64_t iw = 0; iw < w; ++iw) {
          const math::OutRange rw =
              math::windows_containing(iw, ow, geo.kernel[1], geo.stride[1], geo.padding[1], geo.dilation[1]);
          const int64_t self = ih * w + iw;
          A acc = 0;
          for (int64_t i = rh.lo; i <= rh.hi; ++i)
            for (int64_t j = rw.lo; j <= rw.hi; ++j)
              if (ip[base + i * ow + j] == self) acc += static_cast<A>(gp[base + i * ow + j]);
          dp[pl * h * w + self] = static_cast<scalar_t>(acc);
        }
      }
    }
  });
}

void avg_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y) {
  const auto [p, h, w, oh, ow] = planes(x, y);
  HG_DISPATCH_FLOATING(x.dtype(), "avg_pool2d", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = cptr<scalar_t>(x);
    scalar_t* yp = mptr<scalar_t>(y);
    const int64_t work = p * oh * ow * g.kernel[0] * g.kernel[1];
    _Pragma("omp parallel for if (p > 1 && work > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
      const scalar_t* xpl = xp + pl * h * w;
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const math::AvgWindow win = math::avg_window(i, j, h, w, g);
          A sum = 0;
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<A>(xpl[ih * w + iw]);
          yp[(pl * oh + i) * ow + j] =
              static_cast<scalar_t>(win.divisor == 0 ? A(0) : sum / static_cast<A>(win.divisor));
        }
      }
    }
  });
}

void avg_pool2d_backward(const Tensor& g, const kernels::Pool2dGeometry& geo, const Tensor& dx) {
  const auto [p, h, w, oh, ow] = planes(dx, g);
  HG_DISPATCH_FLOATING(dx.dtype(), "avg_pool2d_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* gp = cptr<scalar_t>(g);
    scalar_t* dp = mptr<scalar_t>(dx);
    _Pragma("omp parallel for if (p > 1 && p * h * w > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
      const int64_t base = pl * oh * ow;
      for (int64_t ih = 0; ih < h; ++ih) {
        const math::OutRange rh = math::windows_containing(ih, oh, geo.kernel[0], geo.stride[0], geo.padding[0], 1);
        for (int64_t iw = 0; iw < w; ++iw) {
          const math::OutRange rw =
              math::windows_containing(iw, ow, geo.kernel[1], geo.stride[1], geo.padding[1], 1);
          A acc = 0;
          for (int64_t i = rh.lo; i <= rh.hi; ++i)
            for (int64_t j = rw.lo; j <= rw.hi; ++j) {
              const math::AvgWindow win = math::avg_window(i, j, h, w, geo);
              if (win.divisor == 0 || ih < win.h0 || ih >= win.h1 || iw < win.w0 || iw >= win.w1) continue;
              acc += static_cast<A>(gp[base + i * ow + j]) / static_cast<A>(win.divisor);
            }
          dp[pl * h * w + ih * w + iw] = static_cast<scalar_t>(acc);
        }
      }
    }
  });
}

void adaptive_avg_pool2d(const Tensor& x, const Tensor& y) {
  const auto [p, h, w, oh, ow] = planes(x, y);
  HG_DISPATCH_FLOATING(x.dtype(), "adaptive_avg_pool2d", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = cptr<scalar_t>(x);
    scalar_t* yp = mptr<scalar_t>(y);
    _Pragma("omp parallel for if (p > 1 && p * h * w > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
      const scalar_t* xpl = xp + pl * h * w;
      for (int64_t i = 0; i < oh; ++i) {
        const int64_t h0 = math::adaptive_start(i, h, oh), h1 = math::adaptive_end(i, h, oh);
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t w0 = math::adaptive_start(j, w, ow), w1 = math::adaptive_end(j, w, ow);
          A sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<A>(xpl[ih * w + iw]);
          yp[(pl * oh + i) * ow + j] = static_cast<scalar_t>(sum / static_cast<A>((h1 - h0) * (w1 - w0)));
        }
      }
    }
  });
}

namespace {
// One axis of an adaptive pool, looked up instead of recomputed per element
// (each lookup is two or three 64-bit divisions): the windows i in [lo, hi]
// that contain input position p, and each window's [start, end).
struct AdaptiveAxis {
  std::vector<math::OutRange> containing;  // per input position
  std::vector<int64_t> start, end;         // per window
  AdaptiveAxis(int64_t in, int64_t out) : containing(static_cast<size_t>(in)), start(static_cast<size_t>(out)),
                                          end(static_cast<size_t>(out)) {
    if (out == 0) return;
    for (int64_t p = 0; p < in; ++p) containing[static_cast<size_t>(p)] = math::adaptive_containing(p, in, out);
    for (int64_t i = 0; i < out; ++i) {
      start[static_cast<size_t>(i)] = math::adaptive_start(i, in, out);
      end[static_cast<size_t>(i)] = math::adaptive_end(i, in, out);
    }
  }
};
}  // namespace

void adaptive_avg_pool2d_backward(const Tensor& g, const Tensor& dx) {
  const auto [p, h, w, oh, ow] = planes(dx, g);
  const AdaptiveAxis ah(h, oh), aw(w, ow);
  HG_DISPATCH_FLOATING(dx.dtype(), "adaptive_avg_pool2d_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* gp = cptr<scalar_t>(g);
    scalar_t* dp = mptr<scalar_t>(dx);
    _Pragma("omp parallel for if (p > 1 && p * h * w > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
      const int64_t base = pl * oh * ow;
      for (int64_t ih = 0; ih < h; ++ih) {
        for (int64_t iw = 0; iw < w; ++iw) {
          A acc = 0;
          if (oh > 0 && ow > 0) {
            const math::OutRange rh = ah.containing[static_cast<size_t>(ih)];
            const math::OutRange rw = aw.containing[static_cast<size_t>(iw)];
            for (int64_t i = rh.lo; i <= rh.hi; ++i) {
              const int64_t h0 = ah.start[static_cast<size_t>(i)], h1 = ah.end[static_cast<size_t>(i)];
              for (int64_t j = rw.lo; j <= rw.hi; ++j) {
                const int64_t w0 = aw.start[static_cast<size_t>(j)], w1 = aw.end[static_cast<size_t>(j)];
                if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1) continue;
                acc += static_cast<A>(gp[base + i * ow + j]) / static_cast<A>((h1 - h0) * (w1 - w0));
              }
            }
          }
          dp[pl * h * w + ih * w + iw] = static_cast<scalar_t>(acc);
        }
      }
    }
  });
}

}  // namespace halfgrad::cpu
