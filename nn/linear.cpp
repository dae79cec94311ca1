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

namespace {
Tensor activate(const Tensor& y, Activation act) {
  switch (act) {
    case Activation::None: return y;
    case Activation::ReLU: return relu(y);
    case Activation::GELU: return gelu(y);
    case Activation::GELUTanh: return gelu(y, "tanh");
  }
  return y;
}
}  // namespace

Tensor Linear::forward(const Tensor& x) const { return forward_any(x, activation); }

Tensor Linear::forward(const Tensor& x, Activation act) const {
  HG_CHECK(activation == Activation::None, "Linear::forward: this layer already applies an activation");
  return forward_any(x, act);
}

Tensor Linear::forward_any(const Tensor& x, Activation act) const {
  // Inside fp8_autocast: the fp8 GEMM, then the activation as its own op.
  if (amp::is_fp8_enabled()) return activate(amp::fp8_linear(x, weight, bias, fp8, amp::fp8_recipe()), act);
  return linear(x, weight, bias, act);
}

void Linear::enable_fp8(const amp::Fp8Recipe& recipe) {
  if (fp8.defined()) {
    HG_CHECK(fp8.amax_history.size(0) == recipe.amax_history_len,
             "Linear::enable_fp8: the layer already has an amax history of {} rows; the recipe asks for {}",
             fp8.amax_history.size(0), recipe.amax_history_len);
    return;
  }
  fp8 = amp::Fp8State::create(recipe.amax_history_len, weight.device());
  register_buffer("fp8_scale", fp8.scale);
  register_buffer("fp8_scale_inv", fp8.scale_inv);
  register_buffer("fp8_amax_history", fp8.amax_history);
  register_buffer("fp8_saturated", fp8.saturated, /*persistent=*/false);
}

int64_t enable_fp8(Module& model, const amp::Fp8Recipe& recipe) {
  int64_t n = 0;
  for (const auto& [name, m] : model.named_modules()) {
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      lin->enable_fp8(recipe);
      ++n;
    }
  }
  return n;
}

std::string Linear::extra_repr() const {
  static constexpr const char* kAct[] = {"", ", activation=ReLU", ", activation=GELU", ", activation=GELUTanh"};
  return fmt::format("in_features={}, out_features={}, bias={}{}", in_features, out_features,
                     bias.defined() ? "True" : "False", kAct[static_cast<int>(activation)]);
}

}  // namespace halfgrad::nn
