#pragma once
// fp8 ops (docs/fp8.md): the pieces an fp8 recipe is built from.
//
//   scaled_mm          torch._scaled_mm: (a * scale_a) @ (b * scale_b) (+ bias)
//                      with fp8 a and b, float32 accumulation, out in float32,
//                      bfloat16 or float16. No autograd (as in PyTorch):
//                      amp::fp8_linear is the differentiable layer.
//   fp8_quantize       x * scale rounded (to nearest even) and saturated into
//                      an fp8 dtype, recording max |x| into `amax` in the same
//                      pass: what delayed scaling needs, without a host sync.
//   fp8_update_scales  the delayed-scaling step: new scales from the amax
//                      history, then the history moves down one row.
// Scales are one-element float32 tensors on the operands' device.
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad {

struct ScaledMmOptions {
  Tensor bias;                    // [n], cast to out_dtype; undefined: none
  DType out_dtype = DType::Float32;
  // A one-element float32 tensor set to max |out| (NaN if out has one), the
  // amax the next layer's scale needs, computed by the GEMM's epilogue on CUDA.
  Tensor amax_out;
};
Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 const ScaledMmOptions& options = {});

// The fp8 copy of x * scale (x's shape, contiguous). amax (a one-element
// float32 view) becomes max(amax, max |x|), NaN if x has one; saturated (an
// int64 one-element view, or undefined) counts the elements beyond the format's largest value.
Tensor fp8_quantize(const Tensor& x, const Tensor& scale, DType fp8_dtype, const Tensor& amax,
                    const Tensor& saturated = Tensor());

// For columns [first, first + fp8_max.size()) of history [L, n] and scale, scale_inv [n]
// (all float32, one device): amax = the column's max (most_recent: row 0); when finite and
// > 0, scale = fp8_max / amax / 2^margin (kept when that is not finite); scale_inv = 1 / scale;
// then the rows move down one (the oldest drops) and row 0 becomes 0.
void fp8_update_scales(const Tensor& history, const Tensor& scale, const Tensor& scale_inv, int64_t first,
                       const std::vector<float>& fp8_max, float margin, bool most_recent);

}  // namespace halfgrad
