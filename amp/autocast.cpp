#include "amp/autocast.h"

namespace halfgrad::amp {

namespace {
struct State {
  bool cpu_enabled = false;
  bool cuda_enabled = false;
};
thread_local State g_state;
}  // namespace

bool is_autocast_enabled(DeviceType type) {
  return type == DeviceType::CPU ? g_state.cpu_enabled : g_state.cuda_enabled;
}

void autocast_inputs(std::string_view /*op*/, std::vector<Tensor>& /*inputs*/) {
  // The foundation has no autocast regions yet (issue 3 adds the guard and
  // the policy table); with autocast off for every device there is nothing to cast.
  if (!g_state.cpu_enabled && !g_state.cuda_enabled) return;
}

AutocastOff::AutocastOff() : prev_cpu_(g_state.cpu_enabled), prev_cuda_(g_state.cuda_enabled) {
  g_state.cpu_enabled = false;
  g_state.cuda_enabled = false;
}
AutocastOff::~AutocastOff() {
  g_state.cpu_enabled = prev_cpu_;
  g_state.cuda_enabled = prev_cuda_;
}

}  // namespace halfgrad::amp
