// CPU batch norm (contracts in kernels/kernels.h), with the per-element math of
// kernels/norm_pool_math.h. Row-major [N, C, S]: one channel per OpenMP iteration
// for the statistics (each row of S elements summed in the statistics type,
// the rows added up in double), one (n, c) row per iteration for the
// elementwise passes. Channels-last ([N * S, C] in memory): oneDNN's batch
// normalization primitives for float32 and bfloat16 training (its NHWC kernel
// measured 1.3-1.8x faster than our loops; its plain-layout one 2-12x slower,
// docs/convnets.md), our loops over rows of C otherwise. Half types compute in
// float32, float64 in float64.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <halfgrad/core/macros.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/norm_pool_util.h>
#include <halfgrad/kernels/cpu/onednn.h>
#include <halfgrad/kernels/cpu/parallel.h>
#include <halfgrad/kernels/norm_pool_math.h>

namespace halfgrad::kernels::cpu {

namespace {


math::BatchNormDims ncs(const Tensor& x) { return math::batch_norm_dims(x); }

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

// Rows of C channels in memory: a channels-last tensor (the op gives dense
// row-major or channels-last), or any with one position per sample (S = 1:
// [N, C], or MobileNet's 1x1 maps), whose row-major loops would walk rows of
// one element, C apart.
bool channels_last(const Tensor& x) { return !x.is_contiguous() || ncs(x).s == 1; }

// The rows [r0, r1) of a channels-last pass, compiled for AVX-512 and AVX2 too
// (the baseline build is SSE2): row's channel loop is inlined here, so it
// vectorises for the CPU it runs on. (An OpenMP loop's body is outlined into
// a function that is not cloned, so the clone is this plain loop inside it.)
template <typename Row, typename... Args>
HG_TARGET_CLONES void channels_last_rows(int64_t r0, int64_t r1, const Row& row, Args... args) {
  for (int64_t r = r0; r < r1; ++r) row(r, args...);
}

// totals[k][ch] = sum over rows r of what row(r, acc) adds to acc[k][ch] (K sums per channel).
template <typename A, int K, typename Row>
void channel_sums(int64_t rows, int64_t c, const Row& row, std::vector<double> (&totals)[K]) {
  const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<A> partial(static_cast<size_t>(chunks * K * c), A(0));
  parallel_for(chunks, rows * c > kNormPoolParallelWork, [&](int64_t k) {
    A* acc[K];
    for (int q = 0; q < K; ++q) acc[q] = partial.data() + (k * K + q) * c;
    channels_last_rows(k * kRowsPerChunk, std::min(rows, (k + 1) * kRowsPerChunk), row, static_cast<A* const*>(acc));
  });
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
  for (int64_t ch = 0; ch < c; ++ch)
    mean[static_cast<size_t>(ch)] = static_cast<A>(sum[0][static_cast<size_t>(ch)] / static_cast<double>(rows));
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
  auto row = [&](int64_t r) {
    T* o = out + r * c;
    const int64_t base = r * c;
    for (int64_t ch = 0; ch < c; ++ch) o[ch] = static_cast<T>(f(base + ch, ch));
  };
  // one task per thread (no reduction: any split gives the same values)
  const bool parallel = rows > 1 && rows * c > kNormPoolParallelWork;
  const int64_t per = parallel ? (rows + omp_get_max_threads() - 1) / omp_get_max_threads() : rows;
  for_chunks(rows, std::max<int64_t>(per, 1), parallel,
             [&](int64_t r0, int64_t m) { channels_last_rows(r0, r0 + m, row); });
}

// ---- oneDNN, for channels-last float32 / bfloat16 -----------------------------------------
#if HALFGRAD_WITH_ONEDNN
struct OnednnKey {
  DType dtype;
  Shape shape;
  float eps;
  auto operator<=>(const OnednnKey&) const = default;
};

struct OnednnBatchNorm {
  dnnl::batch_normalization_forward forward;
  dnnl::batch_normalization_backward backward;
  dnnl::memory::desc data, channel;
};

std::shared_ptr<const OnednnBatchNorm> onednn_bn(const Tensor& x, double eps) {
  // 4-d (nhwc) and 5-d (ndhwc) only: [N, C] and [N, C, L] run our loops
  if (x.dim() < 4 || !channels_last(x) || (x.dtype() != DType::Float32 && x.dtype() != DType::BFloat16) ||
      x.numel() == 0)
    return nullptr;
  static PlanCache<OnednnKey, OnednnBatchNorm> cache(onednn::kMaxPrimitives);
  return cache.get({x.dtype(), x.shape(), static_cast<float>(eps)},
                   [](const OnednnKey& k) -> std::shared_ptr<const OnednnBatchNorm> {
                     using tag = dnnl::memory::format_tag;
                     const auto dt =
                         k.dtype == DType::BFloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
                     const dnnl::memory::dims dims(k.shape.begin(), k.shape.end());
                     try {
                       auto bn = std::make_shared<OnednnBatchNorm>();
                       bn->data = dnnl::memory::desc(dims, dt, k.shape.size() == 4 ? tag::nhwc : tag::ndhwc);
                       bn->channel = dnnl::memory::desc({k.shape[1]}, dnnl::memory::data_type::f32, tag::a);
                       const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
                       const dnnl::batch_normalization_forward::primitive_desc fwd(
                           {dnnl::prop_kind::forward_training, bn->data, k.eps, flags}, onednn::engine());
                       const dnnl::batch_normalization_backward::primitive_desc bwd(
                           {dnnl::prop_kind::backward, bn->data, bn->data, k.eps, flags}, onednn::engine(), fwd);
                       // only its JIT kernels: the reference one ("ncsp", "ref") is slower than our loops
                       for (const char* impl : {fwd.impl_info_str(), bwd.impl_info_str()})
                         if (std::string_view(impl).find("jit") == std::string_view::npos) return nullptr;
                       bn->forward = dnnl::batch_normalization_forward(fwd);
                       bn->backward = dnnl::batch_normalization_backward(bwd);
                       return bn;
                     } catch (const dnnl::error&) {
                       return nullptr;
                     }
                   });
}

// A float32 [C] tensor: t, or `fill` where t is undefined.
Tensor channel_or(const Tensor& t, int64_t c, double fill) {
  if (t.defined()) return t;
  Tensor f = make_tensor({c}, TensorOptions(DType::Float32, Device::cpu()));
  cpu::fill(f, fill);
  return f;
}

void execute(const dnnl::primitive& prim, const std::vector<std::pair<int, dnnl::memory>>& args) {
  std::unordered_map<int, dnnl::memory> map(args.begin(), args.end());
  prim.execute(onednn::stream(), map);
  onednn::stream().wait();
}

// Training forward in one primitive: y, the batch mean and (biased) variance;
// then invstd and the running statistics, as our loops compute them.
bool onednn_training(const Tensor& x, double eps, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                     const Tensor& invstd, const Tensor& rm, const Tensor& rv, double momentum, const Tensor& y) {
  const auto bn = onednn_bn(x, eps);
  if (!bn) return false;
  const int64_t c = x.shape()[1], count = x.numel() / c;
  const Tensor var = make_tensor({c}, mean.options());
  const Tensor w = channel_or(weight, c, 1.0), b = channel_or(bias, c, 0.0);
  const dnnl::engine& eng = onednn::engine();
  auto mem = [&](const dnnl::memory::desc& d, const Tensor& t) { return dnnl::memory(d, eng, t.data_ptr()); };
  execute(bn->forward, {{DNNL_ARG_SRC, mem(bn->data, x)},
                        {DNNL_ARG_DST, mem(bn->data, y)},
                        {DNNL_ARG_MEAN, mem(bn->channel, mean)},
                        {DNNL_ARG_VARIANCE, mem(bn->channel, var)},
                        {DNNL_ARG_SCALE, mem(bn->channel, w)},
                        {DNNL_ARG_SHIFT, mem(bn->channel, b)}});
  float* mp = kernel_ptr<float>(mean);
  const float* vp = kernel_ptr<const float>(var);
  for (int64_t ch = 0; ch < c; ++ch)
    finish_stats<float>(ch, mp[ch], vp[ch], count, eps, momentum, mp, kernel_ptr<float>(invstd), kernel_ptr<float>(rm),
                        kernel_ptr<float>(rv));
  return true;
}

// The training backward in one primitive. oneDNN takes the variance, which we
// rebuild from invstd in double (1 / invstd^2 - eps: within a float rounding).
bool onednn_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  const auto bn = onednn_bn(x, 0.0);
  if (!bn || !dx.defined() || !channels_last(g) || !channels_last(dx)) return false;
  const int64_t c = x.shape()[1];
  // with eps 0 in the primitive, variance = 1 / invstd^2 gives back invstd exactly as far as floats go
  const Tensor var = make_tensor({c}, mean.options());
  const float* ip = kernel_ptr<const float>(invstd);
  float* vp = kernel_ptr<float>(var);
  for (int64_t ch = 0; ch < c; ++ch) vp[ch] = static_cast<float>(1.0 / (static_cast<double>(ip[ch]) * ip[ch]));
  const Tensor w = channel_or(weight, c, 1.0), zeros = channel_or(Tensor(), c, 0.0);
  const Tensor dw = dweight.defined() ? dweight : make_tensor({c}, mean.options());
  const Tensor db = dbias.defined() ? dbias : make_tensor({c}, mean.options());
  const dnnl::engine& eng = onednn::engine();
  auto mem = [&](const dnnl::memory::desc& d, const Tensor& t) { return dnnl::memory(d, eng, t.data_ptr()); };
  execute(bn->backward, {{DNNL_ARG_SRC, mem(bn->data, x)},
                         {DNNL_ARG_DIFF_DST, mem(bn->data, g)},
                         {DNNL_ARG_MEAN, mem(bn->channel, mean)},
                         {DNNL_ARG_VARIANCE, mem(bn->channel, var)},
                         {DNNL_ARG_SCALE, mem(bn->channel, w)},
                         {DNNL_ARG_SHIFT, mem(bn->channel, zeros)},
                         {DNNL_ARG_DIFF_SRC, mem(bn->data, dx)},
                         {DNNL_ARG_DIFF_SCALE, mem(bn->channel, dw)},
                         {DNNL_ARG_DIFF_SHIFT, mem(bn->channel, db)}});
  return true;
}
#endif  // HALFGRAD_WITH_ONEDNN

}  // namespace

