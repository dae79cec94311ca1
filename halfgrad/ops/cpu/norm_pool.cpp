// CPU batch norm and 2-d pooling (contracts in ops/kernels.h), with the shared
// per-element math of ops/norm_pool_math.h. Batch norm runs one channel per
// OpenMP iteration for its statistics (each row of S elements summed in the
// statistics type, the rows added up in double) and one (n, c) row per
// iteration for the elementwise passes; pooling runs one [H, W] plane per
// iteration, its backward gathering (as on CUDA) from the windows that hold
// each input element. Half types compute in float32, float64 in float64.
#include <algorithm>
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

// ---- channels-last batch norm: x is [R, C] in memory (R = N * S rows of C
// channels). Each pass walks rows in order and channels innermost, so the
// per-channel work vectorises across channels. Sums go per chunk of rows into
// float (double) partials, added into double totals in chunk order: the same
// bits whatever the thread count.
constexpr int64_t kRowsPerChunk = 256;

bool channels_last(const Tensor& x) { return !x.is_contiguous(); }  // the op gives dense row-major or channels-last

// totals[k][ch] = sum over rows r of what row(r, acc) adds to acc[k][ch] (K sums per channel).
template <typename A, int K, typename Row>
void channel_sums(int64_t rows, int64_t c, const Row& row, std::vector<double> (&totals)[K]) {
  const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<A> partial(static_cast<size_t>(chunks * K * c), A(0));
  _Pragma("omp parallel for schedule(static) if (chunks > 1 && rows * c > kParallelWork)")
  for (int64_t k = 0; k < chunks; ++k) {
    A* acc[K];
    for (int q = 0; q < K; ++q) acc[q] = partial.data() + (k * K + q) * c;
    const int64_t end = std::min(rows, (k + 1) * kRowsPerChunk);
    for (int64_t r = k * kRowsPerChunk; r < end; ++r) row(r, acc);
  }
  for (int q = 0; q < K; ++q) totals[q].assign(static_cast<size_t>(c), 0.0);
  for (int64_t k = 0; k < chunks; ++k)
    for (int q = 0; q < K; ++q)
      for (int64_t ch = 0; ch < c; ++ch)
        totals[q][static_cast<size_t>(ch)] += static_cast<double>(partial[static_cast<size_t>((k * K + q) * c + ch)]);
}

// The running-statistics update and invstd from a channel's mean and biased variance.
template <typename A>
void finish_stats(int64_t ch, double m, double var, int64_t count, double eps, double momentum, A* mp, A* ip, A* rm,
                  A* rv) {
  mp[ch] = static_cast<A>(m);
  ip[ch] = static_cast<A>(1.0 / std::sqrt(var + eps));
  if (rm) {
    const double unbiased = count > 1 ? var * static_cast<double>(count) / static_cast<double>(count - 1) : var;
    rm[ch] = static_cast<A>((1.0 - momentum) * static_cast<double>(rm[ch]) + momentum * m);
    rv[ch] = static_cast<A>((1.0 - momentum) * static_cast<double>(rv[ch]) + momentum * unbiased);
  }
}

template <typename T>
void stats_channels_last(const T* xp, int64_t rows, int64_t c, double eps, stat_t<T>* mp, stat_t<T>* ip,
                         stat_t<T>* rm, stat_t<T>* rv, double momentum) {
  using A = stat_t<T>;
  std::vector<double> sum[1], sq[1];
  channel_sums<A, 1>(rows, c, [&](int64_t r, A* const* acc) {
    const T* x = xp + r * c;
    for (int64_t ch = 0; ch < c; ++ch) acc[0][ch] += static_cast<A>(x[ch]);
  }, sum);
  std::vector<A> mean(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) mean[static_cast<size_t>(ch)] = static_cast<A>(sum[0][static_cast<size_t>(ch)] / static_cast<double>(rows));
  const A* m = mean.data();
  channel_sums<A, 1>(rows, c, [&](int64_t r, A* const* acc) {
    const T* x = xp + r * c;
    for (int64_t ch = 0; ch < c; ++ch) {
      const A d = static_cast<A>(x[ch]) - m[ch];
      acc[0][ch] += d * d;
    }
  }, sq);
  for (int64_t ch = 0; ch < c; ++ch)
    finish_stats<A>(ch, sum[0][static_cast<size_t>(ch)] / static_cast<double>(rows),
                    sq[0][static_cast<size_t>(ch)] / static_cast<double>(rows), rows, eps, momentum, mp, ip, rm, rv);
}

