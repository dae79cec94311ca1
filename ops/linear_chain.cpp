// linear_chain: Linear layers with their activations as one op, so one
// backward sees the whole chain. That is what lets CUDA apply a hidden
// layer's dReLU/dGELU (and reduce its bias gradient) in the epilogue of the
// GEMM that computes the gradient reaching it, the layer above's dx GEMM:
// a node per layer would need an elementwise pass there.
#include <algorithm>
#include <memory>

#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/grad_ops.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

namespace {
constexpr std::string_view kOp = op_name(OpId::linear_chain);

// Shapes and counts, before the dispatcher (autocast does not change them).
void check_layers(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                  const std::vector<Activation>& acts) {
  HG_CHECK(!weights.empty(), "{}: expected at least one layer, got no weights", kOp);
  HG_CHECK(biases.size() == weights.size() && acts.size() == weights.size(),
           "{}: got {} weights, {} biases and {} activations; pass one of each per layer (an undefined Tensor() "
           "for a layer without bias, Activation::None for a layer without activation)",
           kOp, weights.size(), biases.size(), acts.size());
  HG_CHECK(x.defined() && x.dim() >= 1, "{}: the input must have at least 1 dim [*, in_features], got {}", kOp,
           x.describe());
  HG_CHECK(is_floating(x.dtype()), "{}: expected a floating input, got {}. Cast it first, e.g. .to(float32).", kOp,
           x.describe());
  int64_t features = x.shape().back();
  for (size_t i = 0; i < weights.size(); ++i) {
    const Tensor& w = weights[i];
    HG_CHECK(w.defined() && w.dim() == 2, "{}: layer {}: weight must be 2-d [out_features, in_features], got {}", kOp,
             i, w.describe());
    HG_CHECK(w.shape()[1] == features,
             "{}: layer {}: weight {} takes {} input features, but {} has {}; its weight must be [out_features, {}]",
             kOp, i, w.describe(), w.shape()[1],
             i == 0 ? "the input " + x.describe() : fmt::format("the output of layer {}", i - 1), features, features);
    HG_CHECK(!biases[i].defined() || (biases[i].dim() == 1 && biases[i].shape()[0] == w.shape()[0]),
             "{}: layer {}: bias {} must be 1-d with out_features = {} elements (or an undefined Tensor() for none)",
             kOp, i, biases[i].describe(), w.shape()[0]);
    HG_CHECK(static_cast<int>(acts[i]) <= static_cast<int>(Activation::GELUTanh),
             "{}: layer {}: unknown activation {} (None, ReLU, GELU or GELUTanh)", kOp, i,
             static_cast<int>(acts[i]));
    features = w.shape()[0];
  }
}

// One dtype for all, after autocast had its chance to cast.
void check_dtypes(const std::vector<Tensor>& in) {
  const DType dt = in[0].dtype();
  for (size_t k = 1; k < in.size(); ++k)
    HG_CHECK(!in[k].defined() || in[k].dtype() == dt,
             "{}: layer {}: {} {} is {} but the input is {}. Cast it first (e.g. .to({})), or run inside "
             "`amp::autocast`, which casts the inputs of {} for you.",
             kOp, (k - 1) / 2, k % 2 ? "weight" : "bias", in[k].describe(), dtype_name(in[k].dtype()),
             dtype_name(dt), dtype_name(dt), kOp);
}

Tensor rows_of(const Tensor& t) { return t.dim() == 2 ? t : t.reshape({-1, t.shape().back()}); }

// Under create_graph: the chain run again layer by layer with ops from the
// saved inputs (so each hidden output is a function of x and the weights),
// then its backward with ops: differentiable again.
dispatch::Grads chain_grad_ops(const dispatch::Saved& s, const Tensor& g, const std::vector<Activation>& acts,
                               const Shape& x_shape) {
  const size_t layers = acts.size();
  std::vector<Tensor> h{rows_of(s.input(0))}, z;
  for (size_t i = 0; i < layers; ++i) {
    z.push_back(linear(h[i], s.input(1 + 2 * i), s.input(2 + 2 * i)));
    const Activation a = acts[i];
    h.push_back(a == Activation::ReLU ? relu(z[i]) : is_gelu(a) ? gelu(z[i], a == Activation::GELU ? "none" : "tanh") : z[i]);
  }
  dispatch::Grads grads(1 + 2 * layers);
  Tensor gh = rows_of(g);
  for (size_t i = layers; i-- > 0;) {
    const Tensor gz = ops::activation_grad_ops(acts[i], gh, z[i]);
    if (s.needs_grad[1 + 2 * i]) grads[1 + 2 * i] = mm(gz.t(), h[i]);
    if (s.needs_grad[2 + 2 * i]) grads[2 + 2 * i] = sum(gz, {0});
    if (i > 0 || s.needs_grad[0]) gh = mm(gz, s.input(1 + 2 * i));
  }
  if (s.needs_grad[0]) grads[0] = x_shape.size() != 2 ? gh.reshape(x_shape) : gh;
  return grads;
}

}  // namespace

