#pragma once
// Adam and AdamW with PyTorch's formulas (torch.optim.Adam / AdamW), per
// parameter at step t (counted from 1):
//   Adam:  g = g + weight_decay * p          (L2 penalty in the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)   (decoupled decay, before the update)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   v_hat = amsgrad ? (v_max = max(v_max, v)) : v
//   p -= lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
#include <array>

#include "optim/optimizer.h"

namespace halfgrad::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

struct AdamState {
  int64_t step = 0;
  Tensor exp_avg;         // m, in the param's dtype
  Tensor exp_avg_sq;      // v
  Tensor max_exp_avg_sq;  // v_max (amsgrad only)
};

class Adam : public OptimizerImpl<AdamOptions, AdamState> {
 public:
  using Options = AdamOptions;
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});

 protected:
  void check_options(const AdamOptions& o) const override;
  void update(Tensor& param, Tensor& grad, AdamState& state, const AdamOptions& o, const Tensor& inv_scale) override;
};

class AdamW : public OptimizerImpl<AdamWOptions, AdamState> {
 public:
  using Options = AdamWOptions;
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});

 protected:
  void check_options(const AdamWOptions& o) const override;
  void update(Tensor& param, Tensor& grad, AdamState& state, const AdamWOptions& o, const Tensor& inv_scale) override;
};

}  // namespace halfgrad::optim
