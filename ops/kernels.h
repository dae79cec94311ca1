#pragma once
// The backend kernel interface: what ops/ asks of a backend. Each entry
// point picks ops/cpu or ops/cuda by the tensors' device (ops/kernels.cpp)
// and the dtype inside the backend. Kernels write into `out` tensors that
// the op has allocated; they never allocate outputs themselves and never
// record autograd history.
#include <cstdint>
#include <vector>

#include <halfgrad/core/tensor.h>
#include <halfgrad/ops/activation.h>

namespace halfgrad::kernels {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Abs, Relu, Gelu, Sigmoid, Tanh,
  Clamp,      // p.a = min (NaN: none), p.b = max (NaN: none)
  PowScalar,  // x ^ p.a
  Sign,
  GeluTanh,  // gelu(approximate="tanh")
  Hardswish,    // x * relu6(x + 3) / 6
  Hardsigmoid,  // relu6(x + 3) / 6
  Relu6,        // min(max(x, 0), 6) (NaN stays NaN)
};
struct UnaryParams {
  double a = 0, b = 0;
};

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,  // out dtype = input dtype
  // Backward formulas, one rounding each (a = the incoming gradient):
  ReluBackward,      // b = relu output: b <= 0 ? 0 : a (a NaN output passes the gradient, as PyTorch)
  SigmoidBackward,   // b = sigmoid output: a * (1 - b) * b
  TanhBackward,      // b = tanh output: a * (1 - b * b)
  GeluBackward,      // b = gelu input: a * gelu'(b)
  GeluTanhBackward,  // b = gelu input: a * gelu_tanh'(b)
  HardswishBackward,    // b = input: b < -3 ? 0 : b <= 3 ? a * (b / 3 + 0.5) : a (PyTorch's scalar and CUDA kernels)
  HardsigmoidBackward,  // b = input: -3 < b < 3 ? a / 6 : 0
  Relu6Backward,        // b = input: b <= 0 || b >= 6 ? 0 : a (a NaN input passes the gradient, as hardtanh_backward)
  Prelu,                // a = input, b = weight (broadcast): a > 0 ? a : b * a
  Remainder,         // Python's %: the sign of b (integers: b == 0 gives 0; the CPU op checks first)
  Fmod,              // C's fmod: the sign of a (integers: b == 0 gives 0)
  Eq, Ne, Lt, Le, Gt, Ge,                     // out dtype = bool
};

// out = op(in). Same shape; in and out share a dtype.
void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams p = {});
// out = op(a, b); a and b are (possibly expanded) views of out's shape with one dtype.
// Add and Sub compute a + alpha * b and a - alpha * b.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha = 1.0);
// out = cond ? a : b, all views of out's shape.
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
void fill(const Tensor& out, double value);
// dst = src element by element: same shape, any dtypes, any devices, any strides.
void copy(const Tensor& dst, const Tensor& src);

enum class ReduceOp : uint8_t { Sum, Mean, Max, ArgMax, Min, ArgMin };
// Reduce `in` over `dims` (sorted, non-negative, unique) into `out`, whose
// shape is in's shape with those dims set to 1. Float inputs accumulate in
// float32 (float64 for float64). ArgMax/ArgMin write int64 indices (one dim
// only). Max/Min/ArgMax/ArgMin: a NaN wins (the first NaN), ties go to the
// first index.
inline bool is_arg_reduce(ReduceOp op) { return op == ReduceOp::ArgMax || op == ReduceOp::ArgMin; }
inline bool is_sum_reduce(ReduceOp op) { return op == ReduceOp::Sum || op == ReduceOp::Mean; }
// Max/Min with `indices` defined (int64, contiguous, out's shape): the same
// pass also writes each result's position in its reduced row (max(x, dim)).
void reduce(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out,
            const Tensor& indices = Tensor());

// out[b] = a[b] @ b[b] (+ bias) (+ beta * out): a [.., m, k], b [.., k, n], out [.., m, n]
// with 2 or 3 dims (the batch dim of a or b may be stride 0); any strides for
// a and b, rows of out contiguous. Accumulates in float32 (float64 for float64).
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias = Tensor(), float beta = 0.f);

