#pragma once
// Small helpers of the CPU batch-norm and pooling loops (internal): the type
// they accumulate in and when they use threads (typed data: kernel_ptr).
#include <cstdint>
#include <type_traits>

#include <halfgrad/core/tensor.h>
#include <halfgrad/kernels/kernel_ptr.h>
#include <halfgrad/kernels/norm_pool_math.h>

namespace halfgrad::kernels::cpu {

using math::stat_t;  // the accumulation type (kernels/norm_pool_math.h)

// Below this many elements of work a loop stays on one thread.
constexpr int64_t kNormPoolParallelWork = 32768;

}  // namespace halfgrad::kernels::cpu