Tensor linear_chain(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                    const std::vector<Activation>& activations) {
  check_layers(x, weights, biases, activations);
  const size_t layers = weights.size();
  std::vector<Tensor> inputs{x};
  for (size_t i = 0; i < layers; ++i) {
    inputs.push_back(weights[i]);
    inputs.push_back(biases[i]);
  }
  // What backward needs besides the saved inputs and output is kept through
  // dispatch::save_for_backward (version-checked, freed with the graph): the
  // hidden layers' outputs h[1] .. h[layers - 1] (the next GEMMs' inputs),
  // then the backend's per-layer state (kernels::linear_chain's result).
  return dispatch::call(
      OpId::linear_chain, std::move(inputs),
      [acts = activations](const std::vector<Tensor>& in) {
        check_dtypes(in);
        const bool records = dispatch::recording();  // keep what backward reads only if it can run
        const size_t layers = acts.size();
        const Tensor x2 = rows_of(in[0]);
        std::vector<Tensor> h{ops::gemm_operand(x2)}, w, b;
        for (size_t i = 0; i < layers; ++i) {
          w.push_back(ops::gemm_operand(in[1 + 2 * i]));
          b.push_back(in[2 + 2 * i]);
          h.push_back(make_tensor({x2.shape()[0], w[i].shape()[0]}, x2.options()));
        }
        std::vector<Tensor> saved = kernels::linear_chain(h, w, b, acts, records);
        if (records) {
          for (size_t i = 1; i + 1 < h.size(); ++i) dispatch::save_for_backward(h[i]);
          for (const Tensor& t : saved) dispatch::save_for_backward(t);
        }
        if (in[0].dim() == 2) return h.back();
        Shape out_shape = in[0].shape();
        out_shape.back() = h.back().shape()[1];
        return h.back().view(out_shape);
      },
      [acts = activations, x_shape = x.shape()](dispatch::Saved& s, const Tensor& g) -> dispatch::Grads {
        const int64_t layers = static_cast<int64_t>(acts.size());
        if (ops::creating_graph()) return chain_grad_ops(s, g, acts, x_shape);
        // Only the gradients someone needs (PyTorch's needs_input_grad), and only the
        // saved tensors those read: nothing below the lowest wanted gradient.
        int64_t lowest = s.needs_grad[0] ? -1 : layers;
        for (int64_t i = layers - 1; i >= 0; --i)
          if (s.needs_grad[1 + 2 * i] || s.needs_grad[2 + 2 * i]) lowest = std::min(lowest, i);
        const Tensor g2 = rows_of(g).contiguous();
        std::vector<Tensor> h{lowest <= 0 ? ops::gemm_operand(rows_of(s.input(0))) : Tensor()};
        for (int64_t i = 0; i + 1 < layers; ++i) h.push_back(s.extra(static_cast<size_t>(i)));
        // the output is saved (Save::Both) only when the last layer's ReLU needs it
        h.push_back(acts.back() == Activation::ReLU ? s.output().reshape(g2.shape()) : Tensor());
        std::vector<kernels::ChainLayerGrad> grads_of(static_cast<size_t>(layers));
        for (int64_t i = 0; i < layers; ++i) {
          kernels::ChainLayerGrad& layer = grads_of[static_cast<size_t>(i)];
          // the kernel holds the weight's only handle (when the graph is not kept), so
          // it can free an autocast copy at its last read, before making its gradient
          if (i >= lowest) layer.w = ops::gemm_operand(s.take_input(1 + 2 * i));
          layer.dw_wanted = s.needs_grad[1 + 2 * i];
          // AMP on the CPU: a weight cast from float32 gets its gradient in float32 straight from the
          // GEMM's float32 sums (oneDNN writes them from bfloat16 operands): no rounding to bfloat16
          // and no cast pass back to the master weight (Saved::grad_dtypes)
          layer.dw_dtype = s.grad_dtypes[1 + 2 * i];
          if (s.needs_grad[2 + 2 * i]) layer.db = make_tensor({layer.w.shape()[0]}, g.options());
        }
        const Tensor dx =
            s.needs_grad[0] ? make_tensor({g2.shape()[0], grads_of[0].w.shape()[1]}, g.options()) : Tensor();
        std::vector<Tensor> state;  // the backend's, after the hidden outputs
        for (size_t i = static_cast<size_t>(layers - 1); i < s.extras.size(); ++i) state.push_back(s.extra(i));
        kernels::linear_chain_backward(g2, h, acts, state, dx, grads_of);
        dispatch::Grads grads{dx.defined() && x_shape.size() != 2 ? dx.view(x_shape) : dx};
        for (kernels::ChainLayerGrad& layer : grads_of) {
          grads.push_back(std::move(layer.dw));
          grads.push_back(std::move(layer.db));
        }
        return grads;
      },
      activations.back() == Activation::ReLU ? dispatch::Save::Both : dispatch::Save::Inputs);
}

}  // namespace halfgrad
