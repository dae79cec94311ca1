// The kernel list: every entry point of the backend interface, written once
// (no #pragma once: included once per use). Each entry is
//   HG_KERNEL(return type, name, (parameters), (arguments), the tensor whose device picks the backend)
// and the includer defines HG_KERNEL to make of it what it needs: a declaration
// in halfgrad::kernels (kernels.h), in each backend (cpu/cpu_kernels.h,
// cuda/cuda_kernels.h), or a routing function (router.cpp). HG_KERNEL_CHECKED
// marks the entries whose router does more than route (written by hand in
// router.cpp); it is HG_KERNEL unless the includer says otherwise.
// HG_DEFAULT(x) is a default argument: `= x` in declarations, nothing in
// definitions. Adding a kernel: one entry here, then its function in
// kernels/cpu/ and kernels/cuda/ (the build fails until both exist).
//
// Types (UnaryOp, ConvGeometry, ...) and the families' common contracts are in
// kernels.h.
#ifndef HG_KERNEL
#error "define HG_KERNEL(ret, name, params, args, device_of) before including kernels/kernel_list.h"
#endif
#ifndef HG_KERNEL_CHECKED
#define HG_KERNEL_CHECKED HG_KERNEL
#define HG_KERNEL_LIST_OWNS_CHECKED
#endif
#ifndef HG_DEFAULT
#define HG_DEFAULT(...)
#define HG_KERNEL_LIST_OWNS_DEFAULT
#endif

// out = op(in). Same shape; in and out share a dtype.
HG_KERNEL(void, unary, (UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams p HG_DEFAULT({})),
          (op, in, out, p), in)
// out = op(a, b); a and b are (possibly expanded) views of out's shape with one dtype.
// Add and Sub compute a + alpha * b and a - alpha * b.
HG_KERNEL(void, binary, (BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                         double alpha HG_DEFAULT(1.0)),
          (op, a, b, out, alpha), a)
// out = cond ? a : b, all views of out's shape.
HG_KERNEL(void, where, (const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out),
          (cond, a, b, out), cond)
HG_KERNEL(void, fill, (const Tensor& out, double value),
          (out, value), out)
// dst = src element by element: same shape, any dtypes, any devices, any strides.
HG_KERNEL_CHECKED(void, copy, (const Tensor& dst, const Tensor& src),
          (dst, src), dst)
// Reduce `in` over `dims` (sorted, non-negative, unique) into `out`, whose
// shape is in's shape with those dims set to 1. Float inputs accumulate in
// float32 (float64 for float64). ArgMax/ArgMin write int64 indices (one dim
// only). Max/Min/ArgMax/ArgMin: a NaN wins (the first NaN), ties go to the
// first index.
// Max/Min with `indices` defined (int64, contiguous, out's shape): the same
// pass also writes each result's position in its reduced row (max(x, dim)).
HG_KERNEL_CHECKED(void, reduce, (ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out,
                                 const Tensor& indices HG_DEFAULT(Tensor())),
          (op, in, dims, out, indices), in)
// out[b] = a[b] @ b[b] (+ bias) (+ beta * out): a [.., m, k], b [.., k, n], out [.., m, n]
// with 2 or 3 dims (the batch dim of a or b may be stride 0); any strides for
// a and b, rows of out contiguous. Accumulates in float32 (float64 for float64).
HG_KERNEL(void, gemm, (const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias HG_DEFAULT(Tensor()),
                       float beta HG_DEFAULT(0.f)),
          (a, b, out, bias, beta), a)
// Linear + activation in one GEMM (the bias and activation in its epilogue):
// out = act(x2 @ w^T + bias), x2 [N, in], w [out, in], bias [out] or undefined.
// `pre`, when defined ([N, out], contiguous), receives x2 @ w^T + bias: the
// GELUs' backward needs it (ReLU's needs only the output); undefined when no
// backward will run. GELU is the exact (erf) form, GELUTanh PyTorch's
// approximate="tanh", the one cuBLASLt fuses into the GEMM.
HG_KERNEL(void, linear_act, (const Tensor& x2, const Tensor& w, const Tensor& bias, Activation act, const Tensor& out,
                             const Tensor& pre),
          (x2, w, bias, act, out, pre), x2)
// Its backward: gz = g * act'(.), then dx = gz @ w, dw = gz^T @ x2, db = sum(gz, 0)
// (each of dx, dw, db undefined: not wanted). `saved` is the output for ReLU, `pre` for the GELUs.
HG_KERNEL(void, linear_act_backward, (const Tensor& g, const Tensor& x2, const Tensor& w, Activation act,
                                      const Tensor& saved, const Tensor& dx, const Tensor& dw, const Tensor& db),
          (g, x2, w, act, saved, dx, dw, db), g)
