// Tensor-level GEMM for the CPU backend: reads the views' strides into
// GemmArgs so transposed operands reach oneDNN without a copy.
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/gemm.h"

namespace halfgrad::cpu {

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta) {
  const bool batched = out.dim() == 3;
  auto st = [&](const Tensor& t, int i) { return t.strides()[t.dim() - 3 + i]; };  // i: 0 batch, 1 rows, 2 cols
  GemmArgs g;
  g.dtype = out.dtype();
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
  g.bias = bias.defined() ? bias.data_ptr() : nullptr;
  g.beta = beta;
  gemm(g);
}

}  // namespace halfgrad::cpu
