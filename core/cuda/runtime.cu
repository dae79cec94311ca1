// The CUDA runtime layer (see runtime.h). The only file that owns device
// discovery, the current stream and the memory pool.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/cuda/policy.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>

namespace halfgrad::cuda {
namespace {

// Streams are thread-local, like PyTorch's: each thread queues on its own
// choice. nullptr is the legacy default stream, which orders itself against
// every other blocking stream on the device: slow-ish but always correct.
thread_local cudaStream_t t_stream = nullptr;



void check_device(int device, const char* op) {
  HG_CHECK(is_available(),
           "{}: CUDA is not available (no device, or the NVIDIA driver is missing or too old "
           "for this build); use device 'cpu'",
           op);
  HG_CHECK(device >= 0 && device < device_count(), "{}: cuda:{} does not exist ({} CUDA device(s))",
           op, device, device_count());
}

// The device's default pool, configured on first use. Its release threshold
// says how much unused memory the pool may keep cached at a synchronisation
// point; the default (0) hands everything back to the driver each time, so a
// training step would pay for cudaMalloc again. UINT64_MAX: keep it all.
cudaMemPool_t pool_for(int device) {
  static std::unique_ptr<std::once_flag[]> once(new std::once_flag[device_count()]);
  cudaMemPool_t pool;
  HG_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::call_once(once[device], [pool] {  // a throw leaves it unset: tried again next time
    // The first allocation may come inside a graph capture (a process whose
    // first CUDA tensor is made while capturing): setting a pool attribute is
    // forbidden in the default capture mode and would end the capture.
    RelaxedCaptureMode relaxed;
    uint64_t keep_all = UINT64_MAX;
    HG_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  });
  return pool;
}

std::string format_bytes(uint64_t n) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.2f} {}", v, units[u]);
}

[[noreturn]] void out_of_memory(size_t nbytes, int device, cudaMemPool_t pool) {
  size_t free_b = 0, total_b = 0;
  uint64_t used = 0, reserved = 0;  // best effort: the message must not fail too
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
  if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess)
    cudaGetLastError();
  fail(
      "cudaMallocAsync: out of memory on cuda:{} allocating {} ({} bytes). The GPU has {} free "
      "of {}; halfgrad's tensors use {} ({} reserved by its pool). Free tensors you no longer "
      "need (e.g. losses kept for logging: keep .item() instead), reduce the batch size, or "
      "train in float16/bfloat16 to halve activation memory.",
      device, format_bytes(nbytes), nbytes, format_bytes(free_b), format_bytes(total_b),
      format_bytes(used), format_bytes(reserved));
}

template <typename T>
__global__ void fill_kernel(T* __restrict__ out, size_t n, T value) {
  // Grid-stride loop: a capped grid covers any n, each thread taking every
  // (gridDim * blockDim)-th element; consecutive threads write consecutive
  // addresses, so every warp's stores coalesce.
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = value;
}

template <typename T>
T convert(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else if constexpr (std::is_same_v<acc_t<T>, float> && !std::is_same_v<T, float>) {
    return T(static_cast<float>(v));  // core/half.h / float8.h rounding, identical to the CPU backend
  } else if constexpr (std::is_integral_v<T>) {
    return float_to_int64(v);  // NaN and out of range defined, as the CPU backend
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
void launch_fill(void* dst, size_t n, double value) {
  const T v = convert<T>(value);
  // When every byte of the value is the same (zeros, false/true, ...),
  // cudaMemsetAsync does the job without a kernel.
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  if (std::all_of(bytes, bytes + sizeof(T), [&](unsigned char b) { return b == bytes[0]; })) {
    HG_CUDA_CHECK(cudaMemsetAsync(dst, bytes[0], n * sizeof(T), stream()));
    return;
  }
  constexpr unsigned threads = 256;
  // 4096 blocks x 256 threads is ~4x what an H100/H200 holds resident: enough
  // to fill the machine, and the loop handles the rest.
  const auto blocks = static_cast<unsigned>(std::min<size_t>((n + threads - 1) / threads, 4096));
  fill_kernel<T><<<blocks, threads, 0, stream()>>>(static_cast<T*>(dst), n, v);
  HG_CUDA_CHECK(cudaGetLastError());  // launch errors (bad config, no kernel image for this GPU)
}

// Whether `s` is being captured into a graph, as far as the runtime can say.
// An error (e.g. cudaErrorStreamCaptureImplicit: s is the legacy stream and
// another blocking stream is capturing) leaves `known` false.
struct CaptureState {
  bool known = false, capturing = false;
};
CaptureState capture_state(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return {true, status != cudaStreamCaptureStatusNone};
}

}  // namespace

int device_count() {
  // Cached: the set of visible devices cannot change within a process.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // e.g. "CUDA driver version is insufficient": not our error to keep
      n = 0;
    }
    return n;
  }();
  return count;
}

