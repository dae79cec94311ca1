// exp_f32 (kernels/cpu/vec_math.h), the vectorisable exp of softmax and
// cross_entropy on the CPU: within 2 ulp of the correctly rounded exp over the
// whole float32 range, and libm's answers at the edges (0, inf, NaN,
// subnormals).
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <halfgrad/kernels/cpu/vec_math.h>

using halfgrad::kernels::cpu::exp_f32;

namespace {
// Distance in representable floats between two finite non-negative floats.
int64_t ulps(float a, float b) {
  return std::abs(static_cast<int64_t>(std::bit_cast<uint32_t>(a)) - static_cast<int64_t>(std::bit_cast<uint32_t>(b)));
}
}  // namespace

TEST_CASE("exp_f32 is within 2 ulp of exp for every float32 in [-104, 89]", "[ops][cpu][vec_math]") {
  int64_t worst = 0, checked = 0;
  float worst_x = 0;
  // every 61st float in the range (about 2.2 billion floats lie in it; a prime
  // stride visits every exponent and every low-bit pattern of the mantissa)
  for (uint32_t bits = 0; bits < 0xffffffffu - 61; bits += 61) {
    const float x = std::bit_cast<float>(bits);
    if (!(x >= -104.0f && x <= 89.0f)) continue;
    const float ref = static_cast<float>(std::exp(static_cast<double>(x)));
    const float got = exp_f32(x);
    REQUIRE(std::isfinite(ref) == std::isfinite(got));
    // (for subnormal results the bit distance is the error in steps of 2^-149)
    const int64_t d = ulps(got, ref);
    if (d > worst) worst = d, worst_x = x;
    ++checked;
  }
  INFO("worst " << worst << " ulp at x = " << worst_x << " over " << checked << " values");
  CHECK(checked > 30'000'000);
  CHECK(worst <= 2);
}

TEST_CASE("exp_f32 at the edges: 0, 1, overflow, underflow, infinities and NaN", "[ops][cpu][vec_math]") {
  CHECK(exp_f32(0.0f) == 1.0f);
  CHECK(exp_f32(-0.0f) == 1.0f);
  CHECK(exp_f32(1.0f) == static_cast<float>(std::exp(1.0)));
  CHECK(exp_f32(88.72f) == std::exp(88.72f));           // just below FLT_MAX
  CHECK(std::isinf(exp_f32(88.8f)));                      // above: inf, as expf
  CHECK(std::isinf(exp_f32(1e30f)));
  CHECK(exp_f32(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  CHECK(exp_f32(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(exp_f32(-1e30f) == 0.0f);
  CHECK(exp_f32(-104.0f) == 0.0f);
  const float sub = exp_f32(-100.0f);                     // 3.7e-44: a subnormal
  CHECK(sub > 0.0f);
  CHECK(sub < std::numeric_limits<float>::min());
  CHECK(ulps(sub, std::exp(-100.0f)) <= 1);
  CHECK(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(exp_f32(-std::numeric_limits<float>::quiet_NaN())));
}
