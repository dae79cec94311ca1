#pragma once
// gradcheck: compare the gradients that backward() computes against central
// finite differences, in float64 (docs/architecture.md, "Tests": "backward against a
// finite-difference gradient check in float64").
//
//   auto fn = [](const std::vector<Tensor>& in) { return mul(in[0], exp(in[1])); };
//   Tensor x = randn({3, 4}, float64).requires_grad_();
//   Tensor y = randn({4}, float64).requires_grad_();
//   autograd::gradcheck(fn, {x, y});          // throws halfgrad::Error on a mismatch
//   auto r = autograd::gradcheck(fn, {x, y}, {.raise = false});
//   if (!r.ok) fmt::print("{}\n", r.message);
//
// How it works. The function maps the inputs to one floating tensor y. With a
// fixed random upstream gradient v (y's shape; v = 1 for a one-element y, for
// which the implicit `backward()` is used), the scalar L(x) = sum(v * y(x))
// has dL/dx = the vector-Jacobian product that backward(v) computes. For
// every element x_j of every input that requires grad, the checker compares
// that analytical value with (L(x + eps e_j) - L(x - eps e_j)) / (2 eps),
// evaluated under no_grad, and accepts |analytical - numerical| <= atol +
// rtol * |numerical|.
//
// Requirements on the inputs: those that require grad must be float64 CPU
// leaves whose elements do not overlap in memory (no expanded views: expand
// inside `fn` instead); they may be non-contiguous (a transposed leaf tests
// the strided paths). Inputs that do not require grad (int64 targets, masks,
// constants) are passed to `fn` unchanged. The inputs' existing `.grad` are
// restored afterwards and their values are put back bit for bit. `fn` must be
// deterministic (no dropout) and smooth at the given point (keep inputs away
// from the kinks of relu/abs/clamp/max).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <halfgrad/autograd/grad.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/core/error.h>
#include <halfgrad/core/tensor.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::autograd {

struct GradcheckOptions {
  double eps = 1e-6;    // finite-difference step
  double atol = 1e-5;   // absolute tolerance
  double rtol = 1e-3;   // relative tolerance (against |numerical|)
  uint64_t seed = 0;    // for the random upstream gradient
  bool raise = true;    // throw halfgrad::Error on a mismatch (else report in the result)
  size_t max_reported = 8;  // mismatches listed in the message
};

struct GradcheckMismatch {
  size_t input = 0;     // which input
  Shape position;       // multi-index of the element
  double analytical = 0, numerical = 0;
};

struct GradcheckResult {
  bool ok = true;
  int64_t checked = 0;         // elements compared
  double max_abs_error = 0;    // max |analytical - numerical|
  double max_rel_error = 0;    // max |analytical - numerical| / max(|numerical|, 1e-12)
  std::vector<GradcheckMismatch> mismatches;  // every failing element
  std::string message;         // a summary: "gradcheck: ok ..." or the first mismatches
  explicit operator bool() const { return ok; }
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

namespace gradcheck_detail {

inline Shape unravel(int64_t flat, const Shape& shape) {
  Shape idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) continue;
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// Storage offsets (in elements) of t's elements in row-major logical order.
inline std::vector<int64_t> element_offsets(const Tensor& t) {
  const int64_t n = t.numel();
  std::vector<int64_t> offs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Shape idx = unravel(i, t.shape());
    int64_t off = t.offset();
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    offs[static_cast<size_t>(i)] = off;
  }
  return offs;
}

// t's values as float64, row-major logical order (any dtype, CPU or not).
inline std::vector<double> values_f64(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor h = t.device().is_cpu() ? t : t.cpu();
  if (h.dtype() != DType::Float64) h = h.to(DType::Float64);
  const double* base = static_cast<const double*>(h.storage()->data);
  std::vector<double> out;
  out.reserve(static_cast<size_t>(h.numel()));
  for (int64_t off : element_offsets(h)) out.push_back(base[off]);
  return out;
}

inline std::string fmt_index(const Shape& s) { return shape_str(s); }

}  // namespace gradcheck_detail

