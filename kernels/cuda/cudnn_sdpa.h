#pragma once
// Internal (not installed): what the cuDNN fused attention
// (kernels/cuda/cudnn_sdpa.cpp) shows its tests. A plain C++ header (no CUDA
// includes): the plan key is host logic, checked on any machine.
#include <cstdint>
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::kernels::cuda {

// The largest power of two, up to 16, dividing the address: the byte alignment
// cuDNN is told (its vectorised loads depend on it), so part of the problem.
inline int64_t byte_alignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  int64_t align = 16;
  while (align > 1 && addr % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

// The plan cache's key: everything a compiled cuDNN graph depends on, for the
// forward or the backward of one problem: dtype, device, the causal mask, and
// the dims, strides and byte alignment of q, k and v (out, stats, dout and the
// gradients are contiguous by contract: their layout follows from the dims).
// Not in it: the scale (a by-value scalar cuDNN reads at each run) and the
// pointers.
inline std::vector<int64_t> sdpa_plan_key(bool backward, const Tensor& q, const Tensor& k, const Tensor& v,
                                          bool causal) {
  std::vector<int64_t> key{backward ? 1 : 0, static_cast<int64_t>(q.dtype()), q.device().index(), causal ? 1 : 0};
  for (const Tensor* t : {&q, &k, &v}) {
    key.push_back(t->dim());
    key.insert(key.end(), t->shape().begin(), t->shape().end());
    key.insert(key.end(), t->strides().begin(), t->strides().end());
    key.push_back(byte_alignment(t->data_ptr()));
  }
  return key;
}

// The plan cache's counters (process-wide): plans built (a graph planned, an
// engine found or not), lookups that found a plan, and builds for which cuDNN
// had no engine (`unsupported`: the caller took the math path).
struct SdpaPlanCounts {
  uint64_t built = 0;
  uint64_t hits = 0;
  uint64_t unsupported = 0;
};
SdpaPlanCounts sdpa_plan_counts();
void reset_sdpa_plan_counts();  // the counters only; the cached plans stay

}  // namespace halfgrad::kernels::cuda
