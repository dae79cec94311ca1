// CPU softmax / log-softmax over the last dim, and the per-sample NLL that
// cross_entropy builds on. Rows are independent (blocks of rows in parallel),
// computed in float (double for float64) with the max subtracted first; the
// exps of a block of rows run as one vectorised loop (kernels/cpu/vec_math.h).
// Also the CPU's answer to the fused-attention entries: it has none.
#include <algorithm>
#include <cmath>
#include <string>

#include <halfgrad/core/error.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/parallel.h>
#include <halfgrad/kernels/cpu/scratch.h>
#include <halfgrad/kernels/cpu/vec_math.h>

namespace halfgrad::kernels::cpu {

namespace {
template <typename T>
using facc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

int64_t last_dim(const Tensor& t) { return t.dim() == 0 ? 1 : t.shape().back(); }

// e[i] = exp(t[i]) over a flat run: the rows of a block are exponentiated in
// one loop, so 100 rows of 10 classes make one vectorised run of 1000, not
// 100 runs too short for a vector.
HG_TARGET_CLONES void exp_run(const float* t, float* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = exp_f32(t[i]);
}
void exp_run(const double* t, double* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = std::exp(t[i]);
}

// e[i] = exp(v[i]) for n values of a tensor's dtype, in float (double for
// float64): the half types are widened into `wide` (n values) first, a buffer
// of its own (an in-place exp may not vectorise).
template <typename T, typename A>
void exp_of(const T* v, int64_t n, A* e, A* wide) {
  if constexpr (std::is_same_v<T, A>) {
    exp_run(v, e, n);
  } else {
    for (int64_t i = 0; i < n; ++i) wide[i] = static_cast<A>(v[i]);
    exp_run(wide, e, n);
  }
}

// Rows are taken in blocks of about kBlockElems elements (at least one row);
// a block is the unit of the parallel loop and of the scratch.
constexpr int64_t kBlockElems = 4096;

struct SoftmaxScratch;  // the tag of this file's per-thread buffer
struct TargetScratch;   // and of cross_entropy_backward's targets

// Per-row max / sum over a block of nr rows of c values (row stride c), taken a
// column at a time: each row's max or sum is a chain of c dependent
// instructions, latency-bound when walked row by row (100 rows of 10 classes
// were 40% of the loss's time); column by column the rows' chains overlap.
// Each row still sees its values in order, so results are as the row loop's.
template <typename A, typename T>
[[gnu::always_inline]] inline void rows_max(const T* x, int64_t nr, int64_t c, A* m) {
  for (int64_t r = 0; r < nr; ++r) m[r] = static_cast<A>(x[r * c]);
  for (int64_t j = 1; j < c; ++j)
    for (int64_t r = 0; r < nr; ++r) m[r] = std::max(m[r], static_cast<A>(x[r * c + j]));
}
// s[r] = sum_j f(r * c + j), j ascending.
template <typename A, typename F>
[[gnu::always_inline]] inline void rows_sum(int64_t nr, int64_t c, A* s, F&& f) {
  for (int64_t r = 0; r < nr; ++r) s[r] = A(0);
  for (int64_t j = 0; j < c; ++j)
    for (int64_t r = 0; r < nr; ++r) s[r] += f(r * c + j);
}

// A block's two passes around the exp: t = x - max(row), and after it the
// row sums and y. For float32 also compiled for AVX-512 and AVX2 (below):
// the baseline build is SSE2, whose 4 lanes fit a 10-class row badly.
// always_inline: so the clones below compile these bodies for their ISA (a
// call would run the baseline code)
template <typename A, typename T>
[[gnu::always_inline]] inline void block_shift(const T* x, int64_t nr, int64_t c, A* m, A* t) {
  rows_max(x, nr, c, m);
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t j = 0; j < c; ++j) t[r * c + j] = static_cast<A>(x[r * c + j]) - m[r];
}
template <typename A, typename T>
[[gnu::always_inline]] inline void block_normalise(const A* t, const A* e, int64_t nr, int64_t c, A* s, T* y, bool log) {
  rows_sum(nr, c, s, [&](int64_t i) { return e[i]; });
  for (int64_t r = 0; r < nr; ++r) {
    const A* tr = t + r * c;
    const A* er = e + r * c;
    T* yr = y + r * c;
    if (log) {
      // (x - max) - log(sum), PyTorch's order: max + log(sum) first would round
      // a confident row's tiny log(sum) (6e-6 next to 12) to 12's ulps
      const A ls = std::log(s[r]);
      for (int64_t j = 0; j < c; ++j) yr[j] = static_cast<T>(tr[j] - ls);
    } else {
      const A inv = A(1) / s[r];
      for (int64_t j = 0; j < c; ++j) yr[j] = static_cast<T>(er[j] * inv);
    }
  }
}
// float32: the same templates in a cloned non-template overload, which a call with float pointers picks.
HG_TARGET_CLONES void block_shift(const float* x, int64_t nr, int64_t c, float* m, float* t) {
  block_shift<float, float>(x, nr, c, m, t);
}
HG_TARGET_CLONES void block_normalise(const float* t, const float* e, int64_t nr, int64_t c, float* s, float* y,
                                      bool log) {
  block_normalise<float, float>(t, e, nr, c, s, y, log);
}

// A block's input gradient: log_softmax o = g - e * sum(g) (e = exp(y)),
// softmax o = y * (g - sum(g * y)); for float32 cloned too, as above.
template <typename A, typename T>
[[gnu::always_inline]] inline void block_grad(const T* g, const T* y, const A* e, int64_t nr, int64_t c, A* dot, T* o,
                                              bool log) {
  if (log) {
    rows_sum(nr, c, dot, [&](int64_t i) { return static_cast<A>(g[i]); });
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t j = 0; j < c; ++j) {
        const int64_t i = r * c + j;
        o[i] = static_cast<T>(static_cast<A>(g[i]) - e[i] * dot[r]);
      }
  } else {
    rows_sum(nr, c, dot, [&](int64_t i) { return static_cast<A>(g[i]) * static_cast<A>(y[i]); });
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t j = 0; j < c; ++j) {
        const int64_t i = r * c + j;
        o[i] = static_cast<T>(static_cast<A>(y[i]) * (static_cast<A>(g[i]) - dot[r]));
      }
  }
}
HG_TARGET_CLONES void block_grad(const float* g, const float* y, const float* e, int64_t nr, int64_t c, float* dot,
                                 float* o, bool log) {
  block_grad<float, float>(g, y, e, nr, c, dot, o, log);
}

