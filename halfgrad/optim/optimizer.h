#pragma once
// Optimizer: parameter groups, zero_grad and the step loop (torch.optim).
//
// `Optimizer` is the type-erased interface the rest of the framework holds
// (the GradScaler, LR schedulers). `OptimizerImpl<Options, State>` keeps the
// groups, each with its own copy of the optimizer's options, and one State
// per parameter, and runs step():
//
//   step() -> for each group, for each param with a .grad (under no_grad)
//          -> update(param, grad, state, group options)
//
// so each optimizer writes its per-parameter update in exactly one place,
// and a caller that must decide per step whether updates happen (the AMP
// loss scaler) has one loop to hook into.
//
// On CUDA the same loop gathers the group's float32 parameters instead and
// hands them to update_fused_device(): one multi-tensor launch per group (and
// device) that reads the scaler's found_inf and inv_scale on the device, so a
// step never waits for the GPU (optim/cuda/fused_optim_cuda.h).
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <halfgrad/amp/grad_scaler.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad::optim {

class Optimizer : public amp::ScaledOptimizer {
 public:
  ~Optimizer() override = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  void step() { step(amp::ScalerStep{}); }
  // The step the GradScaler calls: skip everything if scaler.found_inf is set,
  // else unscale each grad (if scaler.inv_scale is set) just before its update.
  void step(const amp::ScalerStep& scaler) override = 0;
  std::vector<Tensor> scaled_grads() const override;
  // set_to_none: drop each .grad (the default, as in PyTorch 2); else zero it in place.
  void zero_grad(bool set_to_none = true);

  virtual size_t num_param_groups() const = 0;
  virtual const std::vector<Tensor>& group_params(size_t group) const = 0;
  // Every parameter, group by group.
  std::vector<Tensor> parameters() const;
  // The learning rate of a group (LR schedulers change it between steps).
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // PyTorch's group['initial_lr']: the lr a group's schedule starts from. The
  // first LR scheduler sets it (to the group's lr then), later ones reuse it,
  // so a second scheduler on the same optimizer (SequentialLR) starts from
  // the same base although the first one already changed lr.
  std::optional<double> initial_lr(size_t group) const {
    auto it = initial_lrs_.find(group);
    return it == initial_lrs_.end() ? std::nullopt : std::optional<double>(it->second);
  }
  void set_initial_lr(size_t group, double lr) { initial_lrs_[group] = lr; }

  // "SGD", "Adam", ...: used in messages.
  const std::string& name() const { return name_; }

 protected:
  explicit Optimizer(std::string name) : name_(std::move(name)) {}
  // A parameter an optimizer can take: defined, floating, a leaf.
  void check_param(const Tensor& p, size_t index) const;

 private:
  std::string name_;
  std::map<size_t, double> initial_lrs_;  // group -> initial_lr, once a scheduler set it
};

template <typename Options, typename State>
class OptimizerImpl : public Optimizer {
 public:
  struct ParamGroup {
    std::vector<Tensor> params;
    Options options;
  };

  // A new group with its own options (default: the optimizer's defaults).
  // A parameter may belong to one group only.
  void add_param_group(std::vector<Tensor> params) { add_param_group(std::move(params), defaults_); }
  void add_param_group(std::vector<Tensor> params, const Options& options) {
    HG_CHECK(!params.empty(), "{}: got an empty parameter list", name());
    check_options(options);
    for (size_t i = 0; i < params.size(); ++i) {
      check_param(params[i], i);
      for (size_t j = 0; j < i; ++j)
        HG_CHECK(!params[j].is_same(params[i]), "{}: parameter {} ({}) appears twice in one group", name(), i,
                 params[i].describe());
      for (const auto& g : groups_)
        for (const auto& q : g.params)
          HG_CHECK(!q.is_same(params[i]),
                   "{}: parameter {} ({}) is already in another parameter group; each parameter may be in one "
                   "group only",
                   name(), i, params[i].describe());
    }
    groups_.push_back({std::move(params), options});
  }

  const Options& defaults() const { return defaults_; }
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }

  // A parameter's state; nullptr before its first step.
  const State* state(const Tensor& param) const {
    auto it = state_.find(param.unsafe_impl());
    return it == state_.end() ? nullptr : &it->second;
  }

  using Optimizer::step;
  void step(const amp::ScalerStep& scaler) override {
    NoGradGuard no_grad;
    // The scaler hand-shake. A step with an inf/NaN gradient changes nothing:
    // parameters and state (momentum, Adam's moments and step count) stay
    // bit-identical. On the CPU the flag is plain memory: read it and return.
    const bool flag_on_device = scaler.found_inf.defined() && !scaler.found_inf.device().is_cpu();
    if (scaler.found_inf.defined() && !flag_on_device && scaler.found_inf.item<float>() != 0.0f) return;
    // On CUDA the fused kernels read the flag on the device (every block
    // returns at once when it is set). Only a parameter without a fused
    // kernel (float64 or a strided view on CUDA) needs it on the host: it is
    // read then, once per step, and that read waits for the GPU.
    int host_flag = flag_on_device ? -1 : 0;  // -1: not read yet
    auto skipped_on_host = [&] {
      if (host_flag < 0) host_flag = scaler.found_inf.item<float>() != 0.0f ? 1 : 0;
      return host_flag == 1;
    };
    for (auto& group : groups_) {
      std::vector<DeviceBatch> batches;  // one per CUDA device, usually one
      for (auto& p : group.params) {
        Tensor grad = p.grad();
        if (!grad.defined()) continue;
        HG_CHECK(grad.shape() == p.shape() && grad.device() == p.device(),
                 "{}.step: gradient {} does not match its parameter {}", name(), grad.describe(), p.describe());
        State& state = state_[p.unsafe_impl()];
        if (fuses_on_device(p, grad)) {
          batch_for(batches, p.device()).add(p, grad, &state);
          continue;
        }
        if (skipped_on_host()) continue;
        if (grad.dtype() != p.dtype()) {
          // state and update in the param's dtype: unscale first, then convert
          if (scaler.inv_scale.defined()) grad.mul_(scaler.inv_scale);
          grad = grad.to(p.dtype());
          update(p, grad, state, group.options, Tensor());
        } else {
          update(p, grad, state, group.options, scaler.inv_scale);
        }
      }
      for (auto& b : batches) update_fused_device(b.params, b.grads, b.states, group.options, scaler);
    }
  }

  size_t num_param_groups() const override { return groups_.size(); }
  const std::vector<Tensor>& group_params(size_t group) const override { return checked(group).params; }
  double lr(size_t group) const override { return checked(group).options.lr; }
  void set_lr(size_t group, double lr) override {
    HG_CHECK(lr >= 0.0, "{}: invalid learning rate {}", name(), lr);
    checked(group);
    groups_[group].options.lr = lr;
  }

 protected:
  OptimizerImpl(std::string name, const Options& defaults) : Optimizer(std::move(name)), defaults_(defaults) {}

  // Rejects options the update cannot use (an Error naming the option).
  virtual void check_options(const Options& options) const = 0;
  // One parameter's update, under no_grad; grad has the param's dtype. If
  // inv_scale is defined the grad is still scaled: the update multiplies it
  // by inv_scale, writes the unscaled grad back to .grad (as PyTorch's fused
  // optimizers do) and uses it, in the same pass where it can.
  virtual void update(Tensor& param, Tensor& grad, State& state, const Options& options, const Tensor& inv_scale) = 0;

  // The CUDA path. An optimizer with fused device kernels returns true, and
  // then update_fused_device() gets, per group and device, every parameter
  // whose param and grad are contiguous float32 CUDA tensors, with their
  // states (made on first use). It must not wait for the device: found_inf
  // and inv_scale (either may be undefined) are read by the kernels, which
  // leave everything untouched when found_inf is set.
  virtual bool has_fused_device_update() const { return false; }
  virtual void update_fused_device(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                   const std::vector<State*>& states, const Options& options,
                                   const amp::ScalerStep& scaler) {
    (void)params, (void)grads, (void)states, (void)options, (void)scaler;
    fail("{}.step: no fused CUDA update (has_fused_device_update() is false)", name());
  }

 private:
  struct DeviceBatch {
    Device device;
    std::vector<Tensor> params, grads;
    std::vector<State*> states;  // into state_: node-based, so stable while it grows
    void add(const Tensor& p, const Tensor& g, State* s) {
      params.push_back(p);
      grads.push_back(g);
      states.push_back(s);
    }
  };
  static DeviceBatch& batch_for(std::vector<DeviceBatch>& batches, Device device) {
    for (auto& b : batches)
      if (b.device == device) return b;
    batches.push_back(DeviceBatch{device, {}, {}, {}});
    return batches.back();
  }
  bool fuses_on_device(const Tensor& p, const Tensor& grad) const {
    return p.device().is_cuda() && has_fused_device_update() && p.dtype() == DType::Float32 &&
           grad.dtype() == DType::Float32 && p.is_contiguous() && grad.is_contiguous();
  }

  const ParamGroup& checked(size_t group) const {
    HG_CHECK(group < groups_.size(), "{}: no parameter group {} (there are {})", name(), group, groups_.size());
    return groups_[group];
  }

  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::unordered_map<const TensorImpl*, State> state_;  // keyed by parameter identity
};

}  // namespace halfgrad::optim
