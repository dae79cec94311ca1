#pragma once
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy
// as 1, 2, 3", SC'11), the counter-based generator cuRAND and PyTorch's CUDA
// backend use. Its output is a pure function of (key, counter): element i of a
// random tensor is drawn from counter = offset + i, so every CUDA thread and
// every CPU loop iteration draws its own element with no shared state, and the
// CPU and CUDA backends (both include this header) give the same tensor for the
// same seed. The generator's whole state is (seed, offset): core/random.h.
#include <math.h>  // ::sqrt, ::log, ::cos: the same names on the host and in device code
#include <cstdint>

#include <halfgrad/core/macros.h>

namespace halfgrad::philox {

struct Words {
  uint32_t x[4];
};

HG_INLINE uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Ten rounds of the Philox S-box on a 128-bit counter with a 64-bit key
// (the published round and key-schedule constants).
HG_INLINE Words philox4x32_10(Words c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key bumps (golden ratio, sqrt(3)-1)
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo(kM0, c.x[0], &hi0);
    const uint32_t lo1 = mulhilo(kM1, c.x[2], &hi1);
    c = Words{{hi1 ^ c.x[1] ^ k0, lo1, hi0 ^ c.x[3] ^ k1, lo0}};
  }
  return c;
}

// The four words of element `index` of a draw that starts at `offset`.
HG_INLINE Words draw(uint64_t seed, uint64_t offset, uint64_t index) {
  const uint64_t n = offset + index;
  return philox4x32_10(Words{{static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32), 0u, 0u}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A double in [0, 1) with 53 random bits from two words.
HG_INLINE double unit53(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a >> 5) << 26) | (b >> 6);
  return static_cast<double>(bits) * 0x1.0p-53;
}

// The per-element distributions, all in double so one rounding to the
// tensor's dtype follows (the backends do that rounding, and for uniform
// re-check the upper bound after it).
HG_INLINE double uniform(const Words& w, double low, double high) {
  return low + unit53(w.x[0], w.x[1]) * (high - low);
}

// Box-Muller from two 53-bit uniforms (u1 in (0, 1] so the log is finite).
// Only the cosine branch is used: one normal per counter keeps element i a
// function of i alone.
HG_INLINE double normal(const Words& w, double mean, double std) {
  const double u1 = 1.0 - unit53(w.x[0], w.x[1]);
  const double u2 = unit53(w.x[2], w.x[3]);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return mean + std * (::sqrt(-2.0 * ::log(u1)) * ::cos(kTwoPi * u2));
}

// An integer in [low, high) from 64 random bits (modulo bias below 2^-32
// for ranges under 2^32, as PyTorch's random_).
HG_INLINE int64_t randint(const Words& w, int64_t low, int64_t high) {
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  const uint64_t bits = (static_cast<uint64_t>(w.x[0]) << 32) | w.x[1];
  return static_cast<int64_t>(static_cast<uint64_t>(low) + bits % range);
}

}  // namespace halfgrad::philox
