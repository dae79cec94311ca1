#pragma once
// Multi-tensor gradient norm and clipping: the kernels behind
// nn::utils::clip_grad_norm_ (PyTorch's torch.nn.utils.clip_grad_norm_).
// They live in amp/, next to the loss scaler's multi-tensor kernels whose
// launch machinery they share (amp/cuda/multi_tensor.cuh), so that nn can use
// them (dependencies point down: nn -> amp, never nn -> optim).
//
// Both take every gradient in one call: on CUDA a few launches for all of
// them (one per 128 tensors, then one to finish), on the current stream, and
// nothing waits for the device; the total norm stays on the device and the
// clip reads it there.
#include <cmath>
#include <vector>

#include <halfgrad/core/macros.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad::amp {

// The total norm of order `norm_type` over all elements of all grads, as if
// they were one vector: (sum |x|^p)^(1/p), or max |x| for p = inf (NaN if any
// element is NaN). Grads: float32, float16, bfloat16 or float64, on one device
// (any layout; a non-contiguous one is read through a contiguous copy).
// Accumulates in float32 for float32/float16/bfloat16 (float64 for float64)
// within a chunk of 16384 elements, and the chunks in float64, in a fixed
// order (the same result every run). Returns a float32 0-d tensor on the grads'
// device (0 when there are no elements). norm_type must be > 0 (inf allowed).
Tensor multi_tensor_norm(const std::vector<Tensor>& grads, double norm_type);

// grads *= min(max_norm / (total_norm + 1e-6), 1) in place, the coefficient
// computed in float32 from total_norm (a float32 one-element tensor on the
// grads' device, read there) with PyTorch's arithmetic. A coefficient of 1
// writes nothing (the grads stay bit-identical); a NaN total makes every grad
// NaN, an inf one makes finite grads 0 (and inf ones NaN), as in PyTorch.
// float16/bfloat16 grads multiply in float32 and round once.
void multi_tensor_clip(const std::vector<Tensor>& grads, const Tensor& total_norm, double max_norm);

namespace grad_norm {

// The per-element term and the finishing step, shared by the CPU and CUDA kernels.
enum Mode : int { kInf = 0, kOne = 1, kTwo = 2, kGeneral = 3 };

inline Mode mode_of(double p) {
  if (std::isinf(p)) return kInf;
  if (p == 1.0) return kOne;
  if (p == 2.0) return kTwo;
  return kGeneral;
}

HG_INLINE float pow_t(float a, float p) { return ::powf(a, p); }
HG_INLINE double pow_t(double a, double p) { return ::pow(a, p); }

template <typename A>
HG_INLINE A term(A x, Mode mode, A p) {
  const A a = x < A(0) ? -x : x;
  switch (mode) {
    case kOne: return a;
    case kTwo: return a * a;
    case kGeneral: return pow_t(a, p);
    case kInf: return a;
  }
  return a;
}

// The norm from the summed terms (or the max, for inf), in double.
HG_INLINE double finish(double acc, Mode mode, double p) {
  switch (mode) {
    case kOne: return acc;
    case kTwo: return ::sqrt(acc);
    case kGeneral: return ::pow(acc, 1.0 / p);
    case kInf: return acc;
  }
  return acc;
}

// PyTorch's clip_coef_clamped = clamp(max_norm / (total_norm + 1e-6), max=1)
// for a float32 total: `max_norm / tensor` is tensor.reciprocal() * max_norm
// in float32. NaN stays NaN (clamp propagates it).
HG_INLINE float clip_coef(float total, float max_norm) {
  const float c = (1.0f / (total + 1e-6f)) * max_norm;
  return c > 1.0f ? 1.0f : c;
}

}  // namespace grad_norm

}  // namespace halfgrad::amp
