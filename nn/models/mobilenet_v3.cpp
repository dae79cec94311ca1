// MobileNetV3-small as torchvision 0.14 builds it (see the header). Names and
// registration order follow torchvision's modules, so state_dict() lists the
// same keys in the same order as torchvision's state_dict().
#include <halfgrad/nn/models/mobilenet_v3.h>

#include <algorithm>

#include <halfgrad/amp/autocast.h>
#include <halfgrad/nn/init.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn::models {

int64_t make_divisible(double v, int64_t divisor, std::optional<int64_t> min_value) {
  HG_CHECK(divisor > 0, "make_divisible: divisor must be positive, got {}", divisor);
  const int64_t min_v = min_value.value_or(divisor);
  // Python's int() truncates toward zero; v is a (positive) channel count here
  int64_t new_v = std::max(min_v, static_cast<int64_t>(v + static_cast<double>(divisor) / 2.0) / divisor * divisor);
  if (static_cast<double>(new_v) < 0.9 * v) new_v += divisor;  // never round down by more than 10%
  return new_v;
}

// ---- blocks ------------------------------------------------------------------------------------

Conv2dNormActivation::Conv2dNormActivation(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                                           int64_t stride, int64_t groups, BlockActivation activation,
                                           int64_t dilation)
    : out_channels(out_channels) {
  const int64_t padding = (kernel_size - 1) / 2 * dilation;
  emplace_back<Conv2d>(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, /*bias=*/false);
  emplace_back<BatchNorm2d>(out_channels, /*eps=*/0.001, /*momentum=*/0.01);
  // torchvision passes inplace=True to the activation; ours are out of place (nn/activation.h)
  if (activation == BlockActivation::ReLU) emplace_back<ReLU>();
  if (activation == BlockActivation::Hardswish) emplace_back<Hardswish>(/*inplace=*/true);
}

SqueezeExcitation::SqueezeExcitation(int64_t input_channels, int64_t squeeze_channels)
    : fc1(input_channels, squeeze_channels, 1), fc2(squeeze_channels, input_channels, 1) {
  register_module("avgpool", avgpool);
  register_module("fc1", fc1);
  register_module("fc2", fc2);
  register_module("activation", activation);
  register_module("scale_activation", scale_activation);
}

Tensor SqueezeExcitation::forward(const Tensor& x) const {
  const Tensor scale = scale_activation(fc2(activation(fc1(avgpool(x)))));
  return mul(scale, x);
}

InvertedResidual::InvertedResidual(const InvertedResidualConfig& cnf)
    : use_res_connect(cnf.stride == 1 && cnf.input_channels == cnf.out_channels), out_channels(cnf.out_channels) {
  HG_CHECK(cnf.stride >= 1 && cnf.stride <= 2, "InvertedResidual: illegal stride value {} (1 or 2)", cnf.stride);
  const BlockActivation act = cnf.use_hs ? BlockActivation::Hardswish : BlockActivation::ReLU;
  if (cnf.expanded_channels != cnf.input_channels)  // expand
    block.push_back(std::make_shared<Conv2dNormActivation>(cnf.input_channels, cnf.expanded_channels, 1, 1, 1, act));
  const int64_t stride = cnf.dilation > 1 ? 1 : cnf.stride;  // depthwise
  block.push_back(std::make_shared<Conv2dNormActivation>(cnf.expanded_channels, cnf.expanded_channels, cnf.kernel,
                                                         stride, cnf.expanded_channels, act, cnf.dilation));
  if (cnf.use_se)
    block.push_back(std::make_shared<SqueezeExcitation>(cnf.expanded_channels,
                                                        make_divisible(cnf.expanded_channels / 4, 8)));
  block.push_back(std::make_shared<Conv2dNormActivation>(cnf.expanded_channels, cnf.out_channels, 1, 1, 1,
                                                         BlockActivation::None));  // project
  register_module("block", block);
}

Tensor InvertedResidual::forward(const Tensor& x) const {
  const Tensor result = block(x);
  return use_res_connect ? add(result, x) : result;  // torchvision: result += input
}

// ---- the network -------------------------------------------------------------------------------

