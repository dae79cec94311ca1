#include <halfgrad/amp/grad_scaler.h>

#include <cmath>
#include <limits>

#include <halfgrad/amp/autocast.h>
#include <halfgrad/amp/scaler_kernels.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::amp {

namespace {

// The scale lives in a float32 tensor and the optimizer multiplies by its
// float32 inverse: both must be finite and nonzero, so S must round to a
// normal float32 (1e-50 would become 0, and 0 turns every parameter into NaN).
void check_scale(const char* where, const char* name, double s) {
  const float f = static_cast<float>(s);
  HG_CHECK(s > 0.0 && std::isfinite(s) && f >= std::numeric_limits<float>::min() && std::isfinite(f),
           "{}: {} should be a positive finite float32 (between {:g} and {:g}), got {}", where, name,
           std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), s);
}

// One set of rules for the constructor and load_state_dict.
void check_options(const char* where, const char* scale_name, const GradScalerOptions& o) {
  check_scale(where, scale_name, o.init_scale);
  HG_CHECK(o.growth_factor > 1.0 && std::isfinite(o.growth_factor),
           "{}: growth_factor should be a finite number > 1, got {}", where, o.growth_factor);
  HG_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0,
           "{}: backoff_factor should be in (0, 1), got {} (0 would make the scale 0 after an overflow)", where,
           o.backoff_factor);
  HG_CHECK(o.growth_interval > 0, "{}: growth_interval should be > 0, got {}", where, o.growth_interval);
  HG_CHECK(o.min_scale >= 0.0 && o.min_scale <= o.init_scale,
           "{}: min_scale should be 0 (no floor) or a positive scale no larger than {} = {}, got {}", where,
           scale_name, o.init_scale, o.min_scale);
}

// A state dict holds counts as doubles: check before converting (a NaN or
// 1e300 converted to int64 is undefined behaviour).
int64_t whole_number(const char* key, double v, double lo, double hi) {
  HG_CHECK(std::isfinite(v) && std::floor(v) == v && v >= lo && v <= hi,
           "GradScaler.load_state_dict: \"{}\" should be a whole number in [{}, {}], got {}", key, lo, hi, v);
  return static_cast<int64_t>(v);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions o) : options_(o) {
  check_options("GradScaler", "init_scale", o);
}

void GradScaler::lazy_init(Device device) {
  if (scale_.defined()) return;
  scale_ = full({}, options_.init_scale, TensorOptions(DType::Float32, device));
  growth_tracker_ = full({}, static_cast<double>(init_growth_tracker_), TensorOptions(DType::Int64, device));
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  lazy_init(loss.device());
  HG_CHECK(scale_.device() == loss.device(),
           "GradScaler.scale: the scaler lives on {} but the loss {} is on another device; use one scaler per "
           "device",
           scale_.device().str(), loss.describe());
  return mul(loss, scale_);
}

GradScaler::PerOptimizer& GradScaler::state_for(ScaledOptimizer& optimizer) { return per_optimizer_[&optimizer]; }

Tensor GradScaler::inv_scale() const {
  // 1/S computed in float64, stored in float32, as PyTorch does. On CUDA a
  // device thread computes it from the device-resident scale: the host never
  // reads S, so the step stays free of syncs (and capturable in a CUDA graph).
  // A fresh tensor each time: nobody holding an older one sees it change.
  Tensor inv = empty({}, TensorOptions(DType::Float32, scale_.device()));
  reciprocal_scale(scale_, inv);
  return inv;
}