void batch_norm_training(const Tensor& x, double eps, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                         const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum,
                         const Tensor& y) {
#if HALFGRAD_WITH_ONEDNN
  if (onednn_training(x, eps, weight, bias, mean, invstd, running_mean, running_var, momentum, y)) return;
#endif
  batch_norm_stats(x, eps, mean, invstd, running_mean, running_var, momentum);
  batch_norm_forward(x, mean, invstd, weight, bias, y);
}

void batch_norm_stats(const Tensor& x, double eps, const Tensor& mean, const Tensor& invstd,
                      const Tensor& running_mean, const Tensor& running_var, double momentum) {
  const math::BatchNormDims d = ncs(x);  // not a structured binding: clang < 16 cannot capture one in a lambda
  const int64_t n = d.n, c = d.c, s = d.s;
  const int64_t count = n * s;
  if (count == 0) return;
  HG_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = kernel_ptr<const scalar_t>(x);
    A* mp = kernel_ptr<A>(mean);
    A* ip = kernel_ptr<A>(invstd);
    A* rm = kernel_ptr<A>(running_mean);
    A* rv = kernel_ptr<A>(running_var);
    if (channels_last(x)) return stats_channels_last<scalar_t>(xp, n * s, c, eps, mp, ip, rm, rv, momentum);
    parallel_for(c, n * c * s > kNormPoolParallelWork, [&](int64_t ch) {
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
    });
  });
}

