#pragma once
// A running sum whose rounding error grows with log(n), not n, for loops that
// add one value at a time (a CUDA thread's share of a reduction): values go
// into a level-0 partial; every 16 of them the partial moves up a level, and
// so on for six levels, so each value passes through about 16 roundings per
// level instead of one per value added after it. Integers add exactly and skip
// the levels. The CPU's loops sum pairwise instead (kernels/cpu/reduce.cpp).
#include <type_traits>

#include <halfgrad/core/macros.h>

namespace halfgrad::kernels {

template <typename A>
struct CascadeSum {
  static constexpr int kLevels = 6, kFan = 16;  // the top level takes one value per 16^5
  A level[kLevels] = {};
  int count[kLevels - 1] = {};

  HG_INLINE void add(A x) {
    level[0] += x;
    if constexpr (!std::is_integral_v<A>) {
HG_UNROLL
      for (int k = 0; k < kLevels - 1; ++k) {
        if (++count[k] < kFan) return;
        level[k + 1] += level[k];
        level[k] = A(0);
        count[k] = 0;
      }
    }
  }
  HG_INLINE A total() const {
    A s = level[0];
HG_UNROLL
    for (int k = 1; k < kLevels; ++k) s += level[k];
    return s;
  }
};

}  // namespace halfgrad::kernels
