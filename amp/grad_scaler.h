#pragma once
// GradScaler: dynamic loss scaling, PyTorch's torch.amp.GradScaler.
//
//   scaler.scale(loss).backward();   // gradients are scaled by S (say 65536)
//   scaler.step(optimizer);          // the optimizer consults the scaler
//   scaler.update();                 // S shrinks after an overflow, grows after
//                                    // growth_interval clean steps
//
// Small float16 gradients (below ~6e-8) underflow to zero; scaling the loss
// scales every gradient with it, so they survive backward. Before the update
// the optimizer divides by S again. A step whose gradients hold an inf or NaN
// is skipped whole (no parameter and no optimizer state changes) and S halves.
//
// The scale, the growth tracker and the found-inf flags are tensors on the
// gradients' device: on CUDA a step needs no host sync unless asked. scale(),
// unscale_(), step() and update() only queue device work (the inf/NaN check
// and unscale in one multi-tensor kernel, 1/S and the scale update in one
// device thread each, the optimizer's fused kernels skipping on the device),
// so a whole training step can be captured in a CUDA graph. What waits for
// the device: get_scale(), growth_tracker(), state_dict(), asking a
// StepResult, and trace lines (only while tracing).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::amp {

// What the scaler hands an optimizer for one step.
struct ScalerStep {
  Tensor found_inf;  // float32 scalar: nonzero means skip the whole step
  Tensor inv_scale;  // float32 scalar 1/S while the grads are still scaled; undefined after unscale_
};

// What the scaler needs from an optimizer; optim::Optimizer implements it.
class ScaledOptimizer {
 public:
  virtual ~ScaledOptimizer() = default;
  // The current .grad of every parameter that has one.
  virtual std::vector<Tensor> scaled_grads() const = 0;
  // One step that unscales (if inv_scale is set), and applies the update only
  // if found_inf is zero; a skipped step must leave all state bit-identical.
  virtual void step(const ScalerStep& scaler) = 0;
};

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
  // A floor for the scale (0: none, PyTorch's behaviour). When an overflow
  // would take the scale below it, update() raises an Error saying how many
  // steps in a row were skipped, plus what the explain callback (set_explain)
  // reports, instead of letting the scale slide towards 0 while no step is
  // applied. Costs one read of the scale per update() (a device sync on CUDA).
  double min_scale = 0.0;
};

// The result of scaler.step(): whether the update was applied. Asking syncs
// with the device (once); not asking costs nothing.
class StepResult {
 public:
  StepResult() = default;
  explicit StepResult(Tensor found_inf) : found_inf_(std::move(found_inf)) {}
  bool applied() const { return !found_inf_.defined() || found_inf_.item<float>() == 0.0f; }
  bool skipped() const { return !applied(); }
  const Tensor& found_inf() const { return found_inf_; }

 private:
  Tensor found_inf_;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * S (a disabled scaler returns loss unchanged).
  Tensor scale(const Tensor& loss);
  // Divide the optimizer's grads by S in place and record inf/NaN. At most once
  // per step, before step() (e.g. to clip gradients).
  void unscale_(ScaledOptimizer& optimizer);
  // Check the grads (unless unscale_ did), then let the optimizer unscale and
  // update in one pass; nothing is applied when an inf or NaN was found. An
  // optimizer none of whose parameters has a gradient is an Error, as in
  // PyTorch ("No inf checks were recorded for this optimizer."), and leaves
  // its stage as before unscale_.
  StepResult step(ScaledOptimizer& optimizer);
  // Adjust S for the next iteration (PyTorch's _amp_update_scale_).
  void update();
  // What min_scale's Error adds to its message, e.g. the gradients that hold
  // inf or NaN: scaler.set_explain([&] { return amp::describe(amp::non_finite_grads(model)); }).
  void set_explain(std::function<std::string()> explain) { explain_ = std::move(explain); }
  void update(double new_scale);
  // Observers of step() (amp::Monitor is one): fn(handshake) runs after the
  // inf/NaN check and before the optimizer's update, with what the optimizer
  // gets (both tensors undefined for a disabled scaler; inv_scale undefined
  // after unscale_). It only queues work unless the observer reads a value.
  // Data parallelism: fn(found_inf) runs right after every inf/NaN check, before
  // any optimizer sees the flag; distributed::DistributedDataParallel sets one
  // that all-reduces it (max), so every rank skips the same steps and the
  // scales stay equal. It must only queue device work (no host sync needed).
  void set_found_inf_reducer(std::function<void(Tensor&)> fn) { found_inf_reducer_ = std::move(fn); }
  using StepObserver = std::function<void(const ScalerStep&)>;
  int64_t add_step_observer(StepObserver fn);
  void remove_step_observer(int64_t id);  // unknown ids are ignored

  double get_scale() const;      // reads the scale (a device sync on CUDA)
  Tensor scale_tensor() const;   // the scale tensor itself, no sync (undefined before the first scale())
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    Tensor found_inf;
    size_t checked = 0;  // gradients the inf/NaN check saw (PyTorch's found_inf_per_device non-empty)
  };
  void lazy_init(Device device);
  PerOptimizer& state_for(ScaledOptimizer& optimizer);
  Tensor inv_scale() const;  // a fresh float32 scalar 1/S on the scale's device, computed there
  Tensor check(ScaledOptimizer& optimizer, bool unscale, size_t& checked);

  GradScalerOptions options_;
  Tensor scale_;           // float32 scalar on the loss's device
  Tensor growth_tracker_;  // int64 scalar
  int64_t init_growth_tracker_ = 0;  // from load_state_dict before the first scale()
  std::map<const ScaledOptimizer*, PerOptimizer> per_optimizer_;
  std::function<std::string()> explain_;
  std::function<void(Tensor&)> found_inf_reducer_;
  std::vector<std::pair<int64_t, StepObserver>> observers_;
  int64_t next_observer_id_ = 0;
  void notify(const ScalerStep& handshake) const;
  int64_t skipped_in_a_row_ = 0;  // counted only with a min_scale (it reads found_inf)
};

}  // namespace halfgrad::amp
