#pragma once
// 2-d pooling layers (torch.nn.MaxPool2d, AvgPool2d, AdaptiveAvgPool2d) over
// [N, C, H, W] or [C, H, W] inputs; the functional forms are in
// <halfgrad/ops/norm_pool_ops.h>. stride defaults to kernel_size.
//
//   hg::nn::MaxPool2d pool(3, 2, 1);       // kernel 3, stride 2, padding 1
//   hg::nn::AdaptiveAvgPool2d gap(1);      // global average pooling
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include <halfgrad/nn/module.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(SizeArg kernel_size, std::optional<SizeArg> stride = {}, SizeArg padding = 0,
                     SizeArg dilation = 1, bool ceil_mode = false);
  // MaxPool2d({2, 3}): a braced kernel size (else ambiguous with the move constructor).
  explicit MaxPool2d(std::initializer_list<int64_t> kernel_size, std::optional<SizeArg> stride = {},
                     SizeArg padding = 0, SizeArg dilation = 1, bool ceil_mode = false)
      : MaxPool2d(SizeArg(kernel_size), std::move(stride), std::move(padding), std::move(dilation), ceil_mode) {}
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  std::string extra_repr() const override;

  SizeArg kernel_size, stride, padding, dilation;
  bool ceil_mode;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(SizeArg kernel_size, std::optional<SizeArg> stride = {}, SizeArg padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true,
                     std::optional<int64_t> divisor_override = std::nullopt);
  explicit AvgPool2d(std::initializer_list<int64_t> kernel_size, std::optional<SizeArg> stride = {},
                     SizeArg padding = 0, bool ceil_mode = false, bool count_include_pad = true,
                     std::optional<int64_t> divisor_override = std::nullopt)
      : AvgPool2d(SizeArg(kernel_size), std::move(stride), std::move(padding), ceil_mode, count_include_pad,
                  divisor_override) {}
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  std::string extra_repr() const override;

  SizeArg kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor_override;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(SizeArg output_size) : output_size(std::move(output_size)) {}
  Tensor forward(const Tensor& x) const { return adaptive_avg_pool2d(x, output_size); }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  std::string extra_repr() const override;

  SizeArg output_size;
};

}  // namespace halfgrad::nn