std::vector<InvertedResidualConfig> mobilenet_v3_small_setting(const MobileNetV3SmallOptions& o,
                                                              int64_t* last_channel) {
  HG_CHECK(o.width_mult > 0, "mobilenet_v3_small: width_mult must be positive, got {}", o.width_mult);
  const int64_t rd = o.reduced_tail ? 2 : 1;
  const int64_t dil = o.dilated ? 2 : 1;
  auto adjust = [&](int64_t c) { return make_divisible(static_cast<double>(c) * o.width_mult, 8); };
  // bneck_conf(input, kernel, expanded, out, use_se, activation, stride, dilation)
  auto conf = [&](int64_t in, int64_t k, int64_t exp, int64_t out, bool se, bool hs, int64_t stride, int64_t d) {
    return InvertedResidualConfig{adjust(in), k, adjust(exp), adjust(out), se, hs, stride, d};
  };
  constexpr bool RE = false, HS = true;
  std::vector<InvertedResidualConfig> s = {
      conf(16, 3, 16, 16, true, RE, 2, 1),  // C1
      conf(16, 3, 72, 24, false, RE, 2, 1),  // C2
      conf(24, 3, 88, 24, false, RE, 1, 1),
      conf(24, 5, 96, 40, true, HS, 2, 1),  // C3
      conf(40, 5, 240, 40, true, HS, 1, 1),
      conf(40, 5, 240, 40, true, HS, 1, 1),
      conf(40, 5, 120, 48, true, HS, 1, 1),
      conf(48, 5, 144, 48, true, HS, 1, 1),
      conf(48, 5, 288, 96 / rd, true, HS, 2, dil),  // C4
      conf(96 / rd, 5, 576 / rd, 96 / rd, true, HS, 1, dil),
      conf(96 / rd, 5, 576 / rd, 96 / rd, true, HS, 1, dil),
  };
  if (last_channel) *last_channel = adjust(1024 / rd);  // C5
  return s;
}

MobileNetV3::MobileNetV3(const MobileNetV3SmallOptions& o) : options(o) {
  HG_CHECK(o.num_classes >= 1, "MobileNetV3: num_classes must be at least 1, got {}", o.num_classes);
  HG_CHECK(o.dropout >= 0.0 && o.dropout <= 1.0, "MobileNetV3: dropout must be in [0, 1], got {}", o.dropout);
  int64_t last_channel = 0;
  const std::vector<InvertedResidualConfig> setting = mobilenet_v3_small_setting(o, &last_channel);

  const int64_t first = setting.front().input_channels;
  features.push_back(std::make_shared<Conv2dNormActivation>(3, first, 3, 2, 1, BlockActivation::Hardswish));
  for (const auto& cnf : setting) features.push_back(std::make_shared<InvertedResidual>(cnf));
  const int64_t last_in = setting.back().out_channels, last_out = 6 * last_in;
  features.push_back(std::make_shared<Conv2dNormActivation>(last_in, last_out, 1, 1, 1, BlockActivation::Hardswish));

  classifier.emplace_back<Linear>(last_out, last_channel);
  classifier.emplace_back<Hardswish>(/*inplace=*/true);
  classifier.emplace_back<Dropout>(o.dropout);  // torchvision: inplace=True; ours is out of place
  classifier.emplace_back<Linear>(last_channel, o.num_classes);

  register_module("features", features);
  register_module("avgpool", avgpool);
  register_module("classifier", classifier);

  // torchvision's init, over self.modules() (the draws in module order, from the global generator)
  for (auto& [name, m] : named_modules()) {
    if (auto* conv = dynamic_cast<Conv2d*>(m)) {
      init::kaiming_normal_(conv->weight, 0.0, init::FanMode::FanOut);
      if (conv->bias.defined()) init::zeros_(conv->bias);
    } else if (auto* bn = dynamic_cast<BatchNorm2d*>(m)) {
      init::ones_(bn->weight);
      init::zeros_(bn->bias);
    } else if (auto* lin = dynamic_cast<Linear*>(m)) {
      init::normal_(lin->weight, 0.0, 0.01);
      init::zeros_(lin->bias);
    }
  }
}

Tensor MobileNetV3::forward_impl(const Tensor& x) const {
  HG_CHECK(x.dim() == 4 && x.shape()[1] == 3,
           "MobileNetV3: expected images [N, 3, H, W], got {}; add a batch dim with unsqueeze(0) for one image",
           x.describe());
  Tensor h = features(x);
  h = avgpool(h);
  h = h.flatten(1);
  return classifier(h);
}

Tensor MobileNetV3::forward(const Tensor& x) const {
  // The C++ form of `@autocast()` on forward: on unless the caller's innermost
  // region for this device type says enabled=false (docs/amp.md).
  return amp::autocast_forward(x.device().type(), [&] { return forward_impl(x); });
}

std::shared_ptr<MobileNetV3> mobilenet_v3_small(const MobileNetV3SmallOptions& options) {
  return std::make_shared<MobileNetV3>(options);
}

}  // namespace halfgrad::nn::models
