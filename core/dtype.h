#pragma once
// The dtypes, their sizes and names, and PyTorch's promotion rules.
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

#include <halfgrad/core/float8.h>
#include <halfgrad/core/half.h>
#include <halfgrad/core/macros.h>

namespace halfgrad {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int64, Bool, Float8_e4m3fn, Float8_e5m2 };

inline constexpr DType float32 = DType::Float32;
inline constexpr DType float64 = DType::Float64;
inline constexpr DType float16 = DType::Float16;
inline constexpr DType bfloat16 = DType::BFloat16;
inline constexpr DType int64 = DType::Int64;
inline constexpr DType boolean = DType::Bool;
// fp8 tensors hold scaled values for fp8 GEMMs: they support casts, copies,
// views, printing, safetensors and ops::scaled_mm, and no arithmetic (as in
// PyTorch). docs/fp8.md.
inline constexpr DType float8_e4m3fn = DType::Float8_e4m3fn;
inline constexpr DType float8_e5m2 = DType::Float8_e5m2;

// LibTorch's spellings (torch::kFloat, ...), so `t.to(hg::kHalf)` reads as in C++ PyTorch.
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kDouble = DType::Float64;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kHalf = DType::Float16;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kFloat8_e4m3fn = DType::Float8_e4m3fn;
inline constexpr DType kFloat8_e5m2 = DType::Float8_e5m2;

// `std::cout << dtype` prints dtype_name ("float32"); defined in core/device.cpp.
std::ostream& operator<<(std::ostream& os, DType t);

constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64: return 8;
    case DType::Float32: return 4;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Bool:
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
    case DType::Float8_e4m3fn: return "float8_e4m3fn";
    case DType::Float8_e5m2: return "float8_e5m2";
  }
  return "?";
}

// The dtypes arithmetic runs in. fp8 is a floating format too (PyTorch's
// is_floating_point says so) but only a storage one here: is_float8.
constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
constexpr bool is_float8(DType t) { return t == DType::Float8_e4m3fn || t == DType::Float8_e5m2; }
constexpr bool is_low_precision(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

[[noreturn]] void fail_float8_promotion(DType a, DType b);  // core/device.cpp

// PyTorch's promote_types for our dtypes: bool < int64 < floats; among floats
// the wider wins, and float16 with bfloat16 gives float32 (neither holds the other).
// fp8 promotes with nothing (PyTorch: "Promotion for Float8 Types is not supported").
constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_float8(a) || is_float8(b)) fail_float8_promotion(a, b);
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  if (a == DType::Int64) return b;
  if (b == DType::Int64) return a;
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  return DType::Float32;  // f32 with anything half, or f16 with bf16
}

// C++ type <-> DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<Float8_e4m3fn> { static constexpr DType value = DType::Float8_e4m3fn; };
template <> struct dtype_of<Float8_e5m2> { static constexpr DType value = DType::Float8_e5m2; };

// The type a kernel computes in: half types compute in float and round once.
template <typename T> struct acc_type { using type = T; };
template <> struct acc_type<Half> { using type = float; };
template <> struct acc_type<BFloat16> { using type = float; };
template <> struct acc_type<Float8_e4m3fn> { using type = float; };
template <> struct acc_type<Float8_e5m2> { using type = float; };
template <typename T> using acc_t = typename acc_type<T>::type;

// Floating point to int64 with a defined result for every input (a plain
// cast of NaN or of a value out of range is undefined behaviour): truncation
// toward zero in range; NaN, +-inf and out-of-range values give INT64_MIN, as
// PyTorch's CPU casts do on x86. Host and device: the CUDA kernels use it too.
template <typename F>
HG_INLINE int64_t float_to_int64(F x) {
  return x >= F(-0x1p63) && x < F(0x1p63) ? static_cast<int64_t>(x) : (-9223372036854775807LL - 1);
}
// A bound (clamp's min/max) as int64: out of range saturates, so 1e30 means
// "no upper bound" rather than a wrapped value.
HG_INLINE int64_t saturate_to_int64(double x) {
  if (x >= 0x1p63) return 9223372036854775807LL;
  if (!(x >= -0x1p63)) return -9223372036854775807LL - 1;  // also NaN
  return static_cast<int64_t>(x);
}

}  // namespace halfgrad

