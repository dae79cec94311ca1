#pragma once
// Linear: y = x W^T + b (torch.nn.Linear), weight [out, in], bias [out].
#include <halfgrad/nn/module.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

class Linear : public Module {
 public:
  // PyTorch's default init: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in))
  // (kaiming_uniform_ with a = sqrt(5)), drawn weight first from the global generator.
  // `activation` (halfgrad's extension): ReLU, GELU or GELUTanh applied with the
  // GEMM, one op instead of two (Sequential fuses Linear + ReLU/GELU this way).
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Activation activation = Activation::None);

  Tensor forward(const Tensor& x) const;
  // This layer followed by `act`, as one fused op.
  Tensor forward(const Tensor& x, Activation act) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  // Draws the parameters again.
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  Tensor weight;  // [out_features, in_features], float32
  Tensor bias;    // [out_features], float32; undefined when bias = false
  Activation activation = Activation::None;
};

}  // namespace halfgrad::nn
