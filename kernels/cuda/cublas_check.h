#pragma once
// HG_CUBLAS_CHECK(call): run a cuBLAS / cuBLASLt call; on failure throw
// halfgrad::Error naming the call, the status and where it happened.
// HG_CUBLAS_CHECK_CTX(call, context) adds a description of the problem (op,
// shapes, dtypes); `context` is an expression evaluated only on failure, so
// building the string costs nothing on the hot path.
// For .cu files and host files built with the CUDA include path.
#include <cublasLt.h>

#include <string>

#include <halfgrad/core/error.h>

namespace halfgrad::cuda::detail {

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call, const std::string& context,
                                            const char* file, int line) {
  // cublasLtGetStatus* live in libcublasLt itself: no extra library for messages.
  fail("cuBLAS error in {}: {} ({}){}{} at {}:{}", call, cublasLtGetStatusString(status),
       cublasLtGetStatusName(status), context.empty() ? "" : " while running ", context, file, line);
}

}  // namespace halfgrad::cuda::detail

#define HG_CUBLAS_CHECK_CTX(call, context)                                                          \
  do {                                                                                             \
    const cublasStatus_t hg_cublas_status_ = (call);                                               \
    if (hg_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::halfgrad::cuda::detail::throw_cublas_error(hg_cublas_status_, #call, (context), __FILE__, __LINE__); \
  } while (0)

#define HG_CUBLAS_CHECK(call) HG_CUBLAS_CHECK_CTX(call, std::string())
