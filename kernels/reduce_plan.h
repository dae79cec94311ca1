#pragma once
// How a reduction is laid out, the same for both backends: the reduced dims
// of `in` are moved innermost, so each output reduces one contiguous row of
// `r` elements; a sum/mean over the leading dims of a contiguous tensor (the
// bias gradient of Linear) instead reduces columns in place. The backends
// (kernels/cpu/reduce.cpp, kernels/cuda/reduce.cu) differ only in their loops.
#include <limits>
#include <vector>

#include <halfgrad/core/alias.h>
#include <halfgrad/kernels/kernels.h>

namespace halfgrad::kernels {

struct ReducePlan {
  int64_t r = 1;         // elements reduced into each output
  int64_t outer = 0;     // outputs
  bool nothing = false;  // the output is empty: nothing to do
  bool empty = false;    // no elements to reduce: the output is filled (0, or NaN for a mean)
  bool columns = false;  // sum/mean over leading dims of a contiguous `in`: out[j] = sum_i in[i, j]
  Tensor rows;           // otherwise: [outer, r] contiguous, reduced dims innermost
};

// `copy` is the backend's copy kernel, used only when the rows must be packed.
template <typename Copy>
ReducePlan plan_reduce(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out,
                       Copy copy) {
  ReducePlan p;
  const int64_t nd = in.dim();
  std::vector<bool> reduced(nd, false);
  for (int64_t d : dims) reduced[d] = true;
  for (int64_t d : dims) p.r *= in.shape()[d];
  p.outer = in.numel() / std::max<int64_t>(p.r, 1);
  if (out.numel() == 0) {  // e.g. max over dim 0 of a [2, 0] tensor: a [0] result
    p.nothing = true;
    return p;
  }
  if (in.numel() == 0 || p.r == 0) {
    HG_CHECK(is_sum_reduce(op), "max/min/argmax/argmin: cannot reduce over an empty dimension of {}",
             in.describe());
    p.empty = true;
    return p;
  }
  p.columns = in.is_contiguous() && (op == ReduceOp::Sum || op == ReduceOp::Mean) && p.outer > 1;
  for (size_t i = 0; i < dims.size() && p.columns; ++i) p.columns = dims[i] == static_cast<int64_t>(i);
  if (p.columns) return p;

  Shape pshape, pstrides;
  for (int64_t d = 0; d < nd; ++d)
    if (!reduced[d]) {
      pshape.push_back(in.shape()[d]);
      pstrides.push_back(in.strides()[d]);
    }
  for (int64_t d : dims) {
    pshape.push_back(in.shape()[d]);
    pstrides.push_back(in.strides()[d]);
  }
  p.rows = alias_with(in, pshape, pstrides, in.offset());
  if (!p.rows.is_contiguous()) {
    Tensor packed = make_tensor(pshape, in.options());
    copy(packed, p.rows);
    p.rows = packed;
  }
  return p;
}

// The value an empty reduction leaves in its output.
inline double empty_reduction_value(ReduceOp op) {
  return op == ReduceOp::Sum ? 0.0 : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace halfgrad::kernels
