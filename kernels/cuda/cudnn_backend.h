#pragma once
// What every user of cuDNN's backend (graph) API here shares (internal):
// one cuDNN handle per device, and an owned backend descriptor. The
// convolutions (cudnn_conv.cpp) and the fused attention (cudnn_sdpa.cpp)
// build their own graphs on top. For host files built with the CUDA include path.
#include <cudnn.h>

#include <mutex>
#include <string>
#include <utility>

#include <halfgrad/kernels/cuda/cudnn_check.h>

namespace halfgrad::kernels::cuda {

// Device `device`'s cuDNN handle, created on first use and never destroyed
// (PerDevice), with a mutex that makes cudnnSetStream + cudnnBackendExecute
// one step: a handle holds one stream.
struct CudnnDevice {
  cudnnHandle_t handle = nullptr;
  std::mutex run;
};
CudnnDevice& cudnn_device(int device);

// An owned backend descriptor.
class CudnnDesc {
 public:
  CudnnDesc(cudnnBackendDescriptorType_t type, const std::string& context) {
    HG_CUDNN_CHECK_CTX(cudnnBackendCreateDescriptor(type, &d_), context);
  }
  ~CudnnDesc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  CudnnDesc(CudnnDesc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  CudnnDesc& operator=(CudnnDesc&&) = delete;
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  // The address cudnnBackendSetAttribute(..., CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, ...) reads.
  cudnnBackendDescriptor_t* ptr() { return &d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

}  // namespace halfgrad::kernels::cuda
