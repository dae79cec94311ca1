#include <halfgrad/nn/attention.h>

#include <fmt/format.h>

#include <limits>

#include <halfgrad/nn/init.h>

namespace halfgrad::nn {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// PyTorch's _canonical_mask: a bool mask (true = not attended) as an additive
// one (-inf there, 0 elsewhere), a floating one as it is, both in `dt`.
Tensor additive_mask(const Tensor& mask, DType dt, const char* name) {
  HG_CHECK(mask.dtype() == DType::Bool || is_floating(mask.dtype()),
           "MultiheadAttention: {} {} must be bool (true = not attended) or floating (added to the scores)", name,
           mask.describe());
  return mask.dtype() == DType::Bool ? where(mask, -kInf, 0.0).to(dt) : mask.to(dt);
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, MultiheadAttentionOptions options)
    : embed_dim(embed_dim_),
      num_heads(num_heads_),
      head_dim(0),
      dropout(options.dropout),
      batch_first(options.batch_first),
      // drawn first, as PyTorch's out_proj (before _reset_parameters)
      out_proj(embed_dim_ > 0 ? embed_dim_ : 0, embed_dim_ > 0 ? embed_dim_ : 0, options.bias) {
  HG_CHECK(embed_dim > 0 && num_heads > 0,
           "MultiheadAttention: embed_dim ({}) and num_heads ({}) must be positive", embed_dim, num_heads);
  HG_CHECK(embed_dim % num_heads == 0,
           "MultiheadAttention: embed_dim ({}) must be divisible by num_heads ({}); choose num_heads among its "
           "divisors",
           embed_dim, num_heads);
  HG_CHECK(dropout >= 0.0 && dropout <= 1.0, "MultiheadAttention: dropout must be in [0, 1], got {}", dropout);
  head_dim = embed_dim / num_heads;
  in_proj_weight = empty({3 * embed_dim, embed_dim});
  register_parameter("in_proj_weight", in_proj_weight);
  if (options.bias) {
    in_proj_bias = empty({3 * embed_dim});
    register_parameter("in_proj_bias", in_proj_bias);
  }
  register_module("out_proj", out_proj);
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj.bias.defined()) init::zeros_(out_proj.bias);
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const MultiheadAttentionForwardOptions& options) const {
  constexpr const char* op = "MultiheadAttention";
  HG_CHECK(query.defined() && key.defined() && value.defined(),
           "MultiheadAttention: query, key and value must be defined tensors");
  const bool batched = query.dim() == 3;
  HG_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() && value.dim() == query.dim(),
           "MultiheadAttention: query {}, key {} and value {} must all be 3-d ({}) or all 2-d (unbatched [L, E])",
           query.describe(), key.describe(), value.describe(), batch_first ? "[N, L, E], batch_first" : "[L, N, E]");
  HG_CHECK(query.shape().back() == embed_dim && key.shape().back() == embed_dim && value.shape().back() == embed_dim,
           "MultiheadAttention: the last dim of query {}, key {} and value {} must be embed_dim ({}) (kdim/vdim "
           "other than embed_dim are not supported)",
           query.describe(), key.describe(), value.describe(), embed_dim);
  const bool self = query.is_same(key) && key.is_same(value);
  // Internally batch first: [N, L, E].
  const auto to_nle = [&](const Tensor& t) {
    if (!batched) return t.unsqueeze(0);
    return batch_first ? t : t.transpose(0, 1);
  };
  const Tensor q_in = to_nle(query), k_in = self ? q_in : to_nle(key), v_in = self ? q_in : to_nle(value);
  const int64_t N = q_in.shape()[0], L = q_in.shape()[1], S = k_in.shape()[1];
  HG_CHECK(k_in.shape()[0] == N && v_in.shape()[0] == N,
           "MultiheadAttention: query {}, key {} and value {} must have the same batch size", query.describe(),
           key.describe(), value.describe());
  HG_CHECK(v_in.shape()[1] == S, "MultiheadAttention: key {} and value {} must have the same sequence length",
           key.describe(), value.describe());

  // The projections: one GEMM for self-attention, else one per input.
  const int64_t E = embed_dim, H = num_heads, D = head_dim;
  Tensor q, k, v;
  if (self) {
    const Tensor qkv = linear(q_in, in_proj_weight, in_proj_bias);  // [N, L, 3E]
    q = qkv.narrow(2, 0, E);
    k = qkv.narrow(2, E, E);
    v = qkv.narrow(2, 2 * E, E);
  } else {
    const auto part = [&](const Tensor& x, int64_t i) {
      return linear(x, in_proj_weight.narrow(0, i * E, E),
                    in_proj_bias.defined() ? in_proj_bias.narrow(0, i * E, E) : Tensor());
    };
    q = part(q_in, 0);
    k = part(k_in, 1);
    v = part(v_in, 2);
  }
  // [N, T, E] -> [N, H, T, D]
  const auto heads = [&](const Tensor& t, int64_t T) { return t.reshape({N, T, H, D}).transpose(1, 2); };
  q = heads(q, L);
  k = heads(k, S);
  v = heads(v, S);

  // One additive mask [N or 1, H or 1, L, S] from attn_mask and key_padding_mask.
  const DType dt = q.dtype();
  Tensor mask;
  if (options.attn_mask.defined()) {
    const Tensor& m = options.attn_mask;
    if (m.dim() == 2) {
      HG_CHECK(m.shape()[0] == L && m.shape()[1] == S,
               "MultiheadAttention: the shape of the 2-d attn_mask is {}, but should be [{}, {}] ([L, S])",
               shape_str(m.shape()), L, S);
      mask = additive_mask(m, dt, "attn_mask").view({1, 1, L, S});
    } else {
      HG_CHECK(m.dim() == 3 && m.shape()[0] == N * H && m.shape()[1] == L && m.shape()[2] == S,
               "MultiheadAttention: the shape of the 3-d attn_mask is {}, but should be [{}, {}, {}] "
               "([batch * num_heads, L, S]); a 2-d attn_mask is [L, S]",
               shape_str(m.shape()), N * H, L, S);
      mask = additive_mask(m, dt, "attn_mask").view({N, H, L, S});
    }
  }
  bool causal = false;
  if (options.is_causal && !mask.defined()) {
    if (options.key_padding_mask.defined()) {
      const TensorOptions io(DType::Int64, q.device());
      mask = where(ge(arange(L, io).unsqueeze(1), arange(S, io).unsqueeze(0)), 0.0, -kInf).to(dt).view({1, 1, L, S});
    } else {
      causal = true;
    }
  }
  if (options.key_padding_mask.defined()) {
    const Tensor& m = options.key_padding_mask;
    const bool ok = batched ? (m.dim() == 2 && m.shape()[0] == N && m.shape()[1] == S)
                            : (m.dim() == 1 && m.shape()[0] == S);
    HG_CHECK(ok, "MultiheadAttention: key_padding_mask {} must be [{}{}] ([batch, S], or [S] unbatched)",
             m.describe(), batched ? fmt::format("{}, ", N) : "", S);
    const Tensor kp = additive_mask(m, dt, "key_padding_mask").view({N, 1, 1, S});
    mask = mask.defined() ? add(mask, kp) : kp;
  }

  const double p = is_training() ? dropout : 0.0;
  Tensor out, weights;
  if (options.need_weights) {
    auto r = halfgrad::detail::attention_math(q, k, v, mask, p, causal, std::nullopt, op);
    out = r.output;
    weights = options.average_attn_weights ? mean(r.weights, {1}) : r.weights;  // [N, L, S] or [N, H, L, S]
    if (!batched) weights = weights.squeeze(0);
  } else {
    out = scaled_dot_product_attention(q, k, v, mask, p, causal);
  }
  out = out_proj(out.transpose(1, 2).reshape({N, L, E}));  // [N, L, E]
  if (!batched) return {out.squeeze(0), weights};
  return {batch_first ? out : out.transpose(0, 1), weights};
}

}  // namespace halfgrad::nn
