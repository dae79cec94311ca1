#pragma once
// The CUDA matrix multiply: cuBLASLt at Tensor level. A plain C++ header (no
// CUDA includes) so host code built by g++ (kernels/router.cpp, tests) can call
// it; kernels/cuda/gemm.cu implements it.
//
// Layout: halfgrad tensors are row-major, cuBLAS is column-major. A row-major
// [m, n] matrix with row stride ld is the column-major [n, m] matrix with the
// same ld, so C = A @ B runs as C^T = B^T @ A^T: cuBLAS's "A" is our B, its
// "B" is our A, and no data moves. A transposed view (row stride 1) becomes
// CUBLAS_OP_T on the same memory, so x @ w.t() never copies w.
//
// Numerics: float32, float16 and bfloat16 accumulate in float32
// (CUBLAS_COMPUTE_32F; split-K partial sums of half outputs are kept in
// float32 too), float64 in float64. float32 GEMMs are exact float32 unless
// set_float32_matmul_precision("high") allows TF32.
//
// Everything runs on halfgrad::cuda::current_stream() on the tensors' device and never
// synchronises with the host.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::kernels {
struct ChainLayerGrad;  // kernels/kernels.h
}

namespace halfgrad::kernels::cuda {

// ---- plain GEMM ---------------------------------------------------------------------------
// The CUDA entry of kernels::gemm (kernels/kernels.h), same contract:
//   out[b] = a[b] @ b[b] (+ bias) (+ beta * out[b])
// a [.., m, k], b [.., k, n], out [.., m, n], all 2-d or all 3-d; the batch dim
// of a or b may have stride 0 (or size 1) to share one matrix across the batch.
// a and b may have any strides: a view with a unit row or column stride goes to
// cuBLASLt as is, anything else is first copied into a contiguous scratch.
// out's rows must be contiguous and must not overlap. bias: [n] or undefined,
// added to every row. beta: 0 (out is write-only) or any value (out is read).
// One dtype for all: float32, float64, float16 or bfloat16.
// With a bias, float16/bfloat16 round a @ b + bias once: cuBLASLt's BIAS epilogue where
// it has a kernel (and fusion is on), else the GEMM's float32 sums, the bias (and
// beta * out) added in float32, then one rounding. With beta != 0 and the BIAS epilogue,
// cuBLASLt reads beta * out from out in the half type: that kernel's rounding is its own
// (docs/numerics.md). addmm with beta = alpha = 1 and a bias that is one row takes this
// path (beta = 0) on CUDA, as linear does.
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta);

// ---- Linear with its epilogue ---------------------------------------------------------------
// What runs after the GEMM of y = act(x2 @ w^T + bias). The "Bias" in each
// name applies when `bias` is defined: Linear(bias=false) + ReLU is BiasRelu
// with an undefined bias.
enum class Epilogue : uint8_t {
  None,          // y = x2 @ w^T (+ bias)
  Bias,          // the same, but bias must be defined
  BiasRelu,      // y = relu(z), z = x2 @ w^T + bias: cuBLASLt's RELU_BIAS epilogue, one GEMM
  BiasGelu,      // y = gelu(z), the exact erf GELU of hg::gelu and the CPU backend. cuBLASLt's
                 // GELU epilogue is the tanh approximation, so this is the GEMM (bias in its
                 // epilogue) and one elementwise pass: fusing would silently change the numbers
  BiasGeluTanh,  // y = gelu_tanh(z) (hg::gelu(x, "tanh"), Activation::GELUTanh): cuBLASLt's
                 // GELU_BIAS / GELU_AUX_BIAS epilogue, one GEMM
};

// A buffer for the ReLU bit mask that cuBLASLt's RELU_AUX_BIAS epilogue writes
// and its DRELU/DRELU_BGRAD epilogues read: one bit per element of y [rows,
// features], in cuBLASLt's own (undocumented) bit order. Opaque: pass it back
// to this layer only. A bool tensor [rows, ceil(features / 128) * 16] (the
// mask's leading dimension must be a multiple of 128 bits).
Tensor make_relu_mask(int64_t rows, int64_t features, Device device);

