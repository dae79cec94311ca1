#pragma once
// SGD with momentum, dampening, weight decay and Nesterov momentum, with
// PyTorch's formulas (torch.optim.SGD):
//   d_p = g + weight_decay * p
//   b   = d_p on the first step, else momentum * b + (1 - dampening) * d_p
//   d_p = nesterov ? d_p + momentum * b : b        (when momentum != 0)
//   p  -= lr * d_p
//
//   hg::optim::SGD optimizer(model.parameters(), {.lr = 0.01, .momentum = 0.9});
//
// bfloat16/float16 parameters without float32 master weights: the last three
// options (optim/low_precision.h), e.g. {.lr = 0.1, .stochastic_rounding = true}.
#include <halfgrad/optim/optimizer.h>

namespace halfgrad::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool master_weights = false;       // low_precision.h: a float32 copy of a bfloat16/float16 parameter
  bool stochastic_rounding = false;  // low_precision.h: no copy, SR writes the parameter
  std::optional<DType> state_dtype;  // the momentum buffer's dtype (unset: the parameter's)
};

struct SGDState {
  Tensor momentum_buffer;  // undefined until the first step with momentum
  // CUDA only: float32 scalar on the device counting the steps applied to the
  // buffer. A skipped step is decided on the device, so only the device knows
  // which applied step is the first (the one that starts the buffer as d_p).
  Tensor device_step;
  LowPrecisionState lp;  // master copy and SR stream (optim/low_precision.h)
};

class SGD : public OptimizerImpl<SGDOptions, SGDState> {
 public:
  using Options = SGDOptions;
  SGD(std::vector<Tensor> params, const SGDOptions& options);

 protected:
  void check_options(const SGDOptions& o) const override;
  void update(Tensor& param, Tensor& grad, SGDState& state, const SGDOptions& o, const Tensor& inv_scale) override;
  std::map<std::string, double> save_options(const SGDOptions& o) const override;
  SGDOptions load_options(detail::OptionReader& r) const override;
  std::map<std::string, Tensor> save_state(const SGDState& s) const override;
  SGDState load_state(detail::BufferReader& r, const SGDOptions& o) const override;
  bool has_fused_device_update() const override { return true; }
  bool fuses_low_precision(const Tensor& p, const SGDOptions& o) const override;
  void update_fused_device(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<SGDState*>& states, const SGDOptions& o,
                           const amp::ScalerStep& scaler) override;
};

}  // namespace halfgrad::optim