template <typename F>
void for_row_blocks(int64_t rows, int64_t c, F&& block) {
  const int64_t per = std::max<int64_t>(1, kBlockElems / std::max<int64_t>(c, 1));
  const int64_t blocks = (rows + per - 1) / per;
  parallel_for(blocks, worth_threads(rows * c), [&](int64_t b) { block(b * per, std::min(rows, (b + 1) * per)); });
}
}  // namespace

// Per block of rows: t = x - max(row) (kept), e = exp(t) in one flat run, the
// row sums, then y = e / sum or, for log_softmax, y = t - log(sum).
void softmax(const Tensor& in, const Tensor& out, bool log) {
  const int64_t c = last_dim(in);
  const int64_t rows = c == 0 ? 0 : in.numel() / c;
  HG_DISPATCH_FLOATING(in.dtype(), log ? "log_softmax" : "softmax", [&] {
    using A = facc_t<scalar_t>;
    const scalar_t* x = static_cast<const scalar_t*>(in.data_ptr());
    scalar_t* y = static_cast<scalar_t*>(out.data_ptr());
    for_row_blocks(rows, c, [&](int64_t r0, int64_t r1) {
      const int64_t nr = r1 - r0, n = nr * c;
      A* t = thread_scratch<SoftmaxScratch, A>(2 * n + nr);
      A* e = t + n;
      A* acc = e + n;  // per row: the max, then the sum of the exps
      const scalar_t* xb = x + r0 * c;
      scalar_t* yb = y + r0 * c;
      block_shift(xb, nr, c, acc, t);
      exp_run(t, e, n);
      block_normalise(t, e, nr, c, acc, yb, log);
    });
  });
}

