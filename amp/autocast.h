#pragma once
// Autocast state and the dispatcher's autocast step. The per-thread state
// says whether autocast is on for each device type; `autocast_inputs` is the
// one place where an op's inputs are cast by the policy table (amp/policy.h).
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace halfgrad::amp {

// Is autocast on for this device type on this thread?
bool is_autocast_enabled(DeviceType type);

// The dispatcher's autocast step: cast `inputs` in place by the op's policy
// row. A no-op when autocast is off for the inputs' device type.
void autocast_inputs(std::string_view op, std::vector<Tensor>& inputs);

// Turns autocast off on this thread for its lifetime: the dispatcher wraps
// an op's inner call in it (composite ops are not cast twice), and so does
// the backward engine (backward ops run in their forward dtypes).
class AutocastOff {
 public:
  AutocastOff();
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  bool prev_cpu_, prev_cuda_;
};

}  // namespace halfgrad::amp
