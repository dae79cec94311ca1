#pragma once
// HG_CUDA_CHECK(call): run a CUDA runtime call; on failure throw
// halfgrad::Error naming the call, the error and where it happened.
// For .cu files (and host files built with the CUDA include path).
//
// Build note: fmt 9 turns constexpr off under nvcc (FMT_USE_CONSTEXPR=0) but
// leaves fmt::format_string's constructor consteval, so every fail()/HG_CHECK
// in a .cu stops with "call to consteval function ... did not produce a valid
// constant expression". Compile CUDA sources with -DFMT_USE_CONSTEXPR=1: it
// builds, and format strings are still checked at compile time.
#include <cuda_runtime.h>

#include "core/error.h"

namespace halfgrad::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file,
                                          int line) {
  // Clear the runtime's "last error" so the next, unrelated check does not
  // report it again. (Sticky errors, e.g. a kernel fault, cannot be cleared:
  // the context is dead and the process must restart.)
  cudaGetLastError();
  fail("CUDA error in {}: {} ({}) at {}:{}", call, cudaGetErrorString(err), cudaGetErrorName(err),
       file, line);
}

}  // namespace halfgrad::cuda::detail

#define HG_CUDA_CHECK(call)                                                                \
  do {                                                                                     \
    const cudaError_t hg_cuda_err_ = (call);                                               \
    if (hg_cuda_err_ != cudaSuccess)                                                       \
      ::halfgrad::cuda::detail::throw_cuda_error(hg_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)
