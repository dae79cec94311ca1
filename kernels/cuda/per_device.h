#pragma once
// PerDevice<T>: one T per CUDA device (a library handle and what goes with
// it), made on first use and never destroyed (internal). Shared by the
// cuBLASLt handles (gemm.cu) and the cuDNN handles (cudnn_conv.cpp); their plans
// live in a kernels::PlanCache (kernels/plan_cache.h).
//
// Made under std::call_once, in relaxed CUDA-graph capture mode (creating a
// handle allocates, which a capture in global mode forbids). Never destroyed:
// at exit the CUDA runtime may already be gone, and the driver frees what a
// handle holds anyway.
#include <mutex>

#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>

namespace halfgrad::kernels::cuda {

template <typename T>
class PerDevice {
 public:
  // Device `device`'s T; make(T&) fills it on the first request. `what`
  // names the caller in the error for a device that does not exist.
  template <typename Make>
  T& get(int device, const char* what, Make&& make) {
    HG_CHECK(device >= 0 && device < count_, "{}: CUDA device {} does not exist ({} devices)", what, device, count_);
    Slot& s = slots_[device];
    std::call_once(s.once, [&] {
      halfgrad::cuda::RelaxedCaptureMode relaxed;
      make(s.value);
    });
    return s.value;
  }

 private:
  struct Slot {
    std::once_flag once;
    T value{};
  };
  const int count_ = halfgrad::cuda::device_count();
  Slot* const slots_ = new Slot[count_ > 0 ? count_ : 1];  // never destroyed (above)
};

}  // namespace halfgrad::kernels::cuda
