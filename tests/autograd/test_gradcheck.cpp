// The gradient checker itself: it passes correct gradients, catches wrong
// ones (with a report naming the input and the element), rejects inputs it
// cannot check, and leaves the inputs' values and .grad as they were.
#include <catch2/catch.hpp>

#include <cstring>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;

TEST_CASE("gradcheck passes correct gradients", "[autograd][gradcheck][self]") {
  const Tensor x = hgtest::leaf({3, 4}), y = hgtest::leaf({4});
  auto fn = [](const std::vector<Tensor>& in) { return mul(in[0], exp(in[1])); };
  const auto r = gradcheck(fn, {x, y}, {.raise = false});
  INFO(r.message);
  CHECK(r.ok);
  CHECK(static_cast<bool>(r));
  CHECK(r.checked == 16);
  CHECK(r.mismatches.empty());
  CHECK(r.max_abs_error < 1e-6);
  CHECK_THAT(r.message, Contains("ok"));
  CHECK_NOTHROW(gradcheck(fn, {x, y}));  // raises only on failure
  // a scalar output uses the implicit backward()
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return sum(exp(in[0])); }, {x}).ok);
}

TEST_CASE("gradcheck catches a wrong gradient and reports where", "[autograd][gradcheck][self]") {
  // d/dx sum(x * detach(x)) is reported as detach(x) = x, but the function is sum(x^2): 2x.
  const Tensor x = hgtest::leaf_away({2, 3}, 0.5, 2.0);
  auto wrong = [](const std::vector<Tensor>& in) { return sum(mul(in[0], in[0].detach())); };
  const auto r = gradcheck(wrong, {x}, {.raise = false});
  CHECK_FALSE(r.ok);
  CHECK(r.mismatches.size() == 6);
  CHECK(r.mismatches[0].input == 0);
  CHECK(r.mismatches[0].position == Shape{0, 0});
  // analytical = x, numerical = 2x
  CHECK(r.mismatches[0].analytical == hgtest::values(x)[0]);
  CHECK(r.mismatches[0].numerical == Approx(2 * r.mismatches[0].analytical).epsilon(1e-6));
  CHECK_THAT(r.message, Contains("input 0") && Contains("float64[2, 3]") && Contains("[0, 0]") &&
                            Contains("analytical") && Contains("numerical"));
  REQUIRE_THROWS_AS(gradcheck(wrong, {x}), Error);
  REQUIRE_THROWS_WITH(gradcheck(wrong, {x}), Contains("gradcheck") && Contains("differ"));
  // a gradient that never arrives counts as zero, and is wrong here
  const Tensor y = hgtest::leaf({3});
  const auto r2 = gradcheck([](const std::vector<Tensor>& in) { return sum(exp(in[0].detach()) + in[1]); },
                            {hgtest::leaf({3}), y}, {.raise = false});
  CHECK_FALSE(r2.ok);
  CHECK(r2.mismatches[0].input == 0);
  CHECK(r2.mismatches[0].analytical == 0.0);
}

TEST_CASE("gradcheck rejects inputs it cannot check", "[autograd][gradcheck][self]") {
  auto fn = [](const std::vector<Tensor>& in) { return exp(in[0]); };
  const Tensor f32 = ones({3}).requires_grad_();
  REQUIRE_THROWS_WITH(gradcheck(fn, {f32}), Contains("float64") && Contains("float32[3]"));
  const Tensor nonleaf = mul(hgtest::leaf({3}), 2.0);
  REQUIRE_THROWS_WITH(gradcheck(fn, {nonleaf}), Contains("leaf"));
  REQUIRE_THROWS_WITH(gradcheck(fn, {hgtest::uniform({3}, float64)}), Contains("no input requires grad"));
  Tensor expanded = alias_with(hgtest::uniform({3, 1}, float64), {3, 4}, {1, 0}, 0);
  expanded.requires_grad_();
  REQUIRE_THROWS_WITH(gradcheck(fn, {expanded}), Contains("share memory"));
  REQUIRE_THROWS_WITH(gradcheck([](const std::vector<Tensor>& in) { return gt(in[0], 0.0); }, {hgtest::leaf({3})}),
                      Contains("floating"));
  REQUIRE_THROWS_WITH(gradcheck([](const std::vector<Tensor>& in) { return in[0].detach(); }, {hgtest::leaf({3})}),
                      Contains("does not require grad"));
}

TEST_CASE("gradcheck restores values and .grad and passes non-grad inputs through", "[autograd][gradcheck][self]") {
  Tensor x = hgtest::leaf({2, 3});
  const auto before = hgtest::values(x);
  Tensor g = full({2, 3}, 7.0, float64);
  x.set_grad(g);
  const Tensor target = hgtest::make({1, 0}, {2}, int64);
  auto fn = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); };
  CHECK(gradcheck(fn, {x, target}).ok);
  const auto after = hgtest::values(x);
  REQUIRE(after.size() == before.size());
  CHECK(std::memcmp(after.data(), before.data(), before.size() * sizeof(double)) == 0);  // bit for bit
  CHECK(x.grad().is_same(g));
  CHECK(hgtest::values(x.grad()) == std::vector<double>(6, 7.0));
  // also from inside no_grad, the analytical pass records a graph
  {
    no_grad guard;
    CHECK(gradcheck(fn, {x, target}).ok);
  }
  CHECK(autograd::grad_enabled());
}

TEST_CASE("gradcheck options: tolerances and eps", "[autograd][gradcheck][self]") {
  // Through a float32 cast the function is piecewise constant at the float32
  // ulp: a larger step and looser tolerances make it checkable.
  const Tensor x = hgtest::leaf({5});
  auto fn = [](const std::vector<Tensor>& in) { return exp(in[0].to(float32)).to(float64); };
  autograd::GradcheckOptions loose;
  loose.eps = 1e-3;
  loose.atol = 1e-3;
  loose.rtol = 1e-3;
  loose.raise = false;
  const auto r = gradcheck(fn, {x}, loose);
  INFO(r.message);
  CHECK(r.ok);
  REQUIRE_THROWS_AS(gradcheck(fn, {x}, {.eps = 0}), Error);
}
