#include <halfgrad/optim/sgd.h>

#include <halfgrad/ops/ops.h>
#include <halfgrad/optim/fused_cpu.h>
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
void follow_param(SGDState& s, const Tensor& p, bool device_path) {
  Tensor& buf = s.momentum_buffer;
  if (!device_path && s.device_step.defined()) {
    // A buffer no applied step wrote is no buffer yet: the next step is its first.
    const bool written = s.device_step.item<float>() != 0.0f;
    s.device_step = Tensor();
    if (!written) buf = Tensor();
  }
  if (!buf.defined()) return;
  if (buf.device() != p.device() || buf.dtype() != p.dtype()) buf = buf.to(p.device(), p.dtype());
  if (!device_path) return;
  if (!s.device_step.defined()) {
    // made by the host path, so an applied step wrote it
    s.device_step = full({}, 1.0, TensorOptions(DType::Float32, p.device()));
  } else if (s.device_step.device() != p.device()) {
    s.device_step = s.device_step.to(p.device());  // cuda:0 -> cuda:1
  }
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
}

void SGD::update(Tensor& p, Tensor& grad, SGDState& state, const SGDOptions& o, const Tensor& inv_scale) {
  follow_param(state, p, /*device_path=*/false);
  const bool first = !state.momentum_buffer.defined();
  if (o.momentum != 0.0 && first) state.momentum_buffer = empty_like(p);  // written by the first step
  if (fused::applies({&p, &grad, &state.momentum_buffer})) {
    // one pass: unscale, weight decay, momentum, update
    fused::sgd(p, grad, o.momentum != 0.0 ? state.momentum_buffer : Tensor(), fused::inv_scale_value(inv_scale),
               {static_cast<float>(o.lr), static_cast<float>(o.momentum), static_cast<float>(1.0 - o.dampening),
                static_cast<float>(o.weight_decay), o.nesterov, first});
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
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

SGDOptions SGD::load_options(detail::OptionReader& r) const {
  SGDOptions o;
  o.lr = r.number("lr");
  o.momentum = r.number("momentum");
  o.dampening = r.number("dampening");
  o.weight_decay = r.number("weight_decay");
  o.nesterov = r.flag("nesterov");
  return o;
}

std::map<std::string, Tensor> SGD::save_state(const SGDState& s) const {
  if (!s.momentum_buffer.defined()) return {};
  // CUDA: a buffer that no applied step wrote yet (the first step was skipped)
  // is no buffer: the next step starts it. Reading the count waits for the GPU.
  if (s.device_step.defined() && s.device_step.item<float>() == 0.0f) return {};
  return {{"momentum_buffer", s.momentum_buffer.detach().clone()}};
}

SGDState SGD::load_state(detail::BufferReader& r, const SGDOptions& o) const {
  (void)o;  // a buffer saved with momentum is kept even if the loaded momentum is 0 (it is then unused)
  SGDState s;
  if (r.has("momentum_buffer")) s.momentum_buffer = r.like_param("momentum_buffer");
  return s;  // the CUDA path makes its device_step (1: written) from the buffer on its next step
}

void SGD::update_fused_device(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                              const std::vector<SGDState*>& states, const SGDOptions& o,
                              const amp::ScalerStep& scaler) {
#if HALFGRAD_WITH_CUDA
  std::vector<Tensor> bufs, steps;
  if (o.momentum != 0.0) {
    for (size_t i = 0; i < params.size(); ++i) {
      SGDState& s = *states[i];
      const Tensor& p = params[i];
      follow_param(s, p, /*device_path=*/true);
      if (!s.momentum_buffer.defined()) {
        // zeros, not empty: a skipped first step leaves this state behind
        s.momentum_buffer = zeros_like(p);
        s.device_step = zeros({}, TensorOptions(DType::Float32, p.device()));
      }
      bufs.push_back(s.momentum_buffer);
      steps.push_back(s.device_step);
    }
  }
  cuda_fused::sgd(params, grads, bufs, steps,
                  {static_cast<float>(o.lr), static_cast<float>(o.momentum), static_cast<float>(1.0 - o.dampening),
                   static_cast<float>(o.weight_decay), o.nesterov, /*first_step=*/false},
                  scaler.found_inf, scaler.inv_scale);
#else
  (void)params, (void)grads, (void)states, (void)o, (void)scaler;
  fail("SGD.step: this halfgrad was built without CUDA");
#endif
}

}  // namespace halfgrad::optim
