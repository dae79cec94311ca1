// One cuDNN handle per device for every cuDNN user here (cudnn_backend.h).
#include <string>

#include <halfgrad/kernels/cuda/cudnn_backend.h>
#include <halfgrad/kernels/cuda/per_device.h>

namespace halfgrad::kernels::cuda {

CudnnDevice& cudnn_device(int device) {
  static PerDevice<CudnnDevice> states;
  return states.get(device, "cuDNN", [](CudnnDevice& s) {
    HG_CUDNN_CHECK_CTX(cudnnCreate(&s.handle),
                       std::string("creating the cuDNN handle (is cuDNN 9 with all its sub-libraries, "
                                   "libcudnn_graph/_engines_*/_cnn, installed beside libcudnn.so?)"));
  });
}

}  // namespace halfgrad::kernels::cuda
