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
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
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
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }

  std::string approximate;
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) const { return sigmoid(x); }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) const { return tanh(x); }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
};

// MobileNetV3's activations. `inplace` is accepted so that PyTorch-shaped code
// (nn.Hardswish(inplace=True)) reads the same, and shown in the repr as
// PyTorch does, but ignored: these layers always compute out of place (an
// in-place activation would need its own op and version bump; the result is
// the same, at the cost of one more tensor).
class ReLU6 : public Module {
 public:
  explicit ReLU6(bool inplace = false) : inplace(inplace) {}
  Tensor forward(const Tensor& x) const { return relu6(x); }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  std::string extra_repr() const override { return inplace ? "inplace=True" : ""; }
  bool inplace;
};

class Hardswish : public Module {
 public:
  explicit Hardswish(bool inplace = false) : inplace(inplace) {}
  Tensor forward(const Tensor& x) const { return hardswish(x); }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  bool inplace;  // PyTorch's Hardswish repr does not show it either
};

class Hardsigmoid : public Module {
 public:
  explicit Hardsigmoid(bool inplace = false) : inplace(inplace) {}
  Tensor forward(const Tensor& x) const { return hardsigmoid(x); }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  bool inplace;  // not in the repr, as PyTorch's
};

// torch.nn.PReLU: one learnt slope for negative inputs (num_parameters = 1) or
// one per channel (num_parameters = C, the input's dim 1). Parameter "weight",
// float32 [num_parameters], filled with `init`.
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25) : num_parameters(num_parameters), init(init) {
    HG_CHECK(num_parameters >= 1, "PReLU: num_parameters must be at least 1, got {}", num_parameters);
    weight = full({num_parameters}, init);
    register_parameter("weight", weight);
  }
  Tensor forward(const Tensor& x) const { return prelu(x, weight); }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  std::string extra_repr() const override { return "num_parameters=" + std::to_string(num_parameters); }

  int64_t num_parameters;
  double init;
  Tensor weight;  // [num_parameters], float32
};

}  // namespace halfgrad::nn
