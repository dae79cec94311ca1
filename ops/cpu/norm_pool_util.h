#pragma once
// Small helpers of the CPU batch-norm and pooling loops (internal): the type
// they accumulate in and typed views of a tensor's data.
#include <cstdint>
#include <type_traits>

#include <halfgrad/core/tensor.h>

namespace halfgrad::cpu {

// float64 for float64 data, else float32 (half types compute in float32).
template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
const T* cptr(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <typename T>
T* mptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
template <typename T>
T* opt_ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// Below this many elements of work a loop stays on one thread.
constexpr int64_t kNormPoolParallelWork = 32768;

}  // namespace halfgrad::cpu
