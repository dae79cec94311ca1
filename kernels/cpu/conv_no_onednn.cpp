// The CPU convolution entries in a build without oneDNN: the direct loops
// (conv_direct.cpp). CMake compiles this file or conv_onednn.cpp.
#include <halfgrad/kernels/cpu/conv.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>

namespace halfgrad::kernels::cpu {

void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const kernels::ConvGeometry& g,
                  const Tensor& y) {
  conv_forward_direct(x, w, bias, g, y);
}

void conv_backward_data(const Tensor& dy, const Tensor& w, const kernels::ConvGeometry& g, const Tensor& dx) {
  conv_backward_data_direct(dy, w, g, dx);
}

void conv_backward_weight(const Tensor& dy, const Tensor& x, const kernels::ConvGeometry& g, const Tensor& dw,
                          const Tensor& db) {
  conv_backward_weight_direct(dy, x, g, dw, db);
}

}  // namespace halfgrad::kernels::cpu
