#pragma once
// Batch normalisation layers (torch.nn.BatchNorm1d / BatchNorm2d).
//
// Parameters "weight" (ones) and "bias" (zeros) when affine; buffers
// "running_mean" (zeros), "running_var" (ones) and "num_batches_tracked"
// (int64, 0-d) when track_running_stats, registered in that order (PyTorch's
// state-dict keys). All float32; Module::to(dtype) leaves num_batches_tracked
// int64. Training normalises with the batch statistics and updates the running
// ones (num_batches_tracked += 1); eval() uses the running statistics (or the
// batch's, when track_running_stats is false). momentum = std::nullopt is
// PyTorch's momentum=None: a cumulative average (momentum 1 / num_batches_tracked).
//
//   hg::nn::BatchNorm2d bn(16);
//   y = bn(x);                        // x [N, 16, H, W]
#include <optional>
#include <string>

#include <halfgrad/nn/module.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

// What BatchNorm1d and BatchNorm2d share (PyTorch's _BatchNorm).
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  // running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void reset_running_stats();
  // The above, and weight = 1, bias = 0.
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Tensor weight, bias;                                    // [num_features]; undefined unless affine
  Tensor running_mean, running_var, num_batches_tracked;  // undefined unless track_running_stats

 protected:
  BatchNormBase(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                bool track_running_stats);
  // The layer's input check: an Error naming the layer, as PyTorch's "expected 4D input (got 3D input)".
  virtual void check_input_dim(const Tensor& x) const = 0;
};

// Input [N, C] or [N, C, L].
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input_dim(const Tensor& x) const override;
};

// Input [N, C, H, W].
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input_dim(const Tensor& x) const override;
};

}  // namespace halfgrad::nn
