#include <halfgrad/optim/adam.h>

#include <cmath>

#include <halfgrad/ops/ops.h>
#include <halfgrad/optim/fused_cpu.h>
#include <halfgrad/optim/low_precision_impl.h>
#if HALFGRAD_WITH_CUDA
#include <halfgrad/optim/cuda/fused_optim_cuda.h>
#endif

namespace halfgrad::optim {

namespace {

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, decoupled;
  low_precision::Config lp;
  const char* op() const { return decoupled ? "AdamW.step" : "Adam.step"; }
};

template <typename O>
AdamHyper hyper(const O& o, bool decoupled) {
  return {o.lr, o.betas[0], o.betas[1], o.eps, o.weight_decay, o.amsgrad, decoupled, low_precision::config(o)};
}

void check(const char* name, double lr, const std::array<double, 2>& betas, double eps, double weight_decay) {
  HG_CHECK(lr >= 0.0, "{}: invalid learning rate {} (must be >= 0)", name, lr);
  HG_CHECK(eps >= 0.0, "{}: invalid eps {} (must be >= 0)", name, eps);
  HG_CHECK(betas[0] >= 0.0 && betas[0] < 1.0, "{}: invalid beta1 {} (must be in [0, 1))", name, betas[0]);
  HG_CHECK(betas[1] >= 0.0 && betas[1] < 1.0, "{}: invalid beta2 {} (must be in [0, 1))", name, betas[1]);
  HG_CHECK(weight_decay >= 0.0, "{}: invalid weight_decay {} (must be >= 0)", name, weight_decay);
}

// The per-element constants, all but the step-dependent two
// (math::adam_bias_corrections fills those in).
math::AdamHyper element_hyper(const AdamHyper& h) {
  return {static_cast<float>(h.beta1), static_cast<float>(1.0 - h.beta1), static_cast<float>(h.beta2),
          static_cast<float>(1.0 - h.beta2), static_cast<float>(h.eps), static_cast<float>(h.weight_decay),
          static_cast<float>(1.0 - h.lr * h.weight_decay), 0.0f, 0.0f, h.amsgrad, h.decoupled};
}

// The state follows a parameter that moved (Module::to) after its first
// step, and the step count goes where the path that updates it counts it:
// the device for the fused CUDA path, the host otherwise. Each hand-over is
// a copy (from the device: a wait for the GPU), once, not per step.
void follow_param(AdamState& s, const Tensor& p, bool device_path, DType state_dtype) {
  if (!device_path && s.device_step.defined()) {
    s.step = s.step_count();
    s.device_step = Tensor();
  }
  if (!s.exp_avg.defined()) return;
  for (Tensor* t : {&s.exp_avg, &s.exp_avg_sq, &s.max_exp_avg_sq})
    if (t->defined() && (t->device() != p.device() || t->dtype() != state_dtype)) *t = t->to(p.device(), state_dtype);
  if (!device_path) return;
  if (!s.device_step.defined()) {
    s.device_step = full({}, static_cast<double>(s.step), TensorOptions(DType::Float32, p.device()));
    s.step = 0;  // one count, kept where it is advanced
  } else if (s.device_step.device() != p.device()) {
    s.device_step = s.device_step.to(p.device());  // cuda:0 -> cuda:1
  }
}

// A bfloat16/float16 parameter under the low-precision options, on the host
// path (optim/low_precision.h): one pass in float32, then the rounding.
void adam_update_low_precision(Tensor& p, const Tensor& grad, AdamState& s, const AdamHyper& h,
                               const Tensor& inv_scale, uint64_t seed) {
  const DType sd = low_precision::state_dtype(h.op(), p, h.lp);
  HG_CHECK(p.device().is_cpu(),
           "{}: parameter {} with gradient {} on {} under master_weights/stochastic_rounding/state_dtype: the CUDA "
           "low-precision path needs a contiguous gradient of the parameter's dtype (the fused kernels)",
           h.op(), p.describe(), grad.describe(), p.device().str());
  HG_CHECK(p.is_contiguous() && grad.is_contiguous(),
           "{}: parameter {} (gradient {}) under master_weights/stochastic_rounding/state_dtype must be contiguous; "
           "make the parameter contiguous before building the optimizer",
           h.op(), p.describe(), grad.describe());
  follow_param(s, p, /*device_path=*/false, sd);
  const sr::Key key = low_precision::prepare_host(s.lp, p, h.lp, seed, s.lp.param_index);
  const TensorOptions state_options(sd, p.device());
  if (!s.exp_avg.defined()) {
    s.exp_avg = zeros(p.shape(), state_options);
    s.exp_avg_sq = zeros(p.shape(), state_options);
  }
  if (h.amsgrad && !s.max_exp_avg_sq.defined()) s.max_exp_avg_sq = zeros(p.shape(), state_options);
  ++s.step;
  math::AdamHyper mh = element_hyper(h);
  math::adam_bias_corrections(mh, h.lr, h.beta1, h.beta2, static_cast<double>(s.step));
  fused::adam_low_precision(p, grad, s.lp.master_param, s.exp_avg, s.exp_avg_sq,
                            h.amsgrad ? s.max_exp_avg_sq : Tensor(), fused::inv_scale_value(inv_scale), mh,
                            low_precision::rounding(h.lp), key);
}

// The one Adam/AdamW update; see adam.h for the formulas.
void adam_update(Tensor& p, Tensor& grad, AdamState& s, const AdamHyper& h, const Tensor& inv_scale,
                 uint64_t seed) {
  if (low_precision::applies(p, h.lp)) return adam_update_low_precision(p, grad, s, h, inv_scale, seed);
  follow_param(s, p, /*device_path=*/false, p.dtype());
  if (!s.exp_avg.defined()) {
    s.exp_avg = zeros_like(p);
    s.exp_avg_sq = zeros_like(p);
    if (h.amsgrad) s.max_exp_avg_sq = zeros_like(p);
  }
  ++s.step;
  const double t = static_cast<double>(s.step);
  if (fused::applies({&p, &grad, &s.exp_avg, &s.exp_avg_sq, &s.max_exp_avg_sq})) {
    // one pass: unscale, weight decay, both moments, update
    math::AdamHyper mh = element_hyper(h);
    math::adam_bias_corrections(mh, h.lr, h.beta1, h.beta2, t);
    fused::adam(p, grad, s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq, fused::inv_scale_value(inv_scale), mh);
    return;
  }
  // Any other dtype, layout or device: the same formulas as tensor ops.
  if (inv_scale.defined()) grad.mul_(inv_scale);
  Tensor g = grad;
  if (h.weight_decay != 0.0) {
    if (h.decoupled) p.mul_(1.0 - h.lr * h.weight_decay);
    else g = add(grad, p, h.weight_decay);
  }
  s.exp_avg.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  s.exp_avg_sq.mul_(h.beta2).add_(mul(g, g), 1.0 - h.beta2);

  const double bias_correction1 = 1.0 - std::pow(h.beta1, t);
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, t));
  const double step_size = h.lr / bias_correction1;

  Tensor v = s.exp_avg_sq;
  if (h.amsgrad) {
    s.max_exp_avg_sq.copy_(maximum(s.max_exp_avg_sq, s.exp_avg_sq));
    v = s.max_exp_avg_sq;
  }
  // denom = sqrt(v) / sqrt(1 - beta2^t) + eps, built in one temporary
  Tensor denom = sqrt(v);
  denom.mul_(1.0 / bias_correction2_sqrt).add_(full({}, h.eps, denom.options()));
  p.add_(div(s.exp_avg, denom), -step_size);
}

