// softmax / log_softmax, the losses, dropout. cross_entropy is one fused op
// (log-softmax + NLL forward, softmax - one-hot backward) rather than two,
// so its backward needs no second pass over the logits.
#include <cmath>
#include <cstdio>
#include <functional>
#include <mutex>
#include <utility>
#include <limits>
#include <memory>

#include <halfgrad/dispatch/grad_mode.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/grad_ops.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;

namespace {

// softmax over `dim`: the kernel works on the last dim of a contiguous
// tensor, so other dims are moved last and back.
Tensor softmax_impl(OpId id, const Tensor& a, int64_t dim, bool log) {
  const std::string_view name = op_name(id);
  ops::check_defined(name, {{"input", &a}});
  HG_CHECK(is_floating(a.dtype()), "{}: input {} must be floating", name, a.describe());
  const int64_t d = ops::wrap_dim(name, dim, a.dim());
  const bool last = a.dim() == 0 || d == a.dim() - 1;
  return dispatch::call(
      id, {a},
      [d, last, log](const std::vector<Tensor>& in) {
        const Tensor x = (last ? in[0] : in[0].transpose(d, -1)).contiguous();
        Tensor y = make_tensor(x.shape(), x.options());
        kernels::softmax(x, y, log);
        return last ? y : y.transpose(d, -1);
      },
      [d, last, log](const Saved& s, const Tensor& g) -> Grads {
        if (ops::creating_graph()) {  // with ops: differentiable again (y is this node's output)
          const Tensor& y = s.output();
          if (log) return {sub(g, mul(exp(y), sum(g, {d}, true)))};
          return {mul(y, sub(g, sum(mul(g, y), {d}, true)))};
        }
        const Tensor y = (last ? s.output() : s.output().transpose(d, -1)).contiguous();
        const Tensor gl = (last ? g : g.transpose(d, -1)).contiguous();
        Tensor gi = make_tensor(y.shape(), y.options());
        kernels::softmax_backward(gl, y, gi, log);
        return {last ? gi : gi.transpose(d, -1)};
      },
      Save::Output);
}

void check_targets(std::string_view op, const Tensor& input, const Tensor& target) {
  HG_CHECK(input.dim() == 2, "{}: input must be 2-d [batch, classes], got {}", op, input.describe());
  HG_CHECK(target.dtype() == DType::Int64,
           "{}: target must hold class indices as int64, got {}. For class probabilities, use a loss that takes "
           "them; for float-valued class indices, cast with .to(int64).",
           op, target.describe());
  HG_CHECK(target.dim() == 1 && target.shape()[0] == input.shape()[0],
           "{}: target {} must be 1-d with one class index per row of input {}", op, target.describe(),
           input.describe());
  HG_CHECK(is_floating(input.dtype()), "{}: input {} must be floating", op, input.describe());
}

// The loss from log-probabilities [N, C]: per sample for Reduction::None,
// else reduced in one kernel call; a mean also keeps its count (the targets
// that are not ignore_index; NaN loss when all are ignored, as in PyTorch) in
// *count for backward. The count stays a tensor on the device: no host sync.
Tensor nll_forward(const char* op, const Tensor& logp, const Tensor& target, Reduction reduction,
                   int64_t ignore_index, Tensor* count) {
  if (reduction == Reduction::None) {
    Tensor per = make_tensor({logp.shape()[0]}, logp.options());
    kernels::nll_loss(logp, target, per, ignore_index, op);
    return per;
  }
  Tensor loss = make_tensor({}, logp.options()), k = make_tensor({}, logp.options());
  kernels::nll_loss_reduced(logp, target, loss, k, ignore_index, reduction == Reduction::Mean, op);
  if (reduction == Reduction::Mean) *count = k;
  return loss;
}

// The gradient of each sample's loss, from the reduced loss's gradient.
Tensor per_sample_grad(const Tensor& g, Reduction reduction, int64_t n, const Tensor& count) {
  if (reduction == Reduction::None) return g.contiguous();
  const Tensor gs = reduction == Reduction::Mean ? div(g, count) : g;
  return ops::broadcast_to(gs, {n});  // a stride-0 view: the kernels read grad[i * stride]
}

// Under create_graph: per_sample_grad without the stride-0 view (0-d for a
// reduced loss, broadcast by the ops that use it).
Tensor reduced_grad_ops(const Tensor& g, Reduction reduction, const Tensor& count) {
  return reduction == Reduction::Mean ? div(g, count.to(g.dtype())) : g;
}

// Under create_graph: nll's gradient with ops, -gs[i] at (i, target[i]) and 0
// in rows whose target is ignore_index; differentiable in gs.
Tensor target_grad_ops(const Tensor& gs, const Tensor& target, int64_t classes, int64_t ignore_index) {
  const Tensor valid = ne(target, static_cast<double>(ignore_index));
  const Tensor picked = one_hot(where(valid, target, zeros_like(target)), classes).to(gs.dtype());
  return neg(mul(picked, mul(gs, valid.to(gs.dtype())).unsqueeze(1)));
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return softmax_impl(OpId::softmax, a, dim, false); }
Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax_impl(OpId::log_softmax, a, dim, true); }

