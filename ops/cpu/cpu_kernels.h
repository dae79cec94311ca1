#pragma once
// The CPU backend: one function per entry of ops/kernels.h (same contracts).
#include <halfgrad/ops/kernels.h>

namespace halfgrad::cpu {

void unary(kernels::UnaryOp op, const Tensor& in, const Tensor& out, kernels::UnaryParams p);
void binary(kernels::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
void fill(const Tensor& out, double value);
void copy(const Tensor& dst, const Tensor& src);
void reduce(kernels::ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out,
            const Tensor& indices = Tensor());
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta, bool relu = false);
void linear_act(const Tensor& x2, const Tensor& w, const Tensor& bias, kernels::Activation act, const Tensor& out,
                const Tensor& pre);
void linear_act_backward(const Tensor& g, const Tensor& x2, const Tensor& w, kernels::Activation act,
                         const Tensor& saved, const Tensor& dx, const Tensor& dw, const Tensor& db);
// linear_act_backward's two halves around its dx GEMM: gz = g * act'(.) (g itself
// for no activation), then dw = gz^T @ x2 and db = sum(gz, 0) (each undefined: not wanted).
Tensor activation_backward(const Tensor& g, kernels::Activation act, const Tensor& saved);
void linear_param_grads(const Tensor& gz, const Tensor& x2, const Tensor& dw, const Tensor& db);
std::vector<Tensor> linear_chain(const std::vector<Tensor>& h, const std::vector<Tensor>& w,
                                 const std::vector<Tensor>& b, const std::vector<kernels::Activation>& act, bool keep);
void linear_chain_backward(const Tensor& g, const std::vector<Tensor>& h, const std::vector<kernels::Activation>& act,
                           const std::vector<Tensor>& saved, const Tensor& dx,
                           std::vector<kernels::ChainLayerGrad>& layers);
void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const kernels::ConvGeometry& g,
                  const Tensor& y);
void conv_backward_data(const Tensor& dy, const Tensor& w, const kernels::ConvGeometry& g, const Tensor& dx);
void conv_backward_weight(const Tensor& dy, const Tensor& x, const kernels::ConvGeometry& g, const Tensor& dw,
                          const Tensor& db);
void batch_norm_stats(const Tensor& x, double eps, const Tensor& mean, const Tensor& invstd,
                      const Tensor& running_mean, const Tensor& running_var, double momentum);
void batch_norm_training(const Tensor& x, double eps, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                         const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum,
                         const Tensor& y);
void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, const Tensor& y);
void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias);
void max_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y, const Tensor& indices);
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const kernels::Pool2dGeometry& geo,
                         const Tensor& dx);
void avg_pool2d(const Tensor& x, const kernels::Pool2dGeometry& g, const Tensor& y);
void avg_pool2d_backward(const Tensor& g, const kernels::Pool2dGeometry& geo, const Tensor& dx);
void adaptive_avg_pool2d(const Tensor& x, const Tensor& y);
void adaptive_avg_pool2d_backward(const Tensor& g, const Tensor& dx);
void softmax(const Tensor& in, const Tensor& out, bool log);
void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in, bool log);
void nll_loss(const Tensor& logp, const Tensor& target, const Tensor& out, int64_t ignore_index, const char* op);
void nll_loss_reduced(const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                      int64_t ignore_index, bool mean, const char* op);
void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& grad_logp, int64_t ignore_index);
void cross_entropy_backward(const Tensor& grad, const Tensor& logp, const Tensor& target, const Tensor& gx,
                            int64_t ignore_index);
void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending);
void take_along_dim_backward(const Tensor& g, const Tensor& indices, const Tensor& grad_in);
void cumsum(const Tensor& in, const Tensor& out, bool reverse);
void randperm(const Tensor& out);
void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out, const char* op);
void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, kernels::ScatterMode mode,
             const char* op);
void uniform(const Tensor& out, double low, double high);
void normal(const Tensor& out, double mean, double std);
void randint(const Tensor& out, int64_t low, int64_t high);

// Element conversion as in PyTorch: through the compute type, bool is x != 0,
// float to int64 by float_to_int64 (core/dtype.h).
template <typename D, typename S>
inline D convert(S x) {
  if constexpr (std::is_same_v<D, S>) {
    return x;
  } else if constexpr (std::is_same_v<D, bool>) {
    return static_cast<acc_t<S>>(x) != acc_t<S>(0);
  } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
    return D(static_cast<float>(static_cast<acc_t<S>>(x)));
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<acc_t<S>>) {
    return float_to_int64(static_cast<acc_t<S>>(x));  // D is int64: NaN, inf, 1e30 are defined too
  } else {
    return static_cast<D>(static_cast<acc_t<S>>(x));
  }
}

}  // namespace halfgrad::cpu