// softmax: gi = y * (g - sum(g * y)); log_softmax: gi = g - exp(y) * sum(g),
// its exp again one flat run per block.
void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in, bool log) {
  const int64_t c = last_dim(y);
  const int64_t rows = c == 0 ? 0 : y.numel() / c;
  HG_DISPATCH_FLOATING(y.dtype(), "softmax_backward", [&] {
    using A = facc_t<scalar_t>;
    const scalar_t* g = static_cast<const scalar_t*>(grad_out.data_ptr());
    const scalar_t* yy = static_cast<const scalar_t*>(y.data_ptr());
    scalar_t* gi = static_cast<scalar_t*>(grad_in.data_ptr());
    for_row_blocks(rows, c, [&](int64_t r0, int64_t r1) {
      const int64_t nr = r1 - r0, n = nr * c;
      const scalar_t* gb = g + r0 * c;
      const scalar_t* yb = yy + r0 * c;
      scalar_t* ob = gi + r0 * c;
      if (log) {
        A* e = thread_scratch<SoftmaxScratch, A>(2 * n + nr);
        A* dot = e + n;
        exp_of(yb, n, e, dot + nr);
        block_grad(gb, yb, static_cast<const A*>(e), nr, c, dot, ob, true);
        return;
      }
      A* dot = thread_scratch<SoftmaxScratch, A>(nr);
      block_grad(gb, yb, static_cast<const A*>(nullptr), nr, c, dot, ob, false);
    });
  });
}

namespace {
void check_target(const char* op, int64_t t, int64_t i, int64_t c, int64_t ignore_index) {
  HG_CHECK(t == ignore_index || (t >= 0 && t < c),
           "{}: target {} at position {} is out of range for {} classes (expected 0 to {}, or ignore_index "
           "{})",
           op, t, i, c, c - 1, ignore_index);
}
}  // namespace

void nll_loss(const Tensor& logp, const Tensor& target, const Tensor& out, int64_t ignore_index, const char* op) {
  const int64_t n = logp.shape()[0], c = logp.shape()[1];
  const int64_t* tg = static_cast<const int64_t*>(target.data_ptr());
  for (int64_t i = 0; i < n; ++i) check_target(op, tg[i], i, c, ignore_index);
  HG_DISPATCH_FLOATING(logp.dtype(), "nll_loss", [&] {
    const scalar_t* lp = static_cast<const scalar_t*>(logp.data_ptr());
    scalar_t* o = static_cast<scalar_t*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      o[i] = tg[i] == ignore_index ? scalar_t(0) : static_cast<scalar_t>(-static_cast<double>(lp[i * c + tg[i]]));
  });
}

