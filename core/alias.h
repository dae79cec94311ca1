#pragma once
// Internal (not installed): a view with any geometry on a tensor's storage.
// The ops that make views (ops/shape.cpp) and the kernels build on it; users
// reach views through view/reshape/narrow/expand/transpose/..., which check
// their arguments against the tensor's shape first.
#include <halfgrad/core/tensor.h>

namespace halfgrad {

// A view on `base`'s storage with new geometry and no autograd history. Every
// element it can reach must lie inside the storage (PyTorch's as_strided check):
// otherwise an Error, never an out-of-bounds read.
Tensor alias_with(const Tensor& base, Shape shape, Shape strides, int64_t offset);

}  // namespace halfgrad
