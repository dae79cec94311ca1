#pragma once
// Host/device annotations: the same scalar math compiles for the CPU backend
// (g++) and inside CUDA kernels (nvcc), so CPU tests check GPU arithmetic.
#if defined(__CUDACC__)
#define HG_HOST_DEVICE __host__ __device__
#define HG_INLINE __host__ __device__ __forceinline__
#else
#define HG_HOST_DEVICE
#define HG_INLINE inline
#endif
