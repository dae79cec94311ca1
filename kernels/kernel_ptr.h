#pragma once
// kernel_ptr<T>(t): a tensor's elements as a T* for a kernel, on either
// backend. Unchecked, as kernels are: the op has checked dtype, device and
// layout (Tensor::data<T>() is the checked form, and an Error for a CUDA
// tensor). An undefined tensor, an absent optional operand such as a missing
// bias, gives nullptr.
#include <halfgrad/core/tensor.h>

namespace halfgrad::kernels {

template <typename T>
inline T* kernel_ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace halfgrad::kernels