// One pass over every grad: record inf/NaN in a fresh flag, and unscale in
// place when asked.
Tensor GradScaler::check(ScaledOptimizer& optimizer, bool unscale, size_t& checked) {
  HG_CHECK(scale_.defined(),
           "GradScaler: no scale yet. Call scaler.scale(loss).backward() before unscale_() or step().");
  const std::vector<Tensor> grads = optimizer.scaled_grads();
  checked = grads.size();
  for (const auto& g : grads) {
    HG_CHECK(g.device() == scale_.device(),
             "GradScaler: gradient {} is on {} but the scaler lives on {} (the device of the first scaled loss); use "
             "one GradScaler per device",
             g.describe(), g.device().str(), scale_.device().str());
    HG_CHECK(g.dtype() != DType::Float16,
             "Attempting to unscale FP16 gradients. The parameters are stored in float16, so their gradients "
             "are too, and unscaling them in place would underflow exactly as the scaling was meant to prevent. "
             "Keep float32 master weights (do not call model.to(float16)) and let amp::autocast cast them for "
             "each op. (gradient: {})",
             g.describe());
  }
  // Zeroed on the device's stream (a memset): no host involvement.
  Tensor found_inf = zeros({}, TensorOptions(DType::Float32, scale_.device()));
  unscale_and_check(grads, found_inf, unscale ? inv_scale() : Tensor());
  // across ranks: a step is skipped everywhere if any rank saw an inf/NaN
  if (found_inf_reducer_) found_inf_reducer_(found_inf);
  return found_inf;
}

void GradScaler::unscale_(ScaledOptimizer& optimizer) {
  if (!options_.enabled) return;
  PerOptimizer& st = state_for(optimizer);
  HG_CHECK(st.stage != Stage::Unscaled,
           "unscale_() has already been called on this optimizer since the last update().");
  HG_CHECK(st.stage != Stage::Stepped, "unscale_() is being called after step().");
  st.found_inf = check(optimizer, /*unscale=*/true, st.checked);
  st.stage = Stage::Unscaled;
}

StepResult GradScaler::step(ScaledOptimizer& optimizer) {
  if (!options_.enabled) {
    notify(ScalerStep{});
    optimizer.step(ScalerStep{});
    return StepResult();
  }
  PerOptimizer& st = state_for(optimizer);
  HG_CHECK(st.stage != Stage::Stepped, "step() has already been called since the last update().");
  ScalerStep handshake;
  if (st.stage == Stage::Ready) {
    st.found_inf = check(optimizer, /*unscale=*/false, st.checked);  // the optimizer unscales as it updates
    handshake.inv_scale = inv_scale();
  }
  if (st.checked == 0) {
    // PyTorch's `assert len(found_inf_per_device) > 0`: no parameter had a
    // gradient, so nothing was checked and a step would silently do nothing.
    // Unlike PyTorch (which stays stuck until a new scaler), this optimizer
    // starts afresh: after a backward, step() works.
    per_optimizer_.erase(&optimizer);
    fail("GradScaler.step: No inf checks were recorded for this optimizer. None of its parameters has a "
         "gradient, so there was nothing to check for inf/NaN and nothing to update. Call "
         "scaler.scale(loss).backward() before scaler.step(optimizer), with a loss computed from the optimizer's "
         "parameters (and no zero_grad() between the backward and the step).");
  }
  handshake.found_inf = st.found_inf;
  notify(handshake);
  optimizer.step(handshake);
  st.stage = Stage::Stepped;
  if (is_tracing())  // reading the flag syncs with the device: only when teaching
    trace_line(fmt::format("[scaler]   step: grads scaled by {}, inf/NaN found: {} -> update {}", get_scale(),
                           st.found_inf.item<float>() != 0 ? "yes" : "no",
                           st.found_inf.item<float>() != 0 ? "SKIPPED" : "applied (grads unscaled in the same pass)"));
  return StepResult(st.found_inf);
}

int64_t GradScaler::add_step_observer(StepObserver fn) {
  HG_CHECK(fn != nullptr, "GradScaler::add_step_observer: the observer is empty");
  observers_.emplace_back(next_observer_id_, std::move(fn));
  return next_observer_id_++;
}

void GradScaler::remove_step_observer(int64_t id) {
  std::erase_if(observers_, [id](const auto& o) { return o.first == id; });
}

