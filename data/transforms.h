#pragma once
// Small transforms for batches (or a whole TensorDataset's tensors at once):
// callables on a Tensor, and on an Example, where they change the input and
// keep the target. torchvision's Normalize and a Flatten for feeding images
// to an MLP.
#include <cstdint>
#include <vector>

#include <halfgrad/core/tensor.h>
#include <halfgrad/data/dataset.h>

namespace halfgrad::data {

// (x - mean[c]) / std[c] for every channel c. As torchvision, the channel is
// dimension -3 ([..., C, H, W]: a batch [N, C, H, W] or a sample [C, H, W]);
// one mean/std value applies to every channel. x must be floating; the result
// has its dtype (the constants are rounded to it once).
// E.g. Normalize({kFashionMnistMean}, {kFashionMnistStd}) (data/idx.h).
struct Normalize {
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(const Tensor& x) const;
  Example operator()(Example e) const;

  std::vector<double> mean, std;
};

// torchvision's Pad(padding, fill) in constant mode: `padding` elements of
// `fill` on every side of the last two dims ([..., H, W] -> [..., H + 2p, W + 2p]);
// e.g. Fashion-MNIST's 28x28 to the 32x32 a MobileNet divides by 32 without
// remainder. padding >= 0; the result has x's dtype and device.
struct Pad {
  explicit Pad(int64_t padding, double fill = 0.0);
  Tensor operator()(const Tensor& x) const;
  Example operator()(Example e) const;

  int64_t padding;
  double fill;
};

// x.flatten(start_dim, end_dim): a batch of images [N, C, H, W] -> [N, C*H*W].
struct Flatten {
  int64_t start_dim = 1;
  int64_t end_dim = -1;
  Tensor operator()(const Tensor& x) const { return x.flatten(start_dim, end_dim); }
  Example operator()(Example e) const {
    e.input = (*this)(e.input);
    return e;
  }
};

}  // namespace halfgrad::data
