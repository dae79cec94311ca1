// The loss monitor (see loss_monitor.h): each observe() is a handful of
// scalar ops on the loss's device, each read() one copy to the host.
#include <halfgrad/train/loss_monitor.h>

#include <cmath>
#include <limits>

#include <halfgrad/amp/autocast.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::train {

void NonFiniteMonitor::lazy_init(Device device) {
  const TensorOptions f64(DType::Float64, device);
  zero_ = zeros({}, f64);
  one_ = ones({}, f64);
  step_ = full({}, static_cast<double>(next_step_), f64);
  sum_ = zeros({}, f64);
  finite_ = zeros({}, f64);
  nonfinite_ = zeros({}, f64);
  first_bad_ = full({}, -1.0, f64);
  last_finite_ = full({}, std::numeric_limits<double>::quiet_NaN(), f64);
  skipped_ = zeros({}, f64);
  device_ = device;
  initialised_ = true;
}

void NonFiniteMonitor::observe(const Tensor& loss, const amp::StepResult& step) {
  observe(loss);
  if (!step.found_inf().defined()) return;
  const Tensor& found_inf = step.found_inf();
  HG_CHECK(found_inf.device() == device_, "NonFiniteMonitor::observe: the step's found_inf is {}, the loss on {}",
           found_inf.describe(), device_.str());
  autograd::NoGradGuard no_grad;
  amp::autocast off(device_.type(), std::nullopt, /*enabled=*/false);
  skipped_.add_(where(ne(found_inf.reshape({}), 0.0), one_, zero_));
}

void NonFiniteMonitor::observe(const Tensor& loss) {
  HG_CHECK(loss.defined() && loss.numel() == 1 && loss.is_floating_point(),
           "NonFiniteMonitor::observe: the loss must be a one-element floating tensor, got {}",
           loss.defined() ? loss.describe() : std::string("an undefined tensor"));
  if (!initialised_) lazy_init(loss.device());
  HG_CHECK(loss.device() == device_,
           "NonFiniteMonitor::observe: the loss is {}, earlier losses were on {}; use one monitor per device",
           loss.describe(), device_.str());
  autograd::NoGradGuard no_grad;
  amp::autocast off(device_.type(), std::nullopt, /*enabled=*/false);
  const Tensor l = loss.detach().reshape({}).to(DType::Float64);
  const Tensor fin = isfinite(l);
  sum_.add_(where(fin, l, zero_));
  finite_.add_(where(fin, one_, zero_));
  nonfinite_.add_(where(fin, zero_, one_));
  // The first non-finite step of the window: set once, while still -1.
  first_bad_.copy_(where(fin, first_bad_, where(lt(first_bad_, 0.0), step_, first_bad_)));
  last_finite_.copy_(where(fin, l, last_finite_));
  step_.add_(1.0);
  ++next_step_;
  ++window_steps_;
}

LossReport NonFiniteMonitor::read(const amp::GradScaler* scaler) {
  LossReport r;
  r.steps = window_steps_;
  window_steps_ = 0;
  if (!initialised_) {
    r.mean_loss = std::numeric_limits<double>::quiet_NaN();
    if (scaler && scaler->is_enabled() && scaler->scale_tensor().defined()) r.loss_scale = scaler->get_scale();
    return r;
  }
  autograd::NoGradGuard no_grad;
  amp::autocast off(device_.type(), std::nullopt, /*enabled=*/false);
  std::vector<Tensor> parts = {sum_, finite_, nonfinite_, first_bad_, last_finite_, skipped_};
  Tensor scale;
  if (scaler && scaler->is_enabled()) scale = scaler->scale_tensor();
  if (scale.defined()) {
    HG_CHECK(scale.device() == device_, "NonFiniteMonitor::read: the scaler's scale is {}, the losses on {}",
             scale.describe(), device_.str());
    parts.push_back(scale.reshape({}).to(DType::Float64));
  }
  const std::vector<double> v = stack(parts).to_vector<double>();  // the one host sync
  r.finite_steps = static_cast<int64_t>(v[1]);
  r.nonfinite_steps = static_cast<int64_t>(v[2]);
  r.mean_loss = r.finite_steps > 0 ? v[0] / v[1] : std::numeric_limits<double>::quiet_NaN();
  if (v[3] >= 0) r.first_nonfinite_step = static_cast<int64_t>(v[3]);
  if (!std::isnan(v[4])) r.last_finite_loss = v[4];
  r.skipped_steps = static_cast<int64_t>(v[5]);
  if (scale.defined()) r.loss_scale = v[6];
  // A new window (queued; the next observe() sees it).
  sum_.zero_();
  finite_.zero_();
  nonfinite_.zero_();
  first_bad_.fill_(-1.0);
  skipped_.zero_();
  return r;
}

}  // namespace halfgrad::train
