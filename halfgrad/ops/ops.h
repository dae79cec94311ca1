#pragma once
// The public functional API (PyTorch's torch.* / torch.nn.functional.*).
// Every function here goes through dispatch::call (ops/dispatch.h).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <halfgrad/core/random.h>
#include <halfgrad/core/tensor.h>
#include <halfgrad/ops/activation.h>

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
// From values (row-major); an empty shape means 1-d of values.size().
Tensor tensor(const std::vector<float>& values, const Shape& shape = {}, TensorOptions options = {});
Tensor tensor(const std::vector<double>& values, const Shape& shape = {},
              TensorOptions options = TensorOptions(DType::Float64));
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape = {},
              TensorOptions options = TensorOptions(DType::Int64));
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
Tensor clamp(const Tensor& a, std::optional<double> min, std::optional<double> max);
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
Tensor max(const Tensor& a);  // of all elements
Tensor max(const Tensor& a, int64_t dim, bool keepdim = false);  // values; argmax gives the indices
Tensor argmax(const Tensor& a);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
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

// PyTorch's torch.set_float32_matmul_precision: "highest" (the default) keeps
// float32 GEMMs exact; "high" or "medium" let CUDA use TF32 tensor cores
// (~1e-3 relative error). Process-wide; the CPU GEMM is always exact.
void set_float32_matmul_precision(std::string_view precision);
std::string get_float32_matmul_precision();
bool float32_matmul_allows_tf32();

// ---- activations and losses (torch.nn.functional) ----------------------------------
enum class Reduction { Mean, Sum, None };
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// On probabilities; banned under CUDA autocast (use the with-logits form).
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::Mean);
Tensor dropout(const Tensor& a, double p, bool training);

// ---- joining ----------------------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

}  // namespace halfgrad

// index_select, gather, scatter, masked_fill, where with scalars, one_hot.
#include <halfgrad/ops/indexing_ops.h>
// The operators (+ - * / == < += ...) on tensors.
#include <halfgrad/ops/operators.h>
