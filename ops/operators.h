#pragma once
// Operators on tensors, as in PyTorch: each forwards to the free function of
// ops/ops.h (so autograd, autocast and the errors are those ops'). A scalar
// takes the tensor's dtype, as the scalar overloads of ops.h do. Comparisons
// give bool tensors. The compound assignments (+= -= *= /=) are the in-place
// ops add_/sub_/mul_/div_: an Error on a leaf that requires grad in grad mode.
// Included by ops/ops.h.
#include <halfgrad/ops/ops.h>

namespace halfgrad {

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
// An integer b divides as float32 (true division, as PyTorch's 1.0 / t).
inline Tensor operator/(double a, const Tensor& b) {
  return mul(pow(is_floating(b.dtype()) ? b : b.to(DType::Float32), -1.0), a);
}
inline Tensor operator-(const Tensor& a) { return neg(a); }
// Python's %: remainder (the sign of the divisor), not C's fmod.
inline Tensor operator%(const Tensor& a, const Tensor& b) { return remainder(a, b); }
inline Tensor operator%(const Tensor& a, double b) { return remainder(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
inline Tensor operator>(const Tensor& a, double b) { return gt(a, b); }

inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
inline Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
inline Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }
// scalar op tensor: the mirrored comparison
inline Tensor operator==(double a, const Tensor& b) { return eq(b, a); }
inline Tensor operator!=(double a, const Tensor& b) { return ne(b, a); }
inline Tensor operator<(double a, const Tensor& b) { return gt(b, a); }
inline Tensor operator<=(double a, const Tensor& b) { return ge(b, a); }
inline Tensor operator>(double a, const Tensor& b) { return lt(b, a); }
inline Tensor operator>=(double a, const Tensor& b) { return le(b, a); }

// In place (PyTorch's a += b): the other tensor broadcasts to a's shape and is
// cast to a's dtype.
inline Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
inline Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
inline Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
inline Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
inline Tensor& operator+=(Tensor& a, double b) { return a.add_(b); }
inline Tensor& operator-=(Tensor& a, double b) { return a.sub_(b); }
inline Tensor& operator*=(Tensor& a, double b) { return a.mul_(b); }
inline Tensor& operator/=(Tensor& a, double b) { return a.div_(b); }

}  // namespace halfgrad