namespace {
// nll_loss; `op` names the user's op (nll_loss, cross_entropy) in the kernel's out-of-range message.
Tensor nll_loss_op(const char* op, const Tensor& log_probs, const Tensor& target, Reduction reduction,
                   int64_t ignore_index) {
  ops::check_defined(op, {{"input", &log_probs}, {"target", &target}});
  check_targets(op, log_probs, target);
  const int64_t n = log_probs.shape()[0];
  auto count = std::make_shared<Tensor>();  // the mean's, kept for backward
  return dispatch::call(
      OpId::nll_loss, {log_probs, target},
      [=](const std::vector<Tensor>& in) {
        return nll_forward(op, in[0].contiguous(), in[1].contiguous(), reduction, ignore_index, count.get());
      },
      [=](const Saved& s, const Tensor& g) -> Grads {
        const Tensor& t = s.input(1);
        if (ops::creating_graph())
          return {target_grad_ops(reduced_grad_ops(g, reduction, *count), t, s.input(0).shape()[1], ignore_index),
                  Tensor()};
        Tensor glp = make_tensor(s.input(0).shape(), g.options());
        const Tensor k = count->defined() ? count->to(g.dtype()) : *count;
        kernels::nll_loss_backward(per_sample_grad(g, reduction, n, k), t.contiguous(), glp, ignore_index);
        return {glp, Tensor()};
      },
      Save::Inputs);
}
}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  return nll_loss_op("nll_loss", log_probs, target, reduction, ignore_index);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  ops::check_defined("cross_entropy", {{"input", &logits}, {"target", &target}});
  check_targets("cross_entropy", logits, target);
  const int64_t n = logits.shape()[0];
  // log-probabilities computed in forward, kept for backward
  auto logp = std::make_shared<Tensor>();
  auto count = std::make_shared<Tensor>();
  return dispatch::call(
      OpId::cross_entropy, {logits, target},
      [=](const std::vector<Tensor>& in) {
        const Tensor x = in[0].contiguous();
        *logp = make_tensor(x.shape(), x.options());
        kernels::softmax(x, *logp, /*log=*/true);
        return nll_forward("cross_entropy", *logp, in[1].contiguous(), reduction, ignore_index, count.get());
      },
      [=](const Saved& s, const Tensor& g) -> Grads {
        const Tensor& t = s.input(1);
        if (ops::creating_graph()) {  // softmax(x) - one-hot, with ops from the saved logits
          const Tensor& x = s.input(0);
          const Tensor gs = reduced_grad_ops(g.to(x.dtype()), reduction, *count);
          const Tensor valid = ne(t, static_cast<double>(ignore_index)).to(x.dtype());
          return {add(mul(softmax(x, 1), mul(gs, valid).unsqueeze(1)), target_grad_ops(gs, t, x.shape()[1], ignore_index)),
                  Tensor()};
        }
        const Tensor k = count->defined() ? count->to(logp->dtype()) : *count;
        Tensor gx = make_tensor(logp->shape(), logp->options());
        // softmax(x) - one-hot, times each sample's gradient
        kernels::cross_entropy_backward(per_sample_grad(g.to(logp->dtype()), reduction, n, k), *logp, t.contiguous(),
                                        gx, ignore_index);
        return {gx, Tensor()};
      },
      Save::Inputs);
}