inline GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                 GradcheckOptions opts = {}) {
  namespace d = gradcheck_detail;
  HG_CHECK(opts.eps > 0, "gradcheck: eps must be positive, got {}", opts.eps);

  // ---- validate the inputs --------------------------------------------------------------
  std::vector<size_t> checked_inputs;
  std::vector<std::vector<int64_t>> offsets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    HG_CHECK(t.dtype() == DType::Float64,
             "gradcheck: input {} ({}) requires grad but is not float64; finite differences need float64 "
             "(make it with .to(float64) and cast inside fn if the op under test runs in another dtype)",
             i, t.describe());
    HG_CHECK(t.device().is_cpu(), "gradcheck: input {} ({}) must be on the CPU", i, t.describe());
    HG_CHECK(t.is_leaf(),
             "gradcheck: input {} ({}) requires grad but is not a leaf (it has a grad_fn); pass a leaf and apply "
             "the op inside fn",
             i, t.describe());
    offsets[i] = d::element_offsets(t);
    std::vector<int64_t> sorted = offsets[i];
    std::sort(sorted.begin(), sorted.end());
    HG_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
             "gradcheck: input {} ({}) has elements that share memory (an expanded view); pass a leaf with "
             "distinct elements and expand inside fn",
             i, t.describe());
    checked_inputs.push_back(i);
  }
  HG_CHECK(!checked_inputs.empty(), "gradcheck: no input requires grad (call requires_grad_() on the inputs)");

  // ---- analytical: one backward with the upstream gradient v ------------------------------
  std::vector<Tensor> old_grads(inputs.size());
  for (size_t i : checked_inputs) {
    old_grads[i] = inputs[i].grad();
    inputs[i].set_grad(Tensor());
  }
  struct Restore {
    const std::vector<Tensor>& in;
    std::vector<Tensor>& old;
    const std::vector<size_t>& idx;
    ~Restore() {
      for (size_t i : idx) in[i].set_grad(old[i]);
    }
  } restore{inputs, old_grads, checked_inputs};

  std::vector<double> v;
  std::vector<std::vector<double>> analytical(inputs.size());
  {
    const bool was_enabled = grad_enabled();
    set_grad_enabled(true);
    struct ResetMode {
      bool prev;
      ~ResetMode() { set_grad_enabled(prev); }
    } reset_mode{was_enabled};

    Tensor out = fn(inputs);
    HG_CHECK(out.defined() && is_floating(out.dtype()), "gradcheck: fn must return a floating tensor, got {}",
             out.describe());
    HG_CHECK(out.requires_grad(),
             "gradcheck: the output {} does not require grad: no input that requires grad reaches it", out.describe());
    const int64_t n = out.numel();
    HG_CHECK(n > 0, "gradcheck: the output {} is empty", out.describe());
    if (n == 1) {
      v.assign(1, 1.0);
      out.backward();
    } else {
      std::mt19937_64 gen(opts.seed);
      std::normal_distribution<double> normal(0.0, 1.0);
      v.resize(static_cast<size_t>(n));
      for (auto& x : v) x = normal(gen);
      out.backward(tensor(v, out.shape(), TensorOptions(DType::Float64, out.device())));
    }
    for (size_t i : checked_inputs) {
      const Tensor g = inputs[i].grad();
      if (!g.defined()) {  // no path from this input to the output: a zero gradient
        analytical[i].assign(static_cast<size_t>(inputs[i].numel()), 0.0);
        continue;
      }
      HG_CHECK(g.shape() == inputs[i].shape(), "gradcheck: the gradient of input {} is {}, expected shape {}", i,
               g.describe(), shape_str(inputs[i].shape()));
      HG_CHECK(g.dtype() == inputs[i].dtype(), "gradcheck: the gradient of input {} is {}, expected dtype {}", i,
               g.describe(), dtype_name(inputs[i].dtype()));
      analytical[i] = d::values_f64(g);
    }
  }

  // ---- numerical: central differences under no_grad --------------------------------------
  NoGradGuard no_grad;
  auto objective = [&]() {
    const Tensor out = fn(inputs);
    const std::vector<double> y = d::values_f64(out);
    HG_CHECK(y.size() == v.size(), "gradcheck: fn returned {} elements under no_grad, {} with grad", y.size(),
             v.size());
    double s = 0;
    for (size_t k = 0; k < y.size(); ++k) s += v[k] * y[k];
    return s;
  };

  GradcheckResult r;
  for (size_t i : checked_inputs) {
    const Tensor& t = inputs[i];
    double* base = static_cast<double*>(t.storage()->data);
    for (size_t j = 0; j < offsets[i].size(); ++j) {
      double& x = base[offsets[i][j]];
      const double orig = x;
      x = orig + opts.eps;
      const double lp = objective();
      x = orig - opts.eps;
      const double lm = objective();
      x = orig;
      const double num = (lp - lm) / (2 * opts.eps);
      const double ana = analytical[i][j];
      const double err = std::fabs(ana - num);
      ++r.checked;
      const bool bad = !(err <= opts.atol + opts.rtol * std::fabs(num));  // NaN never passes
      if (std::isnan(err)) {
        r.max_abs_error = err;
        r.max_rel_error = err;
      } else if (!std::isnan(r.max_abs_error)) {
        r.max_abs_error = std::max(r.max_abs_error, err);
        r.max_rel_error = std::max(r.max_rel_error, err / std::max(std::fabs(num), 1e-12));
      }
      if (bad) r.mismatches.push_back({i, d::unravel(static_cast<int64_t>(j), t.shape()), ana, num});
    }
  }
  r.ok = r.mismatches.empty();
  if (r.ok) {
    r.message = fmt::format("gradcheck: ok ({} elements, max |analytical - numerical| = {:.3g})", r.checked,
                            r.max_abs_error);
    return r;
  }
  r.message = fmt::format(
      "gradcheck: {} of {} gradient elements differ from finite differences (atol {}, rtol {}, eps {}):",
      r.mismatches.size(), r.checked, opts.atol, opts.rtol, opts.eps);
  for (size_t k = 0; k < r.mismatches.size() && k < opts.max_reported; ++k) {
    const auto& m = r.mismatches[k];
    r.message += fmt::format("\n  input {} ({}) at {}: analytical {:.10g}, numerical {:.10g}", m.input,
                             inputs[m.input].describe(), d::fmt_index(m.position), m.analytical, m.numerical);
  }
  if (r.mismatches.size() > opts.max_reported) r.message += "\n  ...";
  if (opts.raise) throw Error(r.message);
  return r;
}

