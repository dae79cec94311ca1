// Backend selection: every kernel entry point goes to ops/cpu or ops/cuda by
// the device of its tensors (the dispatcher has already checked that they
// share one). Built without CUDA, a CUDA tensor cannot exist (allocation
// fails first), so the CUDA branches compile away.
#include <halfgrad/ops/kernels.h>

#include <halfgrad/core/alias.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/ops/cpu/cpu_kernels.h>
#include <halfgrad/ops/util.h>
#if HALFGRAD_WITH_CUDA
#include <halfgrad/ops/cuda/cuda_kernels.h>
#include <halfgrad/ops/cuda/gemm.h>
#define HG_BACKEND(t, cpu_call, cuda_call) \
  do {                                     \
    if ((t).device().is_cpu()) {           \
      cpu_call;                            \
    } else {                               \
      cuda_call;                           \
    }                                      \
  } while (0)
#else
#define HG_BACKEND(t, cpu_call, cuda_call) \
  do {                                     \
    (void)(t);                             \
    cpu_call;                              \
  } while (0)
#endif

namespace halfgrad::kernels {

void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams p) {
  HG_BACKEND(in, cpu::unary(op, in, out, p), cuda_ops::unary(op, in, out, p));
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  HG_BACKEND(a, cpu::binary(op, a, b, out, alpha), cuda_ops::binary(op, a, b, out, alpha));
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  HG_BACKEND(a, cpu::where(cond, a, b, out), cuda_ops::where(cond, a, b, out));
}

void fill(const Tensor& out, double value) { HG_BACKEND(out, cpu::fill(out, value), cuda_ops::fill(out, value)); }

void copy(const Tensor& dst, const Tensor& src) {
  HG_CHECK(dst.shape() == src.shape(), "copy: shapes differ: {} and {}", dst.describe(), src.describe());
  if (dst.device() == src.device()) {
    HG_BACKEND(dst, cpu::copy(dst, src), cuda_ops::copy(dst, src));
    return;
  }
  if (dst.numel() == 0) return;
  // Between host and device: bytes move as one block in one dtype and one
  // layout (row-major or channels-last); a cast or a strided layout is done on
  // the side that has the data.
  const int device = dst.device().is_cuda() ? dst.device().index() : src.device().index();
  const auto same_block = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.strides() == b.strides() && ops::non_overlapping_and_dense(a) &&
           ops::non_overlapping_and_dense(b);
  };
  if (same_block(dst, src) || (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous())) {
    cuda::copy_bytes(dst.data_ptr(), dst.device().is_cuda(), src.data_ptr(), src.device().is_cuda(),
                     static_cast<size_t>(src.numel()) * itemsize(src.dtype()), device);
    return;
  }
  if (src.device().is_cpu()) {  // host -> device: cast/pack on the host in dst's layout, then move
    const MemoryFormat f = dst.suggest_memory_format();
    Tensor staged = make_tensor(src.shape(), TensorOptions(dst.dtype(), Device::cpu()), f);
    cpu::copy(staged, src);
    if (same_block(dst, staged)) return copy(dst, staged);
    Tensor moved = make_tensor(src.shape(), TensorOptions(dst.dtype(), dst.device()), f);
    copy(moved, staged);
    return copy(dst, moved);  // device-side strided copy
  }
  // device -> host: pack on the device in the source dtype and layout, move, cast on the host
  const MemoryFormat f = src.suggest_memory_format();
  const bool packed_already = ops::non_overlapping_and_dense(src) && src.is_contiguous(f);
  Tensor packed = packed_already ? src : make_tensor(src.shape(), src.options(), f);
  if (!packed_already) copy(packed, src);
  Tensor host = make_tensor(src.shape(), TensorOptions(src.dtype(), Device::cpu()), f);
  copy(host, packed);
  cpu::copy(dst, host);
}

