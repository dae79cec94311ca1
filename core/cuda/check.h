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

#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>

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

namespace halfgrad::cuda {

// The stream every halfgrad kernel is queued on (cuda::current_stream()).
inline cudaStream_t stream() { return static_cast<cudaStream_t>(current_stream()); }

// Makes `device` current for a scope and puts the caller's device back
// (kernels launch on the current device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    HG_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) {
      HG_CUDA_CHECK(cudaSetDevice(device));
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(prev_);  // a destructor must not throw
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool switched_ = false;
};

// A one-time allocation (a cuBLASLt handle or workspace, a generator's state)
// may come while the stream is being captured into a CUDA graph (a captured
// step whose warm-up ran on another stream). cudaMalloc is forbidden in the
// default (global) capture mode; relaxed mode allows it for this thread, and
// the memory outlives the graph.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { HG_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace halfgrad::cuda
