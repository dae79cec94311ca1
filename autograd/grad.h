#pragma once
// torch.autograd.grad: the gradients of `outputs` with respect to `inputs`,
// returned rather than accumulated into any .grad (no leaf's .grad changes),
// running only the part of the graph between them.
//
//   auto [gx] = hg::autograd::grad({loss}, {x}, {}, {.create_graph = true});
//   hg::Tensor penalty = hg::sum(gx * gx);  // differentiable: gx has a graph
//
// create_graph runs each backward formula in grad mode, so the gradients are
// themselves functions of the inputs (double backward, a gradient penalty);
// the ops whose backward is built from ops are twice differentiable, and the
// few whose backward calls kernels directly (convolution, batch norm,
// pooling, the fused Linear chain) raise an Error naming the op when a
// second backward reaches them (docs/autograd.md).
#include <optional>
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::autograd {

struct GradOptions {
  std::optional<bool> retain_graph;  // keep the graph for another pass; default: create_graph
  bool create_graph = false;         // give the returned gradients a graph (double backward)
  bool allow_unused = false;         // an input the outputs do not depend on: undefined, not an Error
};

// grad_outputs: one per output ("the vector" of the vector-Jacobian product),
// or none (each output must then be a scalar and gets 1). Every input must
// require grad. Gradients come back in each input's dtype.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, const GradOptions& options = {});

}  // namespace halfgrad::autograd
