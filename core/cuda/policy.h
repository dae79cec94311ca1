#pragma once
// Decisions of the CUDA backend that need no GPU to make, kept apart from the
// CUDA calls that act on them so the CPU test suite can check them
// (tests/core/test_cuda_policy.cpp). Plain C++: no CUDA headers. Internal.
#include <cstddef>
#include <cstdint>
#include <string>

#include <halfgrad/core/error.h>

namespace halfgrad::cuda::policy {

// ---- out of memory (runtime.cu allocate, gemm.cu) ----------------------------------------
// On cudaErrorMemoryAllocation the allocator waits for the whole device
// (cudaDeviceSynchronize), trims the pool and retries. That sync is illegal while
// a stream is captured into a CUDA graph (it invalidates the capture), so it is
// done only when the capture status could be read and says "not capturing"; else
// the allocation fails at once with capture_oom_message. (The same rule for the
// device-wide wait a free falls back to when it cannot be ordered after the
// streams recorded for it: Storage::record_stream.)
inline bool may_sync_device(bool capture_status_known, bool capturing) {
  return capture_status_known && !capturing;
}

inline std::string capture_oom_message(size_t nbytes, int device) {
  return fmt::format(
      "cudaMallocAsync: out of memory on cuda:{} allocating {} bytes during CUDA graph capture. Outside a capture "
      "halfgrad would wait for the device and hand cached memory back to the driver, but a synchronisation now "
      "would invalidate the capture. Run the captured step once before capturing (so the pool holds its memory), "
      "free tensors or reduce the batch size, then capture again.",
      device, nbytes);
}

// ---- cuBLASLt epilogue pointers (gemm.cu) ------------------------------------------------
// cuBLASLt requires the bias, bias-gradient and aux (ReLU mask, GELU input)
// pointers of an epilogue to be 16-byte aligned. A view at an odd offset is not:
// the bias is copied to an aligned temporary, a bias gradient is computed into
// one and copied out, an under-aligned aux is not given to cuBLASLt (the layer
// takes its unfused path for it).
inline constexpr uintptr_t kEpiloguePointerAlignment = 16;
inline bool epilogue_pointer_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kEpiloguePointerAlignment == 0;
}

// ---- host <-> device copies (runtime.cu copy_bytes) --------------------------------------
// cudaMemcpyAsync promises nothing about when it has read a pageable host source
// (the runtime stages it only for the synchronous cudaMemcpy), and a pinned
// source is read by the DMA engine later still. copy_bytes promises the caller
// may reuse or free the host buffer on return, so every copy with a host side
// waits for its stream (cudaStreamSynchronize) before returning: what PyTorch's
// blocking copy does (cudaMemcpyAsync on the current stream, then a stream sync).
// Device-to-device copies stay asynchronous.
inline bool copy_waits_for_stream(bool dst_cuda, bool src_cuda) { return !dst_cuda || !src_cuda; }

inline std::string capture_host_copy_message(size_t nbytes, bool to_device) {
  return fmt::format(
      "cuda::copy_bytes: a {} copy of {} bytes during CUDA graph capture: it must wait for its stream (the host "
      "buffer may be reused once the call returns), which a capture forbids. Copy between host and device before "
      "capturing, and inside the graph use device tensors only.",
      to_device ? "host-to-device" : "device-to-host", nbytes);
}

}  // namespace halfgrad::cuda::policy