namespace {
// The dtype a loss computes in: float32 for the half types, else its own.
DType compute_dtype(DType dt) { return dt == DType::Float16 || dt == DType::BFloat16 ? DType::Float32 : dt; }

Tensor reduce_elementwise(const Tensor& l, Reduction reduction) {
  return reduction == Reduction::None ? l : (reduction == Reduction::Sum ? sum(l) : mean(l));
}
// The gradient of each element's loss from the reduced loss's gradient.
Tensor elementwise_grad(const Tensor& g, Reduction reduction, const Shape& shape) {
  if (reduction == Reduction::None) return g;
  const Tensor gs = reduction == Reduction::Mean ? div(g, static_cast<double>(shape_numel(shape))) : g;
  return ops::broadcast_to(gs, shape);
}
void check_same_shape(std::string_view op, const Tensor& input, const Tensor& target) {
  HG_CHECK(input.shape() == target.shape(), "{}: input {} and target {} must have the same shape", op,
           input.describe(), target.describe());
  HG_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()),
           "{}: input {} and target {} must be floating (targets are probabilities in [0, 1])", op, input.describe(),
           target.describe());
}

// ---- weights -----------------------------------------------------------------
// Per-class weights of nll_loss / cross_entropy: [C], floating, on the input's
// device (host-side checks, no data read). The dtype is checked after autocast
// (check_weight_dtype): it must be the input's, as in PyTorch.
void check_class_weight(std::string_view op, const Tensor& w, const Tensor& input, int64_t classes) {
  if (!w.defined()) return;
  HG_CHECK(w.dim() == 1 && w.shape()[0] == classes,
           "{}: weight tensor should be defined either for all {} classes or no classes but got weight {} "
           "(input {}); pass one weight per class, shape [{}]",
           op, classes, w.describe(), input.describe(), classes);
  HG_CHECK(is_floating(w.dtype()), "{}: weight {} must be floating (the input's dtype, {})", op, w.describe(),
           dtype_name(input.dtype()));
  HG_CHECK(w.device() == input.device(), "{}: weight {} must be on the input's device ({}); move it with .to()", op,
           w.describe(), input.device().str());
}
// A weight broadcast over the elements (binary_cross_entropy(_with_logits)).
void check_elementwise_weight(std::string_view op, std::string_view what, const Tensor& w, const Tensor& input) {
  if (!w.defined()) return;
  HG_CHECK(is_floating(w.dtype()), "{}: {} {} must be floating (the input's dtype, {})", op, what, w.describe(),
           dtype_name(input.dtype()));
  HG_CHECK(w.device() == input.device(), "{}: {} {} must be on the input's device ({}); move it with .to()", op,
           what, w.describe(), input.device().str());
  bool ok = w.dim() <= input.dim();
  for (int64_t i = 1; ok && i <= w.dim(); ++i) {
    const int64_t ws = w.shape()[w.dim() - i], is = input.shape()[input.dim() - i];
    ok = ws == is || ws == 1;
  }
  HG_CHECK(ok, "{}: {} {} must broadcast to the input's shape {} (e.g. one value per class, [C])", op, what,
           w.describe(), shape_str(input.shape()));
}
void check_weight_dtype(std::string_view op, std::string_view what, const Tensor& w, DType dt) {
  HG_CHECK(!w.defined() || w.dtype() == dt,
           "{}: {} {} must have the input's dtype {} (as in PyTorch); cast it with .to({}) or run under autocast", op,
           what, w.describe(), dtype_name(dt), dtype_name(dt));
}

