// The built-in rows: PyTorch's autocast lists (aten/src/ATen/autocast_mode.cpp),
// for CUDA and for the CPU. Rows for ops halfgrad does not have yet stay here,
// so this file is the whole table; docs/amp.md ("What we match in PyTorch") lists
// the sources and where we differ on purpose.
#include <halfgrad/amp/policy.h>

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>

#include <halfgrad/amp/op_policy.h>

#include <halfgrad/core/error.h>

namespace halfgrad::amp {

namespace {

using P = CastPolicy;
// The fused Linear+activation ops (and linear_chain, a run of them) are linear
// then an activation with no row (it runs in linear's dtype), so they take
// linear's row.
constexpr const char* kFused = "halfgrad's Linear+activation: one GEMM with the activation in its epilogue, as linear";
constexpr const char* kFusedGelu = "halfgrad's Linear+GELU (exact): the GEMM, then one GELU pass, as linear";
constexpr const char* kFusedGeluTanh =
    "halfgrad's Linear+GELU (tanh): one GEMM with the GELU in its epilogue on CUDA, as linear";
constexpr const char* kChain = "halfgrad's Linear+activation layers as one op (nn::Sequential's runs of them), as linear";
constexpr const char* kViaDtype = "fp32 through the op's dtype argument: inputs are not cast, the output is float32";

struct Builtin {
  std::string_view op;
  CastPolicy policy;
  const char* note = "";
};

// clang-format off
constexpr Builtin kCuda[] = {
  // lower precision: the matmul and convolution family, where tensor cores pay
  {"conv1d", P::LowerPrecision}, {"conv2d", P::LowerPrecision}, {"conv3d", P::LowerPrecision},
  {"conv_tbc", P::LowerPrecision}, {"conv_transpose1d", P::LowerPrecision}, {"conv_transpose2d", P::LowerPrecision},
  {"conv_transpose3d", P::LowerPrecision}, {"convolution", P::LowerPrecision}, {"prelu", P::LowerPrecision},
  {"addmm", P::LowerPrecision}, {"addmv", P::LowerPrecision}, {"addr", P::LowerPrecision},
  {"matmul", P::LowerPrecision}, {"einsum", P::LowerPrecision}, {"mm", P::LowerPrecision},
  {"mv", P::LowerPrecision}, {"linalg_vecdot", P::LowerPrecision}, {"linear", P::LowerPrecision},
  {"addbmm", P::LowerPrecision}, {"baddbmm", P::LowerPrecision}, {"bmm", P::LowerPrecision},
  {"chain_matmul", P::LowerPrecision}, {"linalg_multi_dot", P::LowerPrecision}, {"lstm_cell", P::LowerPrecision},
  {"gru_cell", P::LowerPrecision}, {"rnn_tanh_cell", P::LowerPrecision}, {"rnn_relu_cell", P::LowerPrecision},
  {"scaled_dot_product_attention", P::LowerPrecision},
  {"linear_relu", P::LowerPrecision, kFused}, {"linear_gelu", P::LowerPrecision, kFusedGelu},
  {"linear_gelu_tanh", P::LowerPrecision, kFusedGeluTanh}, {"linear_chain", P::LowerPrecision, kChain},
  // fp32: ops whose range or precision float16 cannot carry
  {"acos", P::Fp32}, {"asin", P::Fp32}, {"cosh", P::Fp32}, {"erfinv", P::Fp32}, {"exp", P::Fp32},
  {"expm1", P::Fp32}, {"log", P::Fp32}, {"log10", P::Fp32}, {"log2", P::Fp32}, {"log1p", P::Fp32},
  {"reciprocal", P::Fp32}, {"rsqrt", P::Fp32}, {"sinh", P::Fp32}, {"tan", P::Fp32}, {"pow", P::Fp32},
  {"softplus", P::Fp32}, {"layer_norm", P::Fp32}, {"group_norm", P::Fp32}, {"rms_norm", P::Fp32},
  {"frobenius_norm", P::Fp32}, {"nuclear_norm", P::Fp32}, {"cosine_similarity", P::Fp32},
  {"poisson_nll_loss", P::Fp32}, {"cosine_embedding_loss", P::Fp32}, {"nll_loss", P::Fp32},
  {"nll_loss2d", P::Fp32}, {"hinge_embedding_loss", P::Fp32}, {"kl_div", P::Fp32}, {"l1_loss", P::Fp32},
  {"smooth_l1_loss", P::Fp32}, {"huber_loss", P::Fp32}, {"mse_loss", P::Fp32},
  {"margin_ranking_loss", P::Fp32}, {"multilabel_margin_loss", P::Fp32}, {"soft_margin_loss", P::Fp32},
  {"triplet_margin_loss", P::Fp32}, {"multi_margin_loss", P::Fp32},
  {"binary_cross_entropy_with_logits", P::Fp32}, {"dist", P::Fp32}, {"pdist", P::Fp32}, {"cdist", P::Fp32},
  {"renorm", P::Fp32}, {"logsumexp", P::Fp32},
  {"upsample_nearest1d", P::Fp32}, {"upsample_nearest2d", P::Fp32}, {"upsample_nearest3d", P::Fp32},
  {"upsample_linear1d", P::Fp32}, {"upsample_bilinear2d", P::Fp32}, {"upsample_trilinear3d", P::Fp32},
  {"upsample_bicubic2d", P::Fp32},
  {"cross_entropy", P::Fp32, "composite in PyTorch (log_softmax + nll_loss, both fp32); one fused op here"},
  {"prod", P::Fp32, kViaDtype}, {"softmax", P::Fp32, kViaDtype}, {"log_softmax", P::Fp32, kViaDtype},
  {"cumprod", P::Fp32, kViaDtype}, {"cumsum", P::Fp32, kViaDtype}, {"linalg_vector_norm", P::Fp32, kViaDtype},
  {"linalg_matrix_norm", P::Fp32, kViaDtype}, {"sum", P::Fp32, kViaDtype}, {"norm", P::Fp32, kViaDtype},
  // promote: ops that combine several inputs and must see one dtype
  {"addcdiv", P::Promote}, {"addcmul", P::Promote}, {"atan2", P::Promote}, {"bilinear", P::Promote},
  {"cross", P::Promote}, {"dot", P::Promote}, {"vdot", P::Promote}, {"grid_sampler", P::Promote},
  {"index_put", P::Promote}, {"tensordot", P::Promote}, {"scatter_add", P::Promote},
  {"cat", P::Promote}, {"stack", P::Promote},
  // banned
  {"binary_cross_entropy", P::Banned},
};

constexpr Builtin kCpu[] = {
  {"conv1d", P::LowerPrecision}, {"conv2d", P::LowerPrecision}, {"conv3d", P::LowerPrecision},
  {"bmm", P::LowerPrecision}, {"mm", P::LowerPrecision}, {"linalg_vecdot", P::LowerPrecision},
  {"baddbmm", P::LowerPrecision}, {"addmm", P::LowerPrecision}, {"addbmm", P::LowerPrecision},
  {"linear", P::LowerPrecision}, {"matmul", P::LowerPrecision}, {"conv_tbc", P::LowerPrecision},
  {"conv_transpose1d", P::LowerPrecision}, {"conv_transpose2d", P::LowerPrecision},
  {"conv_transpose3d", P::LowerPrecision}, {"prelu", P::LowerPrecision},
  {"scaled_dot_product_attention", P::LowerPrecision},
  {"linear_relu", P::LowerPrecision, kFused}, {"linear_gelu", P::LowerPrecision, kFusedGelu},
  {"linear_gelu_tanh", P::LowerPrecision, kFusedGeluTanh}, {"linear_chain", P::LowerPrecision, kChain},
  // fp32: the losses
  {"mse_loss", P::Fp32}, {"nll_loss", P::Fp32}, {"cross_entropy", P::Fp32}, {"l1_loss", P::Fp32},
  {"smooth_l1_loss", P::Fp32}, {"huber_loss", P::Fp32}, {"kl_div", P::Fp32}, {"binary_cross_entropy", P::Fp32},
  {"binary_cross_entropy_with_logits", P::Fp32}, {"margin_ranking_loss", P::Fp32},
  {"hinge_embedding_loss", P::Fp32}, {"triplet_margin_loss", P::Fp32}, {"multilabel_margin_loss", P::Fp32},
  {"soft_margin_loss", P::Fp32}, {"multi_margin_loss", P::Fp32}, {"poisson_nll_loss", P::Fp32},
  {"cosine_embedding_loss", P::Fp32}, {"ctc_loss", P::Fp32},
  // fp32: 3-d pooling, padding, upsampling
  {"avg_pool3d", P::Fp32}, {"max_pool3d", P::Fp32}, {"adaptive_avg_pool3d", P::Fp32},
  {"adaptive_max_pool3d", P::Fp32}, {"reflection_pad1d", P::Fp32}, {"reflection_pad2d", P::Fp32},
  {"replication_pad1d", P::Fp32}, {"replication_pad2d", P::Fp32}, {"replication_pad3d", P::Fp32},
  {"upsample_nearest3d", P::Fp32}, {"upsample_trilinear3d", P::Fp32}, {"upsample_linear1d", P::Fp32},
  {"upsample_bilinear2d", P::Fp32}, {"upsample_bicubic2d", P::Fp32},
  // fp32: linear algebra, fft and other numerically sensitive ops
  {"cholesky", P::Fp32}, {"cholesky_inverse", P::Fp32}, {"cholesky_solve", P::Fp32}, {"inverse", P::Fp32},
  {"lu_solve", P::Fp32}, {"orgqr", P::Fp32}, {"ormqr", P::Fp32}, {"pinverse", P::Fp32}, {"qr", P::Fp32},
  {"svd", P::Fp32}, {"eig", P::Fp32}, {"eigh", P::Fp32}, {"linalg_solve", P::Fp32}, {"linalg_det", P::Fp32},
  {"linalg_inv", P::Fp32}, {"linalg_cholesky", P::Fp32}, {"linalg_qr", P::Fp32}, {"linalg_svd", P::Fp32},
  {"linalg_eig", P::Fp32}, {"linalg_eigh", P::Fp32}, {"linalg_lstsq", P::Fp32}, {"linalg_matrix_exp", P::Fp32},
  {"fft_fft", P::Fp32}, {"fft_ifft", P::Fp32}, {"fft_rfft", P::Fp32}, {"fft_irfft", P::Fp32},
  {"fft_fftn", P::Fp32}, {"fft_ifftn", P::Fp32}, {"stft", P::Fp32}, {"cdist", P::Fp32},
  {"grid_sampler", P::Fp32}, {"prod", P::Fp32}, {"quantile", P::Fp32}, {"nanquantile", P::Fp32},
  {"trace", P::Fp32}, {"trapz", P::Fp32},
  // promote
  {"stack", P::Promote}, {"cat", P::Promote}, {"index_copy", P::Promote},
};
// clang-format on

// The ops halfgrad has that deliberately have no row (they run in their
// inputs' dtypes, as in PyTorch: elementwise ops promote as usual, views and
// copies keep the dtype, in-place ops are never autocast). Every OpId has a
// row or is listed here, per device type (tests/amp/test_op_id.cpp).
#define HG_NO_ROW_BOTH                                                                                        \
  "add", "sub", "mul", "div", "maximum", "minimum", "neg", "sqrt", "abs", "relu", "gelu", "sigmoid", "tanh",  \
      "clamp", "eq", "ne", "lt", "le", "gt", "ge", "where", "mean", "max", "argmax", "dropout", "view",       \
      "permute", "narrow", "slice", "unsqueeze", "squeeze", "expand", "clone", "contiguous", "to",           \
      "to_device", "fill", "copy", "sort", "argsort", "topk", "multinomial", "min", "argmin", "amax", "amin", "all", "any",     \
      "isclose", "isnan", "isinf", "isfinite", "remainder", "fmod", "index_select", "gather", "scatter",       \
      "masked_fill", "one_hot", "batch_norm", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "hardswish", \
      "hardsigmoid", "relu6", "sin", "cos", "erf", "floor", "round", "sign", "var", "std", "embedding",     \
      "scaled_mm", "fp8_quantize", "fp8_update_scales"
constexpr std::string_view kNoRowCuda[] = {HG_NO_ROW_BOTH};
// PyTorch's CPU lists are shorter: these take fp32 (or promote: scatter_add,
// index_put) on CUDA only. layer_norm too: on the CPU it runs in its input's
// dtype (its statistics in float32 all the same, ops/layer_norm.cpp).
constexpr std::string_view kNoRowCpu[] = {HG_NO_ROW_BOTH, "exp", "log", "pow", "softmax", "log_softmax", "sum",
                                          "cumsum", "logsumexp", "norm", "scatter_add", "index_put",
                                          "layer_norm"};
#undef HG_NO_ROW_BOTH

// Every op halfgrad has gets a decision, checked when this file compiles: a
// row on the device type or a place in its no-row list, never both, and no
// stale no-row entry. Adding an op to dispatch/op_id.h without one fails here.
template <size_t R, size_t N>
constexpr bool every_op_decided(const Builtin (&rows)[R], const std::string_view (&no_row)[N]) {
  const auto has_row = [&](std::string_view op) {
    for (const auto& r : rows)
      if (r.op == op) return true;
    return false;
  };
  for (std::string_view op : no_row)
    if (!find_op(op) || has_row(op)) return false;
  for (size_t i = 0; i < kOpCount; ++i) {
    const std::string_view op = op_name(static_cast<OpId>(i));
    int listed = 0;
    for (std::string_view n : no_row) listed += n == op;
    if (has_row(op) == (listed == 1) || listed > 1) return false;
  }
  return true;
}
static_assert(every_op_decided(kCuda, kNoRowCuda),
              "CUDA: an op in dispatch/op_id.h has neither a policy row nor a place in kNoRowCuda (or has both, or "
              "a no-row entry names no op)");
static_assert(every_op_decided(kCpu, kNoRowCpu),
              "CPU: an op in dispatch/op_id.h has neither a policy row nor a place in kNoRowCpu (or has both, or "
              "a no-row entry names no op)");

struct Table {
  std::mutex mutex;  // guards `overrides` and the writes to `policies`
  // op -> policy; std::nullopt marks a built-in row the user removed. Every
  // override is kept here (policy_rows prints them); those of ops halfgrad has
  // are stored into `policies` too.
  std::map<std::string, std::optional<CastPolicy>, std::less<>> overrides[2];
  // The policy of each OpId per device type (kNoRow: none), overrides
  // applied: what lookup_policy(DeviceType, OpId) reads with one relaxed load.
  static constexpr std::int8_t kNoRow = -1;
  std::array<std::atomic<std::int8_t>, kOpCount> policies[2];
  Table() { restore_builtin(); }
  void restore_builtin();
};
Table& table() {
  static Table t;
  return t;
}
std::span<const Builtin> builtin(DeviceType d) {
  if (d == DeviceType::CUDA) return kCuda;
  return kCpu;
}
int slot(DeviceType d) { return d == DeviceType::CUDA ? 1 : 0; }
std::int8_t encode(std::optional<CastPolicy> p) { return p ? static_cast<std::int8_t>(*p) : Table::kNoRow; }

// The built-in rows into the arrays (the first row of an op wins, as in
// builtin_index). Each entry is stored once, so a lookup racing a reset sees
// the old or the built-in policy, never a passing "no row".
void Table::restore_builtin() {
  for (DeviceType d : {DeviceType::CPU, DeviceType::CUDA}) {
    std::array<std::int8_t, kOpCount> resolved;
    resolved.fill(kNoRow);
    for (const auto& r : builtin(d))
      if (const auto id = find_op(r.op); id && resolved[static_cast<size_t>(*id)] == kNoRow)
        resolved[static_cast<size_t>(*id)] = encode(r.policy);
    for (size_t i = 0; i < kOpCount; ++i) policies[slot(d)][i].store(resolved[i], std::memory_order_relaxed);
  }
}

// Fast lookup of the built-in rows (built once).
const std::map<std::string, CastPolicy, std::less<>>& builtin_index(DeviceType d) {
  static const auto make = [](std::span<const Builtin> rows) {
    std::map<std::string, CastPolicy, std::less<>> m;
    for (const auto& r : rows) m.emplace(std::string(r.op), r.policy);
    return m;
  };
  static const auto cpu = make(kCpu), cuda = make(kCuda);
  return d == DeviceType::CUDA ? cuda : cpu;
}

}  // namespace

std::string_view policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::LowerPrecision: return "lower_precision";
    case CastPolicy::Fp32: return "fp32";
    case CastPolicy::Promote: return "promote";
    case CastPolicy::Banned: return "banned";
  }
  return "?";
}

