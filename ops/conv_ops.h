#pragma once
// Convolutions (torch.nn.functional.conv1d ... conv_transpose3d), PyTorch's
// argument order and semantics:
//   input  [N, C_in, *spatial] or unbatched [C_in, *spatial]
//   weight [C_out, C_in / groups, *k]      (transposed: [C_in, C_out / groups, *k])
//   bias   [C_out] or undefined
// stride, padding, dilation (and output_padding): one number for every spatial
// dim or one per dim (ops/size_arg.h). padding also takes "same" (stride 1
// only; an odd total padding puts the extra element after, as PyTorch) and
// "valid" (no padding). input, weight and bias must share one floating dtype
// outside autocast (conv* are lower-precision ops under amp::autocast:
// bfloat16 on the CPU, float16 on CUDA).
//
//   Tensor y = hg::conv2d(x, w, b, /*stride=*/2, /*padding=*/1);
//   Tensor z = hg::conv2d(x, w, {}, 1, "same", 1, /*groups=*/x.size(1));  // depthwise
#include <cstdint>

#include <halfgrad/core/tensor.h>
#include <halfgrad/ops/size_arg.h>

namespace halfgrad {

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), SizeArg stride = 1,
              PaddingArg padding = 0, SizeArg dilation = 1, int64_t groups = 1);
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), SizeArg stride = 1,
              PaddingArg padding = 0, SizeArg dilation = 1, int64_t groups = 1);
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), SizeArg stride = 1,
              PaddingArg padding = 0, SizeArg dilation = 1, int64_t groups = 1);

// out = (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 per
// spatial dim; output_padding must be smaller than stride or dilation (PyTorch's rule).
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), SizeArg stride = 1,
                        SizeArg padding = 0, SizeArg output_padding = 0, int64_t groups = 1, SizeArg dilation = 1);
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), SizeArg stride = 1,
                        SizeArg padding = 0, SizeArg output_padding = 0, int64_t groups = 1, SizeArg dilation = 1);
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), SizeArg stride = 1,
                        SizeArg padding = 0, SizeArg output_padding = 0, int64_t groups = 1, SizeArg dilation = 1);

}  // namespace halfgrad
