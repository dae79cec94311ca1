// The CUDA runtime layer when halfgrad is built without CUDA
// (HALFGRAD_CUDA=OFF, or AUTO without nvcc): no device, and a clear Error
// for anything that needs one.
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace halfgrad::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  fail("cuda::{}: this halfgrad was built without CUDA (HALFGRAD_CUDA=OFF or no nvcc at configure time); use "
       "device 'cpu', or rebuild with -DHALFGRAD_CUDA=ON",
       what);
}
}  // namespace

bool is_available() { return false; }
int device_count() { return 0; }
void* current_stream() { return nullptr; }
void set_current_stream(void*) {}
void* allocate(size_t nbytes, int) {
  if (nbytes == 0) return nullptr;
  no_cuda("allocate");
}
void release(void*, int) noexcept {}
void copy_bytes(void*, bool, const void*, bool, size_t, int) { no_cuda("copy_bytes"); }
void fill(void*, DType, size_t, double, int) { no_cuda("fill"); }
void synchronize() {}

}  // namespace halfgrad::cuda
