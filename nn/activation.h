#pragma once
// Activation layers: module wrappers of the functional ops, so they can sit
// in a Sequential.
#include "nn/module.h"
#include "ops/ops.h"

namespace halfgrad::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return relu(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

// The exact (erf) form, PyTorch's default approximate="none".
class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return gelu(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
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
