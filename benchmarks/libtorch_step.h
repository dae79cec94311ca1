#pragma once
// The same training step in LibTorch, in its own translation unit so that
// only this file sees torch headers. Built when LibTorch is found.
#include <functional>

namespace bench {
// Returns a callable that runs one training step (forward, loss, backward, SGD
// step); amp: forward and loss under LibTorch's CPU autocast in bfloat16
// (LibTorch has no GradScaler, and bfloat16 needs none).
std::function<void()> make_libtorch_step(int batch, int in, int hidden, int classes, float lr, int threads, bool amp);
}  // namespace bench
