#pragma once
// Linear: y = x W^T + b (torch.nn.Linear), weight [out, in], bias [out].
#include <halfgrad/amp/fp8.h>
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
  // Gives the layer its fp8 state (amp/fp8.h) as buffers on the weight's
  // device: fp8_scale, fp8_scale_inv, fp8_amax_history (in the state dict, so
  // a checkpoint resumes them exactly) and fp8_saturated (not saved). Inside an
  // amp::fp8_autocast region the layer then runs as amp::fp8_linear. Calling
  // it again with the same history length does nothing.
  void enable_fp8(const amp::Fp8Recipe& recipe);
  std::string extra_repr() const override;

 private:
  Tensor forward_any(const Tensor& x, Activation act) const;

 public:

  int64_t in_features, out_features;
  Tensor weight;  // [out_features, in_features], float32
  Tensor bias;    // [out_features], float32; undefined when bias = false
  Activation activation = Activation::None;
  amp::Fp8State fp8;  // undefined until enable_fp8
};

// enable_fp8 on every Linear in `model` (itself included); returns how many.
// Call it once after building the model (and after .to(device)) and before
// loading a checkpoint that has fp8 state or creating the optimizer.
int64_t enable_fp8(Module& model, const amp::Fp8Recipe& recipe = {});

}  // namespace halfgrad::nn
