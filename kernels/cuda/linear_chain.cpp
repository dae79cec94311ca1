// A chain of Linear layers on CUDA: the per-layer cuBLASLt calls of gemm.h,
// wired so that each hidden layer's dReLU/dGELU and bias gradient come out of
// the epilogue of the layer above's dx GEMM instead of elementwise passes.
#include <halfgrad/core/alias.h>
#include <halfgrad/core/error.h>
#include <halfgrad/kernels/cuda/gemm.h>
#include <halfgrad/kernels/kernels.h>

namespace halfgrad::kernels::cuda {

namespace {
bool has_activation(Epilogue e) {
  return e == Epilogue::BiasRelu || e == Epilogue::BiasGelu || e == Epilogue::BiasGeluTanh;
}

// z of a tanh-GELU layer, [rows, features] with a row stride rounded up to a multiple
// of 8: the aux layout cuBLASLt's GELU_AUX_BIAS writes and DGELU_BGRAD reads.
Tensor padded_z(int64_t rows, int64_t features, const TensorOptions& options) {
  const int64_t ld = (features + 7) / 8 * 8;
  return alias_with(make_tensor({rows * ld}, options), {rows, features}, {ld, 1}, 0);
}
}  // namespace

std::vector<Tensor> linear_chain(const std::vector<Tensor>& h, const std::vector<Tensor>& w,
                                 const std::vector<Tensor>& b, const std::vector<Epilogue>& epi, bool keep) {
  const size_t layers = w.size();
  std::vector<Tensor> saved(layers);
  const bool fusion = epilogue_fusion();
  for (size_t i = 0; i < layers; ++i) {
    const Tensor& out = h[i + 1];
    const int64_t rows = out.shape()[0], features = out.shape()[1];
    if (keep) {
      switch (epi[i]) {
        case Epilogue::BiasRelu:
          // Read only by the DRELU_BGRAD epilogue of the layer above (the last layer's own
          // dReLU is a pass on its output). Only where cuBLASLt's ReLU may run (it maps NaN
          // to 0: gemm.h, set_relu_epilogue_fusion). Whether cuBLASLt has a mask kernel for
          // this dtype and these shapes is its answer at run time: linear_forward says.
          if (i + 1 < layers && fusion && relu_epilogue_fusion() && h[i].numel() > 0 && out.numel() > 0)
            saved[i] = make_relu_mask(rows, features, out.device());
          break;
        case Epilogue::BiasGeluTanh: saved[i] = padded_z(rows, features, out.options()); break;
        case Epilogue::BiasGelu: saved[i] = make_tensor(out.shape(), out.options()); break;
        case Epilogue::None:
        case Epilogue::Bias: break;
      }
    }
    // no mask kernel for these shapes: backward reads the output instead
    if (!linear_forward(h[i], w[i], b[i], epi[i], out, saved[i])) saved[i] = Tensor();
  }
  return saved;
}

void linear_chain_backward(const Tensor& g, const std::vector<Tensor>& h, const std::vector<Epilogue>& epi,
                           const std::vector<Tensor>& saved, const Tensor& dx,
                           std::vector<kernels::ChainLayerGrad>& layers) {
  const int64_t count = static_cast<int64_t>(layers.size());
  const int64_t lowest = kernels::linear_chain_lowest(dx, layers);
  const bool fusion = epilogue_fusion();
  // What layer k's activation gradient reads: z for the GELUs; for ReLU the mask while
  // cuBLASLt can read it, else the output h[k+1] (relu'(z) = h > 0, as PyTorch).
  const auto act_saved = [&](int64_t k) {
    const bool mask = saved[k].defined() && saved[k].dtype() == DType::Bool;
    if (epi[k] == Epilogue::BiasRelu) return mask && fusion ? saved[k] : h[k + 1];
    HG_CHECK(saved[k].defined(), "linear_chain: internal error: layer {}'s pre-activation was not kept for backward",
             k);
    return saved[k];
  };
  Tensor grad = g;  // dL/dh[layers] for the last layer; below, dL/dz_i (the layer above applied act_i')
  for (int64_t i = count - 1; i >= 0 && i >= lowest; --i) {
    kernels::ChainLayerGrad& layer = layers[static_cast<size_t>(i)];
    const bool last = i == count - 1;
    // The last layer's activation has no GEMM above it: a pass inside this call.
    const Epilogue own = last ? epi[i] : Epilogue::None;
    const Tensor own_saved = last && has_activation(epi[i]) ? act_saved(i) : Tensor();
    // An activated hidden layer's bias gradient was reduced by the dx GEMM above.
    const Tensor grad_bias = !last && has_activation(epi[i]) ? Tensor() : layer.db;
    const Tensor grad_in = i == 0 ? dx : i > lowest ? make_tensor(h[i].shape(), g.options()) : Tensor();
    InputActivation input;
    // h[i], layer i-1's output: what dReLU reads if the DRELU epilogue has no kernel here
    if (i > 0 && grad_in.defined() && has_activation(epi[i - 1]))
      input = {epi[i - 1], act_saved(i - 1), layers[static_cast<size_t>(i - 1)].db, h[i]};
    // one call reads w and writes dw (the stream-ordered pool reuses w's memory after it)
    layer.make_dw();
    linear_backward_epilogue(grad, h[i], layer.w, own, own_saved, grad_in, layer.dw, grad_bias, input);
    layer.w = Tensor();
    grad = grad_in;
  }
}

}  // namespace halfgrad::kernels::cuda