// Linear + activation in one GEMM (the bias and activation in its epilogue):
// out = act(x2 @ w^T + bias), x2 [N, in], w [out, in], bias [out] or undefined.
// `pre`, when defined ([N, out], contiguous), receives x2 @ w^T + bias: the
// GELUs' backward needs it (ReLU's needs only the output); undefined when no
// backward will run. GELU is the exact (erf) form, GELUTanh PyTorch's
// approximate="tanh", the one cuBLASLt fuses into the GEMM.
using halfgrad::Activation;  // ops/activation.h
using halfgrad::is_gelu;
void linear_act(const Tensor& x2, const Tensor& w, const Tensor& bias, Activation act, const Tensor& out,
                const Tensor& pre);
// Its backward: gz = g * act'(.), then dx = gz @ w, dw = gz^T @ x2, db = sum(gz, 0)
// (each of dx, dw, db undefined: not wanted). `saved` is the output for ReLU, `pre` for the GELUs.
void linear_act_backward(const Tensor& g, const Tensor& x2, const Tensor& w, Activation act, const Tensor& saved,
                         const Tensor& dx, const Tensor& dw, const Tensor& db);

// A chain of Linear layers as one op (linear_chain): h[i+1] = act[i](h[i] @ w[i]^T + b[i]).
// h holds layers + 1 tensors: h[0] = x2 [N, in], h[i+1] [N, out_i] contiguous, filled here.
// With `keep` (a backward will run) returns, per layer, what its backward needs besides h:
// z for the GELUs and, on CUDA, cuBLASLt's ReLU bit mask for a hidden ReLU layer. That is
// the backend's own state (the one thing a kernel allocates): pass it back unchanged.
std::vector<Tensor> linear_chain(const std::vector<Tensor>& h, const std::vector<Tensor>& w,
                                 const std::vector<Tensor>& b, const std::vector<Activation>& act, bool keep);
// One layer of that backward. The kernel holds the only handle of the weight w
// and drops it after the layer's last GEMM that reads it; only then does it
// make dw (when wanted, in dw_dtype), so a layer's weight copy (autocast's
// bfloat16 weight) and its float32 gradient are never alive together. db is
// made by the caller (undefined: not wanted).
struct ChainLayerGrad {
  Tensor w;
  bool dw_wanted = false;
  DType dw_dtype = DType::Float32;
  Tensor dw, db;
  // Makes dw (when wanted) in w's shape, on its device (CUDA: before the GEMM that reads both).
  void make_dw() { make_dw(w.shape(), w.device()); }
  // After the layer's last read of w: drops it first, then makes dw, which can have its memory.
  void weight_read() {
    const Shape shape = w.shape();
    const Device device = w.device();
    w = Tensor();
    make_dw(shape, device);
  }

 private:
  void make_dw(const Shape& shape, Device device) {
    if (dw_wanted) dw = make_tensor(shape, TensorOptions(dw_dtype).device(device));
  }
};
// Its backward, top down, from g = dL/dh[layers]: dx = dL/dh[0] (undefined: not wanted) and
// each layer's dw, db. h[layers] is read only for a ReLU on the last layer. Layers below the
// lowest wanted gradient do no work (their h[i] and w may be undefined). On CUDA each hidden
// layer's dReLU/dGELU and bias gradient ride in the epilogue of the dx GEMM of the layer above.
void linear_chain_backward(const Tensor& g, const std::vector<Tensor>& h, const std::vector<Activation>& act,
                           const std::vector<Tensor>& saved, const Tensor& dx, std::vector<ChainLayerGrad>& layers);
// Where that backward stops: -1 when dx is wanted, else the lowest layer with a wanted dw or
// db (the layer count when none is). Layer i computes its input gradient only when i > this.
int64_t linear_chain_lowest(const Tensor& dx, const std::vector<ChainLayerGrad>& layers);