// Per-sample weights w[t_i], 0 where t_i is ignore_index, through a one-hot
// mask [N, C] (halfgrad has no gather op yet; O(N C) like the loss itself).
// The weights are constants: no gradient reaches them (PyTorch has none).
Tensor target_weights(const Tensor& target, const Tensor& w, int64_t ignore_index) {
  const Tensor classes = arange(w.shape()[0], target.options()).unsqueeze(0);
  const Tensor onehot = eq(target.unsqueeze(1), classes).to(w.dtype());
  const Tensor wt = sum(mul(onehot, w.unsqueeze(0)), {1});
  return mul(wt, ne(target, static_cast<double>(ignore_index)).to(w.dtype()));
}

// nll_loss with class weights: mean divides by the summed weights of the
// targets that are not ignored (PyTorch's rule). `w` may be undefined.
Tensor weighted_nll(const char* op, const Tensor& logp, const Tensor& target, const Tensor& w, Reduction reduction,
                    int64_t ignore_index) {
  if (!w.defined()) return nll_loss_op(op, logp, target, reduction, ignore_index);
  const Tensor per = nll_loss_op(op, logp, target, Reduction::None, ignore_index);
  const Tensor wt = target_weights(target, w, ignore_index);
  const Tensor l = mul(per, wt);
  switch (reduction) {
    case Reduction::None: return l;
    case Reduction::Sum: return sum(l);
    case Reduction::Mean: return div(sum(l), sum(wt));
  }
  return l;
}

// Label smoothing's second term for class-index targets (PyTorch's
// cross_entropy_loss_label_smoothing): -sum_c w_c logp_c per sample, 0 where
// ignored, reduced with nll_loss's divisor.
Tensor smoothing_term(const Tensor& logp, const Tensor& target, const Tensor& w, Reduction reduction,
                      int64_t ignore_index) {
  const Tensor valid = ne(target, static_cast<double>(ignore_index));
  const Tensor per = neg(sum(w.defined() ? mul(logp, w.unsqueeze(0)) : logp, {1}));
  const Tensor s = where(valid, per, ops::scalar_tensor(0.0, per.dtype(), per.device()));  // masked_fill
  switch (reduction) {
    case Reduction::None: return s;
    case Reduction::Sum: return sum(s);
    case Reduction::Mean:
      return div(sum(s), w.defined() ? sum(target_weights(target, w, ignore_index)) : sum(valid.to(s.dtype())));
  }
  return s;
}

// cross_entropy with probability targets [N, C]: -sum_c w_c t_c logp_c per
// row; mean divides by N (not by the weights), as PyTorch.
Tensor probability_ce(const Tensor& logp, const Tensor& target, const Tensor& w, Reduction reduction,
                      double label_smoothing) {
  const int64_t n = logp.shape()[0], c = logp.shape()[1];
  const Tensor t =
      label_smoothing > 0.0 ? add(mul(target, 1.0 - label_smoothing), label_smoothing / static_cast<double>(c)) : target;
  Tensor l = mul(logp, t);
  if (w.defined()) l = mul(l, w.unsqueeze(0));
  switch (reduction) {
    case Reduction::None: return neg(sum(l, {1}));
    case Reduction::Sum: return neg(sum(l));
    case Reduction::Mean: return div(neg(sum(l)), static_cast<double>(n));  // n = 0: 0 / 0 = NaN, as PyTorch
  }
  return l;
}

