#pragma once
// Activation layers: module wrappers of the functional ops, so they can sit
// in a Sequential.
#include <string>
#include <utility>

#include <halfgrad/nn/module.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return relu(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

// torch.nn.GELU: approximate "none" (the exact erf form, the default) or
// "tanh". After a Linear in a Sequential, either runs fused with it.
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate(std::move(approximate)) {
    HG_CHECK(this->approximate == "none" || this->approximate == "tanh",
             "GELU: approximate must be \"none\" (exact, the default) or \"tanh\", got \"{}\"", this->approximate);
  }
  Tensor forward(const Tensor& x) const { return gelu(x, approximate); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }

  std::string approximate;
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) const { return sigmoid(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) const { return tanh(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

}  // namespace halfgrad::nn