std::optional<CastPolicy> lookup_policy(DeviceType device, OpId op) {
  const std::int8_t p = table().policies[slot(device)][static_cast<size_t>(op)].load(std::memory_order_relaxed);
  if (p == Table::kNoRow) return std::nullopt;
  return static_cast<CastPolicy>(p);
}

std::span<const std::string_view> ops_without_row(DeviceType device) {
  if (device == DeviceType::CUDA) return kNoRowCuda;
  return kNoRowCpu;
}

std::optional<CastPolicy> lookup_policy(DeviceType device, std::string_view op) {
  if (const auto id = find_op(op)) return lookup_policy(device, *id);
  // A row for an op halfgrad does not have (or one added at run time).
  Table& t = table();
  {
    std::lock_guard lock(t.mutex);
    auto& ov = t.overrides[slot(device)];
    if (!ov.empty()) {
      auto it = ov.find(op);
      if (it != ov.end()) return it->second;
    }
  }
  const auto& index = builtin_index(device);
  auto it = index.find(op);
  if (it == index.end()) return std::nullopt;
  return it->second;
}

std::vector<PolicyRow> policy_rows(DeviceType device) {
  std::vector<PolicyRow> rows;
  Table& t = table();
  std::lock_guard lock(t.mutex);
  const auto& ov = t.overrides[slot(device)];
  for (const auto& r : builtin(device)) {
    auto it = ov.find(r.op);
    if (it == ov.end()) {
      rows.push_back({std::string(r.op), r.policy, r.note});
    } else if (it->second) {
      rows.push_back({std::string(r.op), *it->second, "overridden at run time"});
    }
  }
  for (const auto& [op, p] : ov)
    if (p && !builtin_index(device).count(op)) rows.push_back({op, *p, "added at run time"});
  return rows;
}

