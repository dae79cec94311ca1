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
// Each State has a LowPrecisionState `lp` (optim/low_precision.h: master
// copy, stochastic-rounding stream), whose param_index the loop sets.
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
#include <halfgrad/optim/low_precision.h>

namespace halfgrad::optim {

// An optimizer's state in PyTorch's layout (torch.optim.Optimizer.state_dict()),
// in plain containers so that a checkpoint writer can put the tensors into a
// safetensors file and the rest into JSON:
//
//   state         parameter index -> buffer name -> tensor. A parameter's
//                 index counts over all groups in order (0, 1, ...). Only
//                 parameters with state are listed (a parameter that never had
//                 a gradient has none; PyTorch's SGD without momentum keeps an
//                 entry {momentum_buffer: None}, here there is no entry).
//                   SGD:        momentum_buffer
//                   Adam/AdamW: step, exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad)
//                 `step` is as in PyTorch >= 1.12: a float32 0-d tensor (here
//                 always on the CPU); the buffers are on their parameters'
//                 devices, in their dtypes.
//   param_groups  each group's options by PyTorch's names, and `params`, the
//                 indices of the group's parameters. Options are numbers:
//                 booleans are 0 or 1, and Adam's betas are two entries,
//                 "beta1" and "beta2" (PyTorch's betas = (beta1, beta2)).
//                   SGD:        lr, momentum, dampening, weight_decay, nesterov, maximize
//                   Adam/AdamW: lr, beta1, beta2, eps, weight_decay, amsgrad, maximize
//                 maximize is always 0 (halfgrad minimizes); "initial_lr" is
//                 present once an LR scheduler has set it, as in PyTorch.
//
// state_dict() returns copies (a snapshot, as torch.save of it would be;
// PyTorch returns references to the live buffers). On CUDA it waits for the
// device once (the step counts live there).
struct ParamGroupState {
  std::map<std::string, double> options;
  std::vector<int64_t> params;
};

struct OptimizerStateDict {
  std::map<int64_t, std::map<std::string, Tensor>> state;
  std::vector<ParamGroupState> param_groups;
};

namespace detail {

// Reads one saved param group's options for load_state_dict; every key must be
// taken (finish() rejects the rest).
class OptionReader {
 public:
  OptionReader(std::string op, size_t group, const std::map<std::string, double>& options)
      : op_(std::move(op)), group_(group), options_(options) {}
  double number(const std::string& key);  // required
  bool flag(const std::string& key);      // required, 0 or 1
  std::optional<double> optional(const std::string& key);
  // An option halfgrad lacks: absent or 0, else an Error with `remedy`.
  void optional_zero(const std::string& key, const char* remedy);
  void finish() const;

 private:
  std::string op_;
  size_t group_;
  const std::map<std::string, double>& options_;
  std::vector<std::string> taken_;
};

// Reads one parameter's saved buffers for load_state_dict.
class BufferReader {
 public:
  BufferReader(std::string op, int64_t index, const Tensor& param, const std::map<std::string, Tensor>& buffers)
      : op_(std::move(op)), index_(index), param_(param), buffers_(buffers) {}
  bool has(const std::string& key) const { return buffers_.count(key) != 0; }
  const Tensor& param() const { return param_; }
  // A copy of the buffer in a new tensor laid out like the parameter, on its
  // device; the saved one must have the parameter's shape and dtype (or
  // `dtype`: a float32 state of a bfloat16 parameter, optim/low_precision.h).
  Tensor like_param(const std::string& key) { return like_param(key, param_.dtype()); }
  Tensor like_param(const std::string& key, DType dtype);
  // A one-element int64 tensor's 64 bits (a seed).
  uint64_t bits64(const std::string& key);
  // A step count: a one-element tensor holding a whole number >= 0.
  int64_t step(const std::string& key);
  // A buffer that must be present (when `why` holds).
  void require(const std::string& key, const char* why) const;
  void finish() const;

 private:
  const Tensor& get(const std::string& key);
  std::string op_;
  int64_t index_;
  const Tensor& param_;
  const std::map<std::string, Tensor>& buffers_;
  std::vector<std::string> taken_;
};

}  // namespace detail

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

  // See OptimizerStateDict. load_state_dict replaces the whole state and every
  // group's options (lr, ..., initial_lr) with the saved ones, copying the
  // buffers into the optimizer's own tensors on the parameters' devices. As in
  // PyTorch the saved `params` lists map the saved indices to this
  // optimizer's parameters by position, so the groups must hold the same
  // number of parameters; each buffer must have its parameter's shape and
  // dtype, and an unknown key or option is an Error. Nothing changes when
  // there is an Error.
  virtual OptimizerStateDict state_dict() const = 0;
  virtual void load_state_dict(const OptimizerStateDict& state) = 0;