// A chain of Linear layers as one op (linear_chain): h[i+1] = act[i](h[i] @ w[i]^T + b[i]).
// h holds layers + 1 tensors: h[0] = x2 [N, in], h[i+1] [N, out_i] contiguous, filled here.
// With `keep` (a backward will run) returns, per layer, what its backward needs besides h:
// z for the GELUs and, on CUDA, cuBLASLt's ReLU bit mask for a hidden ReLU layer. That is
// the backend's own state (the one thing a kernel allocates): pass it back unchanged.
HG_KERNEL(std::vector<Tensor>, linear_chain, (const std::vector<Tensor>& h, const std::vector<Tensor>& w,
                                              const std::vector<Tensor>& b, const std::vector<Activation>& act,
                                              bool keep),
          (h, w, b, act, keep), h[0])
// Its backward, top down, from g = dL/dh[layers]: dx = dL/dh[0] (undefined: not wanted) and
// each layer's dw, db. h[layers] is read only for a ReLU on the last layer. Layers below the
// lowest wanted gradient do no work (their h[i] and w may be undefined). On CUDA each hidden
// layer's dReLU/dGELU and bias gradient ride in the epilogue of the dx GEMM of the layer above.
HG_KERNEL(void, linear_chain_backward, (const Tensor& g, const std::vector<Tensor>& h,
                                        const std::vector<Activation>& act, const std::vector<Tensor>& saved,
                                        const Tensor& dx, std::vector<ChainLayerGrad>& layers),
          (g, h, act, saved, dx, layers), g)
// y = conv(x, w) + bias (bias undefined: none). y is fully overwritten.
HG_KERNEL(void, conv_forward, (const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeometry& g,
                               const Tensor& y),
          (x, w, bias, g, y), x)
// dx = the gradient of conv(x, w) with respect to x for the output gradient dy
// (dx's shape is x's; elements no output reads get 0). dx is fully overwritten.
HG_KERNEL(void, conv_backward_data, (const Tensor& dy, const Tensor& w, const ConvGeometry& g, const Tensor& dx),
          (dy, w, g, dx), dy)
// dw (and db = the sum of dy over N and the spatial dims, when defined) for the
// output gradient dy of conv(x, w). Both are fully overwritten. dw and db share
// one dtype: dy's, or on the CPU float32 for a bfloat16 dy (the sums as they
// are, not rounded: a weight autocast cast from float32).
HG_KERNEL(void, conv_backward_weight, (const Tensor& dy, const Tensor& x, const ConvGeometry& g, const Tensor& dw,
                                       const Tensor& db),
          (dy, x, g, dw, db), dy)
// Batch normalisation and 2-d pooling (ops/norm_pool.cpp; CPU: kernels/cpu/batch_norm.cpp and kernels/cpu/pool.cpp,
// CUDA: kernels/cuda/batch_norm.cu and kernels/cuda/pool.cu; per-element math shared in
// kernels/norm_pool_math.h).
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
HG_KERNEL(void, batch_norm_stats, (const Tensor& x, double eps, const Tensor& mean, const Tensor& invstd,
                                   const Tensor& running_mean, const Tensor& running_var, double momentum),
          (x, eps, mean, invstd, running_mean, running_var, momentum), x)
// Training: batch_norm_stats, then batch_norm_forward, in one call (the CPU runs
// channels-last float32/bfloat16 as one oneDNN primitive).
HG_KERNEL(void, batch_norm_training, (const Tensor& x, double eps, const Tensor& weight, const Tensor& bias,
                                      const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                                      const Tensor& running_var, double momentum, const Tensor& y),
          (x, eps, weight, bias, mean, invstd, running_mean, running_var, momentum, y), x)
// y = (x - mean[c]) * invstd[c] * weight[c] + bias[c] (weight undefined: 1, bias undefined: 0).
HG_KERNEL(void, batch_norm_forward, (const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                                     const Tensor& bias, const Tensor& y),
          (x, mean, invstd, weight, bias, y), x)
// The backward for the output gradient g, each result only when defined:
//   dbias[c] = sum g,  dweight[c] = invstd[c] * sum g * (x - mean[c]),
//   dx = w * invstd * (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean)))   (training:
//        the statistics were the batch's), or dx = w * invstd * g (eval: running statistics).
HG_KERNEL(void, batch_norm_backward, (const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                      const Tensor& weight, bool training, const Tensor& dx, const Tensor& dweight,
                                      const Tensor& dbias),
          (g, x, mean, invstd, weight, training, dx, dweight, dbias), g)
