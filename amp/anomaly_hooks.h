#pragma once
// The hooks of amp::DetectNonFinite (amp/anomaly.h) in the dispatcher (each
// op's forward output) and the autograd engine (each backward formula's
// gradients). Internal (not installed): cheap no-ops without a guard.
#include <string>
#include <vector>

#include <halfgrad/amp/anomaly.h>
#include <halfgrad/ops/op_id.h>

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

// While alive, no op is checked: the engine holds one around a backward
// formula, whose own ops (a div inside sqrt's backward) are not the user's;
// it checks the formula's gradients after it.
class SuppressNonFiniteChecks {
 public:
  SuppressNonFiniteChecks();
  ~SuppressNonFiniteChecks();
  SuppressNonFiniteChecks(const SuppressNonFiniteChecks&) = delete;
  SuppressNonFiniteChecks& operator=(const SuppressNonFiniteChecks&) = delete;

 private:
  bool prev_;
};

}  // namespace halfgrad::amp
