#pragma once
// The backend kernel interface: what ops/ asks of a backend. Its entry points
// are written once, in kernels/kernel_list.h; this header declares them in
// halfgrad::kernels, kernels/cpu/cpu_kernels.h and kernels/cuda/cuda_kernels.h
// declare each backend's, and kernels/router.cpp sends every call to the backend
// of its tensors' device (the dtype is picked inside the backend). Here: the
// types the entries take, and the few helpers that are the same on every
// backend (kernels/common.cpp). Kernels write into `out` tensors that the op has
// allocated; they never allocate outputs themselves (linear_chain's saved state
// aside), never record autograd history and check nothing: ops/ checks first.
#include <cstdint>
#include <string>
#include <vector>

#include <halfgrad/core/generator.h>
#include <halfgrad/core/tensor.h>
#include <halfgrad/kernels/activation.h>

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
  Sin, Cos, Erf,
  Floor,  // integers: themselves
  Round,  // half to even (rint), as torch.round; integers: themselves
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

enum class ReduceOp : uint8_t { Sum, Mean, Max, ArgMax, Min, ArgMin };
inline bool is_arg_reduce(ReduceOp op) { return op == ReduceOp::ArgMax || op == ReduceOp::ArgMin; }
inline bool is_sum_reduce(ReduceOp op) { return op == ReduceOp::Sum || op == ReduceOp::Mean; }

using halfgrad::Activation;  // kernels/activation.h
using halfgrad::is_gelu;

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
// Where that backward stops: -1 when dx is wanted, else the lowest layer with a wanted dw or
// db (the layer count when none is). Layer i computes its input gradient only when i > this.
int64_t linear_chain_lowest(const Tensor& dx, const std::vector<ChainLayerGrad>& layers);

// Convolution with 1 to 3 spatial dims (ops/conv.cpp; CPU: kernels/cpu/conv_onednn.cpp on
// oneDNN, CUDA: kernels/cuda/cudnn_conv.cpp on cuDNN). Tensors are [N, C, *spatial]:
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

// Fused scaled-dot-product attention (ops/attention.cpp decides when; CUDA:
// kernels/cuda/cudnn_sdpa.cpp on cuDNN's graph API; the CPU has none). q
// [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev] share one dtype (float16 or
// bfloat16) and have stride 1 in their last dim; the scores are
// q k^T * scale in float32, `causal` masks position j > i (top-left aligned, as
// the math path), the softmax is float32 and the weights are rounded once to
// the dtype before the product with v. No attention mask, no dropout.
struct FusedAttention {
  double scale = 1.0;
  bool causal = false;
};

// nll_loss_reduced's CUDA path, from the other kernels: it runs on CPU tensors
// too, so the tests check it against the CPU loop on a machine without a GPU.
void nll_loss_reduced_by_kernels(const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                                 int64_t ignore_index, bool mean, const char* op = "nll_loss");

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

// The entry points, with their contracts (kernels/kernel_list.h).
#define HG_KERNEL(ret, name, params, args, device_of) ret name params;
#define HG_DEFAULT(...) = __VA_ARGS__
#include <halfgrad/kernels/kernel_list.h>
#undef HG_DEFAULT
#undef HG_KERNEL

}  // namespace halfgrad::kernels
