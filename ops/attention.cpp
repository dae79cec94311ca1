// scaled_dot_product_attention (torch.nn.functional.scaled_dot_product_attention):
// PyTorch's math path as a composite of differentiable ops (matmul, where,
// add, softmax, dropout), so autograd records the inner ops and the result is
// twice differentiable (ops/transformer_ops.h). The lower-precision autocast
// row applies to the whole op; inside, the scores are taken to float32 for the
// mask and the softmax (a float16/bfloat16 input), and the weights rounded
// once to the input's dtype before the product with v.
#include <cmath>
#include <limits>

#include <halfgrad/core/error.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Shape batch_dims(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// The shape rules, before and after autocast.
void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  ops::check_defined(op, {{"query", &q}, {"key", &k}, {"value", &v}});
  HG_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
           "{}: query {}, key {} and value {} need at least 2 dims ([..., L, E], [..., S, E], [..., S, Ev])", op,
           q.describe(), k.describe(), v.describe());
  HG_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
           "{}: query {}, key {} and value {} must share one floating dtype; cast them with .to(), or run under "
           "amp::autocast",
           op, q.describe(), k.describe(), v.describe());
  HG_CHECK(q.shape().back() == k.shape().back(),
           "{}: the last dim of query {} (E = {}) must equal the last dim of key {} ({})", op, q.describe(),
           q.shape().back(), k.describe(), k.shape().back());
  HG_CHECK(k.shape()[k.dim() - 2] == v.shape()[v.dim() - 2],
           "{}: key {} and value {} must have the same sequence length S (dim -2: {} vs {})", op, k.describe(),
           v.describe(), k.shape()[k.dim() - 2], v.shape()[v.dim() - 2]);
  const Shape qb = batch_dims(q), kb = batch_dims(k), vb = batch_dims(v);
  ops::broadcast_shapes(fmt::format("{}: the batch dims of query {}, key {} and value {}", op, q.describe(),
                                    k.describe(), v.describe()),
                        ops::broadcast_shapes(std::string(op) + ": batch dims", qb, kb), vb);
}

}  // namespace

namespace detail {

AttentionResult attention_math(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                               double dropout_p, bool is_causal, std::optional<double> scale, const char* op) {
  check_qkv(op, query, key, value);
  HG_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, "{}: dropout_p must be in [0, 1], got {}", op, dropout_p);
  const int64_t L = query.shape()[query.dim() - 2], S = key.shape()[key.dim() - 2], E = query.shape().back();
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
  const DType dt = query.dtype(), wide = is_low_precision(dt) ? DType::Float32 : dt;
  // As PyTorch's math path: sqrt(scale) on each of q and k, so a float16
  // product does not overflow before the scaling.
  const double root = std::sqrt(std::abs(sc));
  const Tensor kt = mul(key, sc < 0 ? -root : root).transpose(-2, -1);
  Tensor scores = matmul(mul(query, root), kt).to(wide);  // [..., L, S]
  if (is_causal) {
    // keep j <= i: the lower triangle aligned at the top-left
    const TensorOptions io(DType::Int64, query.device());
    const Tensor keep = ge(arange(L, io).unsqueeze(1), arange(S, io).unsqueeze(0));
    scores = where(keep, scores, -kInf);
  }
  Tensor dead;  // rows with every position masked: zeros, not NaN
  if (attn_mask.defined()) {
    HG_CHECK(attn_mask.dtype() == DType::Bool || is_floating(attn_mask.dtype()),
             "{}: attn_mask {} must be bool (true = takes part) or floating (added to the scores)", op,
             attn_mask.describe());
    const Shape s = ops::broadcast_shapes(
        fmt::format("{}: attn_mask {} and the attention weights [..., L = {}, S = {}] {}", op, attn_mask.describe(),
                    L, S, shape_str(scores.shape())),
        attn_mask.shape(), scores.shape());
    HG_CHECK(s == scores.shape(), "{}: attn_mask {} must broadcast to the attention weights' shape {} ([..., L, S])",
             op, attn_mask.describe(), shape_str(scores.shape()));
    scores = attn_mask.dtype() == DType::Bool ? where(attn_mask, scores, -kInf) : add(scores, attn_mask.to(wide));
    dead = all(eq(scores, -kInf), -1, /*keepdim=*/true);
    scores = where(dead, 0.0, scores);
  }
  Tensor weights = softmax(scores, -1);
  if (dead.defined()) weights = where(dead, 0.0, weights);
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, /*training=*/true);
  weights = weights.to(dt);
  return {matmul(weights, value), weights};
}

}  // namespace detail

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  constexpr const char* op = "scaled_dot_product_attention";
  ops::check_defined(op, {{"query", &query}, {"key", &key}, {"value", &value}});
  HG_CHECK(!(is_causal && attn_mask.defined()),
           "{}: is_causal=true and an attn_mask were both given (PyTorch refuses this too); fold the causal mask "
           "into attn_mask, or pass only is_causal",
           op);
  HG_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, "{}: dropout_p must be in [0, 1], got {}", op, dropout_p);
  return dispatch::composite(OpId::scaled_dot_product_attention, {query, key, value, attn_mask},
                             [=](const std::vector<Tensor>& in) {
                               return detail::attention_math(in[0], in[1], in[2], in[3], dropout_p, is_causal, scale,
                                                             op)
                                   .output;
                             });
}

}  // namespace halfgrad
