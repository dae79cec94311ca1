// The CUDA entries of kernels/kernel_list.h that are other CUDA functions: the
// fused Linear entries map their activation onto a cuBLASLt epilogue of the
// GEMM layer (gemm.h), batch norm's training step is its statistics and then
// its forward, and the reduced NLL loss runs the per-sample kernel and
// reductions (no host sync). Host code, built by g++.
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/gemm.h>

namespace halfgrad::kernels::cuda {

namespace {
// None still adds the bias when there is one (and accepts none).
Epilogue epilogue(Activation act) {
  switch (act) {
    case Activation::ReLU: return Epilogue::BiasRelu;
    case Activation::GELU: return Epilogue::BiasGelu;
    case Activation::GELUTanh: return Epilogue::BiasGeluTanh;
    case Activation::None: break;
  }
  return Epilogue::None;
}

std::vector<Epilogue> epilogues(const std::vector<Activation>& act) {
  std::vector<Epilogue> e;
  for (Activation a : act) e.push_back(epilogue(a));
  return e;
}
}  // namespace

void linear_act(const Tensor& x2, const Tensor& w, const Tensor& bias, Activation act, const Tensor& out,
                const Tensor& pre) {
  linear_forward(x2, w, bias, epilogue(act), out, pre);
}

void linear_act_backward(const Tensor& g, const Tensor& x2, const Tensor& w, Activation act, const Tensor& saved,
                         const Tensor& dx, const Tensor& dw, const Tensor& db) {
  linear_backward_epilogue(g, x2, w, epilogue(act), saved, dx, dw, db);
}

std::vector<Tensor> linear_chain(const std::vector<Tensor>& h, const std::vector<Tensor>& w,
                                 const std::vector<Tensor>& b, const std::vector<Activation>& act, bool keep) {
  return linear_chain(h, w, b, epilogues(act), keep);
}

void linear_chain_backward(const Tensor& g, const std::vector<Tensor>& h, const std::vector<Activation>& act,
                           const std::vector<Tensor>& saved, const Tensor& dx, std::vector<ChainLayerGrad>& layers) {
  linear_chain_backward(g, h, epilogues(act), saved, dx, layers);
}

void batch_norm_training(const Tensor& x, double eps, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                         const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum,
                         const Tensor& y) {
  batch_norm_stats(x, eps, mean, invstd, running_mean, running_var, momentum);
  batch_norm_forward(x, mean, invstd, weight, bias, y);
}

void nll_loss_reduced(const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                      int64_t ignore_index, bool mean, const char* op) {
  kernels::nll_loss_reduced_by_kernels(logp, target, out, count, ignore_index, mean, op);
}

}  // namespace halfgrad::kernels::cuda
