#pragma once
// float16 and bfloat16 storage types. Both are 16 bits in memory and compute
// as float: convert in, do the math in float32, round once on the way out.
// Conversions are exact IEEE: round to nearest, ties to even; fp16 keeps
// subnormals; overflow gives +-inf; NaN stays NaN (quiet).
#include <cstdint>
#include <cstring>
#include <limits>

#include <halfgrad/core/macros.h>

namespace halfgrad {

namespace detail {
HG_INLINE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
HG_INLINE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace detail

// float -> IEEE binary16 bits, round to nearest even.
HG_INLINE uint16_t float_to_half_bits(float f) {
  const uint32_t x = detail::float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x0200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value = m * 2^-24. Shift the 24-bit
    // significand right and round to nearest even on the dropped bits.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to 0
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias exponent (127 -> 15), keep 10 mantissa bits, round on 13.
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: fine
  return static_cast<uint16_t>(sign | h);
}

HG_INLINE float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return detail::bits_float(sign);
    // Subnormal: m * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> bfloat16 bits (upper half of a float32), round to nearest even.
// Branch-free (a select, not an early return) so conversion loops vectorise.
HG_INLINE uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = detail::float_bits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x0040u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

HG_INLINE float bfloat16_bits_to_float(uint16_t b) {
  return detail::bits_float(static_cast<uint32_t>(b) << 16);
}

struct Half {
  uint16_t bits = 0;
  Half() = default;
  HG_INLINE Half(float f) : bits(float_to_half_bits(f)) {}  // NOLINT: implicit like c10::Half
  HG_INLINE operator float() const { return half_bits_to_float(bits); }
  HG_INLINE static constexpr Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  HG_INLINE BFloat16(float f) : bits(float_to_bfloat16_bits(f)) {}  // NOLINT
  HG_INLINE operator float() const { return bfloat16_bits_to_float(bits); }
  HG_INLINE static constexpr BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace halfgrad

// The formats' limits, as c10's numeric_limits<Half> / <BFloat16>, from the bit
// patterns: float16 has 5 exponent bits and 10 stored fraction bits, bfloat16
// float32's 8 exponent bits and 7 fraction bits.
namespace std {
template <>
struct numeric_limits<halfgrad::Half> {
  using T = halfgrad::Half;

 public:
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false, is_exact = false;
  static constexpr bool has_infinity = true, has_quiet_NaN = true, has_denorm_loss = false, is_iec559 = true;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr int digits = 11, digits10 = 3, max_digits10 = 5, radix = 2;
  static constexpr int min_exponent = -13, min_exponent10 = -4, max_exponent = 16, max_exponent10 = 4;
  static constexpr T min() { return T::from_bits(0x0400); }         // 2^-14, the smallest normal
  static constexpr T lowest() { return T::from_bits(0xFBFF); }      // -65504
  static constexpr T max() { return T::from_bits(0x7BFF); }         // 65504
  static constexpr T epsilon() { return T::from_bits(0x1400); }     // 2^-10
  static constexpr T round_error() { return T::from_bits(0x3800); } // 0.5
  static constexpr T infinity() { return T::from_bits(0x7C00); }
  static constexpr T quiet_NaN() { return T::from_bits(0x7E00); }
  static constexpr T denorm_min() { return T::from_bits(0x0001); }  // 2^-24
};

template <>
struct numeric_limits<halfgrad::BFloat16> {
  using T = halfgrad::BFloat16;

 public:
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false, is_exact = false;
  static constexpr bool has_infinity = true, has_quiet_NaN = true, has_denorm_loss = false, is_iec559 = false;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr int digits = 8, digits10 = 2, max_digits10 = 4, radix = 2;
  static constexpr int min_exponent = -125, min_exponent10 = -37, max_exponent = 128, max_exponent10 = 38;
  static constexpr T min() { return T::from_bits(0x0080); }         // 2^-126, the smallest normal
  static constexpr T lowest() { return T::from_bits(0xFF7F); }      // -(2 - 2^-7) 2^127
  static constexpr T max() { return T::from_bits(0x7F7F); }         // (2 - 2^-7) 2^127
  static constexpr T epsilon() { return T::from_bits(0x3C00); }     // 2^-7
  static constexpr T round_error() { return T::from_bits(0x3F00); } // 0.5
  static constexpr T infinity() { return T::from_bits(0x7F80); }
  static constexpr T quiet_NaN() { return T::from_bits(0x7FC0); }
  static constexpr T denorm_min() { return T::from_bits(0x0001); }  // 2^-133
};
}  // namespace std
