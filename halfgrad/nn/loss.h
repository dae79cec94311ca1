#pragma once
// Loss modules: the functional losses of ops/ops.h with their settings.
// Call as criterion(input, target).
#include <halfgrad/nn/module.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

// Logits [N, C] and int64 class indices [N].
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(Reduction reduction = Reduction::Mean, int64_t ignore_index = -100)
      : reduction(reduction), ignore_index(ignore_index) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return cross_entropy(input, target, reduction, ignore_index);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); }

  Reduction reduction;
  int64_t ignore_index;
};

// Log-probabilities [N, C] and int64 class indices [N].
class NLLLoss : public Module {
 public:
  explicit NLLLoss(Reduction reduction = Reduction::Mean, int64_t ignore_index = -100)
      : reduction(reduction), ignore_index(ignore_index) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return nll_loss(input, target, reduction, ignore_index);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); }

  Reduction reduction;
  int64_t ignore_index;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
  Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); }

  Reduction reduction;
};

}  // namespace halfgrad::nn
