#pragma once
// The same training step in LibTorch, built as a module of its own
// (liblibtorch_step.so) that cpu_train_step loads with dlopen only in its
// `--child libtorch` processes: the others (halfgrad, the oneDNN floor, the
// parent) never load LibTorch or its OpenBLAS. Built when LibTorch is found.
#include <functional>

// sizes: in, hidden..., classes (an MLP of Linear layers with a ReLU between
// each two). Writes a callable that runs one training step (zero_grad, forward,
// cross-entropy, backward, SGD step) to *step and returns true, or writes the
// error to *error (when not null) and returns false. amp: forward and loss
// under LibTorch's CPU autocast in bfloat16 (LibTorch has no CPU GradScaler,
// and bfloat16 needs none).
extern "C" bool bench_make_libtorch_step(const int* sizes, int n_sizes, int batch, float lr, int threads, bool amp,
                                         std::function<void()>* step, char* error, int error_size);
using bench_make_libtorch_step_fn = decltype(&bench_make_libtorch_step);
