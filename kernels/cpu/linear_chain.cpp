// A chain of Linear layers on the CPU: the per-layer kernels, one after the
// other (there is no epilogue to carry dReLU/dGELU into the next GEMM).
#include <halfgrad/kernels/cpu/cpu_kernels.h>

namespace halfgrad::kernels::cpu {

using kernels::Activation;
using kernels::is_gelu;

std::vector<Tensor> linear_chain(const std::vector<Tensor>& h, const std::vector<Tensor>& w,
                                 const std::vector<Tensor>& b, const std::vector<Activation>& act, bool keep) {
  std::vector<Tensor> saved(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    // ReLU's backward reads its output h[i+1]; the GELUs' read z
    if (keep && is_gelu(act[i])) saved[i] = make_tensor(h[i + 1].shape(), h[i + 1].options());
    cpu::linear_act(h[i], w[i], b[i], act[i], h[i + 1], saved[i]);
  }
  return saved;
}

void linear_chain_backward(const Tensor& g, const std::vector<Tensor>& h, const std::vector<Activation>& act,
                           const std::vector<Tensor>& saved, const Tensor& dx,
                           std::vector<kernels::ChainLayerGrad>& layers) {
  const int64_t lowest = kernels::linear_chain_lowest(dx, layers);
  Tensor grad = g;  // dL/dh[i+1]
  for (int64_t i = static_cast<int64_t>(layers.size()) - 1; i >= 0 && i >= lowest; --i) {
    kernels::ChainLayerGrad& layer = layers[static_cast<size_t>(i)];
    const Tensor grad_in = i == 0 ? dx : i > lowest ? make_tensor(h[i].shape(), g.options()) : Tensor();
    const Tensor gz = cpu::activation_backward(grad, act[i], act[i] == Activation::ReLU ? h[i + 1] : saved[i]);
    if (grad_in.defined()) cpu::gemm(gz, layer.w, grad_in, Tensor(), 0.f);
    layer.weight_read();  // its memory can go to the gradient
    cpu::linear_param_grads(gz, h[i], layer.dw, layer.db);
    grad = grad_in;
  }
}

}  // namespace halfgrad::kernels::cpu
