#include <halfgrad/nn/linear.h>

#include <fmt/format.h>

#include <cmath>

#include <halfgrad/nn/init.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, Activation act)
    : in_features(in), out_features(out), activation(act) {
  HG_CHECK(in >= 0 && out >= 0, "Linear: in_features ({}) and out_features ({}) must be non-negative", in, out);
  weight = empty({out, in});
  register_parameter("weight", weight);
  if (has_bias) {
    bias = empty({out});
    register_parameter("bias", bias);
  }
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias, activation); }

Tensor Linear::forward(const Tensor& x, Activation act) const {
  HG_CHECK(activation == Activation::None, "Linear::forward: this layer already applies an activation");
  return linear(x, weight, bias, act);
}

std::string Linear::extra_repr() const {
  static constexpr const char* kAct[] = {"", ", activation=ReLU", ", activation=GELU", ", activation=GELUTanh"};
  return fmt::format("in_features={}, out_features={}, bias={}{}", in_features, out_features,
                     bias.defined() ? "True" : "False", kAct[static_cast<int>(activation)]);
}

}  // namespace halfgrad::nn
