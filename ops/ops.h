#pragma once
// The public functional API (PyTorch's torch.* / torch.nn.functional.*).
// Every function here goes through dispatch::call (dispatch/dispatch.h).
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <halfgrad/core/generator.h>
#include <halfgrad/core/random.h>
#include <halfgrad/core/tensor.h>
#include <halfgrad/kernels/activation.h>
#include <halfgrad/kernels/numeric_settings.h>
#include <halfgrad/kernels/threads.h>
#include <halfgrad/ops/loss_options.h>
#include <halfgrad/ops/size_arg.h>
#include <halfgrad/ops/sort_ops.h>

namespace halfgrad {

// ---- factories --------------------------------------------------------------
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor arange(int64_t end, TensorOptions options = {});  // int64 unless a dtype is given
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor rand(const Shape& shape, TensorOptions options = {});   // uniform [0, 1)
Tensor randn(const Shape& shape, TensorOptions options = {});  // standard normal
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = {});  // int64 by default
// The same from a Generator (LibTorch's torch::rand(size, generator, options),
// Python's generator=g): its stream, not the global one; its device type must
// be the tensor's. std::nullopt: the global generator.
Tensor rand(const Shape& shape, std::optional<Generator> generator, TensorOptions options = {});
Tensor randn(const Shape& shape, std::optional<Generator> generator, TensorOptions options = {});
Tensor randint(int64_t low, int64_t high, const Shape& shape, std::optional<Generator> generator,
               TensorOptions options = {});
// From values (row-major); an empty shape means 1-d of values.size().
Tensor tensor(const std::vector<float>& values, const Shape& shape = {}, TensorOptions options = {});
Tensor tensor(const std::vector<double>& values, const Shape& shape = {},
              TensorOptions options = TensorOptions(DType::Float64));
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape = {},
              TensorOptions options = TensorOptions(DType::Int64));
// float16/bfloat16 host values (their bits are kept exactly).
Tensor tensor(const std::vector<Half>& values, const Shape& shape = {},
              TensorOptions options = TensorOptions(DType::Float16));
Tensor tensor(const std::vector<BFloat16>& values, const Shape& shape = {},
              TensorOptions options = TensorOptions(DType::BFloat16));
Tensor tensor(const std::vector<bool>& values, const Shape& shape = {}, TensorOptions options = TensorOptions(DType::Bool));
// Braced lists, as LibTorch's torch::tensor({1.5, 2.5}): floating literals give
// float32 (the default dtype), integer literals int64, true/false bool.
Tensor tensor(std::initializer_list<double> values, const Shape& shape = {}, TensorOptions options = {});
Tensor tensor(std::initializer_list<int> values, const Shape& shape = {},
              TensorOptions options = TensorOptions(DType::Int64));
Tensor tensor(std::initializer_list<bool> values, const Shape& shape = {},
              TensorOptions options = TensorOptions(DType::Bool));
// A tensor over memory the caller owns, as LibTorch's torch::from_blob: no copy;
// `data` holds options.dtype() elements (float16/bfloat16 bits included) on
// options.device(), laid out by `strides` (contiguous when omitted), and must
// outlive the tensor and every view of it. `deleter`, when given, is called
// with `data` when the last of them dies. requires_grad in the options is an
// Error (as in LibTorch, make the leaf with .requires_grad_()).
Tensor from_blob(void* data, const Shape& shape, TensorOptions options = {});
Tensor from_blob(void* data, const Shape& shape, const Shape& strides, TensorOptions options = {});
Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> deleter, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

