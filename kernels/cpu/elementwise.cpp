// CPU elementwise kernels: the shared math of kernels/math.h inside the strided
// loop of kernels/cpu/loops.h. Half types load as float, compute, round once.
#include <algorithm>
#include <cstring>
#include <limits>

#include <halfgrad/core/macros.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/loops.h>
#include <halfgrad/kernels/cpu/parallel.h>
#include <halfgrad/kernels/math.h>

namespace halfgrad::kernels::cpu {

using kernels::BinaryOp;
using kernels::UnaryOp;

void unary(UnaryOp op, const Tensor& in, const Tensor& out, kernels::UnaryParams p) {
  HG_DISPATCH_NUMERIC(in.dtype(), "unary", [&] {
    using acc = acc_t<scalar_t>;
    // Integer clamp bounds: NaN (no bound) becomes the type's extreme.
    auto bound = [](double v, bool upper) -> acc {
      if constexpr (std::is_integral_v<acc>) {
        if (v != v) return upper ? std::numeric_limits<acc>::max() : std::numeric_limits<acc>::min();
        return saturate_to_int64(v);  // 1e30 is no bound (a plain cast is undefined)
      } else {
        return static_cast<acc>(v);
      }
    };
    const acc a = bound(p.a, false), b = bound(p.b, true);
    auto run = [&]<UnaryOp Op>() {
      if constexpr (std::is_integral_v<acc> && !math::unary_supports_int(Op)) {
        fail("unary: op is not defined for integer tensors ({})", in.describe());
      } else {
        map<scalar_t, scalar_t>(out, [=](scalar_t x) { return scalar_t(math::unary_fn<Op>(acc(x), a, b)); }, in);
      }
    };
    HG_UNARY_OP_SWITCH(op, run);
  });
}

namespace {
constexpr int64_t kChunk = 16384;  // elements per task of the flat bfloat16 loops below

// bfloat16 ReLU backward, out = y <= 0 ? 0 : g, on the bits: y <= 0 is a zero
// magnitude or the sign bit with a magnitude up to inf; a NaN y passes g, as
// the float test does. AMP's backward runs it over every hidden activation,
// and the generic loop widens each value to float and rounds it back (5% of
// a w1024 AMP step).
HG_TARGET_CLONES void relu_backward_bits(uint16_t* o, const uint16_t* g, const uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    // both loads unconditional and | instead of ||: a select, not branches (signs are random)
    const uint16_t yi = y[i], gi = g[i], mag = yi & 0x7fff;
    const bool zero = (mag == 0) | ((yi >> 15) & (mag <= 0x7f80));
    o[i] = zero ? uint16_t{0} : gi;
  }
}

bool bfloat16_relu_backward(const Tensor& g, const Tensor& y, const Tensor& out) {
  // one flat run: the three dense in the same memory order (row-major, or
  // channels-last; is_contiguous(f) ignores the strides of size-1 dims)
  const MemoryFormat f = out.suggest_memory_format();
  for (const Tensor* t : {&g, &y, &out})
    if (t->dtype() != DType::BFloat16 || t->shape() != out.shape() || !t->is_contiguous(f)) return false;
  const int64_t n = out.numel();
  auto* o = static_cast<uint16_t*>(out.data_ptr());
  const auto* gp = static_cast<const uint16_t*>(g.data_ptr());
  const auto* yp = static_cast<const uint16_t*>(y.data_ptr());
  for_chunks(n, kChunk, worth_threads(n), [&](int64_t i, int64_t m) { relu_backward_bits(o + i, gp + i, yp + i, m); });
  return true;
}
}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  if (op == BinaryOp::ReluBackward && bfloat16_relu_backward(a, b, out)) return;
  HG_DISPATCH_NUMERIC(a.dtype(), "binary", [&] {
    using acc = acc_t<scalar_t>;
    const acc al = static_cast<acc>(alpha);
    auto arith = [&]<BinaryOp Op>() {
      if constexpr (std::is_integral_v<acc> && math::binary_needs_float(Op)) {
        fail("binary: op {} of int64 tensors ({}) has no kernel; cast to a float dtype first",
                static_cast<int>(Op), a.describe());
      } else {
        map<scalar_t, scalar_t, scalar_t>(
            out, [=](scalar_t x, scalar_t y) { return scalar_t(math::binary_fn<Op>(acc(x), acc(y), al)); }, a, b);
      }
    };
    auto compare = [&]<BinaryOp Op>() {
      map<bool, scalar_t, scalar_t>(out, [](scalar_t x, scalar_t y) { return math::compare_fn<Op>(acc(x), acc(y)); },
                                    a, b);
    };
    if (out.dtype() == DType::Bool) {
      HG_COMPARE_OP_SWITCH(op, compare);
    } else {
      HG_ARITH_OP_SWITCH(op, arith);
    }
    fail("binary: op {} cannot write {} from {}", static_cast<int>(op), out.describe(), a.describe());
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  HG_DISPATCH_ALL(a.dtype(), "where", [&] {
    map<scalar_t, bool, scalar_t, scalar_t>(out, [](bool c, scalar_t x, scalar_t y) { return c ? x : y; }, cond, a,
                                            b);
  });
}

void fill(const Tensor& out, double value) {
  HG_DISPATCH_STORAGE(out.dtype(), "fill", [&] {
    const scalar_t v = convert<scalar_t>(value);
    map<scalar_t>(out, [=]() { return v; });
  });
}

namespace {
// float32 -> bfloat16 on a flat range, compiled for AVX-512 and AVX2 as well
// as the baseline and picked at load time (the same exact rounding; wider
// vectors make it memory-bound instead of compute-bound).
HG_TARGET_CLONES void to_bfloat16(uint16_t* d, const float* s,
                                                                            int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_bfloat16_bits(s[i]);
}

HG_TARGET_CLONES void from_bfloat16(float* d, const uint16_t* s,
                                                                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = bfloat16_bits_to_float(s[i]);
}

// The casts autocast runs every step (weights to bfloat16, their gradients
// back) as flat loops on the bits, which the compiler vectorises.
bool bfloat16_cast_fast_path(const Tensor& dst, const Tensor& src) {
  if (!dst.is_contiguous() || !src.is_contiguous()) return false;
  const int64_t n = dst.numel();
  if (dst.dtype() == DType::BFloat16 && src.dtype() == DType::Float32) {
    auto* d = static_cast<uint16_t*>(dst.data_ptr());
    const auto* s = static_cast<const float*>(src.data_ptr());
    for_chunks(n, kChunk, worth_threads(n), [&](int64_t i, int64_t m) { to_bfloat16(d + i, s + i, m); });
    return true;
  }
  if (dst.dtype() == DType::Float32 && src.dtype() == DType::BFloat16) {
    auto* d = static_cast<float*>(dst.data_ptr());
    const auto* s = static_cast<const uint16_t*>(src.data_ptr());
    for_chunks(n, kChunk, worth_threads(n), [&](int64_t i, int64_t m) { from_bfloat16(d + i, s + i, m); });
    return true;
  }
  return false;
}
}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    if (dst.numel() > 0) std::memcpy(dst.data_ptr(), src.data_ptr(), dst.numel() * itemsize(dst.dtype()));
    return;
  }
  if (bfloat16_cast_fast_path(dst, src)) return;
  HG_DISPATCH_STORAGE(dst.dtype(), "copy", [&] {
    using D = scalar_t;
    HG_DISPATCH_STORAGE(src.dtype(), "copy", [&] {
      map<D, scalar_t>(dst, [](scalar_t x) { return convert<D>(x); }, src);
    });
  });
}

}  // namespace halfgrad::kernels::cpu