// A per-channel array of A: v[ch], or `fill` where v is absent.
template <typename A>
std::vector<A> per_channel(const A* v, int64_t c, A fill) {
  return v ? std::vector<A>(v, v + c) : std::vector<A>(static_cast<size_t>(c), fill);
}

// out[r, ch] = f(r * C + ch, ch) over [R, C] rows, rows split across threads;
// f reads per-channel arrays, so the channel loop vectorises.
template <typename T, typename F>
void map_channels_last(int64_t rows, int64_t c, const F& f, T* __restrict out) {
  _Pragma("omp parallel for schedule(static) if (rows > 1 && rows * c > kParallelWork)")
  for (int64_t r = 0; r < rows; ++r) {
    T* o = out + r * c;
    const int64_t base = r * c;
    for (int64_t ch = 0; ch < c; ++ch) o[ch] = static_cast<T>(f(base + ch, ch));
  }
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
    if (channels_last(x)) return stats_channels_last<scalar_t>(xp, n * s, c, eps, mp, ip, rm, rv, momentum);
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
      finish_stats<A>(ch, m, sq / static_cast<double>(count), count, eps, momentum, mp, ip, rm, rv);
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
    if (channels_last(x)) {
      // bn_forward's formula as it is (folding it into a scale and shift would round differently)
      const std::vector<A> wv = per_channel<A>(wp, c, A(1)), bv = per_channel<A>(bp, c, A(0));
      const A *w = wv.data(), *b = bv.data();
      return map_channels_last<scalar_t>(n * s, c, [=](int64_t e, int64_t ch) {
        return math::bn_forward<A>(static_cast<A>(xp[e]), mp[ch], ip[ch], w[ch], b[ch]);
      }, yp);
    }
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
    const bool cl = channels_last(x);
    if (need_sums && cl) {
      std::vector<double> sums[2];
      channel_sums<A, 2>(count, c, [&](int64_t r, A* const* acc) {
        const scalar_t* xr = xp + r * c;
        const scalar_t* gr = gp + r * c;
        for (int64_t ch = 0; ch < c; ++ch) {
          const A gv = static_cast<A>(gr[ch]);
          acc[0][ch] += gv;
          acc[1][ch] += gv * (static_cast<A>(xr[ch]) - mp[ch]);
        }
      }, sums);
      sum_g = std::move(sums[0]);
      sum_gx = std::move(sums[1]);
      for (int64_t ch = 0; ch < c; ++ch) {
        if (dbp) dbp[ch] = static_cast<A>(sum_g[static_cast<size_t>(ch)]);
        if (dwp) dwp[ch] = static_cast<A>(sum_gx[static_cast<size_t>(ch)] * static_cast<double>(ip[ch]));
      }
    } else if (need_sums) {
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
    if (cl) {
      // the per-channel constants once, then one pass over [R, C]
      std::vector<A> mean_g(static_cast<size_t>(c)), kk(static_cast<size_t>(c));
      for (int64_t ch = 0; ch < c; ++ch) {
        const double cnt = static_cast<double>(count), inv = static_cast<double>(ip[ch]);
        mean_g[static_cast<size_t>(ch)] = static_cast<A>(sum_g[static_cast<size_t>(ch)] / cnt);
        kk[static_cast<size_t>(ch)] = static_cast<A>(sum_gx[static_cast<size_t>(ch)] / cnt * inv * inv);
      }
      const std::vector<A> wv = per_channel<A>(wp, c, A(1));
      const A *mg = mean_g.data(), *k = kk.data(), *w = wv.data();
      if (!training)
        return map_channels_last<scalar_t>(count, c, [=](int64_t e, int64_t ch) {
          return math::bn_backward_eval<A>(static_cast<A>(gp[e]), ip[ch], w[ch]);
        }, dxp);
      return map_channels_last<scalar_t>(count, c, [=](int64_t e, int64_t ch) {
        return math::bn_backward_train<A>(static_cast<A>(gp[e]), static_cast<A>(xp[e]), mp[ch], ip[ch], w[ch], mg[ch],
                                          k[ch]);
      }, dxp);
    }
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
using Planes = math::PoolPlanes;
Planes planes(const Tensor& in, const Tensor& out) { return math::pool_planes(in, out); }
}  // namespace

void max_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y, const Tensor& indices) {
  const auto [p, h, w, oh, ow, li, lo] = planes(x, y);
  HG_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = cptr<scalar_t>(x);
    scalar_t* yp = mptr<scalar_t>(y);
    int64_t* ip = mptr<int64_t>(indices);
    const int64_t work = p * oh * ow * g.kernel[0] * g.kernel[1];
    _Pragma("omp parallel for if (p > 1 && work > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
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
    }
  });
}