bool is_available() {
  static const bool available = device_count() > 0;
  return available;
}

void* current_stream() { return t_stream; }
void set_current_stream(void* s) { t_stream = static_cast<cudaStream_t>(s); }

void* allocate(size_t nbytes, int device) {
  check_device(device, "cuda::allocate");  // also for 0 bytes: no tensor on a device that cannot be used
  if (nbytes == 0) return nullptr;
  DeviceGuard guard(device);
  cudaMemPool_t pool = pool_for(device);
  void* ptr = nullptr;
  // cudaMallocFromPoolAsync is cudaMallocAsync with the pool named, so we
  // use the pool configured above even if someone else changed the device's
  // current pool (cudaDeviceSetMemPool).
  cudaError_t err = cudaMallocFromPoolAsync(&ptr, nbytes, pool, stream());
  if (err == cudaErrorMemoryAllocation) {
    // The pool may own memory it cannot hand out yet: blocks freed on other
    // streams whose frees have not run, or cached chunks too fragmented for
    // this size. Wait for all work, return the unused chunks to the driver,
    // and try once more (what PyTorch's caching allocator does on OOM).
    // Not during a graph capture (ours, or any blocking stream's when ours is
    // the legacy stream): the sync would invalidate it.
    cudaGetLastError();
    const CaptureState capture = capture_state(stream());
    if (!policy::may_sync_device(capture.known, capture.capturing))
      fail("{}", policy::capture_oom_message(nbytes, device));
    HG_CUDA_CHECK(cudaDeviceSynchronize());
    HG_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    err = cudaMallocFromPoolAsync(&ptr, nbytes, pool, stream());
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      out_of_memory(nbytes, device, pool);
    }
  }
  if (err != cudaSuccess)
    detail::throw_cuda_error(err, "cudaMallocFromPoolAsync", __FILE__, __LINE__);
  return ptr;
}

void release(void* ptr, int device) noexcept {
  if (ptr == nullptr) return;
  // Written out by hand rather than with DeviceGuard/HG_CUDA_CHECK: this runs
  // in destructors and must report, not throw.
  int prev = -1;
  cudaError_t err = cudaGetDevice(&prev);
  if (err == cudaSuccess && prev != device) err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaFreeAsync(ptr, stream());
  if (prev >= 0 && prev != device) cudaSetDevice(prev);
  if (err == cudaSuccess) return;
  cudaGetLastError();
  // Tensors in static storage can die after the CUDA runtime has shut down at
  // exit; the driver reclaims everything then anyway, so say nothing.
  if (err == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "halfgrad: cudaFreeAsync(%p) on cuda:%d failed: %s (%s)\n", ptr, device,
               cudaGetErrorString(err), cudaGetErrorName(err));
}

