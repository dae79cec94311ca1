#include <halfgrad/nn/normalization.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <halfgrad/autograd/grad_mode.h>

namespace halfgrad::nn {

LayerNorm::LayerNorm(std::vector<int64_t> shape, LayerNormOptions options)
    : normalized_shape(std::move(shape)), eps(options.eps), elementwise_affine(options.elementwise_affine) {
  HG_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must have at least one dim, got []");
  for (int64_t s : normalized_shape)
    HG_CHECK(s > 0, "LayerNorm: normalized_shape [{}] must have positive sizes", fmt::join(normalized_shape, ", "));
  if (elementwise_affine) {
    weight = ones(Shape(normalized_shape));
    register_parameter("weight", weight);
    if (options.bias) {
      bias = zeros(Shape(normalized_shape));
      register_parameter("bias", bias);
    }
  }
}

void LayerNorm::reset_parameters() {
  NoGradGuard guard;
  if (weight.defined()) weight.fill_(1.0);
  if (bias.defined()) bias.zero_();
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, Shape(normalized_shape), weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  // PyTorch: "(64,), eps=1e-05, elementwise_affine=True"
  return fmt::format("({}{}), eps={}, elementwise_affine={}", fmt::join(normalized_shape, ", "),
                     normalized_shape.size() == 1 ? "," : "", eps, elementwise_affine ? "True" : "False");
}

}  // namespace halfgrad::nn