// The CUDA path: one fused launch per kind for a group's parameters, the
// float32 ones and the bfloat16/float16 ones under the low-precision
// options; the step counts live on the device (adam.h, AdamState::device_step).
void adam_update_fused_device(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                              const std::vector<AdamState*>& states, const AdamHyper& h,
                              const amp::ScalerStep& scaler, uint64_t seed) {
#if HALFGRAD_WITH_CUDA
  struct Lists {
    std::vector<Tensor> m, v, vmax, steps;
  } f32, low;
  std::vector<Tensor> f32_params, f32_grads;
  cuda_fused::LowPrecisionList lp;
  lp.rounding = low_precision::rounding(h.lp);
  for (size_t i = 0; i < params.size(); ++i) {
    AdamState& s = *states[i];
    const Tensor& p = params[i];
    const bool is_low = p.dtype() != DType::Float32;
    const DType sd = is_low ? low_precision::state_dtype(h.op(), p, h.lp) : p.dtype();
    follow_param(s, p, /*device_path=*/true, sd);
    const TensorOptions state_options(sd, p.device());
    if (!s.exp_avg.defined()) {
      s.exp_avg = zeros(p.shape(), state_options);
      s.exp_avg_sq = zeros(p.shape(), state_options);
      s.device_step = zeros({}, TensorOptions(DType::Float32, p.device()));
    }
    if (h.amsgrad && !s.max_exp_avg_sq.defined()) s.max_exp_avg_sq = zeros(p.shape(), state_options);
    Lists& l = is_low ? low : f32;
    l.m.push_back(s.exp_avg);
    l.v.push_back(s.exp_avg_sq);
    if (h.amsgrad) l.vmax.push_back(s.max_exp_avg_sq);
    l.steps.push_back(s.device_step);
    if (is_low) {
      low_precision::prepare_device(s.lp, p, h.lp, seed);
      lp.add(p, grads[i], s.lp);
    } else {
      f32_params.push_back(p);
      f32_grads.push_back(grads[i]);
    }
  }
  const cuda_fused::AdamConfig config{element_hyper(h), h.lr, h.beta1, h.beta2};
  if (!f32_params.empty())
    cuda_fused::adam(f32_params, f32_grads, f32.m, f32.v, f32.vmax, f32.steps, config, scaler.found_inf,
                     scaler.inv_scale);
  if (!lp.params.empty())
    cuda_fused::adam_low_precision(lp, low.m, low.v, low.vmax, low.steps, config, scaler.found_inf, scaler.inv_scale);
#else
  (void)params, (void)grads, (void)states, (void)h, (void)scaler, (void)seed;
  fail("{}: this halfgrad was built without CUDA", h.op());
#endif
}