void release_after(void* ptr, int device, void* const* streams, size_t n) noexcept {
  if (ptr == nullptr) return;
  int prev = -1;
  cudaError_t err = cudaGetDevice(&prev);
  if (err == cudaSuccess && prev != device) err = cudaSetDevice(device);
  const cudaStream_t s = stream();
  for (size_t i = 0; i < n && err == cudaSuccess; ++i) {
    const auto other = static_cast<cudaStream_t>(streams[i]);
    if (other == s) continue;
    // An event per stream, destroyed at once: the wait already queued keeps it.
    cudaEvent_t e = nullptr;
    err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventRecord(e, other);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(s, e, 0);
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (err != cudaSuccess) {
    // The free cannot be ordered after the other streams: report it, and wait for the
    // whole device instead where that is allowed (not during a capture), so the memory is
    // still not reused too early.
    const cudaError_t first = err;
    cudaGetLastError();
    const CaptureState capture = capture_state(s);
    const bool synced = policy::may_sync_device(capture.known, capture.capturing) &&
                        cudaDeviceSynchronize() == cudaSuccess;
    if (!synced) cudaGetLastError();
    if (first != cudaErrorCudartUnloading)
      std::fprintf(stderr, "halfgrad: ordering the free of %p on cuda:%d after %zu other stream(s) failed: %s (%s)%s\n",
                   ptr, device, n, cudaGetErrorString(first), cudaGetErrorName(first),
                   synced ? "; waited for the device instead" : "");
    err = cudaSuccess;
  }
  if (prev >= 0 && prev != device) cudaSetDevice(prev);
  release(ptr, device);
}

void copy_bytes(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t nbytes,
                int device) {
  if (nbytes == 0) return;
  if (!dst_cuda && !src_cuda) {  // nothing for the GPU to do
    std::memcpy(dst, src, nbytes);
    return;
  }
  check_device(device, "cuda::copy_bytes");
  DeviceGuard guard(device);
  const cudaMemcpyKind kind = !dst_cuda  ? cudaMemcpyDeviceToHost
                              : src_cuda ? cudaMemcpyDeviceToDevice
                                         : cudaMemcpyHostToDevice;
  // With a host side, wait for the stream before returning (policy.h says why):
  // to the host, so the caller can read dst; from the host, because the runtime
  // may read a pageable source after cudaMemcpyAsync returns (it promises
  // staging only for the synchronous cudaMemcpy) and a pinned one is read by DMA
  // later still, while our caller may free or reuse it at once. Queued on our
  // stream (not cudaMemcpy on the legacy stream) so it stays ordered after the
  // work that last used dst.
  const bool wait = policy::copy_waits_for_stream(dst_cuda, src_cuda);
  if (wait && capture_state(stream()).capturing) fail("{}", policy::capture_host_copy_message(nbytes, dst_cuda));
  HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, stream()));
  if (wait) HG_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void fill(void* dst, DType dtype, size_t n, double value, int device) {
  if (n == 0) return;  // a launch with 0 blocks is an error
  check_device(device, "cuda::fill");
  DeviceGuard guard(device);
  HG_DISPATCH_STORAGE(dtype, "cuda::fill", [&] { launch_fill<scalar_t>(dst, n, value); });
}

void synchronize() {
  if (!is_available()) return;  // nothing can have been queued
  HG_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

namespace {
uint64_t pool_attribute(int device, cudaMemPoolAttr attr, const char* op) {
  check_device(device, op);
  DeviceGuard guard(device);
  uint64_t value = 0;
  HG_CUDA_CHECK(cudaMemPoolGetAttribute(pool_for(device), attr, &value));
  return value;
}
}  // namespace

uint64_t pool_used_current(int device) {
  return pool_attribute(device, cudaMemPoolAttrUsedMemCurrent, "cuda::pool_used_current");
}
uint64_t pool_used_high(int device) {
  return pool_attribute(device, cudaMemPoolAttrUsedMemHigh, "cuda::pool_used_high");
}
void reset_pool_used_high(int device) {
  check_device(device, "cuda::reset_pool_used_high");
  DeviceGuard guard(device);
  uint64_t zero = 0;  // the only value the attribute accepts: resets it to the current use
  HG_CUDA_CHECK(cudaMemPoolSetAttribute(pool_for(device), cudaMemPoolAttrUsedMemHigh, &zero));
}

}  // namespace halfgrad::cuda
