#pragma once
// The losses' settings as aggregates (LibTorch's *Options, named here without
// the "Func"/"Loss" split): one struct per loss, shared by the functions in
// ops/ops.h (and nn/functional.h) and the modules in nn/loss.h. Designated
// initialisers name only what differs from PyTorch's defaults:
//
//   cross_entropy(logits, target, {.weight = w, .label_smoothing = 0.1});
//   nn::CrossEntropyLoss criterion({.ignore_index = 0});
//
// Members keep PyTorch's keyword order where it has one, so a designated
// list must name them in that order (C++20's rule).
#include <cstdint>

#include <halfgrad/core/tensor.h>

namespace halfgrad {

enum class Reduction { Mean, Sum, None };

// nll_loss: log-probabilities [N, C], int64 class indices [N].
struct NLLLossOptions {
  Tensor weight{};  // [C] per-class weights (floating, the input's dtype and device); undefined: all 1
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
};

// cross_entropy: logits [N, C]; targets int64 class indices [N] or floating
// class probabilities [N, C].
struct CrossEntropyOptions {
  Tensor weight{};  // [C], as NLLLossOptions::weight
  int64_t ignore_index = -100;  // class-index targets only
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;  // in [0, 1]
};

struct MSELossOptions {
  Reduction reduction = Reduction::Mean;
};

struct L1LossOptions {
  Reduction reduction = Reduction::Mean;
};

struct SmoothL1LossOptions {
  Reduction reduction = Reduction::Mean;
  double beta = 1.0;  // >= 0; 0 is l1_loss
};

struct BinaryCrossEntropyOptions {
  Tensor weight{};  // broadcasts to the input's shape; undefined: all 1
  Reduction reduction = Reduction::Mean;
};

struct BCEWithLogitsOptions {
  Tensor weight{};  // broadcasts to the input's shape
  Reduction reduction = Reduction::Mean;
  Tensor pos_weight{};  // weight of the positive term, broadcasts to the input's shape (usually [C])
};

}  // namespace halfgrad