// y = the window's max, a NaN if the window holds one (the first NaN's index);
// ties go to the first tap in row-major order. indices (int64, [P, OH, OW]) get
// the argmax's flat position h * W + w in its plane (PyTorch's); a window with
// no tap inside the input gives -inf and index -1.
HG_KERNEL(void, max_pool2d, (const Tensor& x, const Pool2dGeometry& g, const Tensor& y, const Tensor& indices),
          (x, g, y, indices), x)
// dx[p, i] = sum of g[p, o] over the outputs o whose index is i (dx fully
// overwritten; an index outside the plane is skipped).
HG_KERNEL(void, max_pool2d_backward, (const Tensor& g, const Tensor& indices, const Pool2dGeometry& geo,
                                      const Tensor& dx),
          (g, indices, geo, dx), g)
// PyTorch's avg_pool2d: the window clipped to the padded input gives the size
// counted with count_include_pad, clipped to the input the one without.
HG_KERNEL(void, avg_pool2d, (const Tensor& x, const Pool2dGeometry& g, const Tensor& y),
          (x, g, y), x)
HG_KERNEL(void, avg_pool2d_backward, (const Tensor& g, const Pool2dGeometry& geo, const Tensor& dx),
          (g, geo, dx), g)
// Adaptive average pooling: output (oh, ow) averages rows floor(oh * H / OH) to
// ceil((oh + 1) * H / OH) (exclusive), and the same for columns.
HG_KERNEL(void, adaptive_avg_pool2d, (const Tensor& x, const Tensor& y),
          (x, y), x)
HG_KERNEL(void, adaptive_avg_pool2d_backward, (const Tensor& g, const Tensor& dx),
          (g, dx), g)
// Softmax over the last dim of a contiguous tensor (log: log-softmax).
HG_KERNEL(void, softmax, (const Tensor& in, const Tensor& out, bool log),
          (in, out, log), in)
// grad_in from grad_out and the forward output y: softmax: y * (g - sum(g*y));
// log-softmax: g - exp(y) * sum(g).
HG_KERNEL(void, softmax_backward, (const Tensor& grad_out, const Tensor& y, const Tensor& grad_in, bool log),
          (grad_out, y, grad_in, log), grad_out)
// Layer normalisation over the last dim of x [rows, n] (contiguous: ops/layer_norm.cpp
// views the normalized dims as one; CPU: kernels/cpu/layer_norm.cpp, CUDA:
// kernels/cuda/layer_norm.cu). A, the statistics dtype, is float64 for float64 x and
// float32 for float32, float16 and bfloat16. Per row r: mean[r] and rstd[r] =
// 1 / sqrt(var + eps) (A, [rows], contiguous) with the biased variance taken in two
// passes over the row (the mean, then the squared deviations from it: no
// cancellation, as PyTorch's Welford), and out (x's shape and dtype) =
// (x - mean[r]) * rstd[r] * weight + bias, computed in A and rounded once.
// weight and bias are [n] contiguous in A (the op converts them; undefined: 1 and 0).
HG_KERNEL(void, layer_norm_forward, (const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                                     const Tensor& out, const Tensor& mean, const Tensor& rstd),
          (x, weight, bias, eps, out, mean, rstd), x)
// Its backward for the output gradient grad_out (x's shape and dtype, contiguous),
// from the forward's mean and rstd; weight as above. With xhat = (x - mean) * rstd
// and gw = grad_out * weight, each result only when defined (else not wanted):
//   grad_x = rstd * (gw - mean_j(gw) - xhat * mean_j(gw * xhat))   (x's dtype, rounded once)
//   grad_weight[j] = sum_r grad_out * xhat,  grad_bias[j] = sum_r grad_out   ([n], A)
// Sums in A; the column sums over rows are split into chunks fixed by the row count
// alone (partial sums, then added in chunk order): no atomics, the same bits on every
// run and for every thread count.
HG_KERNEL(void, layer_norm_backward, (const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& weight, const Tensor& grad_x,
                                      const Tensor& grad_weight, const Tensor& grad_bias),
          (grad_out, x, mean, rstd, weight, grad_x, grad_weight, grad_bias), grad_out)
// Per-sample negative log-likelihood: out[i] = -logp[i, target[i]] (0 where
// target == ignore_index). logp [N, C] contiguous, target int64 [N]. A target
// outside [0, C) other than ignore_index is an Error naming it.
// `op` names the user's op in the out-of-range message (nll_loss, cross_entropy).
HG_KERNEL(void, nll_loss, (const Tensor& logp, const Tensor& target, const Tensor& out, int64_t ignore_index,
                           const char* op HG_DEFAULT("nll_loss")),
          (logp, target, out, ignore_index, op), logp)
