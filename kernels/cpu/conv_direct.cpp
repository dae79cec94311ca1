// The portable direct convolution loops (kernels/cpu/conv.h): float64, builds
// without oneDNN, and the configurations oneDNN declines run here.
#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>
#include <vector>

#include <halfgrad/core/error.h>
#include <halfgrad/core/macros.h>
#include <halfgrad/kernels/cpu/conv.h>
#include <halfgrad/kernels/cpu/conv_problem.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/kernel_ptr.h>

namespace halfgrad::kernels::cpu {

using conv_detail::check_layout;
using conv_detail::check_weight_grads;
using conv_detail::make_problem;
using conv_detail::Problem;

// The activations' layout: row-major, or channels-last (both dense; the op
// makes them so, in one layout); the weight and bias are row-major.
bool conv_detail::check_layout(const char* op, std::initializer_list<const Tensor*> activations,
                  std::initializer_list<const Tensor*> params) {
  bool cl = false;
  for (const Tensor* t : activations) cl = cl || (t->defined() && !t->is_contiguous());
  for (const Tensor* t : activations) {
    const MemoryFormat f = !cl ? MemoryFormat::Contiguous
                           : t->dim() == 5 ? MemoryFormat::ChannelsLast3d
                                           : MemoryFormat::ChannelsLast;
    HG_CHECK(!t->defined() || t->is_contiguous(f),
             "{}: the CPU kernel takes activations dense in one layout, row-major or channels-last, got {} with "
             "strides {}",
             op, t->describe(), shape_str(t->strides()));
  }
  for (const Tensor* t : params) {
    HG_CHECK(!t->defined() || t->is_contiguous(), "{}: the CPU kernel takes a contiguous weight and bias, got {}", op,
             t->describe());
  }
  return cl;
}

// dw and db share dy's dtype, or are float32 for a bfloat16 dy (kernels.h).
void conv_detail::check_weight_grads(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  const bool wide = dy.dtype() == DType::BFloat16 && dw.dtype() == DType::Float32;
  HG_CHECK(x.dtype() == dy.dtype() && (dw.dtype() == dy.dtype() || wide) &&
               (!db.defined() || db.dtype() == dw.dtype()),
           "conv_backward_weight: x {} and dy {} must share a dtype, and dw {} and db {} take theirs (or float32 for "
           "bfloat16): an internal error, please report it",
           x.describe(), dy.describe(), dw.describe(), db.defined() ? db.describe() : std::string("(none)"));
}

namespace {

constexpr int64_t kParallelWork = 1 << 15;

template <typename T>
using conv_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The outputs o in [lo, hi) whose input o * s + c lies in [0, size).
inline void valid_range(int64_t c, int64_t s, int64_t size, int64_t n_out, int64_t& lo, int64_t& hi) {
  lo = c >= 0 ? 0 : (-c + s - 1) / s;
  hi = size - 1 - c < 0 ? 0 : std::min(n_out, (size - 1 - c) / s + 1);
  if (hi < lo) hi = lo;
}

// Row-major copies of channels-last activations, for the direct loops.
Tensor row_major(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = make_tensor(t.shape(), t.options());
  cpu::copy(c, t);
  return c;
}

// ---------------------------------------------------------------------------
// The direct loops. All three walk the same geometry: for each kernel tap, the
// output rows (od, oh) whose input row lies inside the input, and in each row
// the outputs ow whose input column does. That walk depends on the problem
// only, not on the batch or channel, so it is planned once per call and the
// loops run through the plan: a 5x5 depthwise kernel on a 1x1 map (MobileNetV3's
// last blocks) then costs one tap per channel, not 25 taps of bounds checks.

// One kernel tap that reads inside the input: for each (xo, yo) in rows, output
// ow of that row (offset yo + ow in an output plane) reads input element
// xo + ow * stride (in an input plane), for ow in [lo, hi).
struct TapWalk {
  int64_t tap;  // the flat index into a filter
  int64_t lo, hi;
  std::vector<std::pair<int64_t, int64_t>> rows;  // (xo, yo)
};

std::vector<TapWalk> plan_walk(const Problem& p) {
  std::vector<TapWalk> walk;
  for (int64_t kd = 0; kd < p.k[0]; ++kd)
    for (int64_t kh = 0; kh < p.k[1]; ++kh)
      for (int64_t kw = 0; kw < p.k[2]; ++kw) {
        TapWalk t{(kd * p.k[1] + kh) * p.k[2] + kw, 0, 0, {}};
        const int64_t cw = kw * p.d[2] - p.pb[2];
        valid_range(cw, p.s[2], p.in[2], p.out[2], t.lo, t.hi);
        if (t.lo == t.hi) continue;
        for (int64_t od = 0; od < p.out[0]; ++od) {
          const int64_t id = od * p.s[0] - p.pb[0] + kd * p.d[0];
          if (id < 0 || id >= p.in[0]) continue;
          for (int64_t oh = 0; oh < p.out[1]; ++oh) {
            const int64_t ih = oh * p.s[1] - p.pb[1] + kh * p.d[1];
            if (ih < 0 || ih >= p.in[1]) continue;
            t.rows.emplace_back((id * p.in[1] + ih) * p.in[2] + cw, (od * p.out[1] + oh) * p.out[2]);
          }
        }
        if (!t.rows.empty()) walk.push_back(std::move(t));
      }
  return walk;
}

template <typename T>
void direct_forward(const Problem& p, const T* x, const T* w, const T* b, T* y) {
  using A = conv_acc_t<T>;
  const int64_t cig = p.groups ? p.ci / p.groups : 0, cog = p.groups ? p.co / p.groups : 0;
  const int64_t in_plane = p.in_plane(), out_plane = p.out_plane(), kvol = p.kvol(), sw = p.s[2];
  const int64_t work = p.n * p.co * out_plane * std::max<int64_t>(cig * kvol, 1);
  const std::vector<TapWalk> walk = plan_walk(p);
#pragma omp parallel if (work >= kParallelWork)
  {
    std::vector<A> acc(static_cast<size_t>(out_plane));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < p.n; ++n) {
      for (int64_t oc = 0; oc < p.co; ++oc) {
        std::fill(acc.begin(), acc.end(), b ? static_cast<A>(b[oc]) : A(0));
        const int64_t grp = oc / cog;
        for (int64_t icl = 0; icl < cig; ++icl) {
          const T* xp = x + (n * p.ci + grp * cig + icl) * in_plane;
          const T* wp = w + (oc * cig + icl) * kvol;
          for (const TapWalk& t : walk) {
            const A wv = static_cast<A>(wp[t.tap]);
            for (const auto& [xo, yo] : t.rows)
              for (int64_t ow = t.lo; ow < t.hi; ++ow) acc[yo + ow] += wv * static_cast<A>(xp[xo + ow * sw]);
          }
        }
        T* yp = y + (n * p.co + oc) * out_plane;
        for (int64_t o = 0; o < out_plane; ++o) yp[o] = static_cast<T>(acc[static_cast<size_t>(o)]);
      }
    }
  }
}

template <typename T>
void direct_backward_data(const Problem& p, const T* dy, const T* w, T* dx) {
  using A = conv_acc_t<T>;
  const int64_t cig = p.groups ? p.ci / p.groups : 0, cog = p.groups ? p.co / p.groups : 0;
  const int64_t in_plane = p.in_plane(), out_plane = p.out_plane(), kvol = p.kvol(), sw = p.s[2];
  const int64_t work = p.n * p.ci * out_plane * std::max<int64_t>(cog * kvol, 1);
  const std::vector<TapWalk> walk = plan_walk(p);
#pragma omp parallel if (work >= kParallelWork)
  {
    std::vector<A> acc(static_cast<size_t>(in_plane));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < p.n; ++n) {
      for (int64_t ic = 0; ic < p.ci; ++ic) {
        std::fill(acc.begin(), acc.end(), A(0));
        const int64_t grp = ic / cig, icl = ic % cig;
        for (int64_t ocl = 0; ocl < cog; ++ocl) {
          const int64_t oc = grp * cog + ocl;
          const T* dyp = dy + (n * p.co + oc) * out_plane;
          const T* wp = w + (oc * cig + icl) * kvol;
          for (const TapWalk& t : walk) {
            const A wv = static_cast<A>(wp[t.tap]);
            for (const auto& [xo, yo] : t.rows)
              for (int64_t ow = t.lo; ow < t.hi; ++ow) acc[xo + ow * sw] += wv * static_cast<A>(dyp[yo + ow]);
          }
        }
        T* dxp = dx + (n * p.ci + ic) * in_plane;
        for (int64_t i = 0; i < in_plane; ++i) dxp[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
      }
    }
  }
}

// W: dw's and db's element type, T's or float (sums written unrounded).
template <typename T, typename W>
void direct_backward_weight(const Problem& p, const T* dy, const T* x, W* dw, W* db) {
  using A = conv_acc_t<T>;
  const int64_t cig = p.groups ? p.ci / p.groups : 0, cog = p.groups ? p.co / p.groups : 0;
  const int64_t in_plane = p.in_plane(), out_plane = p.out_plane(), kvol = p.kvol(), sw = p.s[2];
  const int64_t work = p.n * p.co * cig * kvol * out_plane;
  const std::vector<TapWalk> walk = plan_walk(p);
#pragma omp parallel if (work >= kParallelWork)
  {
    std::vector<A> acc(static_cast<size_t>(kvol));
#pragma omp for collapse(2) schedule(static)
    for (int64_t oc = 0; oc < p.co; ++oc) {
      for (int64_t icl = 0; icl < cig; ++icl) {
        const int64_t grp = oc / cog;
        std::fill(acc.begin(), acc.end(), A(0));  // taps no output reads keep 0
        for (int64_t n = 0; n < p.n; ++n) {
          const T* dyp = dy + (n * p.co + oc) * out_plane;
          const T* xp = x + (n * p.ci + grp * cig + icl) * in_plane;
          for (const TapWalk& t : walk) {
            A sum = 0;
            for (const auto& [xo, yo] : t.rows)
              for (int64_t ow = t.lo; ow < t.hi; ++ow)
                sum += static_cast<A>(dyp[yo + ow]) * static_cast<A>(xp[xo + ow * sw]);
            acc[static_cast<size_t>(t.tap)] += sum;
          }
        }
        W* dwp = dw + (oc * cig + icl) * kvol;
        for (int64_t k = 0; k < kvol; ++k) dwp[k] = static_cast<W>(acc[static_cast<size_t>(k)]);
      }
    }
  }
  if (db) {
#pragma omp parallel for schedule(static) if (p.n * p.co * out_plane >= kParallelWork)
    for (int64_t oc = 0; oc < p.co; ++oc) {
      A acc = 0;
      for (int64_t n = 0; n < p.n; ++n) {
        const T* dyp = dy + (n * p.co + oc) * out_plane;
        for (int64_t o = 0; o < out_plane; ++o) acc += static_cast<A>(dyp[o]);
      }
      db[oc] = static_cast<W>(acc);
    }
  }
}

// The depthwise weight gradient on channels-last activations (x [N, *in, C],
// dy [N, *out, C]): the same tap walk, with the channels innermost, so each
// (tap, output) pair is one vectorised multiply-add over a block of channels.
// Threads take blocks of channels (no reduction across threads). oneDNN 2.6
// has no depthwise kernel for this case (see decline_grouped_gemm).
constexpr int64_t kDwBlock = 64;  // channels per task of the channels-last depthwise weight gradient

// One block of nc <= kDwBlock channels from c0: acc[tap][channel] += dy * x
// over every sample and output the tap reads. Compiled for AVX-512 and AVX2
// too (the baseline build is SSE2), the channel loop vectorising; outside the
// OpenMP loop, whose outlined body is not cloned.
template <typename T, typename A>
HG_TARGET_CLONES void dw_cl_block(const Problem& p, const std::vector<TapWalk>& walk, const T* dy, const T* x,
                                  int64_t c0, int64_t nc, A* acc) {
  const int64_t c = p.ci, in_plane = p.in_plane(), out_plane = p.out_plane(), sw = p.s[2];
  for (int64_t n = 0; n < p.n; ++n) {
    const T* xn = x + n * in_plane * c + c0;
    const T* dyn = dy + n * out_plane * c + c0;
    for (const TapWalk& t : walk) {
      A* a = acc + t.tap * kDwBlock;
      for (const auto& [xo, yo] : t.rows) {
        if (nc == kDwBlock) {
          // a whole block: its sums stay in vector registers along the output row
          A sum[kDwBlock];
          for (int64_t k = 0; k < kDwBlock; ++k) sum[k] = a[k];
          for (int64_t ow = t.lo; ow < t.hi; ++ow) {
            const T* xr = xn + (xo + ow * sw) * c;
            const T* gr = dyn + (yo + ow) * c;
            for (int64_t k = 0; k < kDwBlock; ++k) sum[k] += static_cast<A>(gr[k]) * static_cast<A>(xr[k]);
          }
          for (int64_t k = 0; k < kDwBlock; ++k) a[k] = sum[k];
          continue;
        }
        for (int64_t ow = t.lo; ow < t.hi; ++ow) {
          const T* xr = xn + (xo + ow * sw) * c;
          const T* gr = dyn + (yo + ow) * c;
          for (int64_t k = 0; k < nc; ++k) a[k] += static_cast<A>(gr[k]) * static_cast<A>(xr[k]);
        }
      }
    }
  }
}

template <typename T, typename W>
void direct_backward_weight_dw_cl(const Problem& p, const T* dy, const T* x, W* dw, W* db) {
  using A = conv_acc_t<T>;
  constexpr int64_t kBlock = kDwBlock;
  const int64_t c = p.ci, out_plane = p.out_plane(), kvol = p.kvol();
  const std::vector<TapWalk> walk = plan_walk(p);
  const int64_t blocks = (c + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (p.n * out_plane * kvol * c >= kParallelWork)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, nc = std::min(kBlock, c - c0);
    std::vector<A> acc(static_cast<size_t>(kvol * kBlock), A(0));  // [tap][channel]; taps no output reads keep 0
    dw_cl_block(p, walk, dy, x, c0, nc, acc.data());
    for (int64_t k = 0; k < nc; ++k)
      for (int64_t tap = 0; tap < kvol; ++tap)
        dw[(c0 + k) * kvol + tap] = static_cast<W>(acc[static_cast<size_t>(tap * kBlock + k)]);
    if (db) {
      std::vector<A> sum(static_cast<size_t>(nc), A(0));
      for (int64_t r = 0; r < p.n * out_plane; ++r)
        for (int64_t k = 0; k < nc; ++k) sum[static_cast<size_t>(k)] += static_cast<A>(dy[r * c + c0 + k]);
      for (int64_t k = 0; k < nc; ++k) db[c0 + k] = static_cast<W>(sum[static_cast<size_t>(k)]);
    }
  }
}


}  // namespace

