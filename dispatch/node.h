#pragma once
// What a recorded op call leaves for backward: the nodes of the autograd
// graph. Every op has one output, so a Node takes one incoming gradient and
// returns one gradient per op input. Edges point to the Nodes of the inputs
// (nullptr where an input needs no gradient); leaves that require grad end in
// an AccumulateGrad node that writes `.grad` (autograd/engine.h). Here, below
// ops/, because every op's backward formula reads a Saved; the engine that
// runs the graph is autograd/ (internal: not installed).
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::autograd {

using Grads = std::vector<Tensor>;

// A tensor kept for backward. Remembers the storage version at save time so
// an in-place change made afterwards is caught instead of giving wrong grads.
// An op's input is kept as it is, with its place in the graph, so that a
// formula run under create_graph differentiates through it (double backward);
// the op's own output is kept detached (with its grad_fn it would own the
// node that owns it: a cycle) and re-attached by FunctionNode::apply.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t, bool detach = false)
      : tensor_(detach && t.defined() ? t.detach() : t), version_(t.defined() ? t.version() : 0) {}
  // The saved tensor (undefined if an undefined one was saved, e.g. no bias).
  const Tensor& get(const std::string& op) const;
  bool empty() const { return !tensor_.defined() && !released_; }  // nothing was saved
  void reset() {
    tensor_ = Tensor();
    released_ = true;
  }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
  bool released_ = false;
};

// What the dispatcher saved for an op's backward formula.
struct Saved {
  std::string op;
  std::vector<SavedTensor> inputs;  // empty unless the op asked for them
  SavedTensor out;
  std::vector<bool> needs_grad;     // per input: does anyone want its gradient? (PyTorch's needs_input_grad)
  // Per input: the dtype its gradient may be returned in. The input's own,
  // or float32 where the input is a CPU bfloat16 cast of a float32 tensor
  // (autocast's weight casts): that cast's backward takes a float32 gradient
  // as it is, so a formula that can (a GEMM summing in float32) skips the
  // rounding to bfloat16 and the cast back.
  std::vector<DType> grad_dtypes;
  std::vector<SavedTensor> extras;  // what the forward kept for backward (dispatch::save_for_backward)
  // While a formula runs under create_graph: the output with this node as its
  // grad_fn, so that a formula using output() is differentiable through it.
  Tensor attached_out;
  // False while a backward that frees the graph after it (no retain_graph)
  // runs the formula: then take_input may move a saved input out.
  bool retained = true;
  const Tensor& input(size_t i) const;
  // Input i for a formula that keeps the only handle from here on, so that it
  // can free the tensor at its last read (linear_chain frees each layer's
  // weight copy before making the weight's gradient): moved out of the node
  // when the graph will not run again, a copy when it will (retain_graph).
  Tensor take_input(size_t i);
  const Tensor& extra(size_t i) const;
  const Tensor& output() const { return attached_out.defined() ? attached_out : out.get(op); }
};

// An input's metadata, so the engine can check and cast incoming grads.
struct InputMeta {
  Shape shape;
  DType dtype;
  Device device;
  DType grad_dtype;  // dtype, or the wider one its cast node takes (Saved::grad_dtypes)
};

struct Node : std::enable_shared_from_this<Node> {
  std::string name;
  std::vector<std::shared_ptr<Node>> next;  // one per input; nullptr: no grad needed
  std::vector<InputMeta> input_meta;
  // Frees the nodes it alone keeps alive one at a time, not recursively:
  // a long chain (total = total + loss, 200k times) would overflow the stack.
  virtual ~Node();
  // retain_graph: the graph may run again (its saved tensors must stay)
  virtual Grads apply(const Tensor& grad_output, bool retain_graph) = 0;
  virtual void release() {}  // free saved tensors once the graph has been run
};

// Formulas take `const Saved&` but for the few that take_input. A formula
// runs with grad mode off, or on under create_graph (autograd::grad): then
// the ops it calls record, and its result is differentiable in turn as long
// as it is built from ops; one that calls kernels directly is wrapped in
// dispatch::once_differentiable.
using BackwardFn = std::function<Grads(Saved&, const Tensor& grad_output)>;

// The node the dispatcher records for an op: saved tensors + formula.
struct FunctionNode final : Node {
  Saved saved;
  BackwardFn backward;
  bool released = false;
  Grads apply(const Tensor& grad_output, bool retain_graph) override;
  void release() override;
};

}  // namespace halfgrad::autograd