// PyTorch's UserWarning for an elementwise loss whose target's shape differs
// from the input's, printed once per process and op to stderr (halfgrad has no
// logging facility; Python shows it once per call site).
void warn_broadcast(std::once_flag& flag, std::string_view op, const Tensor& input, const Tensor& target) {
  std::call_once(flag, [&] {
    std::fputs(fmt::format("halfgrad warning: {}: Using a target size ({}) that is different to the input size ({}). "
                           "This will likely lead to incorrect results due to broadcasting. Please ensure they have "
                           "the same size.\n",
                           op, shape_str(target.shape()), shape_str(input.shape()))
                   .c_str(),
               stderr);
  });
}

// Input and target expanded to their broadcast shape (differentiable views),
// with the warning when the shapes differ; an Error when they do not broadcast.
std::pair<Tensor, Tensor> broadcast_pair(std::string_view op, std::once_flag& flag, const Tensor& input,
                                         const Tensor& target) {
  ops::check_defined(op, {{"input", &input}, {"target", &target}});
  HG_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), "{}: input {} and target {} must be floating",
           op, input.describe(), target.describe());
  if (input.shape() == target.shape()) return {input, target};
  const Shape s = ops::broadcast_shapes(op, input.shape(), target.shape());
  warn_broadcast(flag, op, input, target);
  return {input.shape() == s ? input : input.expand(s), target.shape() == s ? target : target.expand(s)};
}

// l1_loss and smooth_l1_loss: composites of elementwise ops on d = input -
// target, in float32 for the half types (rounded once at the end).
Tensor elementwise_loss(OpId id, std::once_flag& flag, const Tensor& input, const Tensor& target, Reduction reduction,
                        std::function<Tensor(const Tensor&)> loss) {
  const auto [a, b] = broadcast_pair(op_name(id), flag, input, target);
  return dispatch::composite(id, {a, b}, [reduction, loss](const std::vector<Tensor>& in) {
    const DType dt = promote_types(in[0].dtype(), in[1].dtype()), wide = compute_dtype(dt);
    return reduce_elementwise(loss(sub(in[0].to(wide), in[1].to(wide))), reduction).to(dt);
  });
}
}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NLLLossOptions& options) {
  if (!options.weight.defined()) return nll_loss(log_probs, target, options.reduction, options.ignore_index);
  ops::check_defined("nll_loss", {{"input", &log_probs}, {"target", &target}});
  check_targets("nll_loss", log_probs, target);
  check_class_weight("nll_loss", options.weight, log_probs, log_probs.shape()[1]);
  const Reduction reduction = options.reduction;
  const int64_t ignore_index = options.ignore_index;
  return dispatch::composite(OpId::nll_loss, {log_probs, target, options.weight},
                             [=](const std::vector<Tensor>& in) {
                               const DType dt = in[0].dtype(), wide = compute_dtype(dt);
                               check_weight_dtype("nll_loss", "weight", in[2], dt);
                               return weighted_nll("nll_loss", in[0].to(wide), in[1], in[2].detach().to(wide), reduction,
                                                   ignore_index)
                                   .to(dt);
                             });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  const double eps = options.label_smoothing;
  // PyTorch 1.13 rejects eps > 1 and silently ignores eps < 0; halfgrad rejects both.
  HG_CHECK(eps >= 0.0 && eps <= 1.0, "cross_entropy: label_smoothing must be between 0.0 and 1.0, got {}", eps);
  ops::check_defined("cross_entropy", {{"input", &logits}, {"target", &target}});
  const bool probs = is_floating(target.dtype());
  if (!probs && !options.weight.defined() && eps == 0.0)  // the fused op
    return cross_entropy(logits, target, options.reduction, options.ignore_index);
  if (probs) {
    HG_CHECK(logits.dim() == 2 && is_floating(logits.dtype()),
             "cross_entropy: input must be floating 2-d [batch, classes], got {}", logits.describe());
    HG_CHECK(target.shape() == logits.shape(),
             "cross_entropy: a floating target {} holds class probabilities and must have the input's shape {}; "
             "class indices are int64 [batch]",
             target.describe(), logits.describe());
    HG_CHECK(options.ignore_index < 0,
             "cross_entropy: ignore_index ({}) is not supported for floating point (probability) targets, as in "
             "PyTorch; leave it at -100",
             options.ignore_index);
  } else {
    check_targets("cross_entropy", logits, target);
  }
  check_class_weight("cross_entropy", options.weight, logits, logits.shape()[1]);
  const Reduction reduction = options.reduction;
  const int64_t ignore_index = options.ignore_index;
  const double classes = static_cast<double>(logits.shape()[1]);
  return dispatch::composite(
      OpId::cross_entropy, {logits, target, options.weight}, [=](const std::vector<Tensor>& in) {
        check_weight_dtype("cross_entropy", "weight", in[2], in[0].dtype());
        const DType dt = probs ? promote_types(in[0].dtype(), in[1].dtype()) : in[0].dtype();
        const DType wide = compute_dtype(dt);
        const Tensor logp = log_softmax(in[0].to(wide), 1);
        const Tensor w = in[2].defined() ? in[2].detach().to(wide) : Tensor();
        if (probs) return probability_ce(logp, in[1].to(wide), w, reduction, eps).to(dt);
        Tensor loss = weighted_nll("cross_entropy", logp, in[1], w, reduction, ignore_index);
        if (eps > 0.0)
          loss = add(mul(loss, 1.0 - eps), mul(smoothing_term(logp, in[1], w, reduction, ignore_index), eps / classes));
        return loss.to(dt);
      });
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return mse_loss(input, target, MSELossOptions{.reduction = reduction});
}