void reduce(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out,
            const Tensor& indices) {
  if (indices.defined()) {
    HG_CHECK((op == ReduceOp::Max || op == ReduceOp::Min) && indices.dtype() == DType::Int64 &&
                 indices.is_contiguous() && indices.shape() == out.shape() && indices.device() == in.device(),
             "reduce: indices {} must be contiguous int64 of the output's shape {} (max/min only)",
             indices.describe(), out.describe());
  }
  HG_BACKEND(in, cpu::reduce(op, in, dims, out, indices), cuda_ops::reduce(op, in, dims, out, indices));
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta) {
  HG_BACKEND(a, cpu::gemm(a, b, out, bias, beta), cuda_ops::gemm(a, b, out, bias, beta));
}

#if HALFGRAD_WITH_CUDA
namespace {
cuda_ops::Epilogue epilogue(Activation act) {
  // None still adds the bias when there is one (and accepts none)
  switch (act) {
    case Activation::ReLU: return cuda_ops::Epilogue::BiasRelu;
    case Activation::GELU: return cuda_ops::Epilogue::BiasGelu;
    case Activation::GELUTanh: return cuda_ops::Epilogue::BiasGeluTanh;
    case Activation::None: break;
  }
  return cuda_ops::Epilogue::None;
}
}  // namespace
#endif

void linear_act(const Tensor& x2, const Tensor& w, const Tensor& bias, Activation act, const Tensor& out,
                const Tensor& pre) {
  HG_BACKEND(x2, cpu::linear_act(x2, w, bias, act, out, pre),
             cuda_ops::linear_forward(x2, w, bias, epilogue(act), out, pre));
}

void linear_act_backward(const Tensor& g, const Tensor& x2, const Tensor& w, Activation act, const Tensor& saved,
                         const Tensor& dx, const Tensor& dw, const Tensor& db) {
  HG_BACKEND(g, cpu::linear_act_backward(g, x2, w, act, saved, dx, dw, db),
             cuda_ops::linear_backward_epilogue(g, x2, w, epilogue(act), saved, dx, dw, db));
}

#if HALFGRAD_WITH_CUDA
namespace {
std::vector<cuda_ops::Epilogue> epilogues(const std::vector<Activation>& act) {
  std::vector<cuda_ops::Epilogue> e;
  for (Activation a : act) e.push_back(epilogue(a));
  return e;
}
}  // namespace
#endif

std::vector<Tensor> linear_chain(const std::vector<Tensor>& h, const std::vector<Tensor>& w,
                                 const std::vector<Tensor>& b, const std::vector<Activation>& act, bool keep) {
  std::vector<Tensor> saved;
  HG_BACKEND(h[0], saved = cpu::linear_chain(h, w, b, act, keep),
             saved = cuda_ops::linear_chain(h, w, b, epilogues(act), keep));
  return saved;
}

void linear_chain_backward(const Tensor& g, const std::vector<Tensor>& h, const std::vector<Activation>& act,
                           const std::vector<Tensor>& saved, const Tensor& dx, std::vector<ChainLayerGrad>& layers) {
  HG_BACKEND(g, cpu::linear_chain_backward(g, h, act, saved, dx, layers),
             cuda_ops::linear_chain_backward(g, h, epilogues(act), saved, dx, layers));
}

int64_t linear_chain_lowest(const Tensor& dx, const std::vector<ChainLayerGrad>& layers) {
  if (dx.defined()) return -1;
  const int64_t count = static_cast<int64_t>(layers.size());
  for (int64_t i = 0; i < count; ++i)
    if (layers[i].dw_wanted || layers[i].db.defined()) return i;
  return count;
}

void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeometry& g, const Tensor& y) {
  HG_BACKEND(x, cpu::conv_forward(x, w, bias, g, y), cuda_ops::conv_forward(x, w, bias, g, y));
}