void conv_forward_direct(const Tensor& x, const Tensor& w, const Tensor& bias, const kernels::ConvGeometry& g,
                         const Tensor& y) {
  if (check_layout("conv_forward", {&x, &y}, {&w, &bias})) {  // channels-last: through row-major copies
    const Tensor yr = row_major(y);
    conv_forward_direct(row_major(x), w, bias, g, yr);
    return cpu::copy(y, yr);
  }
  const Problem p = make_problem(x, w, y, g);
  HG_DISPATCH_FLOATING(x.dtype(), "conv_forward", [&] {
    direct_forward<scalar_t>(p, kernel_ptr<const scalar_t>(x), kernel_ptr<const scalar_t>(w),
                             kernel_ptr<const scalar_t>(bias), kernel_ptr<scalar_t>(y));
  });
}

void conv_backward_data_direct(const Tensor& dy, const Tensor& w, const kernels::ConvGeometry& g, const Tensor& dx) {
  if (check_layout("conv_backward_data", {&dy, &dx}, {&w})) {
    const Tensor dxr = row_major(dx);
    conv_backward_data_direct(row_major(dy), w, g, dxr);
    return cpu::copy(dx, dxr);
  }
  const Problem p = make_problem(dx, w, dy, g);
  HG_DISPATCH_FLOATING(dy.dtype(), "conv_backward_data", [&] {
    direct_backward_data<scalar_t>(p, kernel_ptr<const scalar_t>(dy), kernel_ptr<const scalar_t>(w),
                                   kernel_ptr<scalar_t>(dx));
  });
}

