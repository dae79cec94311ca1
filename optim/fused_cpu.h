#pragma once
// Fused CPU optimizer loops over float32 parameters: one pass per parameter
// that unscales the gradient and applies the update (optim/update_math.h).
// Used when parameter, gradient and state are contiguous float32 CPU tensors;
// otherwise the optimizers fall back to tensor ops.
#include <halfgrad/core/tensor.h>
#include <halfgrad/optim/update_math.h>

namespace halfgrad::optim::fused {

// True when the fused loop applies to these tensors (undefined ones ignored).
bool applies(std::initializer_list<const Tensor*> tensors);
// The unscale factor the loop multiplies by: 1 when `inv_scale` is undefined.
float inv_scale_value(const Tensor& inv_scale);

void sgd(const Tensor& p, const Tensor& g, const Tensor& momentum_buffer, float inv_scale, const math::SGDHyper& h);
void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax, float inv_scale,
          const math::AdamHyper& h);

}  // namespace halfgrad::optim::fused
