#pragma once
// Batch normalisation and 2-d pooling (torch.nn.functional.batch_norm,
// max_pool2d, avg_pool2d, adaptive_avg_pool2d). None has an autocast row: each
// runs in its input's dtype, as in PyTorch. Included by <halfgrad/ops/ops.h>.
//
//   y = hg::batch_norm(x, running_mean, running_var, weight, bias, /*training=*/true);
//   y = hg::max_pool2d(x, 3, 2, 1);                 // kernel 3, stride 2, padding 1
//   y = hg::avg_pool2d(x, {2, 3}, std::nullopt, 0, /*ceil_mode=*/true);
//   y = hg::adaptive_avg_pool2d(x, 1);              // global average pooling
#include <cstdint>
#include <optional>

#include <halfgrad/core/tensor.h>
#include <halfgrad/ops/size_arg.h>

namespace halfgrad {

// input [N, C, *] (2 or more dims) of a floating dtype. weight, bias ([C]) and the
// running statistics ([C]) may each be undefined, and are float32 or the input's
// dtype (AMP's mixed case: a float16/bfloat16 input with float32 parameters and
// statistics); the output has the input's dtype and shape (contiguous). The
// statistics are computed in float32 (float64 for a float64 input).
// training: normalise with the batch mean and biased variance over N and the
// spatial dims, and, when the running statistics are defined, update them in
// place (not recorded by autograd): r = (1 - momentum) * r + momentum * stat,
// with the unbiased variance for running_var. Otherwise normalise with the
// running statistics (which must then be defined). Gradients flow to input,
// weight and bias, never to the running statistics.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

// input [N, C, H, W] or [C, H, W] of a floating dtype; sizes are one number or
// one per spatial dim (H, W); stride defaults to kernel_size. Output sizes
// follow PyTorch (ceil_mode rounds up, but the last window must start inside
// the input or the left padding); padding must be at most half the kernel.
// A NaN in a window wins; the gradient goes to the window's (first) maximum.
Tensor max_pool2d(const Tensor& input, SizeArg kernel_size, std::optional<SizeArg> stride = std::nullopt,
                  SizeArg padding = 0, SizeArg dilation = 1, bool ceil_mode = false);
// count_include_pad: padded positions count in the divisor; divisor_override
// (non-zero) replaces the divisor.
Tensor avg_pool2d(const Tensor& input, SizeArg kernel_size, std::optional<SizeArg> stride = std::nullopt,
                  SizeArg padding = 0, bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
// Output (oh, ow) averages rows floor(oh * H / OH) .. ceil((oh + 1) * H / OH) - 1
// and the same for columns (PyTorch's rule).
Tensor adaptive_avg_pool2d(const Tensor& input, SizeArg output_size);

}  // namespace halfgrad
