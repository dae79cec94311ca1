#pragma once
// What the CPU convolution files share (internal): one problem's geometry,
// the activations' layout check, the weight-gradient dtype check. The direct
// loops are in conv_direct.cpp; oneDNN's primitives in conv_onednn.cpp (a
// build without oneDNN compiles conv_no_onednn.cpp in its place).
#include <array>
#include <compare>
#include <initializer_list>

#include <halfgrad/kernels/kernels.h>

namespace halfgrad::kernels::cpu::conv_detail {

// One convolution problem, every spatial dim padded to 3 (size 1, kernel 1,
// stride 1, no padding for the dims the problem does not have).
struct Problem {
  int nd = 2;
  int64_t n = 0, ci = 0, co = 0, groups = 1;
  std::array<int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, out{1, 1, 1};
  std::array<int64_t, 3> s{1, 1, 1}, d{1, 1, 1}, pb{0, 0, 0}, pa{0, 0, 0};
  bool channels_last = false;  // the activations' layout (N, *spatial, C in memory)
  auto operator<=>(const Problem&) const = default;

  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }
  int64_t kvol() const { return k[0] * k[1] * k[2]; }
};

// x [N, C_in, *in], w [C_out, C_in / groups, *k], y [N, C_out, *out].
inline Problem make_problem(const Tensor& x, const Tensor& w, const Tensor& y, const kernels::ConvGeometry& g,
                     bool channels_last = false) {
  Problem p;
  p.channels_last = channels_last;
  p.nd = g.nd;
  p.n = x.shape()[0];
  p.ci = x.shape()[1];
  p.co = w.shape()[0];
  p.groups = g.groups;
  const int off = 3 - g.nd;  // spatial dims sit at the end (D, H, W)
  for (int i = 0; i < g.nd; ++i) {
    p.in[off + i] = x.shape()[2 + i];
    p.k[off + i] = w.shape()[2 + i];
    p.out[off + i] = y.shape()[2 + i];
    p.s[off + i] = g.stride[i];
    p.d[off + i] = g.dilation[i];
    p.pb[off + i] = g.pad_before[i];
    p.pa[off + i] = g.pad_after[i];
  }
  return p;
}

// The activations' layout: row-major, or channels-last (both dense; the op
// makes them so, in one layout); the weight and bias are row-major.
bool check_layout(const char* op, std::initializer_list<const Tensor*> activations,
                  std::initializer_list<const Tensor*> params);
// dw and db share dy's dtype, or are float32 for a bfloat16 dy (kernels.h).
void check_weight_grads(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db);

}  // namespace halfgrad::kernels::cpu::conv_detail