void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, const Tensor& y) {
  const math::BatchNormDims d = ncs(x);
  const int64_t n = d.n, c = d.c, s = d.s;
  if (n * c * s == 0) return;
  HG_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = kernel_ptr<const scalar_t>(x);
    scalar_t* yp = kernel_ptr<scalar_t>(y);
    const A* mp = kernel_ptr<const A>(mean);
    const A* ip = kernel_ptr<const A>(invstd);
    const A* wp = weight.defined() ? kernel_ptr<const A>(weight) : nullptr;
    const A* bp = bias.defined() ? kernel_ptr<const A>(bias) : nullptr;
    if (channels_last(x)) {
      // bn_forward's formula as it is (folding it into a scale and shift would round differently)
      const std::vector<A> wv = per_channel<A>(wp, c, A(1)), bv = per_channel<A>(bp, c, A(0));
      const A *w = wv.data(), *b = bv.data();
      return map_channels_last<scalar_t>(n * s, c, [=](int64_t e, int64_t ch) {
        return math::bn_forward<A>(static_cast<A>(xp[e]), mp[ch], ip[ch], w[ch], b[ch]);
      }, yp);
    }
    const int64_t rows = n * c;
    parallel_for(rows, rows * s > kNormPoolParallelWork, [&](int64_t r) {
      const int64_t ch = r % c;
      const A m = mp[ch], inv = ip[ch], w = wp ? wp[ch] : A(1), b = bp ? bp[ch] : A(0);
      const scalar_t* xr = xp + r * s;
      scalar_t* yr = yp + r * s;
      for (int64_t j = 0; j < s; ++j)
        yr[j] = static_cast<scalar_t>(math::bn_forward<A>(static_cast<A>(xr[j]), m, inv, w, b));
    });
  });
}

void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias) {
#if HALFGRAD_WITH_ONEDNN
  if (training && onednn_backward(g, x, mean, invstd, weight, dx, dweight, dbias)) return;
#endif
  const math::BatchNormDims d = ncs(x);
  const int64_t n = d.n, c = d.c, s = d.s;
  const int64_t count = n * s;
  HG_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward", [&] {
    using A = stat_t<scalar_t>;
    const scalar_t* xp = kernel_ptr<const scalar_t>(x);
    const scalar_t* gp = kernel_ptr<const scalar_t>(g);
    const A* mp = kernel_ptr<const A>(mean);
    const A* ip = kernel_ptr<const A>(invstd);
    const A* wp = weight.defined() ? kernel_ptr<const A>(weight) : nullptr;
    A* dwp = kernel_ptr<A>(dweight);
    A* dbp = kernel_ptr<A>(dbias);
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
      parallel_for(c, n * c * s > kNormPoolParallelWork, [&](int64_t ch) {
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
      });
    }
    if (!dx.defined() || count == 0) return;
    scalar_t* dxp = kernel_ptr<scalar_t>(dx);
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
    parallel_for(rows, rows * s > kNormPoolParallelWork, [&](int64_t r) {
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
    });
  });
}

}  // namespace halfgrad::kernels::cpu
