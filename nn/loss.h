#pragma once
// Loss modules (torch.nn.*Loss): the functional losses of ops/ops.h with their
// settings, one options struct each (ops/loss_options.h, shared with the
// functions). Call as criterion(input, target).
//
//   nn::CrossEntropyLoss criterion({.weight = w, .label_smoothing = 0.1});
//
// A weight (and BCEWithLogitsLoss's pos_weight) is a registered buffer, as in
// PyTorch: it moves with to(device) and is in the state dict when defined.
#include <halfgrad/nn/module.h>
#include <halfgrad/ops/loss_options.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

using halfgrad::BCEWithLogitsOptions;
using halfgrad::BinaryCrossEntropyOptions;
using halfgrad::CrossEntropyOptions;
using halfgrad::L1LossOptions;
using halfgrad::MSELossOptions;
using halfgrad::NLLLossOptions;
using halfgrad::SmoothL1LossOptions;

// Logits [N, C] and int64 class indices [N] or floating class probabilities [N, C].
class CrossEntropyLoss : public Module {
 public:
  CrossEntropyLoss(const CrossEntropyOptions& options = {}) : options(options) {  // NOLINT: implicit from {...}
    register_buffer("weight", this->options.weight);
  }
  explicit CrossEntropyLoss(Reduction reduction, int64_t ignore_index = -100)
      : CrossEntropyLoss(CrossEntropyOptions{.ignore_index = ignore_index, .reduction = reduction}) {}
  Tensor forward(const Tensor& input, const Tensor& target) const { return cross_entropy(input, target, options); }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return with_forward_hooks(forward(input, target));
  }

  CrossEntropyOptions options;
};

// Log-probabilities [N, C] and int64 class indices [N].
class NLLLoss : public Module {
 public:
  NLLLoss(const NLLLossOptions& options = {}) : options(options) {  // NOLINT
    register_buffer("weight", this->options.weight);
  }
  explicit NLLLoss(Reduction reduction, int64_t ignore_index = -100)
      : NLLLoss(NLLLossOptions{.ignore_index = ignore_index, .reduction = reduction}) {}
  Tensor forward(const Tensor& input, const Tensor& target) const { return nll_loss(input, target, options); }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return with_forward_hooks(forward(input, target));
  }

  NLLLossOptions options;
};

class MSELoss : public Module {
 public:
  MSELoss(const MSELossOptions& options = {}) : options(options) {}  // NOLINT
  explicit MSELoss(Reduction reduction) : options{.reduction = reduction} {}
  Tensor forward(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, options); }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return with_forward_hooks(forward(input, target));
  }

  MSELossOptions options;
};

class L1Loss : public Module {
 public:
  L1Loss(const L1LossOptions& options = {}) : options(options) {}  // NOLINT
  explicit L1Loss(Reduction reduction) : options{.reduction = reduction} {}
  Tensor forward(const Tensor& input, const Tensor& target) const { return l1_loss(input, target, options); }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return with_forward_hooks(forward(input, target));
  }

  L1LossOptions options;
};

class SmoothL1Loss : public Module {
 public:
  SmoothL1Loss(const SmoothL1LossOptions& options = {}) : options(options) {}  // NOLINT
  explicit SmoothL1Loss(Reduction reduction, double beta = 1.0) : options{.reduction = reduction, .beta = beta} {}
  Tensor forward(const Tensor& input, const Tensor& target) const { return smooth_l1_loss(input, target, options); }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return with_forward_hooks(forward(input, target));
  }

  SmoothL1LossOptions options;
};

// Probabilities in [0, 1] and targets of the same shape.
class BCELoss : public Module {
 public:
  BCELoss(const BinaryCrossEntropyOptions& options = {}) : options(options) {  // NOLINT
    register_buffer("weight", this->options.weight);
  }
  explicit BCELoss(Reduction reduction) : BCELoss(BinaryCrossEntropyOptions{.reduction = reduction}) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy(input, target, options);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return with_forward_hooks(forward(input, target));
  }

  BinaryCrossEntropyOptions options;
};

// Logits and targets in [0, 1] of the same shape.
class BCEWithLogitsLoss : public Module {
 public:
  BCEWithLogitsLoss(const BCEWithLogitsOptions& options = {}) : options(options) {  // NOLINT
    register_buffer("weight", this->options.weight);
    register_buffer("pos_weight", this->options.pos_weight);
  }
  explicit BCEWithLogitsLoss(Reduction reduction) : BCEWithLogitsLoss(BCEWithLogitsOptions{.reduction = reduction}) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy_with_logits(input, target, options);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return with_forward_hooks(forward(input, target));
  }

  BCEWithLogitsOptions options;
};

}  // namespace halfgrad::nn