// The reduced loss in one call: out (0-d, logp's dtype) = the sum of
// -logp[i, target[i]] over the samples whose target is not ignore_index,
// divided by their count when `mean` (NaN when every target is ignored, as
// in PyTorch); count (0-d, logp's dtype) receives that count, for backward.
// The CPU runs one loop (accumulating in double); CUDA runs the per-sample
// kernel and reductions (no host sync). Targets are checked as nll_loss does.
HG_KERNEL(void, nll_loss_reduced, (const Tensor& logp, const Tensor& target, const Tensor& out, const Tensor& count,
                                   int64_t ignore_index, bool mean, const char* op HG_DEFAULT("nll_loss")),
          (logp, target, out, count, ignore_index, mean, op), logp)
// grad_logp[i, target[i]] = -grad[i] (other entries 0). grad [N], any stride
// (0: a reduced loss's one gradient, broadcast), grad_logp [N, C].
HG_KERNEL(void, nll_loss_backward, (const Tensor& grad, const Tensor& target, const Tensor& grad_logp,
                                    int64_t ignore_index),
          (grad, target, grad_logp, ignore_index), grad)
// cross_entropy's input gradient from its log-probabilities logp [N, C] in
// one pass: gx = softmax - one-hot, each row times its grad (grad [N], any
// stride, 0 for a reduced loss); 0 in a row whose target is ignore_index.
// What nll_loss_backward then log_softmax_backward give, without the one-hot tensor.
HG_KERNEL(void, cross_entropy_backward, (const Tensor& grad, const Tensor& logp, const Tensor& target,
                                         const Tensor& gx, int64_t ignore_index),
          (grad, logp, target, gx, ignore_index), grad)
// Stable sort of each row of the contiguous [rows, n] `in` (n: its last dim)
// into contiguous `values` (in's dtype) and int64 `indices` of in's shape:
// ascending (descending) with NaN the largest value and all NaNs equal, -0.0
// equal to +0.0, ties in their original order. values are in's elements, bit
// for bit (NaN payloads, the sign of zero).
HG_KERNEL(void, sort, (const Tensor& in, const Tensor& values, const Tensor& indices, bool descending),
          (in, values, indices, descending), in)
// The backward of taking values along the last dim at distinct positions (sort,
// topk): grad_in[r, indices[r, j]] = g[r, j]. g and int64 indices contiguous
// [rows, k], grad_in contiguous [rows, n] of g's dtype, zero-filled by the
// caller. Indices must be distinct within a row (plain stores, no atomics); an
// index outside [0, n) is skipped (never written out of bounds).
HG_KERNEL(void, take_along_dim_backward, (const Tensor& g, const Tensor& indices, const Tensor& grad_in),
          (g, indices, grad_in), g)
// Inclusive prefix sum of each row of the contiguous [rows, n] `in` into `out`
// (same shape and dtype); reverse: from the end of the row (out[j] = sum of
// in[j..n-1]). float32 and the half types accumulate in float32 (the CPU: float32
// in float64), float64 in float64, int64 in int64; each output rounds once.
HG_KERNEL(void, cumsum, (const Tensor& in, const Tensor& out, bool reverse),
          (in, out, reverse), in)
// A random permutation of 0..n-1 into the contiguous int64 `out` [n] from its
// device's generator, or from `generator` when one is given (so for the random
// entries below).
HG_KERNEL(void, randperm, (const Tensor& out, Generator* generator HG_DEFAULT(nullptr)),
          (out, generator), out)
HG_KERNEL(void, gather, (const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out, const char* op),
          (in, dim, index, out, op), in)
HG_KERNEL(void, scatter, (const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode,
                          const char* op),
          (self, dim, index, src, mode, op), self)
// Fused attention (kernels.h, FusedAttention). Asks the backend, without
// running anything or syncing, whether it has an engine for this problem's
// forward (and, with `backward`, its backward too): "" if so, else why not
// (the CPU: never). The plans are built on the first request for a problem
// (shapes, strides, alignment, dtype, device, causal) and cached, so asking
// again costs a lookup. The other two entries run only problems it accepted.
HG_KERNEL(std::string, fused_attention_unsupported, (const Tensor& q, const Tensor& k, const Tensor& v,
                                                     const FusedAttention& a, bool backward),
          (q, k, v, a, backward), q)
// out [B, H, L, Ev] (contiguous, q's dtype) and stats [B, H, L, 1] (contiguous
// float32): each query row's log-sum-exp of its scaled, masked scores, which the
// backward reads instead of the attention weights.
HG_KERNEL(void, fused_attention_forward, (const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttention& a,
                                          const Tensor& out, const Tensor& stats),
          (q, k, v, a, out, stats), q)
