#pragma once
// HG_CUDNN_CHECK(call): run a cuDNN call; on failure throw halfgrad::Error
// naming the call, the status (cudnnGetErrorString), cuDNN's own last error
// message (cudnnGetLastErrorString: which attribute or shape it rejected) and
// where it happened. HG_CUDNN_CHECK_CTX(call, context) adds a description of
// the problem (op, dtypes, shapes); `context` is an expression evaluated only
// on failure, so building the string costs nothing on the hot path.
// For host files built with the CUDA include path (kernels/cuda/cudnn_conv.cpp).
#include <cudnn.h>

#include <string>

#include <halfgrad/core/error.h>

namespace halfgrad::cuda::detail {

// cuDNN's message for the last failed call on this thread ("" when it has none).
inline std::string cudnn_last_error() {
  char buf[1024] = {};
  cudnnGetLastErrorString(buf, sizeof(buf));
  return buf;
}

[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t status, const char* call, const std::string& context,
                                           const char* file, int line) {
  const std::string last = cudnn_last_error();
  fail("cuDNN error in {}: {} ({}){}{}{}{} at {}:{}", call, cudnnGetErrorString(status), static_cast<int>(status),
       last.empty() ? "" : "; cuDNN says: ", last, context.empty() ? "" : " while running ", context, file, line);
}

}  // namespace halfgrad::cuda::detail

#define HG_CUDNN_CHECK_CTX(call, context)                                                                \
  do {                                                                                                   \
    const cudnnStatus_t hg_cudnn_status_ = (call);                                                       \
    if (hg_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                                        \
      ::halfgrad::cuda::detail::throw_cudnn_error(hg_cudnn_status_, #call, (context), __FILE__, __LINE__); \
  } while (0)

#define HG_CUDNN_CHECK(call) HG_CUDNN_CHECK_CTX(call, std::string())
