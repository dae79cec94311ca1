#pragma once
// The two 8-bit float formats of Hopper's tensor cores (OCP FP8):
//
//   float8_e4m3fn  1 sign, 4 exponent (bias 7), 3 fraction bits. No infinity
//                  ("fn": finite); S.1111.111 is NaN, so the largest value is
//                  S.1111.110 = 448. Smallest normal 2^-6, subnormals k * 2^-9.
//   float8_e5m2    1 sign, 5 exponent (bias 15), 2 fraction bits: the top byte
//                  of an IEEE float16, with its infinities and NaNs. Largest
//                  finite 57344, smallest normal 2^-14, subnormals k * 2^-16.
//
// float -> fp8 rounds to nearest, ties to even, in one step (never through
// float16: rounding twice can be off by one unit). Out-of-range values:
//   - float8_e4m3fn saturates to +-448 (infinities too), as cuBLASLt's and
//     Transformer Engine's casts do (__NV_SATFINITE). PyTorch's .to() gives
//     NaN there instead; docs/fp8.md says why we follow the hardware casts.
//   - float8_e5m2 overflows to +-inf by default (IEEE, as PyTorch); the
//     quantizer of the fp8 recipe asks for saturation (Fp8Overflow::Saturate).
// NaN stays NaN: 0x7f in both formats (the sign dropped), as NVIDIA's
// conversions give. fp8 -> float is exact. Every float32 input converts
// bit-identically to cuda_fp8.h's __nv_cvt_float_to_fp8 (tests/core/test_float8.cpp).
#include <cstdint>
#include <limits>

#include <halfgrad/core/half.h>
#include <halfgrad/core/macros.h>

namespace halfgrad {

enum class Fp8Overflow : uint8_t { Saturate, Ieee };

namespace detail {
// |x| (float bits without the sign, finite) rounded to an fp8 magnitude code
// with `M` fraction bits and exponent bias `Bias`, to nearest even. The code
// may exceed the format's largest: the caller decides what overflow means.
template <int M, int Bias>
HG_INLINE uint32_t fp8_magnitude_code(uint32_t abs) {
  const int exp = static_cast<int>(abs >> 23) - 127;  // float subnormals: far below, they give 0
  constexpr int kMinExp = 1 - Bias;                   // the smallest normal's exponent
  uint32_t value, base;
  int shift;  // how many low bits of `value` fall below the result's last bit
  if (exp < kMinExp) {  // subnormal result: value = significand with its leading 1
    value = (abs & 0x7fffffu) | 0x800000u;
    shift = 23 - M + (kMinExp - exp);
    base = 0;
    if (shift >= 25) return 0;  // below half the smallest subnormal
  } else {              // normal: the fraction rounds; a carry moves into the exponent
    value = abs & 0x7fffffu;
    shift = 23 - M;
    base = static_cast<uint32_t>(exp + Bias) << M;
  }
  uint32_t q = value >> shift;
  const uint32_t rem = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return base + q;
}
}  // namespace detail

HG_INLINE uint8_t float_to_e4m3fn_bits(float f) {
  const uint32_t x = detail::float_bits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7fu;                                              // NaN
  if (abs >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);                // >= 448 (and inf): saturate
  const uint32_t code = detail::fp8_magnitude_code<3, 7>(abs);
  return static_cast<uint8_t>(sign | (code > 0x7eu ? 0x7eu : code));               // (448, 464]: rounds to 448
}

HG_INLINE uint8_t float_to_e5m2_bits(float f, Fp8Overflow overflow = Fp8Overflow::Ieee) {
  const uint32_t x = detail::float_bits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7fu;                               // NaN
  const uint32_t big = overflow == Fp8Overflow::Saturate ? 0x7bu : 0x7cu;
  if (abs >= 0x47800000u) return static_cast<uint8_t>(sign | big);   // >= 65536 (and inf)
  const uint32_t code = detail::fp8_magnitude_code<2, 15>(abs);
  return static_cast<uint8_t>(sign | (code > 0x7bu ? big : code));   // rounds past 57344
}

HG_INLINE float e4m3fn_bits_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  if (exp == 0xfu && mant == 0x7u) return detail::bits_float(sign | 0x7fc00000u);
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0.001953125f;  // k * 2^-9, exact
    return sign ? -v : v;
  }
  return detail::bits_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

