#pragma once
// Small helpers shared by the op files: dims, broadcasting, scalar operands.
#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>

#include <halfgrad/core/generator.h>
#include <halfgrad/core/layout.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad::ops {

// core/layout.h: broadcasting rules and memory overlap (the dispatcher's
// in-place checks use them too), under the names the op files use.
using halfgrad::broadcast_shapes;
using halfgrad::check_broadcasts_to;
using halfgrad::has_internal_overlap;
using halfgrad::non_overlapping_and_dense;
using halfgrad::overlap;
using halfgrad::Overlap;

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
// The generator a random op draws from: null (the global one) when none is
// given; else it, after checking that its device type is `device`'s (PyTorch:
// "Expected a 'cuda' device type for generator but found 'cpu'").
Generator* generator_for(std::string_view op, std::optional<Generator>& generator, Device device);
// A stride-0 view of `t` with `shape`, which t's shape must broadcast to (no
// autograd; for use inside kernels' callers).
Tensor broadcast_to(const Tensor& t, const Shape& shape);

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
