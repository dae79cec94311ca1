#pragma once
// amp::Monitor: mixed precision's numerics on the user's own model. Attached
// to a model and its GradScaler, it records every N steps, per parameter and
// per module output:
//   gradients (unscaled, as the optimizer applies them): max |g|, zeros,
//     the share below float16's smallest subnormal (2^-24: would underflow)
//     and smallest normal (2^-14), at scale 1 and at the loss scale the
//     backward ran with, inf/NaN;
//   activations (each module's forward output, in its autocast dtype): max |x|
//     against the dtype's largest value, the share that overflowed to inf;
//   a log2 histogram of each (amp/numerics.h), the figure of Micikevicius et
//     al. (2018) made from the model being trained;
//   fp8 layers (nn::enable_fp8): each one's scales, the amaxes its step
//     recorded and the values it saturated since the last record, for the
//     input, the weight and the output gradient.
// And when a step is skipped, one line saying why:
//   step 1200 skipped (scale 65536): grad of features.3.conv.weight is inf (first of 14 non-finite
//   gradients in backward); first non-finite value: backward of exp -> ...
//
//   hg::amp::Monitor monitor(model, scaler, {.every = 100});
//   for (...) { ...forward, scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); }
//   monitor.write_json(run_dir + "/numerics.json");   // halfgrad-report draws it
//
// The model's loop does not change: the monitor watches scaler.step() (a
// step observer, before the update) and, for a recorded step only, hangs
// forward hooks on the modules (so a Sequential's fused layers run fused on
// the other steps). Statistics accumulate on the tensors' device; a record
// reads them back in one copy (plus the scale). Explaining skipped steps
// reads each step's found-inf flag: free on the CPU, so on by default there; a
// device sync per step on CUDA, so off by default there (explain_skips = true
// turns it on: a debugging run, not a fast one).
//
// The model only needs named_parameters() and named_modules() whose modules
// have register_forward_hook (nn::Module's), so amp/ does not depend on nn/.
// The monitor must not outlive the model or the scaler (declare it after them).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <halfgrad/amp/anomaly.h>
#include <halfgrad/amp/grad_scaler.h>
#include <halfgrad/amp/numerics.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad::amp {

struct MonitorOptions {
  // Record steps 0, every, 2 * every, ... (0: only the steps asked for with record_next()).
  int64_t every = 100;
  bool activations = true;  // module outputs too (not only gradients)
  // Read each step's found-inf flag and, on a skipped step, name the gradient
  // that first held inf/NaN (in the order backward produced them). Unset: on
  // when the scaler's flag is on the CPU (free), off on CUDA (a sync per step).
  std::optional<bool> explain_skips;
  // Keep an amp::DetectNonFinite guard alive (on the monitor's thread), so a
  // skipped step also names the op that first produced a non-finite value.
  // A debugging mode: every op's output is checked.
  bool detect_anomaly = false;
  // Called with each skipped step's line (else they are only kept in skips()).
  std::function<void(const std::string&)> on_skip;
};

// One tensor's statistics in a record.
struct TensorStats {
  std::string name;   // "fc1.weight" (a gradient) or "features.3" (a module's output; the model itself: "(model)")
  DType dtype = DType::Float32;  // the gradient's or the output's dtype
  Log2Histogram hist;    // gradients: unscaled; activations: as computed
  Log2Histogram scaled;  // gradients: as backward produced them, times the loss scale (= hist at scale 1)
  int64_t calls = 0;     // outputs seen (a module called twice in a forward adds both), or 1 for a gradient
};

// One fp8 layer's delayed-scaling state in a record (amp/fp8.h), per column:
// 0 the input, 1 the weight, 2 the output gradient.
struct Fp8LayerStats {
  std::string name;              // the module ("fc1")
  std::array<float, 3> scale{};  // the scales this step quantised with
  std::array<float, 3> amax{};   // max |x| this step recorded (the history's newest row)
  std::array<int64_t, 3> saturated{};  // values clipped to the format's largest since the previous record
};

struct MonitorRecord {
  int64_t step = 0;      // 0-based count of scaler.step() calls before this one
  double scale = 1.0;    // the loss scale the backward ran with
  std::optional<bool> skipped;  // known when explain_skips
  std::vector<TensorStats> grads;        // registration order; parameters without a gradient left out
  std::vector<TensorStats> activations;  // modules in named_modules() order; those not called left out
  std::vector<Fp8LayerStats> fp8;        // layers with fp8 state, named_modules() order
};

