#pragma once
// Adam and AdamW with PyTorch's formulas (torch.optim.Adam / AdamW), per
// parameter at step t (counted from 1):
//   Adam:  g = g + weight_decay * p          (L2 penalty in the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)   (decoupled decay, before the update)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   v_hat = amsgrad ? (v_max = max(v_max, v)) : v
//   p -= lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
//
// bfloat16/float16 parameters without float32 master weights: the last three
// options (optim/low_precision.h), e.g. {.lr = 1e-3, .stochastic_rounding =
// true, .state_dtype = hg::float32}.
#include <array>

#include <halfgrad/optim/optimizer.h>

namespace halfgrad::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool master_weights = false;       // low_precision.h: a float32 copy of a bfloat16/float16 parameter
  bool stochastic_rounding = false;  // low_precision.h: no copy, SR writes the parameter
  std::optional<DType> state_dtype;  // the moments' dtype (unset: the parameter's)
};

struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool master_weights = false;       // low_precision.h: a float32 copy of a bfloat16/float16 parameter
  bool stochastic_rounding = false;  // low_precision.h: no copy, SR writes the parameter
  std::optional<DType> state_dtype;  // the moments' dtype (unset: the parameter's)
};

struct AdamState {
  int64_t step = 0;       // steps applied on the host path (CPU, or CUDA params without a fused kernel)
  Tensor exp_avg;         // m, in the param's dtype (or the options' state_dtype)
  Tensor exp_avg_sq;      // v
  Tensor max_exp_avg_sq;  // v_max (amsgrad only)
  // CUDA fused path: the step count as a float32 scalar on the device, as in
  // PyTorch's fused Adam. A skipped step is decided on the device, so the
  // count is advanced there (and `step` above stays 0). Undefined otherwise.
  Tensor device_step;
  LowPrecisionState lp;  // master copy and SR stream (optim/low_precision.h)

  // Applied steps, wherever they are counted (on CUDA, asking waits for the GPU).
  int64_t step_count() const {
    return device_step.defined() ? static_cast<int64_t>(device_step.item<float>()) : step;
  }
};

class Adam : public OptimizerImpl<AdamOptions, AdamState> {
 public:
  using Options = AdamOptions;
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});

 protected:
  void check_options(const AdamOptions& o) const override;
  void update(Tensor& param, Tensor& grad, AdamState& state, const AdamOptions& o, const Tensor& inv_scale) override;
  std::map<std::string, double> save_options(const AdamOptions& o) const override;
  AdamOptions load_options(detail::OptionReader& r) const override;
  std::map<std::string, Tensor> save_state(const AdamState& s) const override;
  AdamState load_state(detail::BufferReader& r, const AdamOptions& o) const override;
  bool has_fused_device_update() const override { return true; }
  bool fuses_low_precision(const Tensor& p, const AdamOptions& o) const override;
  void update_fused_device(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<AdamState*>& states, const AdamOptions& o,
                           const amp::ScalerStep& scaler) override;
};

class AdamW : public OptimizerImpl<AdamWOptions, AdamState> {
 public:
  using Options = AdamWOptions;
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});

 protected:
  void check_options(const AdamWOptions& o) const override;
  void update(Tensor& param, Tensor& grad, AdamState& state, const AdamWOptions& o, const Tensor& inv_scale) override;
  std::map<std::string, double> save_options(const AdamWOptions& o) const override;
  AdamWOptions load_options(detail::OptionReader& r) const override;
  std::map<std::string, Tensor> save_state(const AdamState& s) const override;
  AdamState load_state(detail::BufferReader& r, const AdamWOptions& o) const override;
  bool has_fused_device_update() const override { return true; }
  bool fuses_low_precision(const Tensor& p, const AdamWOptions& o) const override;
  void update_fused_device(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<AdamState*>& states, const AdamWOptions& o,
                           const amp::ScalerStep& scaler) override;
};

}  // namespace halfgrad::optim