template <typename O>
std::map<std::string, double> adam_save_options(const O& o) {
  std::map<std::string, double> out{{"lr", o.lr},   {"beta1", o.betas[0]},           {"beta2", o.betas[1]},
                                    {"eps", o.eps}, {"weight_decay", o.weight_decay}, {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
  low_precision::save(out, low_precision::config(o));
  return out;
}

template <typename O>
O adam_load_options(detail::OptionReader& r) {
  O o;
  o.lr = r.number("lr");
  o.betas = {r.number("beta1"), r.number("beta2")};
  o.eps = r.number("eps");
  o.weight_decay = r.number("weight_decay");
  o.amsgrad = r.flag("amsgrad");
  low_precision::load_into(r, o);
  return o;
}

// PyTorch >= 1.12's layout: step is a float32 0-d tensor (here on the CPU).
std::map<std::string, Tensor> adam_save_state(const AdamState& s) {
  std::map<std::string, Tensor> out;
  low_precision::save_state(out, s.lp);
  if (!s.exp_avg.defined()) return out;
  out.emplace("step", full({}, static_cast<double>(s.step_count()), TensorOptions(DType::Float32)));
  out.emplace("exp_avg", s.exp_avg.detach().clone());
  out.emplace("exp_avg_sq", s.exp_avg_sq.detach().clone());
  if (s.max_exp_avg_sq.defined()) out.emplace("max_exp_avg_sq", s.max_exp_avg_sq.detach().clone());
  return out;
}

template <typename O>
AdamState adam_load_state(detail::BufferReader& r, const O& o, const char* op) {
  AdamState s;
  s.lp = low_precision::load_state(r);
  if (!r.has("exp_avg") && !r.has("step")) return s;  // only a master copy or SR stream so far
  const DType sd = low_precision::state_dtype(op, r.param(), low_precision::config(o));
  s.step = r.step("step");  // the CUDA path moves it to its device_step on its next step
  s.exp_avg = r.like_param("exp_avg", sd);
  s.exp_avg_sq = r.like_param("exp_avg_sq", sd);
  if (o.amsgrad) r.require("max_exp_avg_sq", "the group's amsgrad needs");
  // Without amsgrad a saved max_exp_avg_sq is kept (unused), as PyTorch keeps it.
  if (r.has("max_exp_avg_sq")) s.max_exp_avg_sq = r.like_param("max_exp_avg_sq", sd);
  return s;
}

}  // namespace

std::map<std::string, double> Adam::save_options(const AdamOptions& o) const { return adam_save_options(o); }
AdamOptions Adam::load_options(detail::OptionReader& r) const { return adam_load_options<AdamOptions>(r); }
std::map<std::string, Tensor> Adam::save_state(const AdamState& s) const { return adam_save_state(s); }
AdamState Adam::load_state(detail::BufferReader& r, const AdamOptions& o) const {
  return adam_load_state(r, o, "Adam.load_state_dict");
}
std::map<std::string, double> AdamW::save_options(const AdamWOptions& o) const { return adam_save_options(o); }
AdamWOptions AdamW::load_options(detail::OptionReader& r) const { return adam_load_options<AdamWOptions>(r); }
std::map<std::string, Tensor> AdamW::save_state(const AdamState& s) const { return adam_save_state(s); }
AdamState AdamW::load_state(detail::BufferReader& r, const AdamWOptions& o) const {
  return adam_load_state(r, o, "AdamW.load_state_dict");
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : OptimizerImpl("Adam", options) {
  add_param_group(std::move(params));
}

void Adam::check_options(const AdamOptions& o) const {
  check("Adam", o.lr, o.betas, o.eps, o.weight_decay);
  low_precision::check("Adam", low_precision::config(o));
}
bool Adam::fuses_low_precision(const Tensor& p, const AdamOptions& o) const {
  return low_precision::applies(p, low_precision::config(o));
}

void Adam::update(Tensor& p, Tensor& grad, AdamState& state, const AdamOptions& o, const Tensor& inv_scale) {
  adam_update(p, grad, state, hyper(o, false), inv_scale, sr_seed());
}

void Adam::update_fused_device(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                               const std::vector<AdamState*>& states, const AdamOptions& o,
                               const amp::ScalerStep& scaler) {
  adam_update_fused_device(params, grads, states, hyper(o, false), scaler, sr_seed());
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options) : OptimizerImpl("AdamW", options) {
  add_param_group(std::move(params));
}

void AdamW::check_options(const AdamWOptions& o) const {
  check("AdamW", o.lr, o.betas, o.eps, o.weight_decay);
  low_precision::check("AdamW", low_precision::config(o));
}
bool AdamW::fuses_low_precision(const Tensor& p, const AdamWOptions& o) const {
  return low_precision::applies(p, low_precision::config(o));
}

void AdamW::update(Tensor& p, Tensor& grad, AdamState& state, const AdamWOptions& o, const Tensor& inv_scale) {
  adam_update(p, grad, state, hyper(o, true), inv_scale, sr_seed());
}

void AdamW::update_fused_device(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                const std::vector<AdamState*>& states, const AdamWOptions& o,
                                const amp::ScalerStep& scaler) {
  adam_update_fused_device(params, grads, states, hyper(o, true), scaler, sr_seed());
}

}  // namespace halfgrad::optim
