#include <halfgrad/optim/sgd.h>

#include <halfgrad/ops/ops.h>
#include <halfgrad/optim/fused_cpu.h>
#include <halfgrad/optim/low_precision_impl.h>
#if HALFGRAD_WITH_CUDA
#include <halfgrad/optim/cuda/fused_optim_cuda.h>
#endif

namespace halfgrad::optim {

namespace {

// The state follows a parameter that moved (Module::to) after its first
// step, and the applied-step count goes where the path that updates the
// buffer keeps it: on the device for the fused CUDA path, implied by a
// defined buffer on the host path. Each hand-over is a copy (from the device:
// a wait for the GPU), once, not per step.
void follow_param(SGDState& s, const Tensor& p, bool device_path, DType state_dtype) {
  Tensor& buf = s.momentum_buffer;
  if (!device_path && s.device_step.defined()) {
    // A buffer no applied step wrote is no buffer yet: the next step is its first.
    const bool written = s.device_step.item<float>() != 0.0f;
    s.device_step = Tensor();
    if (!written) buf = Tensor();
  }
  if (!buf.defined()) return;
  if (buf.device() != p.device() || buf.dtype() != state_dtype) buf = buf.to(p.device(), state_dtype);
  if (!device_path) return;
  if (!s.device_step.defined()) {
    // made by the host path, so an applied step wrote it
    s.device_step = full({}, 1.0, TensorOptions(DType::Float32, p.device()));
  } else if (s.device_step.device() != p.device()) {
    s.device_step = s.device_step.to(p.device());  // cuda:0 -> cuda:1
  }
}

math::SGDHyper element_hyper(const SGDOptions& o, bool first) {
  return {static_cast<float>(o.lr), static_cast<float>(o.momentum), static_cast<float>(1.0 - o.dampening),
          static_cast<float>(o.weight_decay), o.nesterov, first};
}

// A bfloat16/float16 parameter under the low-precision options, on the host
// path (optim/low_precision.h): one pass in float32, then the rounding.
void update_low_precision(Tensor& p, const Tensor& grad, SGDState& s, const SGDOptions& o, const Tensor& inv_scale,
                          uint64_t seed) {
  const auto c = low_precision::config(o);
  const DType sd = low_precision::state_dtype("SGD.step", p, c);
  HG_CHECK(p.device().is_cpu(),
           "SGD.step: parameter {} with gradient {} on {} under master_weights/stochastic_rounding/state_dtype: the "
           "CUDA low-precision path needs a contiguous gradient of the parameter's dtype (the fused kernels)",
           p.describe(), grad.describe(), p.device().str());
  HG_CHECK(p.is_contiguous() && grad.is_contiguous(),
           "SGD.step: parameter {} (gradient {}) under master_weights/stochastic_rounding/state_dtype must be "
           "contiguous; make the parameter contiguous before building the optimizer",
           p.describe(), grad.describe());
  follow_param(s, p, /*device_path=*/false, sd);
  const sr::Key key = low_precision::prepare_host(s.lp, p, c, seed, s.lp.param_index);
  const bool first = !s.momentum_buffer.defined();
  if (o.momentum != 0.0 && first) s.momentum_buffer = empty(p.shape(), TensorOptions(sd, p.device()));
  fused::sgd_low_precision(p, grad, s.lp.master_param, o.momentum != 0.0 ? s.momentum_buffer : Tensor(),
                           fused::inv_scale_value(inv_scale), element_hyper(o, first), low_precision::rounding(c),
                           key);
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options) : OptimizerImpl("SGD", options) {
  add_param_group(std::move(params));
}

void SGD::check_options(const SGDOptions& o) const {
  HG_CHECK(o.lr >= 0.0, "SGD: invalid learning rate {} (must be >= 0)", o.lr);
  HG_CHECK(o.momentum >= 0.0, "SGD: invalid momentum {} (must be >= 0)", o.momentum);
  HG_CHECK(o.weight_decay >= 0.0, "SGD: invalid weight_decay {} (must be >= 0)", o.weight_decay);
  HG_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
           "SGD: Nesterov momentum requires a momentum > 0 and zero dampening (got momentum {}, dampening {})",
           o.momentum, o.dampening);
  low_precision::check("SGD", low_precision::config(o));
}

bool SGD::fuses_low_precision(const Tensor& p, const SGDOptions& o) const {
  return low_precision::applies(p, low_precision::config(o));
}

void SGD::update(Tensor& p, Tensor& grad, SGDState& state, const SGDOptions& o, const Tensor& inv_scale) {
  if (low_precision::applies(p, low_precision::config(o)))
    return update_low_precision(p, grad, state, o, inv_scale, sr_seed());
  follow_param(state, p, /*device_path=*/false, p.dtype());
  const bool first = !state.momentum_buffer.defined();
  if (o.momentum != 0.0 && first) state.momentum_buffer = empty_like(p);  // written by the first step
  if (fused::applies({&p, &grad, &state.momentum_buffer})) {
    // one pass: unscale, weight decay, momentum, update
    fused::sgd(p, grad, o.momentum != 0.0 ? state.momentum_buffer : Tensor(), fused::inv_scale_value(inv_scale),
               element_hyper(o, first));
    return;
  }
  // Any other dtype, layout or device: the same formulas as tensor ops.
  if (inv_scale.defined()) grad.mul_(inv_scale);
  Tensor d_p = o.weight_decay != 0.0 ? add(grad, p, o.weight_decay) : grad;
  if (o.momentum != 0.0) {
    Tensor& buf = state.momentum_buffer;
    if (first) {
      buf.copy_(d_p);
    } else {
      buf.mul_(o.momentum).add_(d_p, 1.0 - o.dampening);
    }
    d_p = o.nesterov ? add(d_p, buf, o.momentum) : buf;
  }
  p.add_(d_p, -o.lr);
}

std::map<std::string, double> SGD::save_options(const SGDOptions& o) const {
  std::map<std::string, double> out{{"lr", o.lr},
                                    {"momentum", o.momentum},
                                    {"dampening", o.dampening},
                                    {"weight_decay", o.weight_decay},
                                    {"nesterov", o.nesterov ? 1.0 : 0.0}};
  low_precision::save(out, low_precision::config(o));
  return out;
}

SGDOptions SGD::load_options(detail::OptionReader& r) const {
  SGDOptions o;
  o.lr = r.number("lr");
  o.momentum = r.number("momentum");
  o.dampening = r.number("dampening");
  o.weight_decay = r.number("weight_decay");
  o.nesterov = r.flag("nesterov");
  low_precision::load_into(r, o);
  return o;
}

std::map<std::string, Tensor> SGD::save_state(const SGDState& s) const {
  std::map<std::string, Tensor> out;
  low_precision::save_state(out, s.lp);
  if (!s.momentum_buffer.defined()) return out;
  // CUDA: a buffer that no applied step wrote yet (the first step was skipped)
  // is no buffer: the next step starts it. Reading the count waits for the GPU.
  if (s.device_step.defined() && s.device_step.item<float>() == 0.0f) return out;
  out.emplace("momentum_buffer", s.momentum_buffer.detach().clone());
  return out;
}

SGDState SGD::load_state(detail::BufferReader& r, const SGDOptions& o) const {
  // A buffer saved with momentum is kept even if the loaded momentum is 0 (it is then unused).
  SGDState s;
  s.lp = low_precision::load_state(r);
  const DType sd = low_precision::state_dtype("SGD.load_state_dict", r.param(), low_precision::config(o));
  if (r.has("momentum_buffer")) s.momentum_buffer = r.like_param("momentum_buffer", sd);
  return s;  // the CUDA path makes its device_step (1: written) from the buffer on its next step
}

void SGD::update_fused_device(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                              const std::vector<SGDState*>& states, const SGDOptions& o,
                              const amp::ScalerStep& scaler) {
#if HALFGRAD_WITH_CUDA
  // float32 parameters to the float32 kernels; bfloat16/float16 ones (under
  // the low-precision options) to theirs. Momentum's applied-step counts
  // (device_step) are kept alike for both.
  std::vector<Tensor> bufs, steps;
  std::vector<Tensor> f32_params, f32_grads;
  cuda_fused::LowPrecisionList lp;
  lp.rounding = low_precision::rounding(low_precision::config(o));
  std::vector<Tensor> lp_bufs, lp_steps;
  for (size_t i = 0; i < params.size(); ++i) {
    SGDState& s = *states[i];
    const Tensor& p = params[i];
    const bool low = p.dtype() != DType::Float32;
    const DType sd = low ? low_precision::state_dtype("SGD.step", p, low_precision::config(o)) : p.dtype();
    if (low) {
      low_precision::prepare_device(s.lp, p, low_precision::config(o), sr_seed());
      lp.add(p, grads[i], s.lp);
    } else {
      f32_params.push_back(p);
      f32_grads.push_back(grads[i]);
    }
    if (o.momentum == 0.0) continue;
    follow_param(s, p, /*device_path=*/true, sd);
    if (!s.momentum_buffer.defined()) {
      // zeros, not empty: a skipped first step leaves this state behind
      s.momentum_buffer = zeros(p.shape(), TensorOptions(sd, p.device()));
      s.device_step = zeros({}, TensorOptions(DType::Float32, p.device()));
    }
    (low ? lp_bufs : bufs).push_back(s.momentum_buffer);
    (low ? lp_steps : steps).push_back(s.device_step);
  }
  const math::SGDHyper h = element_hyper(o, /*first=*/false);
  if (!f32_params.empty()) cuda_fused::sgd(f32_params, f32_grads, bufs, steps, h, scaler.found_inf, scaler.inv_scale);
  if (!lp.params.empty()) cuda_fused::sgd_low_precision(lp, lp_bufs, lp_steps, h, scaler.found_inf, scaler.inv_scale);
#else
  (void)params, (void)grads, (void)states, (void)o, (void)scaler;
  fail("SGD.step: this halfgrad was built without CUDA");
#endif
}

}  // namespace halfgrad::optim
