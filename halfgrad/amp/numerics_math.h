#pragma once
// The log2 histogram's bin of one value, shared by the CPU loop
// (amp/numerics.cpp) and the CUDA kernel (amp/cuda/numerics.cu), so the CPU
// tests check the arithmetic the GPU runs. Internal (not installed).
#include <cmath>

#include <halfgrad/core/macros.h>

namespace halfgrad::amp::numerics {

// Binades [2^k, 2^(k+1)) for k in [kLowExp, kHighExp), one bin each, and the
// bins around them (amp/numerics.h has the table).
inline constexpr int kLowExp = -40, kHighExp = 16;
inline constexpr int kBinZero = 0, kBinBelow = 1, kBinFirstBinade = 2;
inline constexpr int kBinAbove = kBinFirstBinade + (kHighExp - kLowExp), kBinNonFinite = kBinAbove + 1;
inline constexpr int kBins = kBinNonFinite + 1;

// A is float (for float32 and the half types, which convert exactly) or double.
template <typename A>
HG_INLINE int log2_bin(A v) {
  if (!(v - v == A(0))) return kBinNonFinite;  // inf - inf and NaN - NaN are NaN
  if (v == A(0)) return kBinZero;
  int e = 0;
  using std::frexp;
  (void)frexp(v, &e);  // |v| = m * 2^e with m in [0.5, 1): v lies in binade e - 1 (subnormals too)
  const int k = e - 1;
  if (k < kLowExp) return kBinBelow;
  if (k >= kHighExp) return kBinAbove;
  return kBinFirstBinade + (k - kLowExp);
}

}  // namespace halfgrad::amp::numerics
