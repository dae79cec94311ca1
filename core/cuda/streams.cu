// Side streams, events, pinned host memory and the non-waiting copy
// (runtime.h, "Asynchronous host-to-device traffic"): what the data loader
// needs to move the next batch to the GPU while the current step runs, kept
// apart from runtime.cu so that file's contracts (every host copy waits)
// stay as they are.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>

namespace halfgrad::cuda {

namespace {
void require_device(int device, const char* op) {
  HG_CHECK(is_available(), "{}: CUDA is not available (no device, or the NVIDIA driver is missing or too old); "
           "use device 'cpu'", op);
  HG_CHECK(device >= 0 && device < device_count(), "{}: cuda:{} does not exist ({} CUDA device(s))", op, device,
           device_count());
}
// For the noexcept releases: report, never throw.
void report(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  std::fprintf(stderr, "halfgrad: %s failed: %s\n", what, cudaGetErrorString(err));
}
}  // namespace

void* host_alloc_pinned(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  HG_CHECK(is_available(), "host_alloc_pinned: CUDA is not available; use ordinary host memory (core/pinned.h "
           "falls back to it by itself)");
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("cudaHostAlloc: could not pin {} bytes of host memory ({}); page-locked memory is limited by the "
         "system (ulimit -l, or the RAM left): use a smaller batch or pin_memory = false",
         nbytes, cudaGetErrorString(err));
  }
  return p;
}

void host_free_pinned(void* ptr) noexcept {
  if (ptr != nullptr) report(cudaFreeHost(ptr), "cudaFreeHost");
}

void* stream_create(int device) {
  require_device(device, "cuda::stream_create");
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  HG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void stream_destroy(void* stream, int device) noexcept {
  if (stream == nullptr) return;
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (prev != device) report(cudaSetDevice(device), "cudaSetDevice");
  report(cudaStreamDestroy(static_cast<cudaStream_t>(stream)), "cudaStreamDestroy");
  if (prev >= 0 && prev != device) cudaSetDevice(prev);
}

void* event_create(int device) {
  require_device(device, "cuda::event_create");
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  HG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void event_destroy(void* event, int) noexcept {
  if (event != nullptr) report(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy");
}

void event_record(void* event, void* stream, int device) {
  DeviceGuard guard(device);
  HG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

void stream_wait_event(void* stream, void* event, int device) {
  DeviceGuard guard(device);
  HG_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}

void event_synchronize(void* event) { HG_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

void copy_bytes_async(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t nbytes, int device,
                      void* stream) {
  if (nbytes == 0) return;
  if (!dst_cuda && !src_cuda) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  require_device(device, "cuda::copy_bytes_async");
  DeviceGuard guard(device);
  const cudaMemcpyKind kind = !dst_cuda  ? cudaMemcpyDeviceToHost
                              : src_cuda ? cudaMemcpyDeviceToDevice
                                         : cudaMemcpyHostToDevice;
  HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, static_cast<cudaStream_t>(stream)));
}

}  // namespace halfgrad::cuda
