#pragma once
// Op identity (internal: not installed). One list of every op the dispatcher
// runs (dispatch::call / composite / call_nograd / inplace), known at compile
// time and shared by the dispatcher, the autocast step and its policy table
// (amp/policy.cpp resolves its name-keyed rows into an array indexed by OpId),
// autograd node names and the trace. Adding or renaming an op here without
// deciding its autocast policy fails the build (a static_assert in amp/policy.cpp).
//
// The names are the ops' names in messages, node names and the trace; an
// in-place op prints as its OpId's name plus "_" (add_, copy_, fill_).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

// clang-format off
#define HALFGRAD_OPS(X)                                                                                     \
  /* elementwise */                                                                                         \
  X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum) X(neg) X(exp) X(log) X(sqrt) X(abs) X(relu)      \
  X(gelu) X(sigmoid) X(tanh) X(clamp) X(eq) X(ne) X(lt) X(le) X(gt) X(ge) X(where) X(remainder) X(fmod)     \
  X(sin) X(cos) X(erf) X(floor) X(round) X(sign)                                                            \
  /* reductions */                                                                                          \
  X(sum) X(mean) X(max) X(argmax) X(min) X(argmin) X(amax) X(amin) X(logsumexp) X(norm) X(all) X(any)      \
  X(isclose) X(isnan) X(isinf) X(isfinite) X(var) X(std)                                                   \
  /* sorting and scans */                                                                                   \
  X(sort) X(argsort) X(topk) X(cumsum)                                                                      \
  /* linear algebra */                                                                                      \
  X(mm) X(bmm) X(addmm) X(matmul) X(linear) X(linear_relu) X(linear_gelu) X(linear_gelu_tanh)               \
  X(linear_chain)                                                                                           \
  /* convolutions, normalisation, pooling (ops/conv.cpp, ops/norm_pool.cpp) */                              \
  X(conv1d) X(conv2d) X(conv3d) X(conv_transpose1d) X(conv_transpose2d) X(conv_transpose3d) X(batch_norm)   \
  X(max_pool2d) X(avg_pool2d) X(adaptive_avg_pool2d)                                                        \
  /* activations of MobileNetV3 */                                                                          \
  X(prelu) X(hardswish) X(hardsigmoid) X(relu6)                                                             \
  /* softmax, losses, dropout */                                                                            \
  X(softmax) X(log_softmax) X(nll_loss) X(cross_entropy) X(mse_loss) X(binary_cross_entropy)               \
  X(binary_cross_entropy_with_logits) X(l1_loss) X(smooth_l1_loss) X(dropout)                               \
  /* views, copies, joins */                                                                                \
  X(view) X(permute) X(narrow) X(slice) X(unsqueeze) X(squeeze) X(expand) X(clone) X(contiguous) X(to)      \
  X(to_device) X(cat) X(stack)                                                                              \
  /* indexing and gathering */                                                                              \
  X(index_select) X(gather) X(scatter) X(scatter_add) X(masked_fill) X(one_hot) X(index_put)                \
  /* the transformer's ops, composites (ops/layer_norm.cpp, ops/embedding.cpp, ops/attention.cpp) */         \
  X(layer_norm) X(embedding) X(scaled_dot_product_attention)                                                \
  /* fp8 (ops/fp8.cpp) */                                                                                   \
  X(scaled_mm) X(fp8_quantize) X(fp8_update_scales)                                                         \
  /* sampling (ops/multinomial.cpp) */                                                                       \
  X(multinomial)                                                                                            \
  /* in place only (add_, sub_, mul_, div_ use add, sub, mul, div) */                                       \
  X(fill) X(copy)
// clang-format on

namespace halfgrad {

enum class OpId : std::uint16_t {
#define HALFGRAD_OP_ENUM(name) name,
  HALFGRAD_OPS(HALFGRAD_OP_ENUM)
#undef HALFGRAD_OP_ENUM
  kCount
};

inline constexpr std::size_t kOpCount = static_cast<std::size_t>(OpId::kCount);

namespace detail {
inline constexpr std::string_view kOpNames[] = {
#define HALFGRAD_OP_NAME(name) #name,
    HALFGRAD_OPS(HALFGRAD_OP_NAME)
#undef HALFGRAD_OP_NAME
};
static_assert(std::size(kOpNames) == kOpCount);
}  // namespace detail

constexpr std::string_view op_name(OpId op) {
  const auto i = static_cast<std::size_t>(op);
  return i < kOpCount ? detail::kOpNames[i] : std::string_view("?");
}

// The op named `name`, or nothing (a policy row for an op halfgrad does not have).
constexpr std::optional<OpId> find_op(std::string_view name) {
  for (std::size_t i = 0; i < kOpCount; ++i)
    if (detail::kOpNames[i] == name) return static_cast<OpId>(i);
  return std::nullopt;
}

// Names are unique (find_op would miss the second of two).
static_assert([] {
  for (std::size_t i = 0; i < kOpCount; ++i)
    if (find_op(detail::kOpNames[i]) != static_cast<OpId>(i)) return false;
  return true;
}());

}  // namespace halfgrad
