// Backend selection: every kernel entry point goes to ops/cpu or ops/cuda by
// the device of its tensors (the dispatcher has already checked that they
// share one). The CUDA backend so far provides fill and copies; the other
// CUDA kernels arrive with the CUDA backend issue and until then a CUDA
// tensor in those ops is a clear Error.
#include "ops/kernels.h"

#include "core/cuda/runtime.h"
#include "ops/cpu/cpu_kernels.h"

namespace halfgrad::kernels {

namespace {
[[noreturn]] void not_on_cuda(const char* op, const Tensor& t) {
  fail("{}: no CUDA kernel yet for {} (the CUDA backend so far allocates, fills and copies). Move the tensor "
       "to the CPU with .cpu() for now.",
       op, t.describe());
}
bool on_cpu(const Tensor& t) { return t.device().is_cpu(); }
}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams p) {
  if (!on_cpu(in)) not_on_cuda("unary", in);
  cpu::unary(op, in, out, p);
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  if (!on_cpu(a)) not_on_cuda("binary", a);
  cpu::binary(op, a, b, out, alpha);
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!on_cpu(a)) not_on_cuda("where", a);
  cpu::where(cond, a, b, out);
}

void fill(const Tensor& out, double value) {
  if (on_cpu(out)) return cpu::fill(out, value);
  HG_CHECK(out.is_contiguous(), "fill: CUDA fill needs a contiguous tensor, got {}", out.describe());
  cuda::fill(out.data_ptr(), out.dtype(), static_cast<size_t>(out.numel()), value, out.device().index);
}

void copy(const Tensor& dst, const Tensor& src) {
  HG_CHECK(dst.shape() == src.shape(), "copy: shapes differ: {} and {}", dst.describe(), src.describe());
  if (on_cpu(dst) && on_cpu(src)) return cpu::copy(dst, src);
  if (dst.numel() == 0) return;
  const size_t nbytes = static_cast<size_t>(src.numel()) * itemsize(src.dtype());
  const bool same_layout = dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous();
  if (same_layout) {
    const int device = dst.device().is_cuda() ? dst.device().index : src.device().index;
    cuda::copy_bytes(dst.data_ptr(), dst.device().is_cuda(), src.data_ptr(), src.device().is_cuda(), nbytes, device);
    return;
  }
  // A cast or a strided layout: do that part on the host.
  if (on_cpu(dst)) {
    HG_CHECK(src.is_contiguous(), "copy: a strided CUDA source ({}) needs a CUDA kernel; call contiguous() first",
             src.describe());
    Tensor host = make_tensor(src.shape(), TensorOptions(src.dtype(), Device::cpu()));
    copy(host, src);
    return cpu::copy(dst, host);
  }
  if (on_cpu(src)) {
    HG_CHECK(dst.is_contiguous(), "copy: a strided CUDA destination ({}) needs a CUDA kernel", dst.describe());
    Tensor host = make_tensor(src.shape(), TensorOptions(dst.dtype(), Device::cpu()));
    cpu::copy(host, src);
    return copy(dst, host);
  }
  not_on_cuda("copy (casting or strided, on the device)", src);
}

void reduce(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out) {
  if (!on_cpu(in)) not_on_cuda("reduce", in);
  cpu::reduce(op, in, dims, out);
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta) {
  if (!on_cpu(a)) not_on_cuda("gemm", a);
  cpu::gemm(a, b, out, bias, beta);
}

void linear_act(const Tensor& x2, const Tensor& w, const Tensor& bias, Activation act, const Tensor& out,
                const Tensor& pre) {
  if (!on_cpu(x2)) not_on_cuda("linear", x2);
  cpu::linear_act(x2, w, bias, act, out, pre);
}

void linear_act_backward(const Tensor& g, const Tensor& x2, const Tensor& w, Activation act, const Tensor& saved,
                         const Tensor& dx, const Tensor& dw, const Tensor& db) {
  if (!on_cpu(g)) not_on_cuda("linear backward", g);
  cpu::linear_act_backward(g, x2, w, act, saved, dx, dw, db);
}

void softmax(const Tensor& in, const Tensor& out, bool log) {
  if (!on_cpu(in)) not_on_cuda(log ? "log_softmax" : "softmax", in);
  cpu::softmax(in, out, log);
}

void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in, bool log) {
  if (!on_cpu(y)) not_on_cuda("softmax_backward", y);
  cpu::softmax_backward(grad_out, y, grad_in, log);
}

void nll_loss(const Tensor& logp, const Tensor& target, const Tensor& out, int64_t ignore_index, const char* op) {
  if (!on_cpu(logp)) not_on_cuda(op, logp);
  cpu::nll_loss(logp, target, out, ignore_index, op);
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& grad_logp, int64_t ignore_index) {
  if (!on_cpu(grad)) not_on_cuda("nll_loss_backward", grad);
  cpu::nll_loss_backward(grad, target, grad_logp, ignore_index);
}

// Random numbers come from the one CPU generator; CUDA tensors get them by copy.
namespace {
template <typename Fill>
void random_fill(const Tensor& out, Fill fill_host) {
  if (on_cpu(out)) return fill_host(out);
  Tensor host = make_tensor(out.shape(), TensorOptions(out.dtype(), Device::cpu()));
  fill_host(host);
  copy(out, host);
}
}  // namespace

void uniform(const Tensor& out, double low, double high) {
  random_fill(out, [&](const Tensor& t) { cpu::uniform(t, low, high); });
}
void normal(const Tensor& out, double mean, double std) {
  random_fill(out, [&](const Tensor& t) { cpu::normal(t, mean, std); });
}
void randint(const Tensor& out, int64_t low, int64_t high) {
  random_fill(out, [&](const Tensor& t) { cpu::randint(t, low, high); });
}

}  // namespace halfgrad::kernels
