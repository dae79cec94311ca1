#pragma once
// Hooks on a leaf's gradient (PyTorch's Tensor.register_post_accumulate_grad_hook):
// fn(leaf) runs right after backward has added a gradient into leaf.grad(),
// on the thread running backward, once per accumulation. A data-parallel
// wrapper starts a bucket's all-reduce there; amp::Monitor notes the order in
// which gradients arrive (the first non-finite one in time is where an
// overflow entered backward).
#include <cstdint>
#include <functional>

#include <halfgrad/core/tensor.h>

namespace halfgrad::autograd {

using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// `leaf` must be a leaf that requires grad (an Error otherwise). Returns an id
// for remove_post_accumulate_grad_hook.
int64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook fn);
// Unknown ids (and leaves without hooks) are ignored.
void remove_post_accumulate_grad_hook(const Tensor& leaf, int64_t id);

// PyTorch's Variable._execution_engine.queue_callback: fn runs once, when the
// backward pass running on this thread has finished (after every gradient is
// written). Only inside a backward (a hook calls it); an Error elsewhere.
// distributed::DistributedDataParallel finishes its all-reduces there.
void queue_callback(std::function<void()> fn);

}  // namespace halfgrad::autograd
