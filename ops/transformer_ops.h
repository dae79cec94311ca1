#pragma once
// The ops of a small transformer (torch.nn.functional.layer_norm, embedding,
// scaled_dot_product_attention). Included by <halfgrad/ops/ops.h>.
//
// layer_norm is one op with a fused kernel each way (ops/layer_norm.cpp); under
// create_graph its backward is written with differentiable ops. embedding and
// scaled_dot_product_attention are composites (dispatch::composite): the
// autocast step sees the op's own name, then the body runs public
// differentiable ops (index_select, where, matmul, softmax, dropout ...),
// which record their own history. So each of the three is twice
// differentiable, on the CPU and CUDA alike. scaled_dot_product_attention's
// body may instead run cuDNN's fused attention on CUDA (below: when, and how
// to ask); it keeps the same promises.
//
// Autocast: layer_norm has PyTorch's fp32 row on CUDA (float16/bfloat16 inputs
// are cast to float32, the output is float32) and no row on the CPU (it runs in
// its input's dtype there, as PyTorch's CPU autocast); either way the mean and
// variance of a float16/bfloat16 input are computed in float32. embedding has
// no row (the output has the weight's dtype). scaled_dot_product_attention has
// the lower-precision row on both (float16 on CUDA, bfloat16 on the CPU by
// default); its softmax runs in float32 and the weights are rounded once.
//
//   auto y = hg::layer_norm(x, {64}, ln_weight, ln_bias);
//   auto e = hg::embedding(tokens, table);               // tokens int64 [B, T]
//   auto o = hg::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#include <cstdint>
#include <optional>
#include <string>

#include <halfgrad/core/tensor.h>

namespace halfgrad {

// Normalises over the last normalized_shape.size() dims of input, which must
// equal normalized_shape: (x - mean) / sqrt(var + eps) with the biased
// variance, then * weight + bias when they are defined (each of shape
// normalized_shape). input is floating; weight and bias have its dtype (or
// float32 with a float16/bfloat16 input: AMP's mixed case); the output has the
// input's dtype and shape. The statistics are computed in float32 for a
// float16/bfloat16 input (float64 for float64).
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// Rows of weight [num_embeddings, embedding_dim] picked by input (int64 of any
// shape, 0-d included): the output is input.shape +
// [embedding_dim], weight's dtype. An index outside [0, num_embeddings) is an
// Error naming the index and num_embeddings (on CUDA this reads the indices'
// min and max back: one sync). padding_idx (negative counts from the end, as in
// PyTorch) marks a row that receives no gradient; the forward values are
// unchanged. The gradient is dense (weight's shape), repeated indices add up.
Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

// PyTorch 2.x's scaled_dot_product_attention: softmax(q k^T * scale + mask) v
// with q [..., L, E], k [..., S, E], v [..., S, Ev] (the leading dims
// broadcast), output [..., L, Ev] in q's dtype (q, k, v share one floating
// dtype). scale defaults to 1/sqrt(E). attn_mask broadcasts to [..., L, S]: a
// bool mask says which positions take part (true = attend), a floating mask is
// added to the scores. is_causal masks position j > i (the lower triangle
// aligned at the top-left, as PyTorch; L need not equal S) and is an Error
// together with attn_mask. Dropout with probability dropout_p (and 1/(1-p)
// scaling) applies to the attention weights whenever dropout_p > 0, as in
// PyTorch (pass 0 when not training). A query row whose positions are all
// masked gives zeros (PyTorch's math path since 2.5), not NaN.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt);

// The two paths of scaled_dot_product_attention (as PyTorch's SDPA backends).
// Math: the composite above, on every device. CudnnFused: on CUDA, one op
// whose forward and backward are cuDNN's flash-attention graphs (nothing of
// size [L, S] reaches memory; the backward recomputes the weights from the
// saved float32 log-sum-exp of each row). The fused path is taken when, after
// autocast's casts, all of these hold:
//   - enable_cudnn_sdp(true) (the default);
//   - no attn_mask (is_causal is fine) and dropout_p == 0: no dropout on the
//     fused path (cuDNN's Philox stream is not ours), so training with
//     dropout takes the math path;
//   - float16 or bfloat16; query, key, value 4-d [B, H, L|S, E|Ev] with equal
//     B and H (no broadcasting), E and Ev multiples of 8 up to 256, stride 1
//     in the last dim (any other strides: MultiheadAttention's views qualify);
//   - on a CUDA device, and cuDNN, asked at run time, has an engine for the
//     forward and, when a backward may run (grad mode on and an input
//     requires grad), for the backward too. Its plans are built once per
//     (shapes, strides, alignment, dtype, device, causal) and cached.
// Anything else takes the math path, with the same results up to rounding.
// A double backward (autograd::grad with create_graph) through a fused call
// works: under create_graph its backward is written in differentiable ops.
enum class AttentionPath : uint8_t { Math, CudnnFused };
struct AttentionPathInfo {
  AttentionPath path = AttentionPath::Math;
  std::string why;  // Math: why not fused ("" for CudnnFused)
};
// torch.backends.cuda.enable_cudnn_sdp / cudnn_sdp_enabled: turn the fused path
// off (process-wide) to get the math path everywhere, e.g. to compare them.
void enable_cudnn_sdp(bool enabled);
bool cudnn_sdp_enabled();
// Which path scaled_dot_product_attention would take for these arguments, as
// given (no autocast is applied: pass the dtypes autocast would make), and
// why not fused; asking builds and caches cuDNN's plans. The current grad mode
// and requires_grad decide whether the backward must be supported too.
AttentionPathInfo sdpa_path(const Tensor& query, const Tensor& key, const Tensor& value,
                            const Tensor& attn_mask = Tensor(), double dropout_p = 0.0, bool is_causal = false,
                            std::optional<double> scale = std::nullopt);
// The path the last scaled_dot_product_attention call on this thread took.
AttentionPathInfo sdpa_last_path();

namespace detail {
// What scaled_dot_product_attention computes, with the attention weights
// (after dropout) returned too: nn::MultiheadAttention's need_weights path.
// attn_mask as above (bool: true = attend; floating: added); no composite
// around it (the caller's ops are autocast one by one).
struct AttentionResult {
  Tensor output, weights;
};
AttentionResult attention_math(const Tensor& query, const Tensor& key, const Tensor& value,
                               const Tensor& attn_mask, double dropout_p, bool is_causal,
                               std::optional<double> scale, const char* op);
// The fused path's rules that need no backend (above), on tensors after
// autocast: "" when they hold (cuDNN is asked next), else the first that fails.
std::string sdpa_fused_rules(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                             double dropout_p);
}  // namespace detail

}  // namespace halfgrad
