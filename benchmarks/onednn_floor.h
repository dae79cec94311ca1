#pragma once
// The floor of a training step of an MLP: only its GEMMs, through oneDNN's
// matmul primitive directly (created once), nothing else. Per Linear layer
// (in -> out, batch B; W is [out, in] row-major as nn::Linear keeps it):
//   forward        Y[B, out]  = X[B, in] x W^T + b
//   weight grad    dW[out, in] = dY^T[out, B] x X[B, in]
//   input grad     dX[B, in]  = dY[B, out] x W[out, in]   (not for the first layer)
// float32, or bf16 (inputs, weights and outputs bf16, f32 accumulation, as
// the AMP step's GEMMs). Built where halfgrad uses oneDNN (HALFGRAD_BENCH_ONEDNN).
#include <functional>
#include <string>
#include <vector>

namespace bench {

// sizes: in, hidden..., classes. Returns a callable that runs the step's GEMMs
// once (in the order the step runs them), or throws when oneDNN cannot.
std::function<void()> make_onednn_floor(const std::vector<int>& sizes, int batch, bool bf16);

}  // namespace bench
