#pragma once
// Shape and memory rules of tensors that need no kernel: PyTorch's
// broadcasting and its memory-overlap checks (ATen's MemoryOverlap). Below
// the dispatcher, which checks in-place ops with them.
#include <string_view>

#include <halfgrad/core/tensor.h>

namespace halfgrad {

// PyTorch broadcasting of two shapes, or an Error naming the op and both shapes.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// PyTorch's rule for an operand of an in-place op (and addmm's bias, expand):
// `from` must broadcast TO `to`, i.e. broadcast_shapes(to, from) is `to`. Else
// an Error naming the op, `what` the operand is, both shapes and `remedy`.
void check_broadcasts_to(std::string_view op, std::string_view what, const Shape& from, const Shape& to,
                         std::string_view remedy = "");

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

}  // namespace halfgrad
