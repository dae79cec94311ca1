#pragma once
// Pinned (page-locked) host tensors: the staging buffers of an asynchronous
// host-to-device copy (data/loader.h assembles each batch in one, so the copy
// to the GPU overlaps the training step instead of blocking it). PyTorch's
// Tensor.pin_memory() / torch.empty(..., pin_memory=True).
#include <halfgrad/core/tensor.h>

namespace halfgrad {

// A new, uninitialised, contiguous CPU tensor. Its memory is page-locked
// (cudaHostAlloc) when CUDA is available; without CUDA (a CPU-only build, or
// no usable device) it is ordinary aligned host memory, so code that stages
// through pinned buffers runs unchanged on a CPU machine. Pinned memory is a
// scarce system resource and freeing it waits for the device: allocate such
// buffers once and reuse them.
Tensor empty_pinned(const Shape& shape, DType dtype = DType::Float32);

// Whether t's memory came from empty_pinned and is really page-locked.
bool is_pinned(const Tensor& t);

}  // namespace halfgrad