// e5m2 is float16's top byte, so float16's exact decoding serves.
HG_INLINE float e5m2_bits_to_float(uint8_t b) { return half_bits_to_float(static_cast<uint16_t>(b << 8)); }

// A float's value in the format, as a float (quantise and dequantise).
HG_INLINE float round_to_e4m3fn(float f) { return e4m3fn_bits_to_float(float_to_e4m3fn_bits(f)); }
HG_INLINE float round_to_e5m2(float f, Fp8Overflow overflow = Fp8Overflow::Ieee) {
  return e5m2_bits_to_float(float_to_e5m2_bits(f, overflow));
}

// Storage types: one byte in memory, compute as float (like Half).
struct Float8_e4m3fn {
  uint8_t bits = 0;
  Float8_e4m3fn() = default;
  HG_INLINE Float8_e4m3fn(float f) : bits(float_to_e4m3fn_bits(f)) {}  // NOLINT: implicit like c10's
  HG_INLINE operator float() const { return e4m3fn_bits_to_float(bits); }
  HG_INLINE static constexpr Float8_e4m3fn from_bits(uint8_t b) {
    Float8_e4m3fn v;
    v.bits = b;
    return v;
  }
};

struct Float8_e5m2 {
  uint8_t bits = 0;
  Float8_e5m2() = default;
  HG_INLINE Float8_e5m2(float f) : bits(float_to_e5m2_bits(f)) {}  // NOLINT
  HG_INLINE operator float() const { return e5m2_bits_to_float(bits); }
  HG_INLINE static constexpr Float8_e5m2 from_bits(uint8_t b) {
    Float8_e5m2 v;
    v.bits = b;
    return v;
  }
};

static_assert(sizeof(Float8_e4m3fn) == 1 && sizeof(Float8_e5m2) == 1);

// The largest finite values, as the recipes' scales use them.
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;

}  // namespace halfgrad

namespace std {
template <>
struct numeric_limits<halfgrad::Float8_e4m3fn> {
  using T = halfgrad::Float8_e4m3fn;

 public:
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false, is_exact = false;
  static constexpr bool has_infinity = false, has_quiet_NaN = true, has_denorm_loss = false, is_iec559 = false;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr int digits = 4, digits10 = 0, max_digits10 = 3, radix = 2;
  static constexpr int min_exponent = -5, min_exponent10 = -1, max_exponent = 9, max_exponent10 = 2;
  static constexpr T min() { return T::from_bits(0x08); }         // 2^-6
  static constexpr T lowest() { return T::from_bits(0xFE); }      // -448
  static constexpr T max() { return T::from_bits(0x7E); }         // 448
  static constexpr T epsilon() { return T::from_bits(0x20); }     // 2^-3
  static constexpr T round_error() { return T::from_bits(0x30); } // 0.5
  static constexpr T quiet_NaN() { return T::from_bits(0x7F); }
  static constexpr T denorm_min() { return T::from_bits(0x01); }  // 2^-9
};

template <>
struct numeric_limits<halfgrad::Float8_e5m2> {
  using T = halfgrad::Float8_e5m2;

 public:
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false, is_exact = false;
  static constexpr bool has_infinity = true, has_quiet_NaN = true, has_denorm_loss = false, is_iec559 = false;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr int digits = 3, digits10 = 0, max_digits10 = 2, radix = 2;
  static constexpr int min_exponent = -13, min_exponent10 = -4, max_exponent = 16, max_exponent10 = 4;
  static constexpr T min() { return T::from_bits(0x04); }         // 2^-14
  static constexpr T lowest() { return T::from_bits(0xFB); }      // -57344
  static constexpr T max() { return T::from_bits(0x7B); }         // 57344
  static constexpr T epsilon() { return T::from_bits(0x34); }     // 2^-2
  static constexpr T round_error() { return T::from_bits(0x38); } // 0.5
  static constexpr T infinity() { return T::from_bits(0x7C); }
  static constexpr T quiet_NaN() { return T::from_bits(0x7F); }
  static constexpr T denorm_min() { return T::from_bits(0x01); }  // 2^-16
};
}  // namespace std