struct SkippedStep {
  int64_t step = 0;
  double scale = 1.0;
  std::string message;  // the one line
  // With detect_anomaly: the op of this process that first produced a
  // non-finite value ("" if none did here: under data parallelism another
  // rank's gradients can bring the inf, averaged into everyone's).
  std::string op;
};

// Where a forward hook can go: one module, type-erased (built by the template constructor).
struct MonitorHookTarget {
  std::string name;
  std::function<int64_t(std::function<void(const Tensor&)>)> add;
  std::function<void(int64_t)> remove;
};

class Monitor {
 public:
  template <typename Model>
    requires requires(Model& m) {
      m.named_parameters();
      m.named_modules();
      m.named_buffers();
    }
  Monitor(Model& model, GradScaler& scaler, MonitorOptions options = {})
      : Monitor(model.named_parameters(), hook_targets(model), scaler, std::move(options), model.named_buffers()) {}
  // named_buffers: where the fp8 layers' state is found (buffers named
  // "<layer>.fp8_scale", ".fp8_amax_history", ".fp8_saturated").
  Monitor(std::vector<std::pair<std::string, Tensor>> named_parameters, std::vector<MonitorHookTarget> modules,
          GradScaler& scaler, MonitorOptions options, const std::vector<std::pair<std::string, Tensor>>& named_buffers = {});
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Record the next step too (on demand), whatever `every` says.
  void record_next();
  const std::vector<MonitorRecord>& records() const { return records_; }
  const std::vector<SkippedStep>& skips() const { return skips_; }
  int64_t steps() const { return steps_; }
  // The last skipped step's line ("" if none): also what the scaler's
  // min_scale Error adds (the monitor sets scaler.set_explain).
  std::string last_skip() const { return skips_.empty() ? "" : skips_.back().message; }

  // Everything recorded, as JSON (written atomically): halfgrad-report's input.
  void write_json(const std::string& path) const;
  std::string json() const;

 private:
  template <typename Model>
  static std::vector<MonitorHookTarget> hook_targets(Model& model) {
    std::vector<MonitorHookTarget> targets;
    for (auto& [name, module] : model.named_modules()) {
      auto* m = module;
      targets.push_back({name.empty() ? "(model)" : name,
                         [m](std::function<void(const Tensor&)> fn) {
                           return m->register_forward_hook(
                               [fn = std::move(fn)](const auto&, const Tensor& out) { fn(out); });
                         },
                         [m](int64_t id) { m->remove_forward_hook(id); }});
    }
    return targets;
  }

  void on_step(const ScalerStep& handshake);
  void arm();     // the next forward is recorded: hooks on, statistics zeroed
  void disarm();  // hooks off
  void record(const ScalerStep& handshake, std::optional<bool> skipped);
  void explain_skip(double scale);

  struct Fp8Layer {
    std::string name;
    Tensor scale, amax_history, saturated;
    std::array<int64_t, 3> seen{};  // saturated at the previous record
  };
  void record_fp8(MonitorRecord& rec);

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<Fp8Layer> fp8_layers_;
  std::vector<MonitorHookTarget> modules_;
  GradScaler& scaler_;
  MonitorOptions options_;
  int64_t observer_id_ = -1;
  std::vector<int64_t> grad_hook_ids_;   // per parameter (-1: none)
  std::vector<int64_t> arrival_;         // per parameter: order its gradient arrived in this step's backward
  int64_t arrivals_ = 0;
  std::vector<int64_t> forward_hook_ids_;  // per module while armed
  // While armed: per module, its statistics row (int64 [kStatsSize]) and dtype.
  Tensor activation_stats_;  // [modules, kStatsSize] on the model's device, allocated when first needed
  std::vector<int64_t> activation_calls_;
  std::vector<DType> activation_dtypes_;
  bool armed_ = false, record_next_ = false;
  int64_t steps_ = 0;
  std::vector<MonitorRecord> records_;
  std::vector<SkippedStep> skips_;
  std::unique_ptr<DetectNonFinite> detect_;
};

// The largest finite value of a floating dtype (float16: 65504).
double dtype_max(DType dtype);

}  // namespace halfgrad::amp
