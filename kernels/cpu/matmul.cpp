// Tensor-level GEMM for the CPU backend: reads the views' strides into
// GemmArgs so transposed operands reach oneDNN without a copy.
#include <halfgrad/core/alias.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/gemm.h>

namespace halfgrad::kernels::cpu {

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta) {
  gemm(a, b, out, bias, beta, false);
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta, bool relu) {
  const bool batched = out.dim() == 3;
  auto st = [&](const Tensor& t, int i) { return t.strides()[t.dim() - 3 + i]; };  // i: 0 batch, 1 rows, 2 cols
  GemmArgs g;
  g.dtype = a.dtype();
  g.c_float32 = out.dtype() == DType::Float32 && a.dtype() != DType::Float32;  // AMP weight gradients
  g.batch = batched ? out.shape()[0] : 1;
  g.m = out.shape()[out.dim() - 2];
  g.n = out.shape()[out.dim() - 1];
  g.k = a.shape()[a.dim() - 1];
  g.a = a.data_ptr();
  g.a_bs = batched ? st(a, 0) : 0;
  g.a_rs = a.strides()[a.dim() - 2];
  g.a_cs = a.strides()[a.dim() - 1];
  g.b = b.data_ptr();
  g.b_bs = batched ? st(b, 0) : 0;
  g.b_rs = b.strides()[b.dim() - 2];
  g.b_cs = b.strides()[b.dim() - 1];
  g.c = out.data_ptr();
  g.c_bs = batched ? st(out, 0) : 0;
  g.c_rs = out.strides()[out.dim() - 2];
  // the GEMM reads the bias as n contiguous elements
  Tensor dense_bias = bias;
  if (bias.defined() && !bias.is_contiguous()) {
    dense_bias = make_tensor(bias.shape(), bias.options());
    copy(dense_bias, bias);
  }
  g.bias = dense_bias.defined() ? dense_bias.data_ptr() : nullptr;
  g.beta = beta;
  g.relu = relu;
  gemm(g);
}

namespace {
// A transposed view without going through the dispatcher (kernels stay below it).
Tensor transposed(const Tensor& t) {
  return alias_with(t, {t.shape()[1], t.shape()[0]}, {t.strides()[1], t.strides()[0]}, t.offset());
}

kernels::UnaryOp gelu_op(kernels::Activation act) {
  return act == kernels::Activation::GELUTanh ? kernels::UnaryOp::GeluTanh : kernels::UnaryOp::Gelu;
}
// g * gelu'(z) in one pass, rounded once.
kernels::BinaryOp gelu_backward_op(kernels::Activation act) {
  return act == kernels::Activation::GELUTanh ? kernels::BinaryOp::GeluTanhBackward : kernels::BinaryOp::GeluBackward;
}
}  // namespace

// Linear + activation: ReLU rides in oneDNN's epilogue (a post-op). The
// GELUs are the GEMM (bias included) then one pass of the shared math, as
// PyTorch's CPU path: backward needs the pre-activation, so the GEMM writes it
// to `pre` when given (else to `out`, activated in place).

void linear_act(const Tensor& x2, const Tensor& w, const Tensor& bias, kernels::Activation act, const Tensor& out,
                const Tensor& pre) {
  using kernels::Activation;
  const Tensor wt = transposed(w);
  if (kernels::is_gelu(act)) {
    const Tensor& z = pre.defined() ? pre : out;
    cpu::gemm(x2, wt, z, bias, 0.f);
    cpu::unary(gelu_op(act), z, out, {});
    return;
  }
  cpu::gemm(x2, wt, out, bias, 0.f, act == Activation::ReLU);
  if (pre.defined()) cpu::copy(pre, out);
}

Tensor activation_backward(const Tensor& g, kernels::Activation act, const Tensor& saved) {
  using kernels::Activation;
  if (act == Activation::None) return g;
  Tensor gz = make_tensor(g.shape(), g.options());
  cpu::binary(act == Activation::ReLU ? kernels::BinaryOp::ReluBackward : gelu_backward_op(act), g, saved, gz, 1.0);
  return gz;
}

void linear_param_grads(const Tensor& gz, const Tensor& x2, const Tensor& dw, const Tensor& db) {
  if (dw.defined()) cpu::gemm(transposed(gz), x2, dw, Tensor(), 0.f);
  if (db.defined()) cpu::reduce(kernels::ReduceOp::Sum, gz, {0}, alias_with(db, {1, db.numel()}, {db.numel(), 1}, db.offset()));
}

void linear_act_backward(const Tensor& g, const Tensor& x2, const Tensor& w, kernels::Activation act,
                         const Tensor& saved, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const Tensor gz = activation_backward(g, act, saved);
  if (dx.defined()) cpu::gemm(gz, w, dx, Tensor(), 0.f);
  linear_param_grads(gz, x2, dw, db);
}

}  // namespace halfgrad::kernels::cpu
