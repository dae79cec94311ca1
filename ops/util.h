#pragma once
// Small helpers shared by the op files: dims, broadcasting, scalar operands.
#include <initializer_list>
#include <string_view>
#include <utility>

#include <halfgrad/core/tensor.h>

namespace halfgrad::ops {

// Wrap a possibly negative dim into [0, ndim).
int64_t wrap_dim(std::string_view op, int64_t dim, int64_t ndim);
// Sorted unique non-negative dims; empty input means all dims.
std::vector<int64_t> normalize_dims(std::string_view op, const Shape& dims, int64_t ndim);
// A reduction's output shape: `in` with `dims` (sorted, unique, in range) set
// to 1 (keepdim) or left out.
Shape keepdim_shape(const Shape& in, const std::vector<int64_t>& dims);
Shape squeezed_shape(const Shape& in, const std::vector<int64_t>& dims);
// Each tensor is defined, or an Error naming the op and which argument is not
// (a default-constructed or moved-from Tensor).
void check_defined(std::string_view op, std::initializer_list<std::pair<std::string_view, const Tensor*>> args);
// PyTorch broadcasting of two shapes, or an Error naming the op and both shapes.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// PyTorch's rule for an operand of an in-place op (and addmm's bias, expand):
// `from` must broadcast TO `to`, i.e. broadcast_shapes(to, from) is `to`. Else
// an Error naming the op, `what` the operand is, both shapes and `remedy`.
void check_broadcasts_to(std::string_view op, std::string_view what, const Shape& from, const Shape& to,
                         std::string_view remedy = "");
// A stride-0 view of `t` with `shape`, which t's shape must broadcast to (no
// autograd; for use inside kernels' callers).
Tensor broadcast_to(const Tensor& t, const Shape& shape);
// Memory overlap, by PyTorch's rules (ATen's MemoryOverlap): cheap checks
// that catch the common cases and answer TooHard for the rest.
enum class Overlap { No, Full, Partial, TooHard };
// Whether the elements of `t` tile one block of memory exactly (any dim order).
bool non_overlapping_and_dense(const Tensor& t);
// Two elements of `t` on one memory location: a stride-0 dim of size > 1.
bool has_internal_overlap(const Tensor& t);
// Full: the same elements in the same layout; Partial: dense views whose memory
// ranges intersect otherwise; TooHard: one of them is not dense.
Overlap overlap(const Tensor& a, const Tensor& b);

// The layout of an elementwise op's output of `shape` (PyTorch keeps its
// inputs' memory format): the first input of that shape that is channels-last
// and not also row-major gives ChannelsLast(3d); one that is row-major and not
// channels-last gives Contiguous; ambiguous ones ([N, C, 1, 1]) and strided
// views are passed over. Contiguous when none decides.
MemoryFormat output_format(const Shape& shape, std::initializer_list<const Tensor*> inputs);
// A new tensor of t's shape in t's layout (contiguous or channels-last), with options o.
Tensor empty_like(const Tensor& t, TensorOptions o);

// A 0-d tensor holding `value`, in `dtype` on `device`.
Tensor scalar_tensor(double value, DType dtype, Device device);
// The one-dtype rule for ops like matmul and linear: all floating inputs must
// share a dtype outside autocast. The message names the op and suggests autocast.
void check_same_dtype(std::string_view op, const std::vector<Tensor>& inputs);
// `t` if the GEMM takes it without a copy (its innermost or its row stride is 1),
// else a contiguous copy.
Tensor gemm_operand(const Tensor& t);

}  // namespace halfgrad::ops
