#pragma once
// The log2 histogram's bin of one value, shared by the CPU loop
// (amp/numerics.cpp) and the CUDA kernel (amp/cuda/numerics.cu), so the CPU
// tests check the arithmetic the GPU runs. Internal (not installed).
#include <cstdint>
#include <cstring>

#include <halfgrad/core/macros.h>

namespace halfgrad::amp::numerics {

// Binades [2^k, 2^(k+1)) for k in [kLowExp, kHighExp), one bin each, and the
// bins around them (amp/numerics.h has the table).
inline constexpr int kLowExp = -40, kHighExp = 16;
inline constexpr int kBinZero = 0, kBinBelow = 1, kBinFirstBinade = 2;
inline constexpr int kBinAbove = kBinFirstBinade + (kHighExp - kLowExp), kBinNonFinite = kBinAbove + 1;
inline constexpr int kBins = kBinNonFinite + 1;

// A is float (for float32 and the half types, which convert exactly) or
// double. The binade is the value's exponent field, read from its bits (no
// frexp: this runs once per element of every recorded tensor). A subnormal
// float or double lies below 2^-126, far below 2^kLowExp.
template <typename A>
HG_INLINE int log2_bin(A v) {
  int k;
  if constexpr (sizeof(A) == 4) {
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    const int e = static_cast<int>((b >> 23) & 0xffu);
    if (e == 0xff) return kBinNonFinite;  // inf or NaN
    if (e == 0) return (b & 0x7fffffu) == 0 ? kBinZero : kBinBelow;
    k = e - 127;
  } else {
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    const int e = static_cast<int>((b >> 52) & 0x7ffu);
    if (e == 0x7ff) return kBinNonFinite;
    if (e == 0) return (b & 0xfffffffffffffull) == 0 ? kBinZero : kBinBelow;
    k = e - 1023;
  }
  if (k < kLowExp) return kBinBelow;
  if (k >= kHighExp) return kBinAbove;
  return kBinFirstBinade + (k - kLowExp);
}

}  // namespace halfgrad::amp::numerics