// ---- elementwise (broadcasting; tensor-tensor ops promote dtypes as PyTorch) --
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// A scalar takes the tensor's dtype (it does not promote float16 to float32).
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor relu(const Tensor& a);
// approximate: "none" (exact erf form, PyTorch's default) or "tanh"
// (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the form cuBLASLt fuses into a GEMM).
Tensor gelu(const Tensor& a, std::string_view approximate = "none");
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
Tensor erf(const Tensor& a);
// floor, round (half to even, as torch.round) and sign (-1, 0 or 1; 0 for +-0
// and, as PyTorch and unlike NumPy, for NaN) keep integer tensors' dtype; their
// gradient is 0.
Tensor floor(const Tensor& a);
Tensor round(const Tensor& a);
Tensor sign(const Tensor& a);
// MobileNetV3's activations, as PyTorch (NaN propagates; int64 only for relu6):
//   hardswish(x) = x * relu6(x + 3) / 6, hardsigmoid(x) = relu6(x + 3) / 6,
//   relu6(x) = min(max(x, 0), 6).
// Gradients at the kinks as PyTorch's scalar CPU and CUDA kernels: hardswish'
// is 0 below -3, x / 3 + 0.5 on [-3, 3] (so -0.5 at -3 and 1.5 at 3), 1 above;
// hardsigmoid' is 1/6 on (-3, 3), else 0; relu6' is 1 on (0, 6), else 0 (a NaN
// input passes the gradient through relu6 and hardswish, 0 for hardsigmoid).
Tensor hardswish(const Tensor& a);
Tensor hardsigmoid(const Tensor& a);
Tensor relu6(const Tensor& a);
// x > 0 ? x : weight * x, weight a scalar (0-d or [1]) or [C] with C = x.shape[1]
// (a 0-d or 1-d x has one channel, as PyTorch). Both floating, one dtype (autocast
// runs it in lower precision, as PyTorch 2's autocast lists). The weight's
// gradient sums over every dim but the channel dim.
Tensor prelu(const Tensor& x, const Tensor& weight);
Tensor clamp(const Tensor& a, std::optional<double> min, std::optional<double> max);
// Tensor bounds (broadcasting, dtypes promote): minimum(maximum(x, min), max),
// so min > max gives max; a NaN in x or a bound gives NaN. The gradient goes to
// x where it lies in [min, max], to min where x < min (and min < max), to max
// where x > max (or max < min), as PyTorch.
Tensor clamp(const Tensor& a, const std::optional<Tensor>& min, const std::optional<Tensor>& max);
Tensor clamp_min(const Tensor& a, double min);
Tensor clamp_min(const Tensor& a, const Tensor& min);
Tensor clamp_max(const Tensor& a, double max);
Tensor clamp_max(const Tensor& a, const Tensor& max);
// remainder: Python's %, the sign of the divisor; fmod: C's fmod, the sign of the
// dividend. Integers too (an integer divisor of 0 is an Error on the CPU; on CUDA
// it gives 0). Gradients: a: g; b: -g * floor(a / b) (remainder), -g * trunc(a / b) (fmod).
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, double b);
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, double b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- reductions --------------------------------------------------------------
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, const Shape& dims, bool keepdim = false);
// Max/min (and argmax/argmin, amax/amin): a NaN wins (the first NaN); ties
// give the first index. Bool inputs are an Error (cast them).
Tensor max(const Tensor& a);  // of all elements; the gradient splits evenly between ties
Tensor min(const Tensor& a);
// LibTorch's torch::max(x, dim): (values, int64 indices); the gradient goes to the index.
std::tuple<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a);  // of the flattened tensor
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& a);
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim = false);
// Values only over several dims (empty: all); the gradient splits evenly between ties.
Tensor amax(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
// log(sum(exp(x))) over dims (empty: all), max-shifted; float16/bfloat16 compute
// in float32 and round once; an all -inf slice gives -inf; integers give float32.
Tensor logsumexp(const Tensor& a, const Shape& dims, bool keepdim = false);
// torch.linalg.vector_norm: (sum |x|^p)^(1/p) over dims (empty: all); p = inf is
// max |x|, -inf min |x|, 0 the count of nonzeros. Floating inputs only;
// float16/bfloat16 accumulate in float32 and round once.
Tensor norm(const Tensor& a, double p = 2.0, const Shape& dims = {}, bool keepdim = false);
// torch.var / torch.std over dims (empty: all): sum((x - mean)^2) / (N - correction),
// correction 1 (Bessel's, PyTorch's default) or 0 (the population variance); with
// N <= correction the result is inf or NaN, as PyTorch. Floating inputs only;
// float16/bfloat16 compute in float32 and round once.
Tensor var(const Tensor& a, const Shape& dims = {}, double correction = 1.0, bool keepdim = false);
Tensor std(const Tensor& a, const Shape& dims = {}, double correction = 1.0, bool keepdim = false);
// Logical reductions: bool out; nonzero (and NaN) is true. Empty: all is true, any false.
Tensor all(const Tensor& a);
Tensor all(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor any(const Tensor& a);
Tensor any(const Tensor& a, int64_t dim, bool keepdim = false);
// torch.equal: same shape and equal values (after dtype promotion; NaN != NaN). Reads to the host.
bool equal(const Tensor& a, const Tensor& b);
// |a - b| <= atol + rtol * |b| elementwise (broadcasting); inf equals inf of the same sign;
// NaN is close to NaN only with equal_nan.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// all(isclose(...)), read to the host.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
Tensor isnan(const Tensor& a);
Tensor isinf(const Tensor& a);
Tensor isfinite(const Tensor& a);
// Sum a broadcast gradient back down to `shape` (the inverse of expand).
Tensor sum_to(const Tensor& a, const Shape& shape);

// ---- linear algebra -------------------------------------------------------------
Tensor mm(const Tensor& a, const Tensor& b);    // [m,k] @ [k,n]
Tensor bmm(const Tensor& a, const Tensor& b);   // [B,m,k] @ [B,k,n]
Tensor matmul(const Tensor& a, const Tensor& b);  // 1-d, 2-d and batched, as torch.matmul
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());  // x @ W^T + b
// Linear followed by an activation, as one op (ops "linear_relu", "linear_gelu",
// "linear_gelu_tanh"): one GEMM with the bias and the activation in its epilogue;
// exact GELU (cuBLASLt fuses only the tanh form) is the GEMM then one pass.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation);
// A chain of Linear layers as one op ("linear_chain", one autograd node):
// h = activations[i](linear(h, weights[i], biases[i])) for each layer i in turn.
// biases[i] may be undefined (no bias); activations[i] may be None. On CUDA each
// layer is one GEMM with its bias and activation in the epilogue, and backward
// applies each hidden layer's dReLU/dGELU and bias gradient in the epilogue of the
// layer above's dx GEMM (no elementwise pass for ReLU and tanh GELU).
// nn::Sequential runs Linear + ReLU/GELU runs of two or more layers this way.
Tensor linear_chain(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                    const std::vector<Activation>& activations);

// set_float32_matmul_precision, set_cudnn_allow_tf32: kernels/numeric_settings.h.

// ---- activations and losses (torch.nn.functional) ----------------------------------
// Reduction and the loss options (CrossEntropyOptions, ...): ops/loss_options.h.
// Each loss has a positional form (reduction first, as before) and an options
// form; a call with two arguments or a braced/designated list takes the
// options form: cross_entropy(x, t, {.label_smoothing = 0.1}).
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);
// Mean divides by the summed weights of the targets that are not ignore_index
// (their count without a weight); NaN when that is 0, as in PyTorch.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index = -100);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NLLLossOptions& options = {});
// Class-index targets int64 [N]: nll_loss of log_softmax, with label smoothing
// (1 - eps) * nll + eps / C * (the weighted sum of -log p over the classes,
// reduced with the same divisor). Probability targets (floating, the input's
// shape [N, C]): -sum_c w_c t_c log_softmax_c per row, smoothed as
// t (1 - eps) + eps / C; mean divides by N; ignore_index must stay negative.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index = -100);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// The elementwise losses broadcast input and target as PyTorch does, with
// PyTorch's warning (once per process and op, on stderr) when the shapes differ.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction);
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& options = {});
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction);
Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossOptions& options = {});
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta; beta = 0 is l1_loss.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta = 1.0);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossOptions& options = {});
// On probabilities; banned under CUDA autocast (use the with-logits form).
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction);
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, const BinaryCrossEntropyOptions& options = {});
// (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x), times weight.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const BCEWithLogitsOptions& options = {});
Tensor dropout(const Tensor& a, double p, bool training);

// ---- joining ----------------------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

}  // namespace halfgrad

// index_select, gather, scatter, masked_fill, where with scalars, one_hot.
#include <halfgrad/ops/indexing_ops.h>
// The operators (+ - * / == < += ...) on tensors.
#include <halfgrad/ops/operators.h>
// conv1d ... conv_transpose3d.
#include <halfgrad/ops/conv_ops.h>
// batch_norm, max_pool2d, avg_pool2d, adaptive_avg_pool2d.
#include <halfgrad/ops/norm_pool_ops.h>
// layer_norm, embedding, scaled_dot_product_attention.
#include <halfgrad/ops/transformer_ops.h>
// scaled_mm, fp8_quantize, fp8_update_scales.
#include <halfgrad/ops/fp8_ops.h>
