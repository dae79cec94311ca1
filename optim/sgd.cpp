#include "optim/sgd.h"

#include "ops/ops.h"

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

void SGD::update(Tensor& p, const Tensor& grad, SGDState& state, const SGDOptions& o) {
  // Plain SGD is one in-place pass: p += -lr * g.
  Tensor d_p = o.weight_decay != 0.0 ? add(grad, p, o.weight_decay) : grad;
  if (o.momentum != 0.0) {
    Tensor& buf = state.momentum_buffer;
    if (!buf.defined()) {
      // Own copy: .grad may be zeroed in place later.
      buf = o.weight_decay != 0.0 ? d_p : d_p.clone();
    } else {
      buf.mul_(o.momentum).add_(d_p, 1.0 - o.dampening);
    }
    d_p = o.nesterov ? add(d_p, buf, o.momentum) : buf;
  }
  p.add_(d_p, -o.lr);
}

}  // namespace halfgrad::optim