void GradScaler::notify(const ScalerStep& handshake) const {
  const auto run = observers_;  // a copy: an observer may remove itself
  for (const auto& [id, fn] : run) fn(handshake);
}

void GradScaler::update() {
  if (!options_.enabled) return;
  // Any optimizer's overflow counts for the shared scale. As in PyTorch, an
  // optimizer whose unscale_() saw no gradient recorded no check.
  Tensor found;
  for (auto& [opt, st] : per_optimizer_)
    if (st.found_inf.defined() && st.checked > 0) found = found.defined() ? add(found, st.found_inf) : st.found_inf;
  HG_CHECK(found.defined(),
           "No inf checks were recorded prior to update. GradScaler.update: call scaler.scale(loss).backward() and "
           "scaler.step(optimizer) (or scaler.unscale_(optimizer)) with gradients before update().");
  const double before = is_tracing() ? get_scale() : 0.0;
  update_scale(scale_, growth_tracker_, found, options_.growth_factor, options_.backoff_factor,
               options_.growth_interval);
  per_optimizer_.clear();
  if (is_tracing())
    trace_line(fmt::format("[scaler]   update: scale {} -> {} (clean steps in a row: {} of {})", before, get_scale(),
                           growth_tracker(), options_.growth_interval));
  if (options_.min_scale > 0.0) {
    skipped_in_a_row_ = found.item<float>() != 0.0f ? skipped_in_a_row_ + 1 : 0;
    const double now = get_scale();
    if (now < options_.min_scale) {
      scale_.fill_(options_.min_scale);  // the state stays usable (and saveable) at the floor
      fail("GradScaler.update: the loss scale fell to {:g}, below min_scale = {:g}: {} step{} in a row skipped "
           "because the gradients held inf or NaN at every scale tried. The overflow is not the scale's: {}",
           now, options_.min_scale, skipped_in_a_row_, skipped_in_a_row_ == 1 ? "" : "s",
           explain_ ? explain_()
                    : std::string("look for the layer that produces it (amp::non_finite_grads(model) names the "
                                  "parameters whose gradients hold inf or NaN; scaler.set_explain adds that here), "
                                  "a learning rate too high, or an input with inf or NaN"));
    }
  }
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale("GradScaler.update", "new_scale", new_scale);
  if (scale_.defined()) scale_.fill_(new_scale);
  else options_.init_scale = new_scale;
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : options_.init_scale;
}

Tensor GradScaler::scale_tensor() const { return scale_; }

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : init_growth_tracker_;
}

std::map<std::string, double> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"_growth_tracker", static_cast<double>(growth_tracker())}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  if (!options_.enabled) return;
  HG_CHECK(!state.empty(),
           "GradScaler.load_state_dict: the source state dict is empty, possibly because it was saved from a "
           "disabled instance of GradScaler.");
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    HG_CHECK(state.count(key), "GradScaler.load_state_dict: missing key \"{}\"", key);
  // Everything is checked before anything changes.
  GradScalerOptions o = options_;
  o.init_scale = state.at("scale");
  o.growth_factor = state.at("growth_factor");
  o.backoff_factor = state.at("backoff_factor");
  o.growth_interval = whole_number("growth_interval", state.at("growth_interval"), 1, 9.2e18);
  check_options("GradScaler.load_state_dict", "scale", o);
  // The tracker counts clean steps since the last growth: always below the interval.
  const int64_t tracker = whole_number("_growth_tracker", state.at("_growth_tracker"), 0,
                                       static_cast<double>(o.growth_interval - 1));
  options_ = o;
  init_growth_tracker_ = tracker;
  if (scale_.defined()) {  // else the first scale() creates them on the loss's device
    scale_.fill_(state.at("scale"));
    growth_tracker_.fill_(state.at("_growth_tracker"));
  }
}

}  // namespace halfgrad::amp