Tensor mse_loss(const Tensor& input_, const Tensor& target_, const MSELossOptions& options) {
  static std::once_flag warned;
  const auto [input, target] = broadcast_pair("mse_loss", warned, input_, target_);
  const Reduction reduction = options.reduction;
  const DType dt = promote_types(input.dtype(), target.dtype());
  return dispatch::call(
      OpId::mse_loss, {input.to(dt), target.to(dt)},
      // Half inputs compute in float32 and round once at the end: the
      // difference, its square and the 2/n factor never round to the half type.
      [reduction](const std::vector<Tensor>& in) {
        const DType dt = in[0].dtype(), wide = compute_dtype(dt);  // after autocast (mse_loss: fp32)
        const Tensor d = sub(in[0].to(wide), in[1].to(wide));
        const Tensor sq = mul(d, d);
        return (reduction == Reduction::None ? sq : (reduction == Reduction::Sum ? sum(sq) : mean(sq))).to(dt);
      },
      [reduction](const Saved& s, const Tensor& g) -> Grads {
        const DType dt = s.input(0).dtype(), wide = compute_dtype(dt);
        const Tensor d = sub(s.input(0).to(wide), s.input(1).to(wide));
        double scale = 2.0;
        if (reduction == Reduction::Mean) scale /= static_cast<double>(d.numel());
        const Tensor gw = g.to(wide);
        const Tensor gd = mul(mul(d, scale), reduction == Reduction::None ? gw : ops::broadcast_to(gw, d.shape()));
        return {gd.to(dt), neg(gd).to(dt)};
      },
      Save::Inputs);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return l1_loss(input, target, L1LossOptions{.reduction = reduction});
}

Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossOptions& options) {
  static std::once_flag warned;
  return elementwise_loss(OpId::l1_loss, warned, input, target, options.reduction,
                          [](const Tensor& d) { return abs(d); });  // gradient sign(d), 0 at d = 0 (as PyTorch)
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  return smooth_l1_loss(input, target, SmoothL1LossOptions{.reduction = reduction, .beta = beta});
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossOptions& options) {
  const double beta = options.beta;
  HG_CHECK(beta >= 0.0, "smooth_l1_loss does not support negative values for beta (got {}); beta = 0 is l1_loss",
           beta);
  static std::once_flag warned;
  return elementwise_loss(OpId::smooth_l1_loss, warned, input, target, options.reduction, [beta](const Tensor& d) {
    const Tensor z = abs(d);
    if (beta == 0.0) return z;
    // 0.5 d^2 / beta where |d| < beta (gradient d / beta), else |d| - 0.5 beta (gradient sign(d))
    return where(lt(z, beta), mul(mul(d, d), 0.5 / beta), sub(z, 0.5 * beta));
  });
}

