// A chain of Linear layers on the CPU: the per-layer kernels, one after the
// other (there is no epilogue to carry dReLU/dGELU into the next GEMM).
#include <halfgrad/ops/cpu/cpu_kernels.h>

namespace halfgrad::cpu {

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

void linear_chain_backward(const Tensor& g, const std::vector<Tensor>& h, const std::vector<Tensor>& w,
                           const std::vector<Activation>& act, const std::vector<Tensor>& saved, const Tensor& dx,
                           const std::vector<Tensor>& dw, const std::vector<Tensor>& db) {
  const int64_t lowest = kernels::linear_chain_lowest(dx, dw, db);
  Tensor grad = g;  // dL/dh[i+1]
  for (int64_t i = static_cast<int64_t>(w.size()) - 1; i >= 0 && i >= lowest; --i) {
    const Tensor grad_in = i == 0 ? dx : i > lowest ? make_tensor(h[i].shape(), g.options()) : Tensor();
    const Tensor& act_saved = act[i] == Activation::ReLU ? h[i + 1] : saved[i];
    cpu::linear_act_backward(grad, h[i], w[i], act[i], act_saved, grad_in, dw[i], db[i]);
    grad = grad_in;
  }
}

}  // namespace halfgrad::cpu