void conv_backward_data(const Tensor& dy, const Tensor& w, const ConvGeometry& g, const Tensor& dx) {
  HG_BACKEND(dy, cpu::conv_backward_data(dy, w, g, dx), cuda_ops::conv_backward_data(dy, w, g, dx));
}

void conv_backward_weight(const Tensor& dy, const Tensor& x, const ConvGeometry& g, const Tensor& dw,
                          const Tensor& db) {
  HG_BACKEND(dy, cpu::conv_backward_weight(dy, x, g, dw, db), cuda_ops::conv_backward_weight(dy, x, g, dw, db));
}

void batch_norm_stats(const Tensor& x, double eps, const Tensor& mean, const Tensor& invstd,
                      const Tensor& running_mean, const Tensor& running_var, double momentum) {
  HG_BACKEND(x, cpu::batch_norm_stats(x, eps, mean, invstd, running_mean, running_var, momentum),
             cuda_ops::batch_norm_stats(x, eps, mean, invstd, running_mean, running_var, momentum));
}
void batch_norm_training(const Tensor& x, double eps, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                         const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum,
                         const Tensor& y) {
  if (x.device().is_cpu())
    return cpu::batch_norm_training(x, eps, weight, bias, mean, invstd, running_mean, running_var, momentum, y);
  batch_norm_stats(x, eps, mean, invstd, running_mean, running_var, momentum);
  batch_norm_forward(x, mean, invstd, weight, bias, y);
}

void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, const Tensor& y) {
  HG_BACKEND(x, cpu::batch_norm_forward(x, mean, invstd, weight, bias, y),
             cuda_ops::batch_norm_forward(x, mean, invstd, weight, bias, y));
}
void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias) {
  HG_BACKEND(x, cpu::batch_norm_backward(g, x, mean, invstd, weight, training, dx, dweight, dbias),
             cuda_ops::batch_norm_backward(g, x, mean, invstd, weight, training, dx, dweight, dbias));
}
void max_pool2d(const Tensor& x, const Pool2dGeometry& g, const Tensor& y, const Tensor& indices) {
  HG_BACKEND(x, cpu::max_pool2d(x, g, y, indices), cuda_ops::max_pool2d(x, g, y, indices));
}
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Pool2dGeometry& geo, const Tensor& dx) {
  HG_BACKEND(g, cpu::max_pool2d_backward(g, indices, geo, dx), cuda_ops::max_pool2d_backward(g, indices, geo, dx));
}
void avg_pool2d(const Tensor& x, const Pool2dGeometry& g, const Tensor& y) {
  HG_BACKEND(x, cpu::avg_pool2d(x, g, y), cuda_ops::avg_pool2d(x, g, y));
}
void avg_pool2d_backward(const Tensor& g, const Pool2dGeometry& geo, const Tensor& dx) {
  HG_BACKEND(g, cpu::avg_pool2d_backward(g, geo, dx), cuda_ops::avg_pool2d_backward(g, geo, dx));
}
void adaptive_avg_pool2d(const Tensor& x, const Tensor& y) {
  HG_BACKEND(x, cpu::adaptive_avg_pool2d(x, y), cuda_ops::adaptive_avg_pool2d(x, y));
}
void adaptive_avg_pool2d_backward(const Tensor& g, const Tensor& dx) {
  HG_BACKEND(g, cpu::adaptive_avg_pool2d_backward(g, dx), cuda_ops::adaptive_avg_pool2d_backward(g, dx));
}

void softmax(const Tensor& in, const Tensor& out, bool log) {
  HG_BACKEND(in, cpu::softmax(in, out, log), cuda_ops::softmax(in, out, log));
}

void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in, bool log) {
  HG_BACKEND(y, cpu::softmax_backward(grad_out, y, grad_in, log), cuda_ops::softmax_backward(grad_out, y, grad_in, log));
}

void nll_loss(const Tensor& logp, const Tensor& target, const Tensor& out, int64_t ignore_index, const char* op) {
  HG_BACKEND(logp, cpu::nll_loss(logp, target, out, ignore_index, op),
             cuda_ops::nll_loss(logp, target, out, ignore_index));
}