// One pass over the targets: the sum (in double, rounded once) and the count.
void nll_loss_reduced(const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                      int64_t ignore_index, bool mean, const char* op) {
  const int64_t n = logp.shape()[0], c = logp.shape()[1];
  const int64_t* tg = static_cast<const int64_t*>(target.data_ptr());
  for (int64_t i = 0; i < n; ++i) check_target(op, tg[i], i, c, ignore_index);
  HG_DISPATCH_FLOATING(logp.dtype(), "nll_loss", [&] {
    const scalar_t* lp = static_cast<const scalar_t*>(logp.data_ptr());
    double sum = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (tg[i] == ignore_index) continue;
      sum -= static_cast<double>(lp[i * c + tg[i]]);
      ++k;
    }
    *static_cast<scalar_t*>(out.data_ptr()) = static_cast<scalar_t>(mean ? sum / static_cast<double>(k) : sum);
    *static_cast<scalar_t*>(count.data_ptr()) = static_cast<scalar_t>(static_cast<double>(k));
  });
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& grad_logp, int64_t ignore_index) {
  const int64_t n = grad_logp.shape()[0], c = grad_logp.shape()[1];
  const int64_t* tg = static_cast<const int64_t*>(target.data_ptr());
  fill(grad_logp, 0.0);
  HG_DISPATCH_FLOATING(grad_logp.dtype(), "nll_loss_backward", [&] {
    const scalar_t* g = static_cast<const scalar_t*>(grad.data_ptr());
    const int64_t gs = grad.stride(0);  // 0: one gradient for every sample (a mean or sum)
    scalar_t* o = static_cast<scalar_t*>(grad_logp.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      if (tg[i] != ignore_index) o[i * c + tg[i]] = static_cast<scalar_t>(-static_cast<double>(g[i * gs]));
  });
}

namespace {
// o[r, j] = (j == t_r ? dot_r : 0) - e[r, j] * dot_r, dot_r = -g_r (0 for a
// row without a valid target, whose t_r matches no column).
template <typename A, typename T>
[[gnu::always_inline]] inline void ce_rows(const A* e, const A* dot, const int64_t* t, int64_t nr, int64_t c, T* o) {
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t j = 0; j < c; ++j)
      o[r * c + j] = static_cast<T>((j == t[r] ? dot[r] : A(0)) - e[r * c + j] * dot[r]);
}
HG_TARGET_CLONES void ce_rows(const float* e, const float* dot, const int64_t* t, int64_t nr, int64_t c, float* o) {
  ce_rows<float, float>(e, dot, t, nr, c, o);
}
}  // namespace

// What nll_loss_backward then log_softmax_backward compute, in one pass with
// no one-hot tensor: the one-hot row's sum is its one entry -g_i, so
// gx = one-hot - exp(logp) * (-g_i), the same arithmetic.
void cross_entropy_backward(const Tensor& grad, const Tensor& logp, const Tensor& target, const Tensor& gx,
                            int64_t ignore_index) {
  const int64_t n = logp.shape()[0], c = logp.shape()[1];
  const int64_t* tg = static_cast<const int64_t*>(target.data_ptr());
  HG_DISPATCH_FLOATING(logp.dtype(), "cross_entropy_backward", [&] {
    using A = facc_t<scalar_t>;
    const scalar_t* g = static_cast<const scalar_t*>(grad.data_ptr());
    const int64_t gs = grad.stride(0);  // 0: one gradient for every sample (a mean or sum)
    const scalar_t* lp = static_cast<const scalar_t*>(logp.data_ptr());
    scalar_t* o = static_cast<scalar_t*>(gx.data_ptr());
    for_row_blocks(n, c, [&](int64_t r0, int64_t r1) {
      const int64_t nr = r1 - r0, m = nr * c;
      A* e = thread_scratch<SoftmaxScratch, A>(2 * m + nr);
      A* dot = e + m;
      exp_of(lp + r0 * c, m, e, dot + nr);
      int64_t* t = thread_scratch<TargetScratch, int64_t>(nr);
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t ti = tg[r0 + r];
        const bool valid = ti != ignore_index && ti >= 0 && ti < c;
        t[r] = valid ? ti : -1;
        dot[r] = valid ? -static_cast<A>(g[(r0 + r) * gs]) : A(0);
      }
      ce_rows(e, dot, t, nr, c, o + r0 * c);
    });
  });
}

// Fused attention: none on the CPU (ops/attention.cpp takes the math path
// there). The run entries are never reached through the op; a direct call is
// an Error.
std::string fused_attention_unsupported(const Tensor&, const Tensor&, const Tensor&, const FusedAttention&, bool) {
  return "the CPU has no fused attention kernel";
}

void fused_attention_forward(const Tensor& q, const Tensor&, const Tensor&, const FusedAttention&, const Tensor&,
                             const Tensor&) {
  fail("fused_attention_forward: no fused attention on the CPU (query {}); call scaled_dot_product_attention, which "
       "takes the math path here",
       q.describe());
}

void fused_attention_backward(const Tensor& q, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const FusedAttention&, const Tensor&, const Tensor&, const Tensor&) {
  fail("fused_attention_backward: no fused attention on the CPU (query {}); call scaled_dot_product_attention, which "
       "takes the math path here",
       q.describe());
}

}  // namespace halfgrad::kernels::cpu
