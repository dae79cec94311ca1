#pragma once
// Dropout: zeroes each element with probability p and scales the rest by
// 1/(1-p) while training; the identity after eval().
#include <fmt/format.h>

#include <halfgrad/nn/module.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : p(p) {
    HG_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability must be in [0, 1], got {}", p);
  }
  Tensor forward(const Tensor& x) const { return dropout(x, p, is_training()); }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  std::string extra_repr() const override { return fmt::format("p={}", p); }

  double p;
};

}  // namespace halfgrad::nn