// y = act(x2 @ w^T + bias) in one cuBLASLt call where an epilogue exists.
//   x2 [N, in] and w [out, in] with any strides (a unit row or column stride avoids a
//   copy; w is read transposed in place), bias [out] or undefined, out [N, out] with
//   contiguous rows; one dtype.
//   aux: what backward needs, or undefined (inference, or ReLU's per-layer backward,
//   which only needs y):
//     BiasRelu:   a mask from make_relu_mask(N, out) (for the chain fusion below; written
//                 only with set_relu_epilogue_fusion(true)), or a tensor [N, out] of out's
//                 dtype that receives z
//     BiasGelu, BiasGeluTanh: a tensor [N, out] of out's dtype (unit column stride)
//                 that receives z. With a row stride that is a multiple of 8 (e.g. out
//                 a multiple of 8 and aux contiguous) GELU_AUX_BIAS writes it in the
//                 same GEMM; otherwise an elementwise pass does.
//     None, Bias: must be undefined.
// When cuBLASLt has no kernel for a fused epilogue (asked of its heuristic), the GEMM
// runs plain (z rounded once, as below) and one elementwise pass applies the activation.
// z = x2 @ w^T + b rounds once to out's dtype, as on the CPU and in PyTorch: the BIAS
// epilogue, or (fusion off, no fused kernel) the plain GEMM writing float32 sums that
// one pass adds the bias to before rounding (float16/bfloat16), or with the bias in C
// and beta = 1 (float32/float64). Rounding the product before the bias rounds twice and,
// in the half types, moves z within an ulp of 0 across it: ReLU's derivative flips. (On
// the H200 half GEMMs with the bias in C rounded twice for some shapes, so half types
// do not rely on it.)
// Returns false when a ReLU mask was asked for but cuBLASLt has no mask epilogue for
// these operands (which dtypes and shapes have one depends on the cuBLAS version and
// the GPU: ask relu_mask_epilogue_available), or may not use it (epilogue_fusion() or
// relu_epilogue_fusion() false): y is right, the mask is not written, and backward
// must read y instead (InputActivation::output). True otherwise.
bool linear_forward(const Tensor& x2, const Tensor& w, const Tensor& bias, Epilogue epi, const Tensor& out,
                    const Tensor& aux);

// Whether linear_forward(x2, w, bias, Epilogue::BiasRelu, out, mask) would write the
// mask now: the settings allow cuBLASLt's ReLU epilogues, the mask is aligned, and
// cuBLASLt's heuristic has a RELU_AUX_BIAS (RELU_AUX without a bias) kernel for these
// operands, dtype and device. Asked of cuBLASLt at run time and cached with the GEMM
// plans, never assumed. Same arguments and checks as linear_forward; runs no GEMM and
// counts nothing (it may copy an operand that cuBLASLt cannot read in place).
bool relu_mask_epilogue_available(const Tensor& x2, const Tensor& w, const Tensor& bias, const Tensor& out,
                                  const Tensor& mask);

// Chain fusion: what produced this layer's input x2, when x2 = act(z_prev) came
// from linear_forward of the layer below. cuBLASLt applies dReLU/dGELU (and the
// bias gradient) in the epilogue of the GEMM that computes dx, so grad_x
// receives dL/dz_prev (not dL/dx2) and grad_bias dL/db_prev, in the same call.
struct InputActivation {
  Epilogue epilogue = Epilogue::None;  // None: grad_x is plain dL/dx2
  // BiasRelu:     the mask that layer's linear_forward filled (fused DRELU), or
  //               its output y_prev (GEMM, then one pass)
  // BiasGeluTanh: z_prev [N, in] (fused DGELU when its row stride is a multiple of 8)
  // BiasGelu:     z_prev (GEMM, then one exact-dGELU pass; cuBLASLt's DGELU is tanh's)
  Tensor saved;
  Tensor grad_bias;  // [in] or undefined: receives dL/db_prev
  // BiasRelu with a mask: that layer's output y_prev, read instead of the mask when
  // no DRELU kernel runs (fusion off, or none for this GEMM's shapes). Without it
  // such a case is an Error.
  Tensor output;
};

