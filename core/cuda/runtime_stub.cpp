// The CUDA runtime layer when halfgrad is built without CUDA
// (HALFGRAD_CUDA=OFF, or AUTO without nvcc): no device, and a clear Error for
// anything that needs one. What needs no device (0 bytes, host-to-host
// copies, the per-thread stream slot) behaves as in runtime.cu.
#include <cstring>

#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>

namespace halfgrad::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  fail("cuda::{}: CUDA is not available: this halfgrad was built without CUDA (HALFGRAD_CUDA=OFF or no nvcc at "
       "configure time); use device 'cpu', or rebuild with -DHALFGRAD_CUDA=ON",
       what);
}
thread_local void* g_stream = nullptr;
}  // namespace

bool is_available() { return false; }
int device_count() { return 0; }
void* current_stream() { return g_stream; }
void set_current_stream(void* stream) { g_stream = stream; }
void* allocate(size_t, int) {
  no_cuda("allocate");  // also for 0 bytes: an empty CUDA tensor is refused at creation, as in PyTorch
}
void release(void*, int) noexcept {}
void release_after(void*, int, void* const*, size_t) noexcept {}
void copy_bytes(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t nbytes, int) {
  if (nbytes == 0) return;
  if (dst_cuda || src_cuda) no_cuda("copy_bytes");
  std::memcpy(dst, src, nbytes);
}
void fill(void*, DType, size_t n, double, int) {
  if (n > 0) no_cuda("fill");
}
void synchronize() {}
uint64_t pool_used_current(int) { no_cuda("pool_used_current"); }
uint64_t pool_used_high(int) { no_cuda("pool_used_high"); }
void reset_pool_used_high(int) { no_cuda("reset_pool_used_high"); }
void* host_alloc_pinned(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  no_cuda("host_alloc_pinned");
}
void host_free_pinned(void*) noexcept {}
void* stream_create(int) { no_cuda("stream_create"); }
void stream_destroy(void*, int) noexcept {}
void* event_create(int) { no_cuda("event_create"); }
void event_destroy(void*, int) noexcept {}
void event_record(void*, void*, int) { no_cuda("event_record"); }
void stream_wait_event(void*, void*, int) { no_cuda("stream_wait_event"); }
void event_synchronize(void*) { no_cuda("event_synchronize"); }
void copy_bytes_async(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t nbytes, int, void*) {
  if (nbytes == 0) return;
  if (dst_cuda || src_cuda) no_cuda("copy_bytes_async");
  std::memcpy(dst, src, nbytes);
}

}  // namespace halfgrad::cuda
