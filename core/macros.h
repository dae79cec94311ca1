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
// #pragma unroll in code the host compiler also sees (g++ would warn).
#if defined(__CUDA_ARCH__)
#define HG_UNROLL _Pragma("unroll")
#else
#define HG_UNROLL
#endif

// CPU hot loops compiled for AVX-512, AVX2 and baseline x86-64; the loader
// picks one per machine (GCC's function multi-versioning, an IFUNC). The
// build option HALFGRAD_TARGET_CLONES=OFF turns it off (ThreadSanitizer's runtime
// crashes resolving IFUNCs), and clang has no clones of function templates.
#if defined(HALFGRAD_NO_TARGET_CLONES) || !defined(__x86_64__) || defined(__CUDACC__) || defined(__clang__)
#define HG_TARGET_CLONES
#else
#define HG_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