// Backward of y = act(x2 @ w^T + bias), given grad = dL/dy [N, out]:
//   gz = grad * act'(z)          one elementwise pass (skipped for None/Bias), where
//                                `saved` is y for BiasRelu (relu'(z) = y > 0, as PyTorch),
//                                z [N, out] (the aux of linear_forward) for the GELUs
//   grad_w = gz^T @ x2  and  grad_bias = sum(gz, 0)   ONE GEMM: cuBLASLt's BGRADB epilogue
//   grad_x = gz @ w              one GEMM, with `input`'s dReLU/dGELU epilogue if given
// grad_x [N, in], grad_w [out, in] (rows contiguous), grad_bias [out]: each may be
// undefined (not needed); all in grad's dtype. grad may have any strides.
//
// Intended use by the op layer (kernels::linear_act / linear_act_backward on CUDA):
//   forward:  epi = {None, ReLU, GELU, GELUTanh} -> {None, BiasRelu, BiasGelu, BiasGeluTanh};
//             pre = a GELU and backward wanted ? make_tensor({N, out}) : Tensor();
//             linear_forward(x2, w, b, epi, y, pre);            // save x2, w, (y | pre)
//   backward: linear_backward_epilogue(g, x2, w, epi, ReLU ? y : pre, dx, dw, db);
//   Per layer that is: one GEMM forward (plus one pass for exact GELU, or for tanh
//   GELU when out_features is not a multiple of 8), and in backward one pass for gz
//   and two GEMMs, db costing nothing extra. (DGELU needs the next layer's dx GEMM:
//   the chain fusion below.)
// Chain fusion (a run of Linear+act layers as one autograd node: op linear_chain,
// linear_chain below):
//   forward of layer i:  mask_i = make_relu_mask(N, out_i) (or z_i for GeluTanh);
//                        linear_forward(h_{i-1}, W_i, b_i, BiasRelu, h_i, mask_i)
//   backward, top down, gz_top = dL/dy of the last layer (no activation):
//     linear_backward_epilogue(gz_i, h_{i-1}, W_i, Epilogue::None, {}, gz_{i-1}, dW_i, db_i,
//                              {BiasRelu, mask_{i-1}, db_{i-1}});
//   so every layer's dReLU and bias gradient ride in GEMM epilogues: no elementwise pass.
//   (The mask comes from cuBLASLt's RELU_AUX_BIAS, so only with set_relu_epilogue_fusion(true).)
void linear_backward_epilogue(const Tensor& grad, const Tensor& x2, const Tensor& w, Epilogue epi,
                              const Tensor& saved, const Tensor& grad_x, const Tensor& grad_w,
                              const Tensor& grad_bias, const InputActivation& input = {});

// ---- a chain of Linear layers (kernels::linear_chain on CUDA, kernels/cuda/linear_chain.cpp) -----
// The chain fusion above, as one autograd node: h[i+1] = act_i(h[i] @ w[i]^T + b[i]),
// epi[i] the Epilogue of layer i. Forward: linear_forward per layer; with `keep`, a hidden
// ReLU layer writes cuBLASLt's mask (when fusion is on, set_relu_epilogue_fusion(true)
// allows cuBLASLt's ReLU, and cuBLASLt has a RELU_AUX kernel for it: linear_forward
// says whether it wrote the mask; else backward reads its output), a GELU layer z (tanh: with its row stride rounded up to a multiple of 8, so
// GELU_AUX_BIAS and DGELU_BGRAD apply at any width). Returns that per-layer state.
// Backward, top down: the last layer's activation is one pass (nothing above it); every
// other layer's dReLU/dGELU and bias gradient ride in the dx GEMM of the layer above
// (exact GELU: GEMM, then one pass). A mask that cannot be read (fusion turned off since
// the forward) gives way to the layer's output h[i+1]. Contracts of kernels::linear_chain.
std::vector<Tensor> linear_chain(const std::vector<Tensor>& h, const std::vector<Tensor>& w,
                                 const std::vector<Tensor>& b, const std::vector<Epilogue>& epi, bool keep);
void linear_chain_backward(const Tensor& g, const std::vector<Tensor>& h, const std::vector<Epilogue>& epi,
                           const std::vector<Tensor>& saved, const Tensor& dx,
                           std::vector<kernels::ChainLayerGrad>& layers);

// grad_z = grad_y * act'(z) alone (the first step above), [N, features] views of one
// dtype, any strides; grad_z may be grad_y itself. `saved` as in linear_backward_epilogue.
void activation_backward(Epilogue epi, const Tensor& grad_y, const Tensor& saved, const Tensor& grad_z);

// ---- settings ---------------------------------------------------------------------------
// float32 GEMMs use TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) only when the user
// opted in with halfgrad::set_float32_matmul_precision("high") (ops/ops.h).

// Whether fused cuBLASLt epilogues are used (default true). false runs every
// epilogue as a plain GEMM plus elementwise passes: for tests (both paths must
// agree) and benchmarks (what fusion saves). With false, a ReLU mask cannot be
// produced or consumed (it is cuBLASLt's own format): that is an Error.
void set_epilogue_fusion(bool enabled);
bool epilogue_fusion();