 protected:
  explicit Optimizer(std::string name) : name_(std::move(name)) {}
  void clear_initial_lrs() { initial_lrs_.clear(); }
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
    // The stochastic-rounding stream's seed, from the global generator when
    // the first group that asks for SR arrives (usually at construction), so
    // an optimizer without SR leaves the generator's stream as it was.
    if (options.stochastic_rounding && !sr_seed_) sr_seed_ = low_precision::draw_seed();
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
    int64_t index = -1;  // over all groups: the state dict's index, part of the SR stream's counter
    for (auto& group : groups_) {
      std::vector<DeviceBatch> batches;  // one per CUDA device, usually one
      for (auto& p : group.params) {
        ++index;
        Tensor grad = p.grad();
        if (!grad.defined()) continue;
        HG_CHECK(grad.shape() == p.shape() && grad.device() == p.device(),
                 "{}.step: gradient {} does not match its parameter {}", name(), grad.describe(), p.describe());
        // The kernels read the scaler's tensors where the parameter lives: a
        // host flag given to a device kernel, or the reverse, would crash.
        for (const Tensor* s : {&scaler.inv_scale, &scaler.found_inf})
          HG_CHECK(!s->defined() || (s->device() == p.device() && s->dtype() == DType::Float32 && s->numel() == 1),
                   "{}.step: the scaler's {} {} must be a one-element float32 tensor on the device of parameter {}; "
                   "a GradScaler keeps its tensors on its gradients' device (use one scaler per device)",
                   name(), s == &scaler.inv_scale ? "inv_scale" : "found_inf", s->describe(), p.describe());
        State& state = state_[p.unsafe_impl()];
        state.lp.param_index = index;
        if (fuses_on_device(p, grad, group.options)) {
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

  OptimizerStateDict state_dict() const override {
    OptimizerStateDict out;
    int64_t index = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      ParamGroupState group;
      group.options = save_options(groups_[g].options);
      group.options["maximize"] = 0.0;
      if (auto init = initial_lr(g)) group.options["initial_lr"] = *init;
      for (const auto& p : groups_[g].params) {
        auto it = state_.find(p.unsafe_impl());
        if (it != state_.end()) {
          auto buffers = save_state(it->second);
          if (!buffers.empty()) out.state.emplace(index, std::move(buffers));
        }
        group.params.push_back(index++);
      }
      out.param_groups.push_back(std::move(group));
    }
    return out;
  }

  void load_state_dict(const OptimizerStateDict& sd) override {
    const std::string op = name() + ".load_state_dict";
    HG_CHECK(sd.param_groups.size() == groups_.size(),
             "{}: the state dict has {} parameter groups but this optimizer has {}; load a state dict saved from an "
             "optimizer with the same groups",
             op, sd.param_groups.size(), groups_.size());
    // Validate everything first: an Error leaves the optimizer as it was.
    std::map<int64_t, std::pair<const Tensor*, size_t>> param_of;  // saved index -> (parameter, group)
    std::vector<Options> options;
    std::map<size_t, double> initial_lrs;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const ParamGroupState& sg = sd.param_groups[g];
      HG_CHECK(sg.params.size() == groups_[g].params.size(),
               "{}: param_groups[{}] of the state dict has {} parameters but this optimizer's group {} has {}; load a "
               "state dict saved from an optimizer over the same parameters",
               op, g, sg.params.size(), g, groups_[g].params.size());
      for (size_t j = 0; j < sg.params.size(); ++j) {
        HG_CHECK(param_of.emplace(sg.params[j], std::make_pair(&groups_[g].params[j], g)).second,
                 "{}: parameter index {} appears twice in the state dict's param_groups", op, sg.params[j]);
      }
      detail::OptionReader reader(op, g, sg.options);
      Options o = load_options(reader);
      reader.optional_zero("maximize", "halfgrad's optimizers do not maximize; negate the loss instead");
      if (auto init = reader.optional("initial_lr")) initial_lrs[g] = *init;
      reader.finish();
      check_options(o);
      options.push_back(o);
    }
    std::vector<std::pair<const TensorImpl*, State>> states;
    for (const auto& [index, buffers] : sd.state) {
      auto it = param_of.find(index);
      HG_CHECK(it != param_of.end(),
               "{}: the state dict has state for parameter {} but no param group lists it; the state dict is "
               "inconsistent (was it edited?)",
               op, index);
      const Tensor& p = *it->second.first;
      detail::BufferReader reader(op, index, p, buffers);
      State s = load_state(reader, options[it->second.second]);
      reader.finish();
      states.emplace_back(p.unsafe_impl(), std::move(s));
    }
    // Commit.
    for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = options[g];
    clear_initial_lrs();
    for (const auto& [g, lr] : initial_lrs) set_initial_lr(g, lr);
    state_.clear();
    for (auto& [impl, s] : states) state_.emplace(impl, std::move(s));
    for (const auto& g : groups_)
      if (g.options.stochastic_rounding && !sr_seed_) sr_seed_ = low_precision::draw_seed();
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
  // state_dict hooks: the group options by PyTorch's names (without maximize
  // and initial_lr, which the base adds), and back (every option required);
  // a parameter's buffers (empty: no entry), and back into a State whose
  // tensors are the optimizer's own, on the parameter's device.
  virtual std::map<std::string, double> save_options(const Options& options) const = 0;
  virtual Options load_options(detail::OptionReader& reader) const = 0;
  virtual std::map<std::string, Tensor> save_state(const State& state) const = 0;
  virtual State load_state(detail::BufferReader& reader, const Options& options) const = 0;
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
  // Whether a bfloat16/float16 CUDA parameter under these options also goes
  // to update_fused_device (the low-precision kernels, optim/low_precision.h).
  virtual bool fuses_low_precision(const Tensor& p, const Options& options) const {
    (void)p, (void)options;
    return false;
  }
  // The seed of the stochastic-rounding stream (0 while no group asked for SR).
  uint64_t sr_seed() const { return sr_seed_.value_or(0); }
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
  bool fuses_on_device(const Tensor& p, const Tensor& grad, const Options& options) const {
    return p.device().is_cuda() && has_fused_device_update() && grad.dtype() == p.dtype() && p.is_contiguous() &&
           grad.is_contiguous() && (p.dtype() == DType::Float32 || fuses_low_precision(p, options));
  }

  const ParamGroup& checked(size_t group) const {
    HG_CHECK(group < groups_.size(), "{}: no parameter group {} (there are {})", name(), group, groups_.size());
    return groups_[group];
  }

  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::unordered_map<const TensorImpl*, State> state_;  // keyed by parameter identity
  std::optional<uint64_t> sr_seed_;                     // drawn once a group asks for stochastic rounding
};

}  // namespace halfgrad::optim
