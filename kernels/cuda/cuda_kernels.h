#pragma once
// The CUDA backend: one function per entry of kernels/kernel_list.h, with the
// same contracts as the CPU backend. A plain C++ header (no CUDA includes):
// kernels/router.cpp, built by g++, calls these; the .cu files beside it
// implement them (each says how), kernels/cuda/composite.cpp the entries made of
// other CUDA functions. Every kernel runs on cuda::current_stream(), never
// synchronises, and computes half types in float32 with the shared per-element
// math of kernels/math.h. What CUDA cannot do without a host sync, it does not:
// an out-of-range class target gives a NaN loss (which shows, and makes the
// GradScaler skip the step), an out-of-range gather index NaN (0 for integer
// dtypes), a scatter skips it; `op` (the name for an Error) is unused here.
#include <halfgrad/kernels/kernels.h>

namespace halfgrad::kernels::cuda {

#define HG_KERNEL(ret, name, params, args, device_of) ret name params;
#define HG_DEFAULT(...) = __VA_ARGS__
#include <halfgrad/kernels/kernel_list.h>
#undef HG_DEFAULT
#undef HG_KERNEL

}  // namespace halfgrad::kernels::cuda
