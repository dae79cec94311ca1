#include "optim/sgd.h"

#include "ops/ops.h"
#include "optim/fused_cpu.h"

namespace halfgrad::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options) : OptimizerImpl("SGD", options) {
  add_param_group(std::move(params));
}

void SGD::check_options(const SGDOptions& o) const {
  HG_CHECK(o.lr >= 0.0, "SGD: invalid learning rate {} (must be >= 0)", o.lr);
  HG_CHECK(o.momentum >= 0.0, "SGD: invalid momentum {} (must be >= 0)", o.momentum);
  HG_CHECK(o.weight_decay >= 0.0, "SGD: invalid weight_decay {} (must be >= 0)", o.weight_decay);
  HG_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
           "SGD: Nesterov momentum requires a momentum > 0 and zero dampening (got momentum {}, dampening {})",
           o.momentum, o.dampening);
}

void SGD::update(Tensor& p, Tensor& grad, SGDState& state, const SGDOptions& o, const Tensor& inv_scale) {
  const bool first = !state.momentum_buffer.defined();
  if (o.momentum != 0.0 && first) state.momentum_buffer = empty_like(p);  // written by the first step
  if (fused::applies({&p, &grad, &state.momentum_buffer})) {
    // one pass: unscale, weight decay, momentum, update
    fused::sgd(p, grad, o.momentum != 0.0 ? state.momentum_buffer : Tensor(), fused::inv_scale_value(inv_scale),
               {static_cast<float>(o.lr), static_cast<float>(o.momentum), static_cast<float>(1.0 - o.dampening),
                static_cast<float>(o.weight_decay), o.nesterov, first});
    return;
  }
  // Any other dtype, layout or device: the same formulas as tensor ops.
  if (inv_scale.defined()) grad.mul_(inv_scale);
  Tensor d_p = o.weight_decay != 0.0 ? add(grad, p, o.weight_decay) : grad;
  if (o.momentum != 0.0) {
    Tensor& buf = state.momentum_buffer;
    if (first) {
      buf.copy_(d_p);
    } else {
      buf.mul_(o.momentum).add_(d_p, 1.0 - o.dampening);
    }
    d_p = o.nesterov ? add(d_p, buf, o.momentum) : buf;
  }
  p.add_(d_p, -o.lr);
}

}  // namespace halfgrad::optim
