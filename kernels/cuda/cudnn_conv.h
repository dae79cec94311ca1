#pragma once
// Internal (not installed): what the cuDNN convolution backend (kernels/cuda/cudnn_conv.cpp)
// shows its tests. A plain C++ header (no CUDA includes).
#include <cstdint>

namespace halfgrad::kernels::cuda {

// The plan cache: a finalized cuDNN execution plan per (op, dtype, shapes,
// strides, alignment, geometry, device, TF32 setting, bias blending), built
// once (`built`, also counting keys for which no engine was found) and reused
// afterwards (`hits`). Process-wide, thread-safe.
struct ConvPlanCounts {
  uint64_t built = 0;
  uint64_t hits = 0;
  uint64_t bias_blended = 0;   // forward calls whose bias rode in cuDNN's beta = 1 (one rounding)
  uint64_t bias_added = 0;     // forward calls that added the bias in a separate pass
  uint64_t layout_copies = 0;  // runs that no engine took in their layouts: redone on contiguous aligned copies
  uint64_t explicit_padding = 0;  // runs whose asymmetric padding no engine took: redone with explicit zeros
  uint64_t cropped = 0;  // runs with negative padding (output_padding >= stride): redone on the part of x read
};
ConvPlanCounts conv_plan_counts();
void reset_conv_plan_counts();  // the counters only; the cached plans stay

}  // namespace halfgrad::kernels::cuda