// Convolution with 1 to 3 spatial dims (ops/conv.cpp; CPU: ops/cpu/conv.cpp on
// oneDNN, CUDA: ops/cuda/conv.cu on cuDNN). Tensors are [N, C, *spatial]:
//   x [N, C_in, *in], w [C_out, C_in / groups, *k], y [N, C_out, *out], bias [C_out]
// with, per spatial dim i (floor division; the op has checked every size > 0):
//   out[i] = (in[i] + pad_before[i] + pad_after[i] - dilation[i] * (k[i] - 1) - 1) / stride[i] + 1
// Transposed convolutions are these three run the other way round (conv_transpose's
// forward is conv_backward_data). All tensors share one dtype (float32, float16,
// bfloat16; float64 on the CPU); products accumulate in float32 (float64 for
// float64) and each output rounds once. Layouts: each tensor is dense in NC*
// order (contiguous) or channels-last (C innermost); the op allocates outputs in
// its input's layout.
struct ConvGeometry {
  int nd = 2;  // spatial dims: 1, 2 or 3
  int64_t groups = 1;
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t pad_before[3] = {0, 0, 0}, pad_after[3] = {0, 0, 0};
};
// Negative padding: a transposed convolution whose output_padding is >= its stride
// (legal while < dilation) has pad_after < 0 in the geometry of its convolution
// (ops/conv.cpp): x's last elements are then read by no output (they get the bias
// only). The CPU loops take that as it is; cuDNN takes no negative padding (PyTorch
// never sends it any), so the CUDA backend runs on the part of x that is read,
// x[start, start + size) per spatial dim, with that padding 0 (`g`): the same out
// sizes and values. `cropped`: some padding was negative. `empty`: no output reads
// x at all (every tap lands in padding): y = 0 (+ bias), dx = 0, dw = 0.
struct ConvCrop {
  ConvGeometry g;  // pad_before, pad_after >= 0
  int64_t start[3] = {0, 0, 0}, size[3] = {0, 0, 0};
  bool cropped = false, empty = false;
};
// in: x's g.nd spatial sizes.
ConvCrop crop_negative_padding(const ConvGeometry& g, const int64_t* in);
// y = conv(x, w) + bias (bias undefined: none). y is fully overwritten.
void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeometry& g, const Tensor& y);
// dx = the gradient of conv(x, w) with respect to x for the output gradient dy
// (dx's shape is x's; elements no output reads get 0). dx is fully overwritten.
void conv_backward_data(const Tensor& dy, const Tensor& w, const ConvGeometry& g, const Tensor& dx);
// dw (and db = the sum of dy over N and the spatial dims, when defined) for the
// output gradient dy of conv(x, w). Both are fully overwritten. dw and db share
// one dtype: dy's, or on the CPU float32 for a bfloat16 dy (the sums as they
// are, not rounded: a weight autocast cast from float32).
void conv_backward_weight(const Tensor& dy, const Tensor& x, const ConvGeometry& g, const Tensor& dw,
                          const Tensor& db);

// Batch normalisation and 2-d pooling (ops/norm_pool.cpp; CPU: ops/cpu/batch_norm.cpp and ops/cpu/pool.cpp,
// CUDA: ops/cuda/batch_norm.cu and ops/cuda/pool.cu; per-element math shared in
// ops/norm_pool_math.h).
//
// Batch norm: x, g, y, dx are dense [N, C, S] (S: the product of the spatial
// dims, 1 for [N, C]) in one floating dtype T and one layout: row-major, or
// channels-last ([N, S, C] in memory). Every per-channel tensor ([C]:
// mean, invstd, weight, bias, running stats, dweight, dbias) is contiguous in the
// statistics dtype A = float64 for float64 x, else float32: the op converts
// weights and running stats before and after. Sums accumulate in A (the CPU:
// float32 sums of each row of S, added up in float64); each output rounds once.
//
// The batch statistics: mean[c] and invstd[c] = 1 / sqrt(var[c] + eps) with the
// biased variance over N * S elements (two passes: the mean, then the squared
// deviations). When running_mean/running_var are defined, they are updated in
// place: r = (1 - momentum) * r + momentum * stat, with the unbiased variance
// var * n / (n - 1) for running_var (n = N * S > 1; the op checks). N * S == 0:
// nothing is read or written.
void batch_norm_stats(const Tensor& x, double eps, const Tensor& mean, const Tensor& invstd,
                      const Tensor& running_mean, const Tensor& running_var, double momentum);
