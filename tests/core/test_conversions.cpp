// Conversions with a defined result for every input: float -> int64 casts
// (NaN and out-of-range values: a plain C++ cast is undefined behaviour),
// item<T>() range checks, and randint's bounds for floating dtypes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::ivalues;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
}  // namespace

TEST_CASE("float to int64 casts: truncation in range, INT64_MIN for NaN, inf and out of range",
          "[tensor][conversions]") {
  // torch.tensor(v, dtype=dt).to(torch.int64) on x86 (PyTorch 1.13 CPU)
  const std::vector<double> v = {kNaN, kInf, -kInf, 1e30, -1e30, 0x1p63, -0x1p63, 9.2e18, -3.7, 3.7};
  const std::vector<int64_t> f64 = {kMin, kMin, kMin, kMin, kMin, kMin, kMin, 9200000000000000000, -3, 3};
  const std::vector<int64_t> f32 = {kMin, kMin, kMin, kMin, kMin, kMin, kMin, 9200000267938955264, -3, 3};
  const std::vector<int64_t> f16 = {kMin, kMin, kMin, kMin, kMin, kMin, kMin, kMin, -3, 3};  // 9.2e18 is inf
  CHECK(ivalues(hgtest::make(v, {10}, float64).to(int64)) == f64);
  CHECK(ivalues(hgtest::make(v, {10}, float32).to(int64)) == f32);
  CHECK(ivalues(hgtest::make(v, {10}, float16).to(int64)) == f16);
  CHECK(ivalues(hgtest::make(v, {10}, bfloat16).to(int64))[0] == kMin);
  // full does not: like PyTorch it refuses a value int64 cannot hold (tests/ops/test_factory_options.cpp)
  CHECK_THROWS_WITH(full({2}, kNaN, int64), Contains("without overflow"));
  CHECK_THROWS_WITH(full({2}, -1e300, int64), Contains("without overflow"));
  // clamp bounds beyond int64 mean "no bound" on that side
  const Tensor i = hgtest::make({-5, 0, 5}, {3}, int64);
  CHECK(ivalues(clamp(i, -1e30, 1e30)) == std::vector<int64_t>{-5, 0, 5});
  CHECK(ivalues(clamp(i, 1.0, 1e30)) == std::vector<int64_t>{1, 1, 5});
}

TEST_CASE("item<T>() refuses a value T cannot hold", "[tensor][conversions]") {
  CHECK_THROWS_WITH(full({}, kNaN).item<int64_t>(), Contains("item") && Contains("int64") && Contains("nan"));
  CHECK_THROWS_WITH(full({}, 1e19, float64).item<int64_t>(), Contains("cannot be converted"));
  CHECK_THROWS_WITH(full({}, -kInf).item<int64_t>(), Contains("cannot be converted"));
  CHECK_THROWS_WITH(full({}, 1e300, float64).item<float>(), Contains("float32"));
  CHECK_THROWS_WITH(full({}, 70000.0).item<Half>(), Contains("float16"));
  CHECK_THROWS_WITH(full({}, 1e39, float64).item<BFloat16>(), Contains("bfloat16"));
  // what fits, and what PyTorch's checked conversion lets through
  CHECK(full({}, -3.7).item<int64_t>() == -3);
  CHECK(full({}, -0x1p63, float64).item<int64_t>() == kMin);
  CHECK(std::isinf(full({}, kInf, float64).item<float>()));
  CHECK(std::isnan(full({}, kNaN, float64).item<float>()));
  CHECK(static_cast<float>(full({}, 65504.0).item<Half>()) == 65504.0f);
  CHECK(std::isinf(static_cast<float>(full({}, kInf).item<Half>())));
  CHECK(full({}, kNaN).item<bool>());  // NaN != 0
  CHECK(halfgrad::tensor(std::vector<int64_t>{INT64_MAX}).item<float>() == 0x1p63f);
}

TEST_CASE("randint into a floating dtype: bounds checked and high never reached, as PyTorch",
          "[random][conversions]") {
  // torch.randint(0, 70000, (3,), dtype=torch.float16): "to - 1 is out of bounds for c10::Half"
  CHECK_THROWS_WITH(randint(0, 70000, {3}, float16), Contains("randint") && Contains("out of bounds") &&
                                                           Contains("float16"));
  CHECK_THROWS_WITH(randint(-70000, 0, {3}, float16), Contains("from") && Contains("out of bounds"));
  // bfloat16 holds 999 only as 1000: PyTorch lowers high to 996 so no draw rounds up to high
  manual_seed(3);
  for (auto [high, dt, want_max] : {std::tuple{1000, bfloat16, 996.0}, std::tuple{70000, bfloat16, 69632.0},
                                    std::tuple{2049, float16, 2048.0}, std::tuple{70000, float32, 69999.0}}) {
    INFO(high << " " << dtype_name(dt));
    const auto v = hgtest::values(randint(0, high, {200000}, dt));
    const double mx = *std::max_element(v.begin(), v.end());
    CHECK(mx < high);
    CHECK(mx == want_max);  // torch's max over 100000 draws
  }
  // both ends, negative ranges too (torch's min and max over 400000 draws)
  for (auto [low, high, dt, want_min, want_max] :
       {std::tuple{-1001, 1001, bfloat16, -1000.0, 1000.0}, std::tuple{-70001, 70001, bfloat16, -69632.0, 69632.0},
        std::tuple{-3000, -2000, float16, -3000.0, -2001.0}}) {
    INFO(low << " " << high << " " << dtype_name(dt));
    const auto v = hgtest::values(randint(low, high, {400000}, dt));
    CHECK(*std::min_element(v.begin(), v.end()) == want_min);
    CHECK(*std::max_element(v.begin(), v.end()) == want_max);
  }
}
