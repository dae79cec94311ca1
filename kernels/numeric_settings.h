#pragma once
// Numeric settings the backends read when they pick a GEMM or convolution
// algorithm (PyTorch's torch.set_float32_matmul_precision and
// torch.backends.cudnn.allow_tf32). They live below ops/ so that the kernels
// ask here, not the public API; <halfgrad.h> exports them as hg::...
#include <string>
#include <string_view>

namespace halfgrad {

// PyTorch's torch.set_float32_matmul_precision: "highest" (the default) keeps
// float32 GEMMs exact; "high" or "medium" let CUDA use TF32 tensor cores
// (~1e-3 relative error). Process-wide; the CPU GEMM is always exact.
void set_float32_matmul_precision(std::string_view precision);
std::string get_float32_matmul_precision();
bool float32_matmul_allows_tf32();
// PyTorch's torch.backends.cudnn.allow_tf32 (default true): whether float32
// convolutions on CUDA may run on TF32 tensor cores (~1e-3 relative error).
// false: only cuDNN engines without tensor cores for float32 (exact float32
// products). Process-wide; read when a convolution's engine is chosen (the
// choice is cached per setting). The half types always use tensor cores.
void set_cudnn_allow_tf32(bool allow);
bool cudnn_allow_tf32();

}  // namespace halfgrad