// HG_DISPATCH_*(dtype, name, ...): run the lambda body with scalar_t bound to
// the C++ type of `dtype`; any other dtype is an Error naming the op.
#define HG_DTYPE_CASE(enum_v, T, ...) \
  case enum_v: {                      \
    using scalar_t = T;               \
    return __VA_ARGS__();             \
  }

#define HG_DISPATCH_FLOATING(dtype, op, ...)                                                      \
  [&] {                                                                                          \
    switch (dtype) {                                                                             \
      HG_DTYPE_CASE(::halfgrad::DType::Float32, float, __VA_ARGS__)                              \
      HG_DTYPE_CASE(::halfgrad::DType::Float64, double, __VA_ARGS__)                             \
      HG_DTYPE_CASE(::halfgrad::DType::Float16, ::halfgrad::Half, __VA_ARGS__)                   \
      HG_DTYPE_CASE(::halfgrad::DType::BFloat16, ::halfgrad::BFloat16, __VA_ARGS__)              \
      default:                                                                                   \
        ::halfgrad::fail("{}: dtype {} is not supported (expected a floating dtype: float32, "    \
                         "float64, float16 or bfloat16)", op, ::halfgrad::dtype_name(dtype));    \
    }                                                                                            \
  }()

#define HG_DISPATCH_NUMERIC(dtype, op, ...)                                                       \
  [&] {                                                                                          \
    switch (dtype) {                                                                             \
      HG_DTYPE_CASE(::halfgrad::DType::Float32, float, __VA_ARGS__)                              \
      HG_DTYPE_CASE(::halfgrad::DType::Float64, double, __VA_ARGS__)                             \
      HG_DTYPE_CASE(::halfgrad::DType::Float16, ::halfgrad::Half, __VA_ARGS__)                   \
      HG_DTYPE_CASE(::halfgrad::DType::BFloat16, ::halfgrad::BFloat16, __VA_ARGS__)              \
      HG_DTYPE_CASE(::halfgrad::DType::Int64, int64_t, __VA_ARGS__)                              \
      default:                                                                                   \
        ::halfgrad::fail("{}: dtype {} is not supported (expected a number dtype)", op,           \
                         ::halfgrad::dtype_name(dtype));                                          \
    }                                                                                            \
  }()

// The six dtypes arithmetic runs in, as switch cases (HG_DISPATCH_ALL, HG_DISPATCH_STORAGE).
#define HG_DTYPE_CASES_ALL(...)                                                                   \
  HG_DTYPE_CASE(::halfgrad::DType::Float32, float, __VA_ARGS__)                                  \
  HG_DTYPE_CASE(::halfgrad::DType::Float64, double, __VA_ARGS__)                                 \
  HG_DTYPE_CASE(::halfgrad::DType::Float16, ::halfgrad::Half, __VA_ARGS__)                       \
  HG_DTYPE_CASE(::halfgrad::DType::BFloat16, ::halfgrad::BFloat16, __VA_ARGS__)                  \
  HG_DTYPE_CASE(::halfgrad::DType::Int64, int64_t, __VA_ARGS__)                                  \
  HG_DTYPE_CASE(::halfgrad::DType::Bool, bool, __VA_ARGS__)

#define HG_DISPATCH_ALL(dtype, op, ...)                                                           \
  [&] {                                                                                          \
    switch (dtype) {                                                                             \
      HG_DTYPE_CASES_ALL(__VA_ARGS__)                                                            \
      default: break;                                                                            \
    }                                                                                            \
    ::halfgrad::fail("{}: dtype {} is not supported (fp8 tensors support casts, copies, views "   \
                     "and ops::scaled_mm: cast to float32 first)", op, ::halfgrad::dtype_name(dtype)); \
  }()

// Every dtype, fp8 included: for the few kernels fp8 tensors have (copy, fill, print, item).
#define HG_DISPATCH_STORAGE(dtype, op, ...)                                                       \
  [&] {                                                                                          \
    switch (dtype) {                                                                             \
      HG_DTYPE_CASES_ALL(__VA_ARGS__)                                                            \
      HG_DTYPE_CASE(::halfgrad::DType::Float8_e4m3fn, ::halfgrad::Float8_e4m3fn, __VA_ARGS__)    \
      HG_DTYPE_CASE(::halfgrad::DType::Float8_e5m2, ::halfgrad::Float8_e5m2, __VA_ARGS__)        \
    }                                                                                            \
    ::halfgrad::fail("{}: unknown dtype", op);                                                   \
  }()
