#include <halfgrad/nn/init.h>

#include <cmath>

#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn::init {

namespace {
void check_floating(const char* op, const Tensor& t) {
  HG_CHECK(t.defined() && t.is_floating_point(), "init::{}: expected a floating tensor, got {}", op, t.describe());
}
// Values are drawn in float64 on the CPU's generator and rounded once into
// t's dtype (in place for a contiguous CPU tensor; else through copy_).
Tensor& fill_from(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
  return t;
}
int64_t fan(const Tensor& t, FanMode mode) {
  const auto [in, out] = calculate_fan_in_and_fan_out(t);
  return mode == FanMode::FanIn ? in : out;
}
}  // namespace

double calculate_gain(std::string_view nl, double param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "conv3d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  fail("calculate_gain: unsupported nonlinearity \"{}\" (expected linear, conv1d, conv2d, conv3d, sigmoid, tanh, "
       "relu, leaky_relu or selu)",
       nl);
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  HG_CHECK(t.dim() >= 2, "init: fan in and fan out cannot be computed for {}, which has fewer than 2 dimensions",
           t.describe());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.shape()[d];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

Tensor& uniform_(Tensor& t, double low, double high) {
  check_floating("uniform_", t);
  HG_CHECK(low <= high, "init::uniform_: low ({}) must not exceed high ({})", low, high);
  NoGradGuard no_grad;
  // In place on the CPU: the values the float64 detour below gives (the same
  // Philox draws, low + u (high - low) in double, one rounding; a draw that
  // rounds up to `high` becomes `low`, keeping [low, high) as rand does),
  // without its three float64 temporaries (400 MB for a 4096 x 4096 weight).
  if (t.device().is_cpu() && t.is_contiguous()) {
    kernels::uniform(t, low, high);
    t.bump_version();  // an in-place write: the autocast cache and saved tensors must see it
    return t;
  }
  const Tensor u = rand(t.shape(), float64);  // on the CPU's generator wherever t lives
  return fill_from(t, u * (high - low) + low);
}

Tensor& normal_(Tensor& t, double mean, double std) {
  check_floating("normal_", t);
  HG_CHECK(std >= 0, "init::normal_: std must be non-negative, got {}", std);
  NoGradGuard no_grad;
  if (t.device().is_cpu() && t.is_contiguous()) {  // in place, as uniform_
    kernels::normal(t, mean, std);
    t.bump_version();
    return t;
  }
  const Tensor n = randn(t.shape(), float64);
  return fill_from(t, n * std + mean);
}

Tensor& constant_(Tensor& t, double value) {
  HG_CHECK(t.defined(), "init::constant_: undefined tensor");
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, std::string_view nonlinearity) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode)));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, std::string_view nonlinearity) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode)));
  return normal_(t, 0.0, std);
}

Tensor& xavier_uniform_(Tensor& t, double gain) {
  const auto [in, out] = calculate_fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform_(t, -bound, bound);
}

Tensor& xavier_normal_(Tensor& t, double gain) {
  const auto [in, out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)));
}

}  // namespace halfgrad::nn::init
