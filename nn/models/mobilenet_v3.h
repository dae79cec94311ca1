#pragma once
// MobileNetV3-small, exactly torchvision 0.14's `mobilenet_v3_small`
// (torchvision/models/mobilenetv3.py and the blocks of torchvision/ops/misc.py):
// the same layers, the same init, and a state dict with torchvision's names,
// shapes and order (features.0.0.weight, features.0.1.running_mean, ...,
// features.1.block.1.fc1.weight, ..., classifier.3.bias), so a torchvision
// checkpoint exported to safetensors loads unchanged:
//
//   hg::nn::models::MobileNetV3 model({.num_classes = 10});
//   model.load_state_dict(hg::nn::load("mobilenet_v3_small.safetensors"));
//   model.eval();
//   hg::Tensor logits = model(images);  // [N, 3, H, W] -> [N, num_classes]
//
// Its forward runs under autocast for the input's device type (the C++ form of
// a torchvision user's `@autocast()` on forward): on the CPU the convolutions
// and Linears run in bfloat16, on CUDA in float16, the parameters stay float32.
// forward_impl is the same network without that wrapper (torchvision's
// _forward_impl), for float32 inference and for callers that manage autocast.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <halfgrad/nn/activation.h>
#include <halfgrad/nn/batchnorm.h>
#include <halfgrad/nn/conv.h>
#include <halfgrad/nn/dropout.h>
#include <halfgrad/nn/linear.h>
#include <halfgrad/nn/module.h>
#include <halfgrad/nn/pooling.h>
#include <halfgrad/nn/sequential.h>

namespace halfgrad::nn::models {

struct MobileNetV3SmallOptions {
  int64_t num_classes = 1000;
  double width_mult = 1.0;  // every channel count times this, rounded to a multiple of 8 (make_divisible)
  double dropout = 0.2;     // before the last Linear
  bool reduced_tail = false;  // torchvision's reduced_tail: the last blocks at half width
  bool dilated = false;       // torchvision's dilated: the last blocks dilated 2 instead of strided
};

// torchvision's _make_divisible (from the TensorFlow MobileNet code): v rounded
// to the nearest multiple of divisor, at least min_value (default divisor), and
// never more than 10% below v.
int64_t make_divisible(double v, int64_t divisor, std::optional<int64_t> min_value = std::nullopt);

// Which activation a Conv2dNormActivation ends with.
enum class BlockActivation { None, ReLU, Hardswish };

// torchvision.ops.Conv2dNormActivation with MobileNetV3's norm layer: a
// Sequential of Conv2d (padding (kernel - 1) / 2 * dilation, no bias),
// BatchNorm2d(eps = 0.001, momentum = 0.01) and the activation (if any), named
// "0", "1", "2".
class Conv2dNormActivation : public Sequential {
 public:
  Conv2dNormActivation(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
                       int64_t groups = 1, BlockActivation activation = BlockActivation::ReLU, int64_t dilation = 1);
  int64_t out_channels;
};

// torchvision.ops.SqueezeExcitation with MobileNetV3's Hardsigmoid:
// x * hardsigmoid(fc2(relu(fc1(avgpool(x))))), fc1 and fc2 1x1 Conv2d with bias.
class SqueezeExcitation : public Module {
 public:
  SqueezeExcitation(int64_t input_channels, int64_t squeeze_channels);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }

  AdaptiveAvgPool2d avgpool{1};
  Conv2d fc1, fc2;
  ReLU activation;
  Hardsigmoid scale_activation;
};

// One row of torchvision's inverted_residual_setting (InvertedResidualConfig),
// channels already multiplied by width_mult and rounded.
struct InvertedResidualConfig {
  int64_t input_channels, kernel, expanded_channels, out_channels;
  bool use_se, use_hs;  // squeeze-excitation; Hardswish (else ReLU)
  int64_t stride, dilation;
};

// torchvision's InvertedResidual: "block" = [expand 1x1 (when the expansion
// changes the width)] + depthwise kxk + [SqueezeExcitation] + project 1x1 (no
// activation); the input is added back when stride 1 keeps the width.
class InvertedResidual : public Module {
 public:
  explicit InvertedResidual(const InvertedResidualConfig& cnf);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }

  Sequential block;
  bool use_res_connect;
  int64_t out_channels;
};

// The rows of torchvision's _mobilenet_v3_conf("mobilenet_v3_small", ...) and its last_channel.
std::vector<InvertedResidualConfig> mobilenet_v3_small_setting(const MobileNetV3SmallOptions& options,
                                                              int64_t* last_channel = nullptr);

class MobileNetV3 : public Module {
 public:
  explicit MobileNetV3(const MobileNetV3SmallOptions& options = {});
  // [N, 3, H, W] -> logits [N, num_classes], under autocast for x's device type.
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  // The same network without the autocast wrapper (torchvision's _forward_impl).
  Tensor forward_impl(const Tensor& x) const;

  MobileNetV3SmallOptions options;
  Sequential features;
  AdaptiveAvgPool2d avgpool{1};
  Sequential classifier;
};

// torchvision.models.mobilenet_v3_small(num_classes=..., width_mult=..., dropout=...), untrained.
std::shared_ptr<MobileNetV3> mobilenet_v3_small(const MobileNetV3SmallOptions& options = {});

}  // namespace halfgrad::nn::models