// dq, dk, dv (contiguous, the shapes and dtype of q, k, v; fully overwritten)
// for the output gradient dout (contiguous, out's shape), from the forward's
// out and stats.
HG_KERNEL(void, fused_attention_backward, (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                           const Tensor& dout, const Tensor& stats, const FusedAttention& a,
                                           const Tensor& dq, const Tensor& dk, const Tensor& dv),
          (q, k, v, out, dout, stats, a, dq, dk, dv), q)
// Random fills of a contiguous `out` from its device's generator (core/random.h),
// or from `generator` (core/generator.h) when one is given.
HG_KERNEL(void, uniform, (const Tensor& out, double low, double high, Generator* generator HG_DEFAULT(nullptr)),
          (out, low, high, generator), out)
HG_KERNEL(void, normal, (const Tensor& out, double mean, double std, Generator* generator HG_DEFAULT(nullptr)),
          (out, mean, std, generator), out)
HG_KERNEL(void, randint, (const Tensor& out, int64_t low, int64_t high, Generator* generator HG_DEFAULT(nullptr)),
          (out, low, high, generator), out)
// torch.multinomial on the contiguous [rows, n] non-negative `weights` (every
// row with a positive sum, finite; without replacement at least num_samples
// positive: the op checked) into the contiguous int64 `out` [rows, num_samples].
// With replacement: sample j of row r inverts the row's cumulative sum at
// u * total, u from Philox counter offset + r * num_samples + j; the sum is
// taken in double in a fixed order both backends share (kernels/multinomial_math.h),
// so they give the same indices. Without replacement: the exponential race
// (PyTorch's): the num_samples largest w_i / E_i, E_i ~ Exp(1) from counter
// offset + r * n + i, in descending order (ties: the lower index first).
HG_KERNEL(void, multinomial, (const Tensor& weights, bool replacement, const Tensor& out,
                              Generator* generator HG_DEFAULT(nullptr)),
          (weights, replacement, out, generator), weights)
// fp8 (docs/fp8.md). out (float8_e4m3fn or float8_e5m2, in's shape) = in * scale[0],
// rounded to nearest even and saturated to the format's largest finite value;
// amax[0] = max(amax[0], max |in|) (a NaN in `in` makes it NaN); saturated[0]
// (int64, or undefined) += the count of |in * scale| beyond the largest value.
// in and out contiguous; scale and amax: one-element float32 views on in's device.
HG_KERNEL(void, fp8_quantize, (const Tensor& in, const Tensor& scale, const Tensor& out, const Tensor& amax,
                               const Tensor& saturated),
          (in, scale, out, amax, saturated), in)
// Delayed scaling for columns [first, first + fp8_max.size()) of `history`
// ([L, n] float32, row 0 the newest) and scale, scale_inv ([n] float32): per
// column, amax = max over the rows (most_recent: row 0); when it is finite and
// > 0 and fp8_max / amax / 2^margin is finite, that becomes the scale (else
// the scale stays); scale_inv = 1 / scale; then rows shift down one (the
// oldest drops) and row 0 becomes 0 for the next amax.
HG_KERNEL(void, fp8_update_scales, (const Tensor& history, const Tensor& scale, const Tensor& scale_inv,
                                    int64_t first, const std::vector<float>& fp8_max, float margin,
                                    bool most_recent),
          (history, scale, scale_inv, first, fp8_max, margin, most_recent), history)
// out = (a * scale_a[0]) @ (b * scale_b[0]) (+ bias): a [m, k], b [k, n] fp8
// (any strides), scale_a/scale_b one-element float32, bias [n] contiguous in out's dtype
// or undefined, out [m, n] contiguous float32, bfloat16 or float16.
// Products are exact in float32; sums accumulate in float32. amax_out (a
// one-element float32 view, or undefined) is set to max |out| (cuBLASLt's AMAX_D).
HG_KERNEL(void, scaled_mm, (const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                            const Tensor& bias, const Tensor& out, const Tensor& amax_out),
          (a, b, scale_a, scale_b, bias, out, amax_out), a)

#ifdef HG_KERNEL_LIST_OWNS_CHECKED
#undef HG_KERNEL_CHECKED
#undef HG_KERNEL_LIST_OWNS_CHECKED
#endif
#ifdef HG_KERNEL_LIST_OWNS_DEFAULT
#undef HG_DEFAULT
#undef HG_KERNEL_LIST_OWNS_DEFAULT
#endif
