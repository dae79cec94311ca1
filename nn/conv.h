#pragma once
// Convolution layers (torch.nn.Conv1d ... ConvTranspose3d), PyTorch's
// constructor arguments, parameters and init:
//   Conv*d:          weight [out_channels, in_channels / groups, *kernel_size]
//   ConvTranspose*d: weight [in_channels, out_channels / groups, *kernel_size]
//   bias [out_channels] (undefined when bias = false), all float32.
// Init (reset_parameters): weight kaiming_uniform_(a = sqrt(5)), bias
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = weight.size(1) * prod(kernel_size),
// drawn weight first from the global generator.
//
//   hg::nn::Conv2d stem(3, 16, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1, 1, 1, /*bias=*/false);
//   hg::nn::Conv2d dw(16, 16, 3, 1, "same", 1, /*groups=*/16);
//
// padding_mode: only "zeros" (others are an Error: not supported yet).
#include <cstdint>
#include <string>
#include <vector>

#include <halfgrad/nn/module.h>
#include <halfgrad/ops/conv_ops.h>
#include <halfgrad/ops/size_arg.h>

namespace halfgrad::nn {

namespace detail {
// What the six layers share: options, parameters, init and repr.
class ConvNd : public Module {
 public:
  // Draws the parameters again.
  void reset_parameters();
  // PyTorch's: "3, 16, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False".
  std::string extra_repr() const override;

  int64_t in_channels, out_channels;
  std::vector<int64_t> kernel_size, stride;
  std::vector<int64_t> padding;  // per spatial dim (for "same"/"valid": 0s; see padding_string)
  std::string padding_string;    // "same" or "valid" when given so, else ""
  std::vector<int64_t> dilation, output_padding;
  int64_t groups;
  bool transposed;
  std::string padding_mode = "zeros";
  Tensor weight;  // float32
  Tensor bias;    // float32; undefined when bias = false

 protected:
  ConvNd(const char* name, int nd, bool transposed, int64_t in_channels, int64_t out_channels,
         const SizeArg& kernel_size, const SizeArg& stride, const PaddingArg& padding, const SizeArg& dilation,
         const SizeArg& output_padding, int64_t groups, bool bias, const std::string& padding_mode);
  PaddingArg padding_arg() const;
};
}  // namespace detail

class Conv1d : public detail::ConvNd {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, SizeArg kernel_size, SizeArg stride = 1, PaddingArg padding = 0,
         SizeArg dilation = 1, int64_t groups = 1, bool bias = true, std::string padding_mode = "zeros");
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
};

class Conv2d : public detail::ConvNd {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, SizeArg kernel_size, SizeArg stride = 1, PaddingArg padding = 0,
         SizeArg dilation = 1, int64_t groups = 1, bool bias = true, std::string padding_mode = "zeros");
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
};

class Conv3d : public detail::ConvNd {
 public:
  Conv3d(int64_t in_channels, int64_t out_channels, SizeArg kernel_size, SizeArg stride = 1, PaddingArg padding = 0,
         SizeArg dilation = 1, int64_t groups = 1, bool bias = true, std::string padding_mode = "zeros");
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
};

class ConvTranspose1d : public detail::ConvNd {
 public:
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, SizeArg kernel_size, SizeArg stride = 1,
                  SizeArg padding = 0, SizeArg output_padding = 0, int64_t groups = 1, bool bias = true,
                  SizeArg dilation = 1);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
};

class ConvTranspose2d : public detail::ConvNd {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, SizeArg kernel_size, SizeArg stride = 1,
                  SizeArg padding = 0, SizeArg output_padding = 0, int64_t groups = 1, bool bias = true,
                  SizeArg dilation = 1);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
};

class ConvTranspose3d : public detail::ConvNd {
 public:
  ConvTranspose3d(int64_t in_channels, int64_t out_channels, SizeArg kernel_size, SizeArg stride = 1,
                  SizeArg padding = 0, SizeArg output_padding = 0, int64_t groups = 1, bool bias = true,
                  SizeArg dilation = 1);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
};

}  // namespace halfgrad::nn
