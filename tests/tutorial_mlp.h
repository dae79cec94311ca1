#pragma once
// The MLP of PyTorch's AMP tutorial (examples/mlp), shared by the tests that
// train or inspect it: Linear(10, 100) -> ReLU -> Linear(100, 10).
#include <halfgrad.h>

namespace hgtest {

struct MLP : halfgrad::nn::Module {
  halfgrad::nn::Linear linear1{10, 100}, linear2{100, 10};
  MLP() {
    register_module("linear1", linear1);
    register_module("linear2", linear2);
  }
  halfgrad::Tensor forward(const halfgrad::Tensor& x) { return linear2(halfgrad::relu(linear1(x))); }
};

}  // namespace hgtest