void set_policy(DeviceType device, std::string_view op, std::optional<CastPolicy> policy) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.overrides[slot(device)][std::string(op)] = policy;
  if (const auto id = find_op(op))
    t.policies[slot(device)][static_cast<size_t>(*id)].store(encode(policy), std::memory_order_relaxed);
}

void reset_policies() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  for (auto& ov : t.overrides) ov.clear();
  t.restore_builtin();
}

std::string banned_message(DeviceType device, std::string_view op) {
  if (op == "binary_cross_entropy")
    return fmt::format(
        "binary_cross_entropy is unsafe to autocast ({} autocast): it takes probabilities, and float16 "
        "cannot resolve probabilities near 0 and 1. Use binary_cross_entropy_with_logits (it combines a sigmoid "
        "and the loss and is safe to autocast), or run this op outside the autocast region.",
        device_type_name(device));
  return fmt::format("{} is banned under {} autocast; run it outside the autocast region", op,
                     device_type_name(device));
}

std::string policy_markdown() {
  std::string out;
  for (DeviceType d : {DeviceType::CUDA, DeviceType::CPU}) {
    out += fmt::format("### {} (default lower-precision dtype: {})\n\n", d == DeviceType::CUDA ? "CUDA" : "CPU",
                       d == DeviceType::CUDA ? "float16" : "bfloat16");
    for (CastPolicy p : {CastPolicy::LowerPrecision, CastPolicy::Fp32, CastPolicy::Promote, CastPolicy::Banned}) {
      std::string ops, notes;
      int count = 0;
      for (const auto& r : policy_rows(d)) {
        if (r.policy != p) continue;
        ops += (count++ ? ", " : "") + fmt::format("`{}`", r.op);
        if (!r.note.empty()) notes += fmt::format("\n  - `{}`: {}", r.op, r.note);
      }
      if (count == 0) continue;
      out += fmt::format("- **{}** ({} ops): {}{}\n", policy_name(p), count, ops, notes);
    }
    out += "\n";
  }
  out += "Ops without a row run in the dtypes of their inputs (elementwise ops promote as usual).\n";
  return out;
}

}  // namespace halfgrad::amp
