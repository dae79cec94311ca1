// nn::utils::clip_grad_norm_ and clip_grad_value_ (nn/utils.h), on the
// multi-tensor kernels of amp/grad_norm.h.
#include <halfgrad/nn/utils.h>

#include <cmath>

#include <halfgrad/amp/grad_norm.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/core/error.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn::utils {

namespace {
std::vector<Tensor> grads_of(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  return grads;
}
}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  HG_CHECK(norm_type > 0.0,
           "clip_grad_norm_: norm_type {} is not supported; use a p > 0 (2 for the Euclidean norm) or INFINITY for "
           "the max norm",
           norm_type);
  HG_CHECK(max_norm >= 0.0, "clip_grad_norm_: max_norm {} must be >= 0 (and not NaN)", max_norm);
  const std::vector<Tensor> grads = grads_of(parameters);
  if (grads.empty()) {
    // PyTorch returns tensor(0.): here on the parameters' device
    Device device = Device::cpu();
    for (const Tensor& p : parameters)
      if (p.defined()) {
        device = p.device();
        break;
      }
    return zeros({}, TensorOptions(DType::Float32, device));
  }
  NoGradGuard no_grad;
  Tensor total = amp::multi_tensor_norm(grads, norm_type);
  if (error_if_nonfinite) {
    const float v = total.item<float>();  // on CUDA: waits for the device
    HG_CHECK(std::isfinite(v),
             "clip_grad_norm_: the total norm of order {} of the gradients is {}, so they cannot be clipped. Find "
             "the non-finite gradient (with AMP, clip after scaler.unscale_(optimizer); scaler.step then skips such "
             "a step), or pass error_if_nonfinite = false to scale the gradients by the non-finite norm anyway",
             norm_type, v);
  }
  amp::multi_tensor_clip(grads, total, max_norm);
  return total;
}

Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  HG_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value {} must be >= 0 (and not NaN)", clip_value);
  NoGradGuard no_grad;
  // one clamp per grad (PyTorch 1.13 loops the same way)
  for (Tensor g : grads_of(parameters)) g.copy_(clamp(g, -clip_value, clip_value));
}

void clip_grad_value_(const Tensor& parameter, double clip_value) {
  clip_grad_value_(std::vector<Tensor>{parameter}, clip_value);
}

}  // namespace halfgrad::nn::utils