// Training: batch_norm_stats, then batch_norm_forward, in one call (the CPU runs
// channels-last float32/bfloat16 as one oneDNN primitive).
void batch_norm_training(const Tensor& x, double eps, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                         const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum,
                         const Tensor& y);
// y = (x - mean[c]) * invstd[c] * weight[c] + bias[c] (weight undefined: 1, bias undefined: 0).
void batch_norm_forward(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, const Tensor& y);
// The backward for the output gradient g, each result only when defined:
//   dbias[c] = sum g,  dweight[c] = invstd[c] * sum g * (x - mean[c]),
//   dx = w * invstd * (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean)))   (training:
//        the statistics were the batch's), or dx = w * invstd * g (eval: running statistics).
void batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, bool training, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias);

// Pooling over the last two dims of [P, H, W] planes (P = N * C) into
// [P, OH, OW], both dense in one layout: row-major, or channels-last for 4-d
// tensors (math::PlaneLayout); indices are in the output's layout; the op has computed OH, OW by PyTorch's rules and checked them.
// Window (oh, ow) starts at (oh * stride - padding) and has kernel taps spaced by
// dilation (max pooling only; average pooling has dilation 1). Float dtypes;
// half types compute in float32, float64 in float64; each output rounds once.
struct Pool2dGeometry {
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  bool count_include_pad = true;  // avg: divide by the window's size inside the padded input
  int64_t divisor_override = 0;   // avg: divide by this instead (0: none)
};
// y = the window's max, a NaN if the window holds one (the first NaN's index);
// ties go to the first tap in row-major order. indices (int64, [P, OH, OW]) get
// the argmax's flat position h * W + w in its plane (PyTorch's); a window with
// no tap inside the input gives -inf and index -1.
void max_pool2d(const Tensor& x, const Pool2dGeometry& g, const Tensor& y, const Tensor& indices);
// dx[p, i] = sum of g[p, o] over the outputs o whose index is i (dx fully
// overwritten; an index outside the plane is skipped).
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Pool2dGeometry& geo, const Tensor& dx);
// PyTorch's avg_pool2d: the window clipped to the padded input gives the size
// counted with count_include_pad, clipped to the input the one without.
void avg_pool2d(const Tensor& x, const Pool2dGeometry& g, const Tensor& y);
void avg_pool2d_backward(const Tensor& g, const Pool2dGeometry& geo, const Tensor& dx);
// Adaptive average pooling: output (oh, ow) averages rows floor(oh * H / OH) to
// ceil((oh + 1) * H / OH) (exclusive), and the same for columns.
void adaptive_avg_pool2d(const Tensor& x, const Tensor& y);
void adaptive_avg_pool2d_backward(const Tensor& g, const Tensor& dx);

// Softmax over the last dim of a contiguous tensor (log: log-softmax).
void softmax(const Tensor& in, const Tensor& out, bool log);
// grad_in from grad_out and the forward output y: softmax: y * (g - sum(g*y));
// log-softmax: g - exp(y) * sum(g).
void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in, bool log);
// Per-sample negative log-likelihood: out[i] = -logp[i, target[i]] (0 where
// target == ignore_index). logp [N, C] contiguous, target int64 [N]. A target
// outside [0, C) other than ignore_index is an Error naming it.
// `op` names the user's op in the out-of-range message (nll_loss, cross_entropy).
void nll_loss(const Tensor& logp, const Tensor& target, const Tensor& out, int64_t ignore_index,
              const char* op = "nll_loss");
