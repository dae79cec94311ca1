#pragma once
// Derivatives written with ops, for the backward formulas run under
// create_graph (internal: not installed). A formula normally applies a
// derivative in one kernel pass; when autograd::grad asks for a gradient with
// a graph of its own, it writes the derivative with differentiable ops
// instead, so that the gradient can be differentiated again.
#include <halfgrad/core/tensor.h>
#include <halfgrad/kernels/activation.h>

namespace halfgrad::ops {

// Inside a backward formula, grad mode is on only under create_graph.
bool creating_graph();

// d gelu / dx at x, exact or (tanh_form) PyTorch's tanh approximation.
Tensor gelu_grad_ops(const Tensor& x, bool tanh_form);

// g times the derivative of `act` at the pre-activation z (ReLU: where z > 0).
Tensor activation_grad_ops(Activation act, const Tensor& g, const Tensor& z);

}  // namespace halfgrad::ops
