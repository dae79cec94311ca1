// scaled_dot_product_attention (torch.nn.functional.scaled_dot_product_attention):
// two paths behind one composite (ops/transformer_ops.h says which is taken when).
//
//  - The math path, on every device: PyTorch's math path as a composite of
//    differentiable ops (matmul, where, add, softmax, dropout), so autograd
//    records the inner ops and the result is twice differentiable. Inside, the
//    scores are taken to float32 for the mask and the softmax (a
//    float16/bfloat16 input), and the weights rounded once to the input's dtype
//    before the product with v.
//  - The fused path, on CUDA: one recorded op whose forward and backward are
//    cuDNN's flash-attention graphs (kernels::fused_attention_*), taken when
//    the rules below hold and cuDNN says it has engines for the problem.
//
// The lower-precision autocast row applies to the whole op (the route is
// decided after autocast's casts, inside the composite's body).
#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include <halfgrad/core/error.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/dispatch/grad_mode.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

namespace {

using autograd::Grads;
using autograd::Saved;

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

std::atomic<bool> g_cudnn_sdp{true};
thread_local AttentionPathInfo t_last_path{AttentionPath::Math, "no scaled_dot_product_attention call yet on this thread"};

double scale_of(const Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.shape().back()));
}

// keep j <= i: the causal mask, the lower triangle aligned at the top-left ([L, S] bool)
Tensor causal_keep(int64_t L, int64_t S, Device device) {
  const TensorOptions io(DType::Int64, device);
  return ge(arange(L, io).unsqueeze(1), arange(S, io).unsqueeze(0));
}

bool any_requires_grad(const Tensor& q, const Tensor& k, const Tensor& v) {
  return autograd::grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// The route for tensors after autocast: "" for the fused path, else why the
// math path. The host rules first (cheap), then cuDNN itself, asked whether
// it has engines for the forward and, when a backward may run, the backward.
std::string math_only_reason(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                             double dropout_p, bool is_causal, double scale) {
  std::string why = detail::sdpa_fused_rules(q, k, v, attn_mask, dropout_p);
  if (!why.empty()) return why;
  return kernels::fused_attention_unsupported(q, k, v, kernels::FusedAttention{scale, is_causal},
                                              any_requires_grad(q, k, v));
}

// The gradients of attention written with differentiable ops, from q, k, v and
// the output gradient g: what the fused op's backward runs under create_graph,
// so that a double backward differentiates it (the fused kernels themselves
// are once differentiable). The weights are recomputed in float32 as the math
// path's; rowsum(dP * P) stands for rowsum(dO * O), which would need the
// output with its history.
Grads attention_backward_by_ops(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, double scale,
                                bool is_causal) {
  const DType dt = q.dtype(), wide = is_low_precision(dt) ? DType::Float32 : dt;
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)).to(wide), scale);
  if (is_causal) scores = where(causal_keep(q.shape()[2], k.shape()[2], q.device()), scores, -kInf);
  const Tensor p = softmax(scores, -1);
  const Tensor go = g.to(dt);
  const Tensor dv = matmul(p.to(dt).transpose(-2, -1), go);
  const Tensor dp = matmul(go, v.transpose(-2, -1)).to(wide);
  const Tensor ds = mul(mul(p, sub(dp, sum(mul(dp, p), {-1}, /*keepdim=*/true))), scale).to(dt);
  return {matmul(ds, k), matmul(ds.transpose(-2, -1), q), dv};
}

