#pragma once
// amp::DetectNonFinite (amp/anomaly.h) as the dispatcher's NonFiniteWatch
// layer (dispatch/layers.h: each op's forward output, each backward formula's
// gradients), and its switches for amp's own code. Internal (not installed):
// cheap no-ops without a guard.
#include <string>
#include <vector>

#include <halfgrad/amp/anomaly.h>
#include <halfgrad/dispatch/layers.h>
#include <halfgrad/dispatch/op_id.h>

namespace halfgrad::amp {

// Whether a guard on this thread is waiting for its first non-finite value.
bool detect_non_finite_active();

// The policy-table row autocast applies to `op` on its inputs' device right
// now: "lower_precision", "fp32", "promote", "none" (no row), or "off"
// (autocast is off). Asked before autocast casts the inputs.
std::string policy_row_now(OpId op, const std::vector<Tensor>& inputs);

// Checks `outputs` for inf/NaN and keeps the first hit. policy_row: as
// policy_row_now gives it, or "backward".
void detail_check_non_finite(const char* phase, const std::string& op, const std::string& policy_row,
                             const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

// While alive, no op is checked (the layer excluded): for code whose ops are
// not the user's (the monitor's statistics, moving gradients between ranks).
class SuppressNonFiniteChecks {
 public:
  SuppressNonFiniteChecks() = default;
  SuppressNonFiniteChecks(const SuppressNonFiniteChecks&) = delete;
  SuppressNonFiniteChecks& operator=(const SuppressNonFiniteChecks&) = delete;

 private:
  dispatch::ExcludeGuard guard_{dispatch::Layer::NonFiniteWatch};
};

}  // namespace halfgrad::amp
