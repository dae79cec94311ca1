#include <halfgrad/nn/batchnorm.h>

#include <fmt/format.h>

#include <halfgrad/autograd/grad_mode.h>

namespace halfgrad::nn {

BatchNormBase::BatchNormBase(int64_t n, double eps_, std::optional<double> momentum_, bool affine_, bool track)
    : num_features(n), eps(eps_), momentum(momentum_), affine(affine_), track_running_stats(track) {
  HG_CHECK(n > 0, "BatchNorm: num_features must be positive, got {}", n);
  if (affine) {
    weight = ones({n});
    bias = zeros({n});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  if (track) {
    running_mean = zeros({n});
    running_var = ones({n});
    num_batches_tracked = zeros({}, DType::Int64);
    register_buffer("running_mean", running_mean);
    register_buffer("running_var", running_var);
    register_buffer("num_batches_tracked", num_batches_tracked);
  }
}

void BatchNormBase::reset_running_stats() {
  if (!track_running_stats) return;
  NoGradGuard guard;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (!affine) return;
  NoGradGuard guard;
  weight.fill_(1.0);
  bias.zero_();
}

Tensor BatchNormBase::forward(const Tensor& x) const {
  check_input_dim(x);
  double factor = momentum.value_or(0.0);
  if (is_training() && track_running_stats) {
    Tensor count = num_batches_tracked;  // the module's tensor (a shared handle)
    {
      NoGradGuard guard;
      count.add_(1.0);
    }
    // momentum=None: the cumulative average (reads the count: a host sync on CUDA, as in PyTorch)
    if (!momentum) factor = 1.0 / static_cast<double>(count.item<int64_t>());
  }
  // eval without running stats normalises with the batch's (PyTorch)
  const bool use_batch = is_training() || !track_running_stats;
  return batch_norm(x, running_mean, running_var, weight, bias, use_batch, factor, eps);
}

std::string BatchNormBase::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features, eps,
                     momentum ? fmt::format("{}", *momentum) : std::string("None"), affine ? "True" : "False",
                     track_running_stats ? "True" : "False");
}

void BatchNorm1d::check_input_dim(const Tensor& x) const {
  HG_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), "BatchNorm1d: expected 2D or 3D input (got {}D input {})",
           x.defined() ? x.dim() : 0, x.defined() ? x.describe() : std::string("undefined"));
}

void BatchNorm2d::check_input_dim(const Tensor& x) const {
  HG_CHECK(x.defined() && x.dim() == 4, "BatchNorm2d: expected 4D input (got {}D input {})",
           x.defined() ? x.dim() : 0, x.defined() ? x.describe() : std::string("undefined"));
}

}  // namespace halfgrad::nn
