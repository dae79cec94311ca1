// softmax / log_softmax, the losses, dropout. cross_entropy is one fused op
// (log-softmax + NLL forward, softmax - one-hot backward) rather than two,
// so its backward needs no second pass over the logits.
#include <cmath>
#include <limits>
#include <memory>

#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/ops/dispatch.h>
#include <halfgrad/ops/kernels.h>
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

// Per-sample losses [N] -> the requested reduction. Mean divides by the
// number of targets that are not ignore_index (NaN when all are ignored, as
// in PyTorch). The count stays a tensor on the device: no host sync.
Tensor reduce_loss(const Tensor& per_sample, Reduction reduction, const Tensor& count) {
  switch (reduction) {
    case Reduction::None: return per_sample;
    case Reduction::Sum: return sum(per_sample);
    case Reduction::Mean: return div(sum(per_sample), count);
  }
  return per_sample;
}

// The gradient of each sample's loss, from the reduced loss's gradient.
Tensor per_sample_grad(const Tensor& g, Reduction reduction, int64_t n, const Tensor& count) {
  if (reduction == Reduction::None) return g.contiguous();
  const Tensor gs = reduction == Reduction::Mean ? div(g, count) : g;
  return ops::broadcast_to(gs.reshape({1}), {n}).contiguous();
}

// How many targets count toward the mean, as a 0-d tensor of `dtype`.
Tensor target_count(const Tensor& target, int64_t ignore_index, DType dtype) {
  return sum(ne(target, static_cast<double>(ignore_index))).to(dtype);
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return softmax_impl(OpId::softmax, a, dim, false); }
Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax_impl(OpId::log_softmax, a, dim, true); }

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  ops::check_defined("nll_loss", {{"input", &log_probs}, {"target", &target}});
  check_targets("nll_loss", log_probs, target);
  const int64_t n = log_probs.shape()[0];
  return dispatch::call(
      OpId::nll_loss, {log_probs, target},
      [=](const std::vector<Tensor>& in) {
        const Tensor lp = in[0].contiguous();
        Tensor per = make_tensor({n}, lp.options());
        kernels::nll_loss(lp, in[1].contiguous(), per, ignore_index);
        const Tensor count = reduction == Reduction::Mean ? target_count(in[1], ignore_index, lp.dtype()) : Tensor();
        return reduce_loss(per, reduction, count);
      },
      [=](const Saved& s, const Tensor& g) -> Grads {
        const Tensor& t = s.input(1);
        const Tensor count = reduction == Reduction::Mean ? target_count(t, ignore_index, g.dtype()) : Tensor();
        Tensor glp = make_tensor(s.input(0).shape(), g.options());
        kernels::nll_loss_backward(per_sample_grad(g, reduction, n, count), t.contiguous(), glp, ignore_index);
        return {glp, Tensor()};
      },
      Save::Inputs);
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
        Tensor per = make_tensor({n}, x.options());
        kernels::nll_loss(*logp, in[1].contiguous(), per, ignore_index, "cross_entropy");
        if (reduction == Reduction::Mean) *count = target_count(in[1], ignore_index, x.dtype());
        return reduce_loss(per, reduction, *count);
      },
      [=](const Saved& s, const Tensor& g) -> Grads {
        const Tensor& t = s.input(1);
        Tensor glp = make_tensor(logp->shape(), logp->options());
        kernels::nll_loss_backward(per_sample_grad(g.to(logp->dtype()), reduction, n, count->defined() ? count->to(logp->dtype()) : *count), t.contiguous(), glp,
                                   ignore_index);
        Tensor gx = make_tensor(logp->shape(), logp->options());
        kernels::softmax_backward(glp, *logp, gx, /*log=*/true);  // softmax(x) * sum - one-hot
        return {gx, Tensor()};
      },
      Save::Inputs);
}

namespace {
// The dtype a loss computes in: float32 for the half types, else its own.
DType compute_dtype(DType dt) { return dt == DType::Float16 || dt == DType::BFloat16 ? DType::Float32 : dt; }
}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  ops::check_defined("mse_loss", {{"input", &input}, {"target", &target}});
  HG_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()),
           "mse_loss: input {} and target {} must be floating", input.describe(), target.describe());
  ops::broadcast_shapes("mse_loss", input.shape(), target.shape());
  HG_CHECK(input.shape() == target.shape(),
           "mse_loss: input {} and target {} should have the same shape (PyTorch broadcasts with a warning; "
           "halfgrad asks you to expand explicitly)",
           input.describe(), target.describe());
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

namespace {
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
}  // namespace

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
}  // namespace

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction) {
  ops::check_defined("binary_cross_entropy", {{"input", &probs}, {"target", &target}});
  check_same_shape("binary_cross_entropy", probs, target);
  check_probabilities(probs);
  const DType dt = promote_types(probs.dtype(), target.dtype());
  return dispatch::call(
      OpId::binary_cross_entropy, {probs.to(dt), target.to(dt)},
      [reduction](const std::vector<Tensor>& in) {
        const Tensor &p = in[0], &t = in[1];
        // -(t log p + (1 - t) log(1 - p)), each log clamped at -100 as in PyTorch
        const Tensor logp = clamp(log(p), -100.0, std::nullopt);
        const Tensor log1mp = clamp(log(sub(ops::scalar_tensor(1.0, p.dtype(), p.device()), p)), -100.0, std::nullopt);
        const Tensor l = neg(add(mul(t, logp), mul(sub(ops::scalar_tensor(1.0, t.dtype(), t.device()), t), log1mp)));
        return reduce_elementwise(l, reduction);
      },
      [reduction](const Saved& s, const Tensor& g) -> Grads {
        const Tensor &p = s.input(0), &t = s.input(1);
        // (p - t) / max(p (1 - p), 1e-12)
        const Tensor one = ops::scalar_tensor(1.0, p.dtype(), p.device());
        const Tensor denom = clamp(mul(p, sub(one, p)), 1e-12, std::nullopt);
        const Tensor ge = elementwise_grad(g, reduction, p.shape());
        // d/dt = log(1 - p) - log(p), unclamped (PyTorch's target backward)
        const Tensor gt = s.needs_grad[1] ? mul(sub(log(sub(one, p)), log(p)), ge) : Tensor();
        return {s.needs_grad[0] ? mul(div(sub(p, t), denom), ge) : Tensor(), gt};
      },
      Save::Inputs);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction) {
  ops::check_defined("binary_cross_entropy_with_logits", {{"input", &logits}, {"target", &target}});
  check_same_shape("binary_cross_entropy_with_logits", logits, target);
  const DType dt = promote_types(logits.dtype(), target.dtype());
  return dispatch::call(
      OpId::binary_cross_entropy_with_logits, {logits.to(dt), target.to(dt)},
      [reduction](const std::vector<Tensor>& in) {
        const Tensor &x = in[0], &t = in[1];
        // stable form: max(x, 0) - x t + log(1 + exp(-|x|))
        const Tensor soft = log(add(exp(neg(abs(x))), 1.0));
        const Tensor l = add(sub(relu(x), mul(x, t)), soft);
        return reduce_elementwise(l, reduction);
      },
      [reduction](const Saved& s, const Tensor& g) -> Grads {
        const Tensor &x = s.input(0), &t = s.input(1);
        const Tensor ge = elementwise_grad(g, reduction, x.shape());
        return {s.needs_grad[0] ? mul(sub(sigmoid(x), t), ge) : Tensor(), s.needs_grad[1] ? mul(neg(x), ge) : Tensor()};
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
