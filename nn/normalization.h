#pragma once
// Layer normalisation (torch.nn.LayerNorm): normalises over the last
// normalized_shape.size() dims of its input (hg::layer_norm).
//
// Parameters "weight" (ones) and "bias" (zeros), each of shape
// normalized_shape, when elementwise_affine (bias only when bias is true too):
// PyTorch's state-dict keys. Float32; under autocast the statistics are float32
// whatever the input's dtype (ops/transformer_ops.h).
//
//   hg::nn::LayerNorm ln(64);                          // x [..., 64]
//   hg::nn::LayerNorm ln2({8, 8}, {.eps = 1e-6, .bias = false});
#include <string>
#include <vector>

#include <halfgrad/nn/module.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
  bool bias = true;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, LayerNormOptions options = {});
  explicit LayerNorm(int64_t normalized_shape, LayerNormOptions options = {})
      : LayerNorm(std::vector<int64_t>{normalized_shape}, options) {}

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  // weight = 1, bias = 0.
  void reset_parameters();
  std::string extra_repr() const override;

  std::vector<int64_t> normalized_shape;
  double eps;
  bool elementwise_affine;
  Tensor weight;  // normalized_shape; undefined unless elementwise_affine
  Tensor bias;    // normalized_shape; undefined unless elementwise_affine and bias
};

}  // namespace halfgrad::nn
