#include <halfgrad/optim/optimizer.h>

namespace halfgrad::optim {

void Optimizer::zero_grad(bool set_to_none) {
  for (size_t g = 0; g < num_param_groups(); ++g) {
    for (const auto& p : group_params(g)) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        NoGradGuard no_grad;
        grad.zero_();
      }
    }
  }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (const auto& p : group_params(g)) out.push_back(p);
  return out;
}

void Optimizer::check_param(const Tensor& p, size_t index) const {
  HG_CHECK(p.defined(), "{}: parameter {} is an undefined tensor", name(), index);
  HG_CHECK(p.is_floating_point(), "{}: parameter {} is {}; only floating tensors can be optimized", name(), index,
           p.describe());
  HG_CHECK(p.is_leaf(),
           "{}: parameter {} ({}) is not a leaf tensor (it has a grad_fn), so it never receives a .grad. Optimize "
           "the tensor it was computed from, or make it a leaf with detach().requires_grad_().",
           name(), index, p.describe());
}

}  // namespace halfgrad::optim

namespace halfgrad::optim {

std::vector<Tensor> Optimizer::scaled_grads() const {
  std::vector<Tensor> grads;
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (const auto& p : group_params(g))
      if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

}  // namespace halfgrad::optim