namespace {
// PyTorch's check, on CPU tensors (host memory: no sync). On CUDA it would cost
// a device sync per call, so there an input outside [0, 1] gives NaN (PyTorch
// raises a device-side assert, which ends the process).
void check_probabilities(const Tensor& probs) {
  if (!probs.device().is_cpu() || probs.numel() == 0) return;
  NoGradGuard no_grad;
  const Tensor p = probs.to(DType::Float64);
  auto count = [](const Tensor& b) { return sum(b.to(DType::Int64)).item<int64_t>(); };
  const int64_t bad = count(lt(p, 0.0)) + count(gt(p, 1.0)) + count(ne(p, p));  // NaN too
  HG_CHECK(bad == 0,
           "binary_cross_entropy: all elements of input should be between 0 and 1 ({} of {} are not, in {}); "
           "pass probabilities (e.g. sigmoid(logits)), or better binary_cross_entropy_with_logits on the logits",
           bad, probs.numel(), probs.describe());
}
// A weight as a constant: no gradient reaches it (PyTorch has none for these
// weights and raises when one is needed; halfgrad leaves .grad undefined).
Tensor constant(const Tensor& w) { return w.defined() ? w.detach() : w; }
// `l` times the weight when there is one.
Tensor weighted(const Tensor& l, const Tensor& w) { return w.defined() ? mul(l, w) : l; }
}  // namespace

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction) {
  return binary_cross_entropy(probs, target, BinaryCrossEntropyOptions{.reduction = reduction});
}

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, const BinaryCrossEntropyOptions& options) {
  ops::check_defined("binary_cross_entropy", {{"input", &probs}, {"target", &target}});
  check_same_shape("binary_cross_entropy", probs, target);
  check_elementwise_weight("binary_cross_entropy", "weight", options.weight, probs);
  check_probabilities(probs);
  const Reduction reduction = options.reduction;
  const DType dt = promote_types(probs.dtype(), target.dtype());
  return dispatch::call(
      OpId::binary_cross_entropy, {probs.to(dt), target.to(dt), constant(options.weight)},
      [reduction](const std::vector<Tensor>& in) {
        const Tensor &p = in[0], &t = in[1];
        check_weight_dtype("binary_cross_entropy", "weight", in[2], p.dtype());
        // -(t log p + (1 - t) log(1 - p)), each log clamped at -100 as in PyTorch
        const Tensor logp = clamp(log(p), -100.0, std::nullopt);
        const Tensor log1mp = clamp(log(sub(ops::scalar_tensor(1.0, p.dtype(), p.device()), p)), -100.0, std::nullopt);
        const Tensor l = neg(add(mul(t, logp), mul(sub(ops::scalar_tensor(1.0, t.dtype(), t.device()), t), log1mp)));
        return reduce_elementwise(weighted(l, in[2]), reduction);
      },
      [reduction](const Saved& s, const Tensor& g) -> Grads {
        const Tensor &p = s.input(0), &t = s.input(1), &w = s.input(2);
        // (p - t) / max(p (1 - p), 1e-12)
        const Tensor one = ops::scalar_tensor(1.0, p.dtype(), p.device());
        const Tensor denom = clamp(mul(p, sub(one, p)), 1e-12, std::nullopt);
        const Tensor ge = weighted(elementwise_grad(g, reduction, p.shape()), w);
        // d/dt = log(1 - p) - log(p), unclamped (PyTorch's target backward)
        const Tensor gt = s.needs_grad[1] ? mul(sub(log(sub(one, p)), log(p)), ge) : Tensor();
        // no gradient for the weight (PyTorch has none)
        return {s.needs_grad[0] ? mul(div(sub(p, t), denom), ge) : Tensor(), gt, Tensor()};
      },
      Save::Inputs);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction) {
  return binary_cross_entropy_with_logits(logits, target, BCEWithLogitsOptions{.reduction = reduction});
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const BCEWithLogitsOptions& options) {
  static constexpr std::string_view op = "binary_cross_entropy_with_logits";
  ops::check_defined(op, {{"input", &logits}, {"target", &target}});
  check_same_shape(op, logits, target);
  check_elementwise_weight(op, "weight", options.weight, logits);
  check_elementwise_weight(op, "pos_weight", options.pos_weight, logits);
  const Reduction reduction = options.reduction;
  const DType dt = promote_types(logits.dtype(), target.dtype());
  // softplus(-x) = log(1 + exp(-x)), stable: log(1 + exp(-|x|)) + max(-x, 0)
  auto softplus_neg = [](const Tensor& x) { return add(log(add(exp(neg(abs(x))), 1.0)), relu(neg(x))); };
  return dispatch::call(
      OpId::binary_cross_entropy_with_logits,
      {logits.to(dt), target.to(dt), constant(options.weight), constant(options.pos_weight)},
      [reduction, softplus_neg](const std::vector<Tensor>& in) {
        const Tensor &x = in[0], &t = in[1], &w = in[2], &pw = in[3];
        check_weight_dtype(op, "weight", w, x.dtype());
        check_weight_dtype(op, "pos_weight", pw, x.dtype());
        // (1 - t) x + (1 + (pw - 1) t) softplus(-x), as PyTorch
        const Tensor sp = softplus_neg(x);
        const Tensor pos = pw.defined() ? mul(add(mul(sub(pw, 1.0), t), 1.0), sp) : sp;
        const Tensor l = add(sub(x, mul(x, t)), pos);
        return reduce_elementwise(weighted(l, w), reduction);
      },
      [reduction, softplus_neg](const Saved& s, const Tensor& g) -> Grads {
        const Tensor &x = s.input(0), &t = s.input(1), &w = s.input(2), &pw = s.input(3);
        const Tensor ge = weighted(elementwise_grad(g, reduction, x.shape()), w);
        Tensor gx, gt;
        if (s.needs_grad[0]) {
          const Tensor sig = sigmoid(x);
          if (pw.defined()) {  // (pw t + 1 - t) sigmoid(x) - pw t
            const Tensor pwt = mul(pw, t);
            gx = sub(mul(add(sub(pwt, t), 1.0), sig), pwt);
          } else {
            gx = sub(sig, t);
          }
          gx = mul(gx, ge);
        }
        // d/dt: (pw - 1) softplus(-x) - x (-x without pos_weight)
        if (s.needs_grad[1]) gt = mul(pw.defined() ? sub(mul(sub(pw, 1.0), softplus_neg(x)), x) : neg(x), ge);
        // no gradient for weight and pos_weight (PyTorch has none)
        return {gx, gt, Tensor(), Tensor()};
      },
      Save::Inputs);
}

Tensor dropout(const Tensor& a, double p, bool training) {
  HG_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got {}", p);
  if (!training || p == 0.0) return a;
  return dispatch::composite(OpId::dropout, {a}, [p](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    if (p == 1.0) return mul(x, 0.0);
    // keep with probability 1 - p, scale kept values by 1 / (1 - p)
    const Tensor keep = ge(rand(x.shape(), x.options()), p);
    const Tensor mask = div(keep.to(x.dtype()), 1.0 - p);
    return mul(x, mask);
  });
}

}  // namespace halfgrad