// The backwards gather, like the CUDA kernels (the same window arithmetic of
// ops/norm_pool_math.h, so these tests check it): each input element adds up the
// gradients of the windows that contain it, in float32 (float64), rounding once.
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const kernels::Pool2dGeometry& geo,
                         const Tensor& dx) {
  const auto [p, h, w, oh, ow, li, lo] = planes(dx, g);
  HG_DISPATCH_FLOATING(dx.dtype(), "max_pool2d_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* gp = cptr<scalar_t>(g);
    const int64_t* ip = cptr<int64_t>(indices);
    scalar_t* dp = mptr<scalar_t>(dx);
    _Pragma("omp parallel for if (p > 1 && p * h * w > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
      for (int64_t ih = 0; ih < h; ++ih) {
        const math::OutRange rh =
            math::windows_containing(ih, oh, geo.kernel[0], geo.stride[0], geo.padding[0], geo.dilation[0]);
        for (int64_t iw = 0; iw < w; ++iw) {
          const math::OutRange rw =
              math::windows_containing(iw, ow, geo.kernel[1], geo.stride[1], geo.padding[1], geo.dilation[1]);
          const int64_t self = ih * w + iw;
          A acc = 0;
          for (int64_t i = rh.lo; i <= rh.hi; ++i)
            for (int64_t j = rw.lo; j <= rw.hi; ++j) {
              const int64_t o = lo.at(pl, i * ow + j);
              if (ip[o] == self) acc += static_cast<A>(gp[o]);
            }
          dp[li.at(pl, self)] = static_cast<scalar_t>(acc);
        }
      }
    }
  });
}

void avg_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y) {
  const auto [p, h, w, oh, ow, li, lo] = planes(x, y);
  HG_DISPATCH_FLOATING(x.dtype(), "avg_pool2d", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = cptr<scalar_t>(x);
    scalar_t* yp = mptr<scalar_t>(y);
    const int64_t work = p * oh * ow * g.kernel[0] * g.kernel[1];
    _Pragma("omp parallel for if (p > 1 && work > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const math::AvgWindow win = math::avg_window(i, j, h, w, g);
          A sum = 0;
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<A>(xp[li.at(pl, ih * w + iw)]);
          yp[lo.at(pl, i * ow + j)] =
              static_cast<scalar_t>(win.divisor == 0 ? A(0) : sum / static_cast<A>(win.divisor));
        }
      }
    }
  });
}

void avg_pool2d_backward(const Tensor& g, const kernels::Pool2dGeometry& geo, const Tensor& dx) {
  const auto [p, h, w, oh, ow, li, lo] = planes(dx, g);
  HG_DISPATCH_FLOATING(dx.dtype(), "avg_pool2d_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* gp = cptr<scalar_t>(g);
    scalar_t* dp = mptr<scalar_t>(dx);
    _Pragma("omp parallel for if (p > 1 && p * h * w > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
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
              acc += static_cast<A>(gp[lo.at(pl, i * ow + j)]) / static_cast<A>(win.divisor);
            }
          dp[li.at(pl, ih * w + iw)] = static_cast<scalar_t>(acc);
        }
      }
    }
  });
}

