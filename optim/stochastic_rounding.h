#pragma once
// Stochastic rounding (SR) of a float32 value to bfloat16 or float16, and the
// random bits it uses. Shared by the CPU loops (optim/low_precision_cpu.cpp)
// and the CUDA kernels (optim/cuda/fused_optim_lp.cu), so the CPU tests check
// the GPU's arithmetic and both backends give the same bits.
//
// x lies between two neighbours of the narrow format: t (toward zero) and
// t + 1 ulp (away from zero). SR returns the one away from zero with
// probability equal to x's fraction of the gap, |x - t| / gap, so its mean is
// x: an update far smaller than the gap still moves the weight on average,
// where round-to-nearest would round it away every time (docs/amp.md,
// "Stochastic rounding"). With 16 random bits r (uniform in [0, 2^16)) the
// rule is exact: round away from zero iff r < fraction * 2^16.
//
// The bits come from Philox4x32-10 (core/philox.h), a pure function of
// (key, counter): key = the optimizer's seed, counter = (element / 8,
// parameter index, step), 16 bits per element, so element i of parameter k
// at step t gets the same bits on every backend and in every thread.
#include <cstdint>

#include <halfgrad/core/half.h>
#include <halfgrad/core/philox.h>

namespace halfgrad::optim::sr {

// float32 -> bfloat16 bits. bfloat16 is float32's upper half, so the low 16
// bits of x are its fraction of the gap in units of 2^-16 exactly (also for
// subnormals, and across a binade: the bit pattern counts the gap).
// NaN stays a quiet NaN, +-inf stays; a value past the largest bfloat16
// becomes inf with probability equal to its fraction, as SR defines it.
HG_INLINE uint16_t bfloat16_bits(float x, uint16_t random) {
  const uint32_t u = halfgrad::detail::float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t toward_zero = u >> 16;
  const uint32_t fraction = u & 0xffffu;
  return static_cast<uint16_t>(toward_zero + (random < fraction ? 1u : 0u));
}

// float32 -> float16 bits (subnormals kept). The fraction |x - t| / gap is
// exact in float: t <= |x| < 2t (or t = 0), so |x| - t is exact (Sterbenz),
// and the gap is a power of two. |x| >= 65536 (the gap past 65504) is inf.
HG_INLINE uint16_t half_bits(float x, uint16_t random) {
  const uint32_t u = halfgrad::detail::float_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // quiet NaN, as float_to_half_bits
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  const float ax = halfgrad::detail::bits_float(abs);
  uint32_t t;
  if (abs >= 0x38800000u) {
    t = (abs - 0x38000000u) >> 13;  // a normal float16: rebias, drop 13 bits (toward zero)
  } else {
    t = static_cast<uint32_t>(ax * 16777216.0f);  // subnormal: |x| / 2^-24, truncated (the product is exact)
  }
  const uint32_t e = t >> 10;
  const float gap = halfgrad::detail::bits_float(((e > 0 ? e : 1u) + 102u) << 23);  // 2^(max(e, 1) - 25)
  const float fraction = (ax - half_bits_to_float(static_cast<uint16_t>(t))) / gap;
  return static_cast<uint16_t>(sign | (t + (static_cast<float>(random) < fraction * 65536.0f ? 1u : 0u)));
}

template <typename T>
HG_INLINE T round(float x, uint16_t random);
template <>
HG_INLINE BFloat16 round<BFloat16>(float x, uint16_t random) {
  return BFloat16::from_bits(bfloat16_bits(x, random));
}
template <>
HG_INLINE Half round<Half>(float x, uint16_t random) {
  return Half::from_bits(half_bits(x, random));
}

// Where one parameter's random stream is: the optimizer's seed, the
// parameter's index over all groups (the state dict's index) and its count
// of applied steps with SR (1 on the first).
struct Key {
  uint64_t seed;
  uint32_t param_index;
  uint32_t step;
};

// The 128 random bits of elements 8g .. 8g + 7.
HG_INLINE philox::Words words(const Key& k, uint64_t group) {
  return philox::philox4x32_10(
      philox::Words{{static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), k.param_index, k.step}},
      static_cast<uint32_t>(k.seed), static_cast<uint32_t>(k.seed >> 32));
}
// Element i's 16 bits from its group's words.
HG_INLINE uint16_t pick(const philox::Words& w, uint64_t i) {
  return static_cast<uint16_t>(w.x[(i >> 1) & 3u] >> ((i & 1u) * 16u));
}
HG_INLINE uint16_t bits(const Key& k, uint64_t i) { return pick(words(k, i >> 3), i); }

}  // namespace halfgrad::optim::sr