void nll_loss_reduced(const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                      int64_t ignore_index, bool mean, const char* op) {
  if (logp.device().is_cpu()) return cpu::nll_loss_reduced(logp, target, out, count, ignore_index, mean, op);
  nll_loss_reduced_by_kernels(logp, target, out, count, ignore_index, mean, op);
}

// The kernels the ops would run (per-sample loss, its sum; the mask target !=
// ignore_index as logp's dtype, its sum; the division), without the
// dispatcher around each.
void nll_loss_reduced_by_kernels(const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                                 int64_t ignore_index, bool mean, const char* op) {
  const int64_t n = logp.shape()[0];
  const Tensor per = make_tensor({n}, logp.options());
  nll_loss(logp, target, per, ignore_index, op);
  const Tensor out1 = alias_with(out, {1}, {1}, out.offset()), count1 = alias_with(count, {1}, {1}, count.offset());
  reduce(ReduceOp::Sum, per, {0}, out1);
  const Tensor ignore = ops::scalar_tensor(static_cast<double>(ignore_index), DType::Int64, target.device());
  const Tensor kept = make_tensor({n}, TensorOptions(DType::Bool, target.device()));
  binary(BinaryOp::Ne, target, ops::broadcast_to(ignore, {n}), kept);
  const Tensor kept_f = make_tensor({n}, logp.options());
  copy(kept_f, kept);
  reduce(ReduceOp::Sum, kept_f, {0}, count1);
  if (mean) binary(BinaryOp::Div, out, count, out);
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& grad_logp, int64_t ignore_index) {
  HG_BACKEND(grad, cpu::nll_loss_backward(grad, target, grad_logp, ignore_index),
             cuda_ops::nll_loss_backward(grad, target, grad_logp, ignore_index));
}

void cross_entropy_backward(const Tensor& grad, const Tensor& logp, const Tensor& target, const Tensor& gx,
                            int64_t ignore_index) {
  HG_BACKEND(logp, cpu::cross_entropy_backward(grad, logp, target, gx, ignore_index),
             cuda_ops::cross_entropy_backward(grad, logp, target, gx, ignore_index));
}

void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending) {
  HG_BACKEND(in, cpu::sort(in, values, indices, descending), cuda_ops::sort(in, values, indices, descending));
}
void take_along_dim_backward(const Tensor& g, const Tensor& indices, const Tensor& grad_in) {
  HG_BACKEND(g, cpu::take_along_dim_backward(g, indices, grad_in),
             cuda_ops::take_along_dim_backward(g, indices, grad_in));
}
void cumsum(const Tensor& in, const Tensor& out, bool reverse) {
  HG_BACKEND(in, cpu::cumsum(in, out, reverse), cuda_ops::cumsum(in, out, reverse));
}
void randperm(const Tensor& out) { HG_BACKEND(out, cpu::randperm(out), cuda_ops::randperm(out)); }
void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out, const char* op) {
  HG_BACKEND(in, cpu::gather(in, dim, index, out, op), cuda_ops::gather(in, dim, index, out));
}
void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode,
             const char* op) {
  HG_BACKEND(self, cpu::scatter(self, dim, index, src, mode, op), cuda_ops::scatter(self, dim, index, src, mode));
}

void uniform(const Tensor& out, double low, double high) {
  HG_BACKEND(out, cpu::uniform(out, low, high), cuda_ops::uniform(out, low, high));
}
void normal(const Tensor& out, double mean, double std) {
  HG_BACKEND(out, cpu::normal(out, mean, std), cuda_ops::normal(out, mean, std));
}
void randint(const Tensor& out, int64_t low, int64_t high) {
  HG_BACKEND(out, cpu::randint(out, low, high), cuda_ops::randint(out, low, high));
}

}  // namespace halfgrad::kernels
