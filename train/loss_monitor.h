#pragma once
// Watching the loss without slowing the loop: a training step must not wait
// for the device just to learn whether its loss is finite. observe() queues a
// few scalar ops on the loss's device that keep, there, the sum and count of
// the finite losses, the count of non-finite ones and the index of the first,
// the latest finite loss, and (given the GradScaler's StepResult) the count of
// skipped optimizer steps. read(), every N steps, is the one host sync: it
// returns those since the previous read (the progress bar's mean loss, the
// metrics row, the stop-or-go decision) and starts a new window.
//
//   hg::train::NonFiniteMonitor monitor;
//   for (...) {
//     ... auto result = scaler.step(opt); scaler.update();
//     monitor.observe(loss, result);
//     if (step % 50 == 0) {
//       auto r = monitor.read(&scaler);
//       if (!r.finite()) { stop: r.first_nonfinite_step, r.last_finite_loss }
//     }
//   }
//
// Under a GradScaler a non-finite *gradient* is routine (the step is skipped
// and the scale halves); a non-finite *loss* is not: the forward pass itself
// overflowed or the model diverged, and training should stop.
#include <cstdint>
#include <optional>

#include <halfgrad/amp/grad_scaler.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad::train {

struct LossReport {
  int64_t steps = 0;            // observe() calls in this window
  int64_t finite_steps = 0;     // ... whose loss was finite
  int64_t nonfinite_steps = 0;  // ... whose loss was NaN or +-inf
  double mean_loss = 0;         // mean of the window's finite losses; NaN when there were none
  // Step index (first_step + the number of observe() calls before it) of the
  // window's first non-finite loss.
  std::optional<int64_t> first_nonfinite_step;
  std::optional<double> last_finite_loss;  // the latest finite loss of the whole run so far
  int64_t skipped_steps = 0;               // optimizer steps the scaler skipped in this window
  std::optional<double> loss_scale;        // the scaler's scale at the read (read(&scaler))
  bool finite() const { return nonfinite_steps == 0; }
};

class NonFiniteMonitor {
 public:
  // first_step: the index of the first observed step (a resumed run's step).
  explicit NonFiniteMonitor(int64_t first_step = 0) : first_step_(first_step), next_step_(first_step) {}

  // One step's loss: a one-element floating tensor (any device, any float
  // dtype; gradients are not kept). No host sync. The first call fixes the
  // device; later losses must be on it.
  void observe(const Tensor& loss);
  // ... and whether the optimizer step was skipped (the scaler's found-inf
  // flag, read on the device; an empty StepResult counts as applied).
  void observe(const Tensor& loss, const amp::StepResult& step);

  // The window since the previous read (one device-to-host copy), then a new
  // window. With a scaler, its scale is read in the same copy.
  LossReport read(const amp::GradScaler* scaler = nullptr);

  int64_t steps_observed() const { return next_step_ - first_step_; }

 private:
  void lazy_init(Device device);
  int64_t first_step_;
  int64_t next_step_;
  int64_t window_steps_ = 0;
  bool initialised_ = false;
  Device device_;
  // float64 scalars on the loss's device
  Tensor zero_, one_;
  Tensor step_;         // the index of the next observed step
  Tensor sum_;          // of the window's finite losses
  Tensor finite_;       // their count
  Tensor nonfinite_;    // the count of non-finite losses in the window
  Tensor first_bad_;    // the index of the first of them, -1 when none
  Tensor last_finite_;  // NaN until a finite loss is seen
  Tensor skipped_;      // skipped optimizer steps in the window
};

}  // namespace halfgrad::train