// The reduced loss in one call: out (0-d, logp's dtype) = the sum of
// -logp[i, target[i]] over the samples whose target is not ignore_index,
// divided by their count when `mean` (NaN when every target is ignored, as
// in PyTorch); count (0-d, logp's dtype) receives that count, for backward.
// The CPU runs one loop (accumulating in double); CUDA runs the per-sample
// kernel and reductions (no host sync). Targets are checked as nll_loss does.
void nll_loss_reduced(const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                      int64_t ignore_index, bool mean, const char* op = "nll_loss");
// nll_loss_reduced's CUDA path, from the other kernels: it runs on CPU tensors
// too, so the tests check it against the CPU loop on a machine without a GPU.
void nll_loss_reduced_by_kernels(const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                                 int64_t ignore_index, bool mean, const char* op = "nll_loss");
// grad_logp[i, target[i]] = -grad[i] (other entries 0). grad [N], any stride
// (0: a reduced loss's one gradient, broadcast), grad_logp [N, C].
void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& grad_logp, int64_t ignore_index);
// cross_entropy's input gradient from its log-probabilities logp [N, C] in
// one pass: gx = softmax - one-hot, each row times its grad (grad [N], any
// stride, 0 for a reduced loss); 0 in a row whose target is ignore_index.
// What nll_loss_backward then log_softmax_backward give, without the one-hot tensor.
void cross_entropy_backward(const Tensor& grad, const Tensor& logp, const Tensor& target, const Tensor& gx,
                            int64_t ignore_index);

// Stable sort of each row of the contiguous [rows, n] `in` (n: its last dim)
// into contiguous `values` (in's dtype) and int64 `indices` of in's shape:
// ascending (descending) with NaN the largest value and all NaNs equal, -0.0
// equal to +0.0, ties in their original order. values are in's elements, bit
// for bit (NaN payloads, the sign of zero).
void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending);
// The backward of taking values along the last dim at distinct positions (sort,
// topk): grad_in[r, indices[r, j]] = g[r, j]. g and int64 indices contiguous
// [rows, k], grad_in contiguous [rows, n] of g's dtype, zero-filled by the
// caller. Indices must be distinct within a row (plain stores, no atomics); an
// index outside [0, n) is skipped (never written out of bounds).
void take_along_dim_backward(const Tensor& g, const Tensor& indices, const Tensor& grad_in);
// Inclusive prefix sum of each row of the contiguous [rows, n] `in` into `out`
// (same shape and dtype); reverse: from the end of the row (out[j] = sum of
// in[j..n-1]). float32 and the half types accumulate in float32 (the CPU: float32
// in float64), float64 in float64, int64 in int64; each output rounds once.
void cumsum(const Tensor& in, const Tensor& out, bool reverse);
// A random permutation of 0..n-1 into the contiguous int64 `out` [n] from its
// device's generator.
void randperm(const Tensor& out);
// Gather and scatter along `dim` (ops/indexing.cpp). `index` (int64), `in`/`out`
// and `src` have the same number of dims (>= 1); the loop runs over index's
// shape (any strides; an expanded index gives index_select and index_add):
//   gather:  out[p] = in[p with p[dim] = index[p]]           (out has index's shape)
//   scatter: self[p with p[dim] = index[p]] = src[p]          (Assign; in place)
//                                          += src[p]          (Add)
// Assign/gather: any dtype. Add: float32, float64, int64 (the op accumulates
// half types in a float32 copy). A repeated index under Assign: the last write
// wins on the CPU, any one of them on CUDA. Index range: the CPU checks every
// index before writing anything (an Error naming `op`, the dim, the index and
// the valid range); CUDA cannot raise without a sync, so there an out-of-range
// index is skipped by scatter and gives NaN (0 for integer/bool) in gather:
// the kernels never touch memory out of bounds.
enum class ScatterMode : uint8_t { Assign, Add };
void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out, const char* op);
void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode,
             const char* op);

// Random fills of a contiguous `out` from its device's generator (core/random.h).
void uniform(const Tensor& out, double low, double high);
void normal(const Tensor& out, double mean, double std);
void randint(const Tensor& out, int64_t low, int64_t high);

}  // namespace halfgrad::kernels