// PyTorch's gradgradcheck: the second derivatives of fn, by gradcheck on
// s(x) = sum_i <grad_i(x), v_i>, where grad = autograd::grad(fn(x), x, u,
// create_graph) for fixed u and v: s's gradient comes from a double backward,
// its finite differences from first-order gradients (themselves checked by
// gradcheck). An op whose backward is not twice differentiable raises its Error.
inline GradcheckResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                     GradcheckOptions opts = {}) {
  // fixed, uneven weights: a wrong term cannot cancel out
  auto weights_like = [](const Tensor& t, double phase) {
    NoGradGuard no_grad;
    return add(sin(add(mul(arange(0.0, static_cast<double>(t.numel()), 1.0, t.options()), 0.7), phase)), 1.5)
        .reshape(t.shape());
  };
  const GradcheckFn second = [fn, weights_like](const std::vector<Tensor>& in) {
    // gradcheck evaluates fn under no_grad for its finite differences: the
    // first-order gradients need a graph all the same, and one of their own
    // only where gradcheck differentiates s
    const bool create_graph = grad_enabled();
    GradModeGuard with_grad(true);
    std::vector<Tensor> wrt;
    for (const Tensor& t : in)
      if (t.defined() && t.requires_grad()) wrt.push_back(t);
    const Tensor y = fn(in);
    const std::vector<Tensor> grads =
        grad({y}, wrt, {weights_like(y, 0.3)}, {.create_graph = create_graph, .allow_unused = true});
    Tensor total = mul(sum(wrt[0]), 0.0);  // keeps a graph where every second derivative is 0 (ReLU)
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined()) total = add(total, sum(mul(grads[i], weights_like(grads[i], 1.1 * static_cast<double>(i)))));
    return total;
  };
  GradcheckOptions quiet = opts;
  quiet.raise = false;
  GradcheckResult r = gradcheck(second, inputs, quiet);
  r.message.replace(0, 9, "gradgradcheck");  // "gradcheck" would name the first derivatives
  if (!r.ok && opts.raise) throw Error(r.message);
  return r;
}

}  // namespace halfgrad::autograd

namespace halfgrad {
using autograd::gradcheck;
using autograd::gradgradcheck;
}
