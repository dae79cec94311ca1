#pragma once
// The activation a fused Linear applies in its GEMM's epilogue (ops::linear with
// an activation, ops::linear_chain, nn::Sequential's Linear+activation fusion).
#include <cstdint>

namespace halfgrad {

// GELU is the exact (erf) form, GELUTanh PyTorch's approximate="tanh".
enum class Activation : uint8_t { None, ReLU, GELU, GELUTanh };
// The GELUs keep the pre-activation z for backward (ReLU reads its output).
inline bool is_gelu(Activation a) { return a == Activation::GELU || a == Activation::GELUTanh; }

}  // namespace halfgrad
