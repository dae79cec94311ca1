#pragma once
// The same training step in LibTorch, in its own translation unit so that
// only this file sees torch headers. Built when LibTorch is found.
#include <functional>

namespace bench {
// Returns a callable that runs one training step (forward, loss, backward, SGD step).
std::function<void()> make_libtorch_step(int batch, int in, int hidden, int classes, float lr, int threads);
}  // namespace bench
