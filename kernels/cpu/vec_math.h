#pragma once
// exp for float32 loops that vectorise. libm's expf is a call per element (the
// compiler cannot vectorise a loop around it without -ffast-math), and in the
// loss of a small model it was the largest single cost after the GEMMs. This is
// the classic Cephes scheme, branch-free so that a loop over it vectorises:
//   exp(x) = 2^n * exp(r),  n = round(x / ln 2),  r = x - n ln 2 in [-ln2/2, ln2/2]
// with ln 2 split in two (Cody-Waite) so r is exact, and exp(r) a degree-7
// polynomial. Error <= 2 ulp over the whole range (tests/kernels/cpu/test_vec_math.cpp
// sweeps it against double exp); exp(-inf) = 0, exp(+inf) = inf, NaN stays
// NaN, results below 2^-126 are subnormal or 0 as with expf.
//
// The selects below are float compares, which GCC turns into vector blends
// only under -fno-trapping-math (a compare may raise an FP exception, and we
// never read those): files whose loops call this are compiled with it
// (cmake/library.cmake); elsewhere it is correct, only scalar.
#include <bit>
#include <cstdint>

namespace halfgrad::kernels::cpu {

inline float exp_f32(float x) {
  // Beyond these, exp is 0 or inf in float32; clamping keeps n in range. NaN
  // fails both tests and passes through (and makes p NaN below).
  x = x < -104.0f ? -104.0f : x;
  x = x > 89.0f ? 89.0f : x;
  // round(x * log2(e)) by the 1.5 * 2^23 trick: adding it leaves no fraction
  // bits, so the sum is rounded to an integer in the current (nearest) mode.
  constexpr float kShift = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kShift) - kShift;
  float r = x - n * 0.693359375f;  // ln2's high part: 9 bits, so n * it is exact
  r = r - n * -2.12194440e-4f;     // and its low part
  // exp(r) on [-0.347, 0.347] (Cephes expf's minimax coefficients)
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // * 2^n in two halves: n runs from -150 to 128, and one power 2^n alone would
  // not be a normal float at either end (2^-150, 2^128); each half is.
  const int32_t i = static_cast<int32_t>(n != n ? 0.0f : n);  // (a NaN's conversion is undefined)
  const int32_t i1 = i / 2, i2 = i - i1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(i1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(i2 + 127) << 23);
  return p * s1 * s2;
}

}  // namespace halfgrad::kernels::cpu