// The fused path: one recorded op, its forward and backward cuDNN's graphs.
// Saved: q, k, v, the output and the forward's float32 row statistics
// (log-sum-exp), all on the device; nothing syncs with the host.
Tensor attention_fused(const Tensor& query, const Tensor& key, const Tensor& value, double scale, bool is_causal) {
  const kernels::FusedAttention fa{scale, is_causal};
  return dispatch::call(
      OpId::scaled_dot_product_attention, {query, key, value},
      [fa](const std::vector<Tensor>& in) {
        const Tensor &q = in[0], &k = in[1], &v = in[2];
        Tensor out = make_tensor({q.shape()[0], q.shape()[1], q.shape()[2], v.shape()[3]}, q.options());
        const Tensor stats = make_tensor({q.shape()[0], q.shape()[1], q.shape()[2], 1},
                                         TensorOptions(DType::Float32, q.device()));
        kernels::fused_attention_forward(q, k, v, fa, out, stats);
        if (dispatch::recording()) dispatch::save_for_backward(stats);
        return out;
      },
      [fa](Saved& s, const Tensor& g) -> Grads {
        const Tensor &q = s.input(0), &k = s.input(1), &v = s.input(2);
        // create_graph: the formula in ops, so that it is differentiable in turn
        if (autograd::grad_enabled()) return attention_backward_by_ops(q, k, v, g, fa.scale, fa.causal);
        Tensor dq = make_tensor(q.shape(), q.options()), dk = make_tensor(k.shape(), k.options()),
               dv = make_tensor(v.shape(), v.options());
        kernels::fused_attention_backward(q, k, v, s.output(), g.to(q.dtype()).contiguous(), s.extra(0), fa, dq, dk,
                                          dv);
        return {dq, dk, dv};
      },
      dispatch::Save::Both);
}

}  // namespace

void enable_cudnn_sdp(bool enabled) { g_cudnn_sdp.store(enabled, std::memory_order_relaxed); }
bool cudnn_sdp_enabled() { return g_cudnn_sdp.load(std::memory_order_relaxed); }

AttentionPathInfo sdpa_path(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                            double dropout_p, bool is_causal, std::optional<double> scale) {
  constexpr const char* op = "sdpa_path";
  check_qkv(op, query, key, value);
  std::string why =
      math_only_reason(query, key, value, attn_mask, dropout_p, is_causal, scale_of(query, scale));
  return {why.empty() ? AttentionPath::CudnnFused : AttentionPath::Math, std::move(why)};
}

AttentionPathInfo sdpa_last_path() { return t_last_path; }

namespace detail {

std::string sdpa_fused_rules(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                             double dropout_p) {
  if (!cudnn_sdp_enabled()) return "the fused path is turned off (enable_cudnn_sdp(false))";
  if (attn_mask.defined()) return "an attn_mask is given (the fused path takes is_causal or no mask)";
  if (dropout_p > 0.0) return "dropout_p > 0 (the fused path has no dropout; pass 0 when not training)";
  if (!is_low_precision(q.dtype()))
    return fmt::format("the dtype is {} (the fused path takes float16 and bfloat16: run under amp::autocast or cast)",
                       dtype_name(q.dtype()));
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    return "query, key and value are not all 4-d (the fused path takes [B, H, L, E])";
  for (int d = 0; d < 2; ++d)
    if (k.shape()[d] != q.shape()[d] || v.shape()[d] != q.shape()[d])
      return "the batch and head dims of query, key and value differ (broadcast): the fused path needs them equal";
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return "a tensor is empty";
  const int64_t E = q.shape()[3], Ev = v.shape()[3];
  if (E % 8 != 0 || Ev % 8 != 0 || E > 256 || Ev > 256)
    return fmt::format("head dims E = {} and Ev = {}: the fused path takes multiples of 8 up to 256", E, Ev);
  if (q.strides()[3] != 1 || k.strides()[3] != 1 || v.strides()[3] != 1)
    return "the last dim of query, key or value has a stride other than 1 (call .contiguous())";
  if (!q.device().is_cuda()) return "the tensors are not on a CUDA device (the fused path is cuDNN's)";
  return "";
}

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
  if (is_causal) scores = where(causal_keep(L, S, query.device()), scores, -kInf);
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
  return dispatch::composite(
      OpId::scaled_dot_product_attention, {query, key, value, attn_mask}, [=](const std::vector<Tensor>& in) {
        const Tensor &q = in[0], &k = in[1], &v = in[2], &mask = in[3];
        check_qkv(op, q, k, v);
        const double sc = scale_of(q, scale);
        std::string why = math_only_reason(q, k, v, mask, dropout_p, is_causal, sc);
        const bool fused = why.empty();
        t_last_path = {fused ? AttentionPath::CudnnFused : AttentionPath::Math, std::move(why)};
        if (fused) return attention_fused(q, k, v, sc, is_causal);
        return detail::attention_math(q, k, v, mask, dropout_p, is_causal, scale, op).output;
      });
}

}  // namespace halfgrad
