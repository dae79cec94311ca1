// The recorded nodes' own behaviour: version-checked saved tensors, freeing a
// long graph without recursion, and a FunctionNode running its formula.
#include <halfgrad/dispatch/node.h>

#include <halfgrad/dispatch/grad_mode.h>

namespace halfgrad::autograd {

const Tensor& SavedTensor::get(const std::string& op) const {
  HG_CHECK(!released_,
           "{} backward: trying to backward through the graph a second time (or to use saved tensors after "
           "they were freed). Pass retain_graph=true to the first backward() if you need to run it twice.",
           op);
  if (!tensor_.defined()) return tensor_;
  HG_CHECK(tensor_.version() == version_,
           "{} backward: one of the tensors needed for gradient computation ({}) has been modified by an "
           "in-place operation: it is at version {}, expected version {}. Use an out-of-place op, or clone() "
           "the tensor before changing it.",
           op, tensor_.describe(), tensor_.version(), version_);
  return tensor_;
}

const Tensor& Saved::input(size_t i) const {
  HG_CHECK(i < inputs.size(), "{} backward: input {} was not saved (internal error)", op, i);
  return inputs[i].get(op);
}

Tensor Saved::take_input(size_t i) {
  Tensor t = input(i);  // checks what input() checks
  if (!retained) inputs[i].reset();
  return t;
}

const Tensor& Saved::extra(size_t i) const {
  HG_CHECK(i < extras.size(), "{} backward: its forward kept {} tensors, asked for number {} (internal error)", op,
           extras.size(), i);
  return extras[i].get(op);
}

Node::~Node() {
  std::vector<std::shared_ptr<Node>> doomed;
  auto take_edges = [&doomed](Node& n) {
    for (auto& e : n.next)
      if (e && e.use_count() == 1) doomed.push_back(std::move(e));  // last owner: free it here, later
  };
  take_edges(*this);
  while (!doomed.empty()) {
    std::shared_ptr<Node> n = std::move(doomed.back());
    doomed.pop_back();
    take_edges(*n);  // its edges come to us, so its own destructor finds none to free
  }
}

Grads FunctionNode::apply(const Tensor& grad_output, bool retain_graph) {
  HG_CHECK(!released,
           "{} backward: trying to backward through the graph a second time (or to use saved tensors after "
           "they were freed). Pass retain_graph=true to the first backward() if you need to run it twice.",
           name);
  saved.retained = retain_graph;
  if (!autograd::grad_enabled() || saved.out.empty()) return backward(saved, grad_output);
  // create_graph: the saved output as this node's output again (PyTorch's
  // SavedVariable unpacking), dropped after the formula so that the node does
  // not keep itself alive through it.
  struct Detach {
    Saved& s;
    ~Detach() { s.attached_out = Tensor(); }
  } detach{saved};
  const Tensor& out = saved.out.get(name);
  if (out.defined()) {
    saved.attached_out = out.detach();
    saved.attached_out.unsafe_impl()->grad_fn = shared_from_this();
  }
  return backward(saved, grad_output);
}

void FunctionNode::release() {
  for (auto& s : saved.inputs) s.reset();
  for (auto& s : saved.extras) s.reset();
  saved.out.reset();
  backward = nullptr;  // also frees anything the formula captured
  released = true;
}

}  // namespace halfgrad::autograd
