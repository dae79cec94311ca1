#pragma once
// The CPU convolutions (kernels/cpu/conv_onednn.cpp, conv_direct.cpp), internal. The three entries of
// kernels/kernels.h (cpu::conv_forward, ...) run oneDNN 2.6's convolution
// primitives where they can: float32 and bfloat16 natively (bf16 accumulates in
// float32 inside oneDNN), float16 through float32 (inputs widened, the output
// rounded once). float64, builds without oneDNN and configurations oneDNN
// rejects run the portable direct loops below (OpenMP over N x C; double
// accumulation for float64, float for the others).
//
// Memory formats: oneDNN gets our plain NC* / OI* layouts for 1x1 stride-1
// convolutions (a GEMM) and chooses its own blocked formats for the rest
// (reorders around each call; 2-4x faster for depthwise and k x k layers on
// MobileNetV3-small's shapes, benchmarks/cpu_conv.cpp). The environment
// variable HALFGRAD_CONV_FORMAT=plain|any forces one (tests, benchmarks).
// Primitives (and their reorders) are cached per kind, dtype, shapes,
// geometry and format.
//
// Channels-last activations (N, *spatial, C in memory) go to oneDNN as they
// are (nwc/nhwc/ndhwc, weights in the format it picks: no activation reorders);
// the direct loops run them through row-major copies.
//
// Activations are dense, row-major or channels-last; weights row-major (the op makes them so).
#include <halfgrad/kernels/kernels.h>

namespace halfgrad::kernels::cpu {

// The portable direct loops, same contracts as kernels::conv_*; exposed so the
// tests can compare them with the oneDNN path.
void conv_forward_direct(const Tensor& x, const Tensor& w, const Tensor& bias, const kernels::ConvGeometry& g,
                         const Tensor& y);
void conv_backward_data_direct(const Tensor& dy, const Tensor& w, const kernels::ConvGeometry& g, const Tensor& dx);
void conv_backward_weight_direct(const Tensor& dy, const Tensor& x, const kernels::ConvGeometry& g, const Tensor& dw,
                                 const Tensor& db);

}  // namespace halfgrad::kernels::cpu
