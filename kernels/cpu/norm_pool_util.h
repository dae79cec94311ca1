#pragma once
// Small helpers of the CPU batch-norm and pooling loops (internal): the type
// they accumulate in and when they use threads (typed data: kernel_ptr).
#include <cstdint>
#include <type_traits>

#include <halfgrad/core/tensor.h>
#include <halfgrad/kernels/kernel_ptr.h>

namespace halfgrad::kernels::cpu {

// float64 for float64 data, else float32 (half types compute in float32).
template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Below this many elements of work a loop stays on one thread.
constexpr int64_t kNormPoolParallelWork = 32768;

}  // namespace halfgrad::kernels::cpu
