#pragma once
// Multi-head attention (torch.nn.MultiheadAttention): the query, key and value
// projected by one packed weight, split into num_heads heads, attended per head
// (hg::scaled_dot_product_attention) and projected back by out_proj.
//
// Parameters and state-dict keys as PyTorch's: "in_proj_weight" [3E, E]
// (xavier_uniform_), "in_proj_bias" [3E] (zeros; with bias only), and the
// sub-module "out_proj" (a Linear E -> E: "out_proj.weight" with Linear's
// init, "out_proj.bias" zeros). As in PyTorch the draws run out_proj's
// weight and bias first, then in_proj_weight. kdim/vdim other than embed_dim,
// add_bias_kv and add_zero_attn are not supported.
//
// Inputs [L, N, E] (or [N, L, E] with batch_first), or unbatched [L, E];
// key and value [S, N, E] likewise. forward returns (output, weights): output
// as the query; weights [N, L, S] averaged over the heads (or [N, H, L, S] with
// average_attn_weights = false; without the N for unbatched input), after
// dropout, undefined when need_weights is false. Dropout on the attention
// weights applies only in training mode.
//
// Masks follow PyTorch's MultiheadAttention (the opposite of
// scaled_dot_product_attention's bool convention): key_padding_mask [N, S]
// (or [S]) and attn_mask [L, S] or [N * num_heads, L, S], bool true = this
// position is NOT attended, or floating, added to the scores. is_causal masks
// the future (j > i); with an attn_mask it is, as in PyTorch, only a hint that
// the mask is causal and the mask is used as given. (PyTorch requires the mask
// with is_causal; here is_causal alone builds the causal mask.)
//
//   hg::nn::MultiheadAttention attn(64, 4, {.dropout = 0.1, .batch_first = true});
//   auto [y, w] = attn(x, x, x, {.need_weights = false, .is_causal = true});
#include <string>
#include <tuple>

#include <halfgrad/nn/linear.h>
#include <halfgrad/nn/module.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;
  bool bias = true;
  bool batch_first = false;
};

// MultiheadAttention::forward's keyword arguments.
struct MultiheadAttentionForwardOptions {
  Tensor key_padding_mask;
  bool need_weights = true;
  Tensor attn_mask;
  bool average_attn_weights = true;
  bool is_causal = false;
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});

  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const MultiheadAttentionForwardOptions& options = {}) const;
  // The forward hooks see the output (not the weights).
  std::tuple<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                        const MultiheadAttentionForwardOptions& options = {}) const {
    auto [out, weights] = forward(query, key, value, options);
    return {with_forward_hooks(std::move(out)), std::move(weights)};
  }
  // PyTorch's _reset_parameters: xavier_uniform_(in_proj_weight), zero biases.
  void reset_parameters();
  // No extra_repr: PyTorch prints only the out_proj child.

  int64_t embed_dim, num_heads, head_dim;
  double dropout;
  bool batch_first;
  Tensor in_proj_weight;  // [3 * embed_dim, embed_dim], float32
  Tensor in_proj_bias;    // [3 * embed_dim]; undefined without bias
  Linear out_proj;
};

}  // namespace halfgrad::nn
