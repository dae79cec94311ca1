// CPU softmax / log-softmax over the last dim, and the per-sample NLL that
// cross_entropy builds on. Rows are independent: one row per iteration,
// computed in float (double for float64) with the max subtracted first.
#include <cmath>

#include <halfgrad/ops/cpu/cpu_kernels.h>

namespace halfgrad::cpu {

namespace {
template <typename T>
using facc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

int64_t last_dim(const Tensor& t) { return t.dim() == 0 ? 1 : t.shape().back(); }
}  // namespace

void softmax(const Tensor& in, const Tensor& out, bool log) {
  const int64_t c = last_dim(in);
  const int64_t rows = c == 0 ? 0 : in.numel() / c;
  HG_DISPATCH_FLOATING(in.dtype(), log ? "log_softmax" : "softmax", [&] {
    using A = facc_t<scalar_t>;
    const scalar_t* x = static_cast<const scalar_t*>(in.data_ptr());
    scalar_t* y = static_cast<scalar_t*>(out.data_ptr());
    _Pragma("omp parallel for if (rows * c > 65536)")
    for (int64_t r = 0; r < rows; ++r) {
      const scalar_t* xr = x + r * c;
      scalar_t* yr = y + r * c;
      A mx = static_cast<A>(xr[0]);
      for (int64_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<A>(xr[j]));
      A sum = 0;
      for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<A>(xr[j]) - mx);
      if (log) {
        // (x - max) - log(sum), PyTorch's order: max + log(sum) first would round
        // a confident row's tiny log(sum) (6e-6 next to 12) to 12's ulps
        const A ls = std::log(sum);
        for (int64_t j = 0; j < c; ++j) yr[j] = static_cast<scalar_t>((static_cast<A>(xr[j]) - mx) - ls);
      } else {
        const A inv = A(1) / sum;
        for (int64_t j = 0; j < c; ++j) yr[j] = static_cast<scalar_t>(std::exp(static_cast<A>(xr[j]) - mx) * inv);
      }
    }
  });
}

void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in, bool log) {
  const int64_t c = last_dim(y);
  const int64_t rows = c == 0 ? 0 : y.numel() / c;
  HG_DISPATCH_FLOATING(y.dtype(), "softmax_backward", [&] {
    using A = facc_t<scalar_t>;
    const scalar_t* g = static_cast<const scalar_t*>(grad_out.data_ptr());
    const scalar_t* yy = static_cast<const scalar_t*>(y.data_ptr());
    scalar_t* gi = static_cast<scalar_t*>(grad_in.data_ptr());
    _Pragma("omp parallel for if (rows * c > 65536)")
    for (int64_t r = 0; r < rows; ++r) {
      const scalar_t* gr = g + r * c;
      const scalar_t* yr = yy + r * c;
      scalar_t* out = gi + r * c;
      A dot = 0;
      if (log) {
        for (int64_t j = 0; j < c; ++j) dot += static_cast<A>(gr[j]);
        for (int64_t j = 0; j < c; ++j)
          out[j] = static_cast<scalar_t>(static_cast<A>(gr[j]) - std::exp(static_cast<A>(yr[j])) * dot);
      } else {
        for (int64_t j = 0; j < c; ++j) dot += static_cast<A>(gr[j]) * static_cast<A>(yr[j]);
        for (int64_t j = 0; j < c; ++j)
          out[j] = static_cast<scalar_t>(static_cast<A>(yr[j]) * (static_cast<A>(gr[j]) - dot));
      }
    }
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

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& grad_logp, int64_t ignore_index) {
  const int64_t n = grad_logp.shape()[0], c = grad_logp.shape()[1];
  const int64_t* tg = static_cast<const int64_t*>(target.data_ptr());
  fill(grad_logp, 0.0);
  HG_DISPATCH_FLOATING(grad_logp.dtype(), "nll_loss_backward", [&] {
    const scalar_t* g = static_cast<const scalar_t*>(grad.data_ptr());
    scalar_t* o = static_cast<scalar_t*>(grad_logp.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      if (tg[i] != ignore_index) o[i * c + tg[i]] = static_cast<scalar_t>(-static_cast<double>(g[i]));
  });
}

}  // namespace halfgrad::cpu
