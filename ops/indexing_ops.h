#pragma once
// Indexing and gathering (PyTorch's torch.index_select, gather, scatter,
// scatter_add, masked_fill, where with scalars, nn.functional.one_hot).
// Included by ops/ops.h. Index tensors are int64, masks are bool. The forward
// kernels run on the CPU and CUDA; the CPU checks every index (an Error
// naming the op, the dim, the index and the valid range), CUDA does not (that
// would cost a device sync): there gather/index_select give NaN (0 for
// integer and bool tensors) for an out-of-range index and scatter skips it.
#include <halfgrad/core/tensor.h>

namespace halfgrad {

// out = input with dimension `dim` replaced by input[index[i]] (index 1-d or
// 0-d, int64, values in [0, size) -- no negative wrap, as in PyTorch). The
// backward adds the gradient back at the indices (repeated indices add up).
Tensor index_select(const Tensor& input, int64_t dim, const Tensor& index);
// out[p] = input[p with p[dim] = index[p]]: out has index's shape; index has
// input's number of dims and index.size(d) <= input.size(d) for d != dim.
// Backward: scatter_add of the gradient into zeros.
Tensor gather(const Tensor& input, int64_t dim, const Tensor& index);
// A copy of input with out[p with p[dim] = index[p]] = src[p] (p over index's
// shape; index.size(d) <= src.size(d), and <= input.size(d) for d != dim; src
// has input's dtype). A repeated index: on the CPU the last write (in row-major
// order of index) wins, on CUDA an unspecified one (PyTorch: undefined).
// Backward: input gets the gradient with the written positions zeroed, src
// gets gather(grad, dim, index) (zero where src was not read).
Tensor scatter(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& input, int64_t dim, const Tensor& index, double value);
// As scatter, but out[...] += src[p] (repeated indices add up). float16 and
// bfloat16 accumulate in float32 and round once. On CUDA the adds are atomic:
// float sums can differ in the last bits between runs (as in PyTorch).
Tensor scatter_add(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src);
// value where mask (bool, broadcasting with input) is true, else input; the
// result has the broadcast shape and input's dtype (the value is converted to
// it). The tensor form needs a 0-d value (a CPU 0-d value works with a CUDA
// input) and gives it the sum of the gradient where mask is true.
Tensor masked_fill(const Tensor& input, const Tensor& mask, double value);
Tensor masked_fill(const Tensor& input, const Tensor& mask, const Tensor& value);
// where with a scalar (a Python float, in PyTorch's typing): with a floating
// tensor the scalar takes its dtype; with an integer or bool tensor the result
// is float32; with two scalars it is float32 (PyTorch's default dtype).
Tensor where(const Tensor& condition, const Tensor& input, double other);
Tensor where(const Tensor& condition, double input, const Tensor& other);
Tensor where(const Tensor& condition, double input, double other);
// torch.nn.functional.one_hot: int64 index of shape S -> int64 S + [num_classes];
// num_classes = -1 takes max(index) + 1. Negative indices, or indices >=
// num_classes, are an Error. Reads the index on the host (a sync on CUDA, as
// in PyTorch). No gradient (integer).
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);

}  // namespace halfgrad
