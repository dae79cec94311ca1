#include "optim/adam.h"

#include <cmath>

#include "ops/ops.h"
#include "optim/fused_cpu.h"

namespace halfgrad::optim {

namespace {

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, decoupled;
};

void check(const char* name, double lr, const std::array<double, 2>& betas, double eps, double weight_decay) {
  HG_CHECK(lr >= 0.0, "{}: invalid learning rate {} (must be >= 0)", name, lr);
  HG_CHECK(eps >= 0.0, "{}: invalid eps {} (must be >= 0)", name, eps);
  HG_CHECK(betas[0] >= 0.0 && betas[0] < 1.0, "{}: invalid beta1 {} (must be in [0, 1))", name, betas[0]);
  HG_CHECK(betas[1] >= 0.0 && betas[1] < 1.0, "{}: invalid beta2 {} (must be in [0, 1))", name, betas[1]);
  HG_CHECK(weight_decay >= 0.0, "{}: invalid weight_decay {} (must be >= 0)", name, weight_decay);
}

// The one Adam/AdamW update; see adam.h for the formulas.
void adam_update(Tensor& p, Tensor& grad, AdamState& s, const AdamHyper& h, const Tensor& inv_scale) {
  if (!s.exp_avg.defined()) {
    s.exp_avg = zeros_like(p);
    s.exp_avg_sq = zeros_like(p);
    if (h.amsgrad) s.max_exp_avg_sq = zeros_like(p);
  }
  ++s.step;
  const double t = static_cast<double>(s.step);
  if (fused::applies({&p, &grad, &s.exp_avg, &s.exp_avg_sq, &s.max_exp_avg_sq})) {
    // one pass: unscale, weight decay, both moments, update
    const math::AdamHyper mh{static_cast<float>(h.beta1), static_cast<float>(1.0 - h.beta1),
                             static_cast<float>(h.beta2), static_cast<float>(1.0 - h.beta2),
                             static_cast<float>(h.eps), static_cast<float>(h.weight_decay),
                             static_cast<float>(1.0 - h.lr * h.weight_decay),
                             static_cast<float>(h.lr / (1.0 - std::pow(h.beta1, t))),
                             static_cast<float>(std::sqrt(1.0 - std::pow(h.beta2, t))), h.amsgrad, h.decoupled};
    fused::adam(p, grad, s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq, fused::inv_scale_value(inv_scale), mh);
    return;
  }
  // Any other dtype, layout or device: the same formulas as tensor ops.
  if (inv_scale.defined()) grad.mul_(inv_scale);
  Tensor g = grad;
  if (h.weight_decay != 0.0) {
    if (h.decoupled) p.mul_(1.0 - h.lr * h.weight_decay);
    else g = add(grad, p, h.weight_decay);
  }
  s.exp_avg.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  s.exp_avg_sq.mul_(h.beta2).add_(mul(g, g), 1.0 - h.beta2);

  const double bias_correction1 = 1.0 - std::pow(h.beta1, t);
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, t));
  const double step_size = h.lr / bias_correction1;

  Tensor v = s.exp_avg_sq;
  if (h.amsgrad) {
    s.max_exp_avg_sq.copy_(maximum(s.max_exp_avg_sq, s.exp_avg_sq));
    v = s.max_exp_avg_sq;
  }
  // denom = sqrt(v) / sqrt(1 - beta2^t) + eps, built in one temporary
  Tensor denom = sqrt(v);
  denom.mul_(1.0 / bias_correction2_sqrt).add_(full({}, h.eps, denom.options()));
  p.add_(div(s.exp_avg, denom), -step_size);
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : OptimizerImpl("Adam", options) {
  add_param_group(std::move(params));
}

void Adam::check_options(const AdamOptions& o) const { check("Adam", o.lr, o.betas, o.eps, o.weight_decay); }

void Adam::update(Tensor& p, Tensor& grad, AdamState& state, const AdamOptions& o, const Tensor& inv_scale) {
  adam_update(p, grad, state, {o.lr, o.betas[0], o.betas[1], o.eps, o.weight_decay, o.amsgrad, false}, inv_scale);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options) : OptimizerImpl("AdamW", options) {
  add_param_group(std::move(params));
}

void AdamW::check_options(const AdamWOptions& o) const { check("AdamW", o.lr, o.betas, o.eps, o.weight_decay); }

void AdamW::update(Tensor& p, Tensor& grad, AdamState& state, const AdamWOptions& o, const Tensor& inv_scale) {
  adam_update(p, grad, state, {o.lr, o.betas[0], o.betas[1], o.eps, o.weight_decay, o.amsgrad, true}, inv_scale);
}

}  // namespace halfgrad::optim
