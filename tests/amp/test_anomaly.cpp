// amp::DetectNonFinite (amp/anomaly.h): the first op whose forward output or
// backward gradient held inf or NaN, with its dtype and the policy row that
// chose it, for an overflow planted in one activation and an inf planted in
// one backward.
#include <catch2/catch.hpp>

#include <halfgrad.h>
#include <halfgrad/amp/anomaly_hooks.h>

#include <cmath>

#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Tensor;

TEST_CASE("DetectNonFinite names the op whose float16 output overflowed, and the policy row", "[amp][anomaly]") {
  // 300 * 100 * 4 = 120000 > 65504: the linear's float16 output overflows; the
  // relu after it passes the inf on, but the first one is the linear's
  const Tensor x = hg::full({2, 4}, 300.0), w = hg::full({3, 4}, 100.0);
  hg::amp::DetectNonFinite detect;
  Tensor y;
  {
    hg::amp::autocast region(hg::kCPU, hg::kHalf);
    y = hg::relu(hg::linear(x, w));
  }
  CHECK(std::isinf(hgtest::values(y)[0]));
  REQUIRE(detect.first());
  const auto& f = *detect.first();
  CHECK(f.phase == "forward");
  CHECK(f.op == "linear");
  CHECK(f.tensor == "float16[2, 3] cpu");
  CHECK(f.inf == 6);
  CHECK(f.nan == 0);
  CHECK(f.policy == "float16 by the policy table (lower_precision)");
  CHECK(f.inputs == std::vector<std::string>{"float16[2, 4] cpu", "float16[3, 4] cpu"});  // after autocast's casts
  CHECK(detect.describe() ==
        "first non-finite value: forward of linear -> float16[2, 3] cpu (float16 by the policy table "
        "(lower_precision)) holds 6 inf, 0 NaN; inputs: float16[2, 4] cpu, float16[3, 4] cpu");
  // the same in float32: no overflow, nothing found
  detect.reset();
  (void)hg::relu(hg::linear(x, w));
  CHECK_FALSE(detect.first());
  CHECK(detect.describe() == "no non-finite value seen");
}

TEST_CASE("DetectNonFinite names the backward that produced an inf from finite values", "[amp][anomaly]") {
  // sqrt(0) = 0 is finite; its gradient 1 / (2 sqrt(0)) is not. The div inside
  // sqrt's backward formula is not reported as an op of its own.
  const Tensor x = hgtest::make({0.0, 1.0, 4.0}, {3}, DType::Float32).requires_grad_(true);
  hg::amp::DetectNonFinite detect;
  hg::sqrt(x * 1.0).sum().backward();
  REQUIRE(detect.first());
  const auto& f = *detect.first();
  CHECK(f.phase == "backward");
  CHECK(f.op == "sqrt");
  CHECK(f.tensor == "float32[3] cpu");
  CHECK(f.inf == 1);
  CHECK(f.inputs == std::vector<std::string>{"float32[3] cpu"});  // the incoming gradient
  CHECK_THAT(detect.describe(), Catch::Matchers::StartsWith("first non-finite value: backward of sqrt"));
}

TEST_CASE("DetectNonFinite: off without a guard, nested guards, policy rows of fp32 ops", "[amp][anomaly]") {
  CHECK_FALSE(hg::amp::detect_non_finite_active());
  {
    hg::amp::DetectNonFinite outer;
    {
      hg::amp::DetectNonFinite inner;
      (void)hg::log(hg::zeros({2}));  // -inf
      REQUIRE(inner.first());
      CHECK(inner.first()->op == "log");
      CHECK(inner.first()->policy == "autocast off: the inputs' dtype");
    }
    CHECK_FALSE(outer.first());  // the inner guard took it
    {
      hg::amp::autocast region(hg::kCPU);
      (void)hg::exp(hg::full({2}, 100.0));  // no row: float32 in, e^100 overflows float32 too
    }
    REQUIRE(outer.first());
    CHECK(outer.first()->op == "exp");
    CHECK(outer.first()->policy == "no row in the policy table: the inputs' dtype");
    outer.reset();
    {
      hg::amp::autocast region(hg::kCPU);
      // fp32 by the policy table, and still (1e20)^2 = 1e40 is past float32's range
      (void)hg::nn::functional::mse_loss(hg::full({2}, 1e20).to(hg::kBFloat16), hg::zeros({2}));
    }
    REQUIRE(outer.first());
    CHECK(outer.first()->op == "mse_loss");
    CHECK(outer.first()->policy == "float32 by the policy table (fp32)");
    CHECK(outer.first()->inputs == std::vector<std::string>{"float32[2] cpu", "float32[2] cpu"});
  }
  CHECK_FALSE(hg::amp::detect_non_finite_active());
}

TEST_CASE("DetectNonFinite ignores a gradient backward computes for an input that needs none", "[amp][anomaly]") {
  // h * (1/16384): the scalar becomes a tensor, and mul's formula also sums a
  // (float16, overflowing) gradient for it; nobody needs that one.
  auto w = hg::full({4, 4}, 1.0).requires_grad_();
  hg::amp::DetectNonFinite detect;
  Tensor h;
  {
    hg::amp::autocast region(hg::kCPU, hg::kHalf);
    h = hg::matmul(hg::full({256, 4}, 300.0), w);  // 1200 each: finite
  }
  (h * (1.0 / 16384)).sum().backward();
  CHECK(hg::isfinite(w.grad()).all().item<bool>());
  CHECK_FALSE(detect.first());
  CHECK(detect.describe() == "no non-finite value seen");
}
