#pragma once
// The autograd layer's own nodes and entry points (internal: not installed):
// the accumulator at each leaf, the edge an op input gets, and the backward
// pass. The nodes an op call records are dispatch/node.h.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <halfgrad/dispatch/layers.h>
#include <halfgrad/dispatch/node.h>

namespace halfgrad::autograd {

// The end of the graph for a leaf: adds the incoming grad to `.grad`.
struct AccumulateGrad final : Node {
  std::weak_ptr<TensorImpl> leaf;
  std::mutex mutex;  // backward from several threads may reach one leaf (PyTorch locks here too)
  // autograd/hooks.h: run after each accumulation, outside the lock
  std::vector<std::pair<int64_t, std::function<void(const Tensor&)>>> hooks;
  int64_t next_hook_id = 0;
  Grads apply(const Tensor& grad_output, bool retain_graph) override;

 private:
  void accumulate(TensorImpl& leaf_impl, const Tensor& grad_output);
};

// The edge for `t` as an op input: its grad_fn, its accumulator if it is a
// leaf that requires grad, or nullptr.
std::shared_ptr<Node> gradient_edge(const Tensor& t);

// The autograd layer's recorder (autograd/record.cpp): a FunctionNode named
// `name` becomes out's grad_fn. dispatch::call reaches it through the
// registered recorder; custom Functions (autograd/function.h) call it directly.
Tensor record_node(std::string name, const std::vector<Tensor>& inputs, Tensor out, BackwardFn backward,
                   dispatch::Save save, std::vector<Tensor> extras);

// Run backward from `root` with `grad` (the engine: topological order);
// create_graph runs the formulas in grad mode (and retains the graph).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph, bool create_graph = false);

}  // namespace halfgrad::autograd