void conv_backward_weight_direct(const Tensor& dy, const Tensor& x, const kernels::ConvGeometry& g, const Tensor& dw,
                                 const Tensor& db) {
  check_weight_grads(dy, x, dw, db);
  const bool cl = check_layout("conv_backward_weight", {&dy, &x}, {&dw, &db});
  const Problem p = make_problem(x, dw, dy, g, cl);
  const bool depthwise_cl = cl && p.groups == p.ci && p.groups == p.co;  // its own channels-last loop
  if (cl && !depthwise_cl) return conv_backward_weight_direct(row_major(dy), row_major(x), g, dw, db);
  HG_DISPATCH_FLOATING(dy.dtype(), "conv_backward_weight", [&] {
    auto run = [&]<typename W>(W*) {
      if (depthwise_cl)
        direct_backward_weight_dw_cl<scalar_t, W>(p, kernel_ptr<const scalar_t>(dy), kernel_ptr<const scalar_t>(x),
                                                  kernel_ptr<W>(dw), kernel_ptr<W>(db));
      else
        direct_backward_weight<scalar_t, W>(p, kernel_ptr<const scalar_t>(dy), kernel_ptr<const scalar_t>(x),
                                            kernel_ptr<W>(dw), kernel_ptr<W>(db));
    };
    if (dw.dtype() == dy.dtype()) run(static_cast<scalar_t*>(nullptr));
    else run(static_cast<float*>(nullptr));  // float32 sums (check_weight_grads)
  });
}

}  // namespace halfgrad::kernels::cpu