void adaptive_avg_pool2d(const Tensor& x, const Tensor& y) {
  const auto [p, h, w, oh, ow, li, lo] = planes(x, y);
  HG_DISPATCH_FLOATING(x.dtype(), "adaptive_avg_pool2d", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = cptr<scalar_t>(x);
    scalar_t* yp = mptr<scalar_t>(y);
    if (oh == 1 && ow == 1 && li.channels_last) {
      // the global average of channels-last images (squeeze-and-excitation's pool):
      // per image, the H * W rows of C added in order, the channel loop vectorised
      const int64_t c = li.c, hw = h * w, images = p / c;
      _Pragma("omp parallel for if (images > 1 && p * hw > kParallelWork)")
      for (int64_t n = 0; n < images; ++n) {
        std::vector<A> acc(static_cast<size_t>(c), A(0));
        for (int64_t k = 0; k < hw; ++k) {
          const scalar_t* row = xp + (n * hw + k) * c;
          for (int64_t ch = 0; ch < c; ++ch) acc[static_cast<size_t>(ch)] += static_cast<A>(row[ch]);
        }
        for (int64_t ch = 0; ch < c; ++ch) yp[n * c + ch] = static_cast<scalar_t>(acc[static_cast<size_t>(ch)] / static_cast<A>(hw));
      }
      return;
    }
    _Pragma("omp parallel for if (p > 1 && p * h * w > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
      for (int64_t i = 0; i < oh; ++i) {
        const int64_t h0 = math::adaptive_start(i, h, oh), h1 = math::adaptive_end(i, h, oh);
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t w0 = math::adaptive_start(j, w, ow), w1 = math::adaptive_end(j, w, ow);
          A sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<A>(xp[li.at(pl, ih * w + iw)]);
          yp[lo.at(pl, i * ow + j)] = static_cast<scalar_t>(sum / static_cast<A>((h1 - h0) * (w1 - w0)));
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
  const auto [p, h, w, oh, ow, li, lo] = planes(dx, g);
  const AdaptiveAxis ah(h, oh), aw(w, ow);
  HG_DISPATCH_FLOATING(dx.dtype(), "adaptive_avg_pool2d_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* gp = cptr<scalar_t>(g);
    scalar_t* dp = mptr<scalar_t>(dx);
    if (oh == 1 && ow == 1) {
      // a global average: every input element gets its plane's g / (H * W), the
      // value the general gather below computes, written in memory order
      const int64_t hw = h * w;
      std::vector<scalar_t> share(static_cast<size_t>(p));
      for (int64_t pl = 0; pl < p; ++pl) share[static_cast<size_t>(pl)] = static_cast<scalar_t>(static_cast<A>(gp[pl]) / static_cast<A>(hw));
      const scalar_t* sh = share.data();
      if (li.channels_last) {
        const int64_t c = li.c, rows = (p / c) * hw;
        _Pragma("omp parallel for if (rows > 1 && p * hw > kParallelWork)")
        for (int64_t r = 0; r < rows; ++r) {
          const scalar_t* src = sh + (r / hw) * c;
          scalar_t* out = dp + r * c;
          for (int64_t ch = 0; ch < c; ++ch) out[ch] = src[ch];
        }
      } else {
        _Pragma("omp parallel for if (p > 1 && p * hw > kParallelWork)")
        for (int64_t pl = 0; pl < p; ++pl) std::fill(dp + pl * hw, dp + (pl + 1) * hw, sh[pl]);
      }
      return;
    }
    _Pragma("omp parallel for if (p > 1 && p * h * w > kParallelWork)")
    for (int64_t pl = 0; pl < p; ++pl) {
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
                acc += static_cast<A>(gp[lo.at(pl, i * ow + j)]) / static_cast<A>((h1 - h0) * (w1 - w0));
              }
            }
          }
          dp[li.at(pl, ih * w + iw)] = static_cast<scalar_t>(acc);
        }
      }
    }
  });
}

}  // namespace halfgrad::cpu
