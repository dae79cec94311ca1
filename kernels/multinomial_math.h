#pragma once
// The arithmetic of torch.multinomial that the CPU and CUDA backends share
// (kernels/cpu/multinomial.cpp, kernels/cuda/multinomial.cu), so that a seed
// gives the same samples on either device.
//
// With replacement, a row of n weights is split into kLanes lanes of
// lane_size(n) consecutive elements. Each lane's prefix sums start from 0 and
// are taken in order (in double), lane_start[t] is the sum of the lanes'
// totals before t, in order. A CUDA block gives each lane to a thread; the CPU
// adds in the same order, so every sum is bitwise the same. A sample u in
// [0, 1) picks the last lane whose start is <= u * total (among lanes with a
// positive total), then the first element of it whose prefix exceeds
// u * total - start: a weight of 0 is never picked (its prefix equals its
// predecessor's), whatever the rounding.
#include <math.h>  // ::log: the same name on the host and in device code
#include <cstdint>

#include <halfgrad/core/macros.h>
#include <halfgrad/core/philox.h>

namespace halfgrad::kernels::multinomial_math {

inline constexpr int64_t kLanes = 256;

HG_INLINE int64_t lane_size(int64_t n) { return (n + kLanes - 1) / kLanes; }

// a * b rounded once (never contracted into a multiply-add on the device).
HG_INLINE double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// The sampled index of one row: prefix[i] the lane-local inclusive prefix sums
// (n of them), start[t] the lanes' starts (kLanes + 1 of them: start[kLanes]
// is the row's total), u the draw in [0, 1).
HG_INLINE int64_t sample_row(const double* prefix, const double* start, int64_t n, double u) {
  const int64_t size = lane_size(n);
  const double total = start[kLanes];
  const double x = mul_rn(u, total);
  // the last lane t with start[t] <= x (start[0] = 0 <= x)
  int64_t lo = 0, hi = kLanes - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (start[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  // x rounded up to the total: step back over the empty lanes at the end
  while (lo > 0 && !(start[lo + 1] > start[lo])) --lo;
  const int64_t first = lo * size;
  const int64_t last = first + size < n ? first + size : n;  // one past the lane's end
  const double y = x - start[lo];
  const double lane_total = prefix[last - 1];  // positive: the lane was chosen for it
  // the first element whose prefix exceeds y; if rounding left y at or past the
  // lane's total, the first whose prefix reaches it (the lane's last positive weight)
  int64_t a = first, b = last - 1;
  const bool past = !(y < lane_total);
  while (a < b) {
    const int64_t mid = (a + b) / 2;
    if (past ? prefix[mid] >= lane_total : prefix[mid] > y) b = mid;
    else a = mid + 1;
  }
  return a;
}

// The race key of weight w (PyTorch's multinomial without replacement: the
// largest w / E with E ~ Exp(1) are a sample without replacement). E = -log(v)
// for v in (0, 1]; E = 0 (v = 1, probability 2^-53) makes the key +inf.
HG_INLINE double race_key(double w, const philox::Words& words) {
  if (!(w > 0)) return 0.0;
  const double e = -::log(1.0 - philox::unit53(words.x[0], words.x[1]));
  return e > 0 ? w / e : static_cast<double>(INFINITY);
}

}  // namespace halfgrad::kernels::multinomial_math