// Whether cuBLASLt's ReLU epilogues may apply the ReLU (default false). They compute
// "x := max(x, 0)" (cublasLt.h), which maps a NaN pre-activation to 0; hg::relu, the
// CPU backend and PyTorch keep NaN (relu(NaN) = NaN), so a NaN in a layer's input or
// weights would vanish from the loss instead of reaching it (and GradScaler would not
// see it). So by default a Linear+ReLU runs the GEMM with the bias in its epilogue
// (BIAS) and our ReLU pass, and writes no ReLU mask (linear_forward returns false for
// one; backward reads y): PyTorch's NaN semantics, at the cost of one pass per layer
// forward and, in a chain, the dReLU pass and bias-gradient reduction that DRELU_BGRAD
// would have fused. true allows RELU_BIAS and RELU_AUX_BIAS (and with them the mask and
// DRELU/DRELU_BGRAD): faster, but a NaN pre-activation gives 0 there. Gradients agree
// either way (relu'(NaN) = 0, as PyTorch's threshold_backward). No effect while
// epilogue fusion is off.
void set_relu_epilogue_fusion(bool allow_nan_to_zero);
bool relu_epilogue_fusion();

// ---- counters (internal, test-visible) -------------------------------------------------------
// Which cuBLASLt epilogue a GEMM asked for. Every call that asks for one (fusion on) is
// counted once: `fused` when cuBLASLt had a kernel and ran it, `fallback` when it had none
// and the layer ran the plain GEMM plus elementwise passes instead. Plain GEMMs (no
// epilogue asked, including every GEMM with fusion off) count in `plain`. For tests
// (prove a fused epilogue really ran) and benchmarks; process-wide, relaxed atomics.
enum class FusedEpilogue : uint8_t {
  Bias,           // BIAS
  Relu,           // RELU, RELU_BIAS
  ReluMask,       // RELU_AUX, RELU_AUX_BIAS: also writes the bit mask
  GeluTanh,       // GELU, GELU_BIAS
  GeluTanhAux,    // GELU_AUX, GELU_AUX_BIAS: also writes z
  BiasGrad,       // BGRADB (grad_w's GEMM reduces grad_bias)
  DRelu,          // DRELU
  DReluBiasGrad,  // DRELU_BGRAD
  DGelu,          // DGELU
  DGeluBiasGrad,  // DGELU_BGRAD
};
inline constexpr int kFusedEpilogueKinds = 10;
const char* fused_epilogue_name(FusedEpilogue e);

struct GemmCounts {
  uint64_t fused[kFusedEpilogueKinds] = {};
  uint64_t fallback[kFusedEpilogueKinds] = {};
  uint64_t plain = 0;
  uint64_t fused_of(FusedEpilogue e) const { return fused[static_cast<int>(e)]; }
  uint64_t fallback_of(FusedEpilogue e) const { return fallback[static_cast<int>(e)]; }
};
GemmCounts gemm_counts();
void reset_gemm_counts();
// ---- what cuBLASLt offers, asked at run time ------------------------------------------------
// Whether cuBLASLt's heuristic has a kernel for the epilogue `kind` on out = a @ b, asked
// exactly as this layer asks it before it runs a GEMM with that epilogue: the same call
// description (operand layouts, a transposed view read in place, alignment, dtype, the
// float32 precision setting), the same plan cache. That answer is what makes a GEMM that
// asks for `kind` count as `fused` (true) or as `fallback` (false) in GemmCounts. Runs no
// GEMM and counts nothing (it may copy an operand cuBLASLt cannot read in place, or an
// under-aligned bias, as the GEMM would). 2-d operands of one dtype on one device; pass
// the tensors the layer's GEMM gets (the same pointers: alignment is part of the question):
//   linear_forward (Bias, Relu, ReluMask, GeluTanh, GeluTanhAux): a = x2, b = w.t(), out = y,
//     bias = the bias [n] (undefined: the variant without BIAS; Bias needs one), aux = the
//     mask (ReluMask) or z (GeluTanhAux), else undefined.
//   linear_backward_epilogue's grad_w GEMM (BiasGrad): a = gz.t(), b = x2, out = grad_w,
//     bias = grad_bias [m].
//   its grad_x GEMM (DRelu, DReluBiasGrad: aux the mask; DGelu, DGeluBiasGrad: aux z):
//     a = gz, b = w, out = grad_x, bias = input.grad_bias [n] for the *BiasGrad kinds only.
// False without asking where the layer would not ask either: no products (m, n or k 0),
// an aux cuBLASLt cannot take (under-aligned; z's row stride not a multiple of 8), a
// non-contiguous bias gradient. Which epilogue the layer asks for (the fusion settings,
// the activation, the aux given) is its own rule, documented above; the counters say what
// it asked.
bool epilogue_available(FusedEpilogue kind, const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias,
                        const Tensor& aux);

namespace detail {
// Called by gemm.cu where it chooses (exposed so a CPU test can check the bookkeeping).
void count_epilogue(FusedEpilogue e, bool fused);
void count_plain();
}  // namespace detail

}  // namespace halfgrad::kernels::cuda
