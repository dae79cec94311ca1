#pragma once
// The one path every op takes (docs/architecture.md, "One op call"):
//
//   dispatch::call(OpId::linear, {x, w, b}, forward, backward, Save::Inputs)
//     1. layers     the registered layers before the kernel (dispatch/layers.h):
//                   the non-finite watch, then autocast, whose policy table
//                   may cast the floating inputs
//     2. checks     all tensors on one device
//     3. forward    the backend kernels, with every layer excluded and grad mode off
//     4. autograd   if an input requires grad, the autograd layer records a
//                   Node holding the saved tensors and the backward formula
//
// The dispatcher knows no feature by name: it depends on core/ only, and
// amp/ and autograd/ register into it.
//
// An op file (ops/*.cpp) therefore reads as: its checks, its kernel call,
// its backward formula. In-place ops take `dispatch::inplace`: no autocast
// (as in PyTorch), no recording, and they bump the version counter. Ops are
// named by OpId (dispatch/op_id.h): the autocast row, the node name and the trace
// line all come from it.
#include <functional>
#include <string_view>
#include <vector>

#include <halfgrad/dispatch/layers.h>
#include <halfgrad/dispatch/node.h>
#include <halfgrad/dispatch/op_id.h>

namespace halfgrad::dispatch {

using autograd::Grads;
using autograd::Saved;

using Forward = std::function<Tensor(const std::vector<Tensor>& inputs)>;
using Backward = autograd::BackwardFn;

Tensor call(OpId op, std::vector<Tensor> inputs, const Forward& forward, Backward backward,
            Save save = Save::Inputs);

// A composite op (PyTorch's CompositeImplicitAutograd: matmul, stack,
// dropout): the autocast step and device checks for `op`, then `body` runs
// with autocast off and grad mode as it was, so the ops inside record their
// own history.
Tensor composite(OpId op, std::vector<Tensor> inputs, const Forward& body);

// Ops without a gradient (comparisons, argmax, factories): autocast step and
// device checks, then the kernel.
Tensor call_nograd(OpId op, std::vector<Tensor> inputs, const Forward& forward);

// Where an in-place op departs from the common rules of inplace().
struct InplaceRules {
  bool any_device = false;        // copy_: `others` may be on another device
  bool self_may_overlap = false;  // fill_: one value through an expanded view is well defined
};

// In-place op `op`_ on `self` (named op_name(op) + "_" in messages): every tensor in `others` on self's device and
// broadcasting TO self's shape (PyTorch: the broadcast shape must be self's),
// self not requiring grad in grad mode, no two elements of self on one memory
// location and no tensor in `others` partly overlapping self (PyTorch's
// memory-overlap errors; full identity, x.add_(x), is fine); then the kernel
// and a version bump.
void inplace(OpId op, const Tensor& self, std::vector<Tensor> others,
             const std::function<void()>& kernel, InplaceRules rules = {});

// Inside a call()'s forward: whether the op will be recorded, i.e. whether its
// backward can run (grad mode on and an input requires grad). A forward that
// keeps extra state only for backward (an activation's pre-activation, a ReLU
// mask) asks this instead of working it out from its inputs.
bool recording();
// Inside a recorded call()'s forward: keep `t` for the backward formula, which
// reads it back as Saved::extra(i) in the order kept. Like the saved inputs it
// is version-checked (an in-place change before backward is an Error) and
// freed when the graph has run. An Error when the op is not being recorded.
void save_for_backward(const Tensor& t);

// For a backward formula that calls kernels directly (a convolution's, batch
// norm's, pooling's): right for one backward, but under create_graph its
// gradients would be constants and a double backward silently wrong. Wrapped,
// it runs without recording, and where anything it read requires grad its
// gradients get a node that raises an Error naming `op` when a second
// backward reaches it (PyTorch's @once_differentiable).
Backward once_differentiable(OpId op, Backward formula);

// Shared check: every defined tensor on the same device, else a clear Error.
void check_same_device(std::string_view op, const std::vector<Tensor>& inputs);

}  // namespace halfgrad::dispatch
