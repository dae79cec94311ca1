// sin, cos, erf, floor, round, sign, var and std (the ops a transformer and
// its initialisers reach for): forward against float64 references in every
// float dtype (int64 where PyTorch keeps it), round's ties to even, sign's
// zeros and NaN, var/std over dims with each correction; backward by finite
// differences in float64 and, in the half dtypes, against the float64
// gradient; errors; and on a CUDA device, CUDA against the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <halfgrad.h>
#include <halfgrad/amp/policy.h>

#include "cuda_compare.h"
#include "test_util.h"

using namespace halfgrad;
using hgtest::values;
using Catch::Matchers::Contains;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;
};

std::vector<UnaryCase> smooth_cases() {
  return {
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, -4, 4},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, -4, 4},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, -3, 3},
  };
}

// var over `dims` of v (shape s) in float64, with the correction.
std::vector<double> var_ref(const std::vector<double>& v, const Shape& s, const std::vector<int64_t>& dims,
                            double correction) {
  const std::vector<double> sums = hgtest::reduce(v, s, dims, hgtest::RefReduce::Sum);
  int64_t n = 1;
  for (int64_t d : dims) n *= s[static_cast<size_t>(d)];
  Shape ks = s;
  for (int64_t d : dims) ks[static_cast<size_t>(d)] = 1;
  std::vector<double> mean(sums.size());
  for (size_t i = 0; i < sums.size(); ++i) mean[i] = sums[i] / static_cast<double>(n);
  const std::vector<double> m = hgtest::expand(mean, ks, s);
  std::vector<double> sq(v.size());
  for (size_t i = 0; i < v.size(); ++i) sq[i] = (v[i] - m[i]) * (v[i] - m[i]);
  std::vector<double> r = hgtest::reduce(sq, s, dims, hgtest::RefReduce::Sum);  // keepdim or not: the same order
  const double dof = std::max(static_cast<double>(n) - correction, 0.0);
  for (double& x : r) x /= dof;
  return r;
}

}  // namespace

TEST_CASE("sin, cos and erf match float64 references in every float dtype", "[ops][elementwise][trig]") {
  for (const auto& c : smooth_cases())
    for (DType dt : hgtest::kFloatDTypes)
      for (bool transposed : {false, true}) {
        INFO(c.name << " " << hgtest::dname(dt) << (transposed ? " transposed" : ""));
        const Tensor x = transposed ? hgtest::uniform({13, 7}, dt, c.lo, c.hi).t()
                                    : hgtest::uniform({300, 257}, dt, c.lo, c.hi);  // large: threaded
        const Tensor y = c.op(x);
        CHECK(y.dtype() == dt);
        HG_CHECK_CLOSE(y, hgtest::map1(values(x), c.ref));
      }
  // integers compute in float32, as PyTorch
  const Tensor i = hgtest::make({-2, 0, 3}, {3}, int64);
  CHECK(sin(i).dtype() == float32);
  HG_CHECK_CLOSE(sin(i), (std::vector<double>{std::sin(-2.0), 0, std::sin(3.0)}));
  // the edges: NaN stays NaN; sin/cos of inf is NaN; erf saturates
  const Tensor e = hgtest::make({kNaN, kInf, -kInf, 0}, {4}, float32);
  const auto s = values(sin(e)), c = values(cos(e)), r = values(erf(e));
  CHECK(std::isnan(s[0]));
  CHECK(std::isnan(s[1]));
  CHECK(std::isnan(c[2]));
  CHECK(c[3] == 1.0);
  CHECK(r[1] == 1.0);
  CHECK(r[2] == -1.0);
  CHECK(std::isnan(r[0]));
}

TEST_CASE("floor and round (half to even) are exact; integers keep their dtype", "[ops][elementwise][round]") {
  const std::vector<double> v = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.25, -2.75, 3.0, -0.0, 1e6 + 0.5};
  const std::vector<double> rounded = {-2, -2, -0.0, 0, 2, 2, 2, -3, 3, -0.0, 1e6};
  const std::vector<double> floored = {-3, -2, -1, 0, 1, 2, 2, -3, 3, -0.0, 1e6};
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    // the values as the dtype holds them (bfloat16 cannot hold 1e6 + 0.5)
    const Tensor x = hgtest::make(v, {static_cast<int64_t>(v.size())}, dt);
    const auto held = values(x);
    std::vector<double> want_round, want_floor;
    for (double h : held) {
      want_round.push_back(std::nearbyint(h));  // the default mode: ties to even
      want_floor.push_back(std::floor(h));
    }
    HG_CHECK_EXACT(round(x), want_round);
    HG_CHECK_EXACT(floor(x), want_floor);
    CHECK(round(x).dtype() == dt);
  }
  // the ties, in float64 exactly as written
  HG_CHECK_EXACT(round(hgtest::make(v, {11}, float64)), rounded);
  HG_CHECK_EXACT(floor(hgtest::make(v, {11}, float64)), floored);
  // NaN and inf pass through
  const auto odd = values(round(hgtest::make({kNaN, kInf, -kInf}, {3}, float32)));
  CHECK(std::isnan(odd[0]));
  CHECK(odd[1] == kInf);
  CHECK(odd[2] == -kInf);
  const Tensor i = hgtest::make({-7, 0, 9}, {3}, int64);
  CHECK(floor(i).dtype() == int64);
  CHECK(round(i).dtype() == int64);
  HG_CHECK_EXACT(round(i), (std::vector<double>{-7, 0, 9}));
}

TEST_CASE("sign: -1, 0 or 1 in the input's dtype; 0 for +-0 and for NaN, as PyTorch", "[ops][elementwise][sign]") {
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::make({-3.5, -0.0, 0.0, 2.0, kInf, -kInf, kNaN}, {7}, dt);
    const Tensor y = sign(x);
    CHECK(y.dtype() == dt);
    HG_CHECK_EXACT(y, (std::vector<double>{-1, 0, 0, 1, 1, -1, 0}));
  }
  const Tensor i = sign(hgtest::make({-5, 0, 8}, {3}, int64));
  CHECK(i.dtype() == int64);
  HG_CHECK_EXACT(i, (std::vector<double>{-1, 0, 1}));
}

TEST_CASE("backward of sin, cos and erf by finite differences; floor, round and sign give 0",
          "[ops][elementwise][backward]") {
  for (const auto& c : smooth_cases()) {
    INFO(c.name);
    autograd::gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {hgtest::leaf({3, 5}, -3, 3)});
    autograd::gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0]); },
                        {hgtest::strided_leaf({4, 3}, -3, 3)});
  }
  // in the half dtypes the formula runs in the forward's dtype: close to float64's
  for (const auto& c : smooth_cases())
    for (DType dt : {float32, float16, bfloat16}) {
      INFO(c.name << " " << hgtest::dname(dt));
      const Tensor x64 = hgtest::uniform({4, 6}, bfloat16, -2, 2).to(float64).requires_grad_(true);
      const Tensor x = x64.detach().to(dt).requires_grad_(true);
      c.op(x64).sum().backward();
      c.op(x).sum().backward();
      CHECK(x.grad().dtype() == dt);
      HG_CHECK_CLOSE_TOL(x.grad(), values(x64.grad()), 4 * hgtest::tol(dt));
    }
  // piecewise constant: a zero gradient, even from an inf upstream
  for (auto op : {+[](const Tensor& t) { return floor(t); }, +[](const Tensor& t) { return round(t); },
                  +[](const Tensor& t) { return sign(t); }}) {
    const Tensor x = hgtest::leaf({5});
    op(x).backward(full({5}, kInf, float64));
    HG_CHECK_EXACT(x.grad(), (std::vector<double>(5, 0.0)));
  }
}

TEST_CASE("var and std over dims match float64 references, every correction and float dtype",
          "[ops][reduce][var]") {
  const Shape s{4, 5, 6};
  struct DimsCase {
    Shape dims;
    std::vector<int64_t> wrapped;
  };
  const std::vector<DimsCase> dims_cases = {{{1}, {1}}, {{0, 2}, {0, 2}}, {{-1}, {2}}, {{}, {0, 1, 2}}};
  for (DType dt : hgtest::kFloatDTypes)
    for (const auto& dc : dims_cases)
      for (double correction : {1.0, 0.0, 2.5})
        for (bool keepdim : {false, true}) {
          INFO(hgtest::dname(dt) << " dims " << shape_str(dc.dims) << " correction " << correction
                                 << " keepdim " << keepdim);
          // an offset mean: a naive sum of squares would lose the variance
          const Tensor x = hgtest::uniform(s, dt, 9, 11);
          const auto ref = var_ref(values(x), s, dc.wrapped, correction);
          const Tensor v = var(x, dc.dims, correction, keepdim);
          CHECK(v.dtype() == dt);
          CHECK(v.shape() == hgtest::reduced_shape(s, dc.wrapped, keepdim));
          HG_CHECK_CLOSE(v, ref);
          HG_CHECK_CLOSE(halfgrad::std(x, dc.dims, correction, keepdim), hgtest::map1(ref, [](double r) { return std::sqrt(r); }));
        }
  // defaults: all elements, Bessel's correction, as torch.var(x)
  const Tensor x = hgtest::make({1, 2, 3, 4}, {2, 2}, float32);
  CHECK(var(x).item<double>() == Approx(5.0 / 3.0));
  CHECK(halfgrad::std(x).item<double>() == Approx(std::sqrt(5.0 / 3.0)));
  CHECK(var(x, {}, 0).item<double>() == Approx(1.25));
  // N <= correction: NaN for a constant slice (0 / 0), inf otherwise, as PyTorch
  CHECK(std::isnan(var(hgtest::make({3}, {1}, float32)).item<double>()));
  CHECK(std::isinf(var(hgtest::make({1, 2}, {2}, float32), {}, 2.0).item<double>()));
  CHECK(std::isnan(var(full({}, 2.0, float64)).item<double>()));
  // an empty slice: NaN
  CHECK(std::isnan(var(zeros({0, 3}), {0}, 1.0)[0].item<double>()));
}

TEST_CASE("backward of var and std by finite differences, and in the half dtypes", "[ops][reduce][var][backward]") {
  for (double correction : {1.0, 0.0})
    for (const Shape& dims : {Shape{0}, Shape{1}, Shape{}}) {
      INFO("correction " << correction << " dims " << shape_str(dims));
      autograd::gradcheck([&](const std::vector<Tensor>& in) { return var(in[0], dims, correction); },
                          {hgtest::leaf({3, 4})});
      autograd::gradcheck([&](const std::vector<Tensor>& in) { return halfgrad::std(in[0], dims, correction, true); },
                          {hgtest::strided_leaf({3, 4})});
    }
  for (DType dt : {float32, float16, bfloat16}) {
    INFO(hgtest::dname(dt));
    const Tensor x64 = hgtest::uniform({5, 6}, bfloat16, -2, 2).to(float64).requires_grad_(true);
    const Tensor x = x64.detach().to(dt).requires_grad_(true);
    (var(x64, {1}).sum() + halfgrad::std(x64, {0}).sum()).backward();
    (var(x, {1}).sum() + halfgrad::std(x, {0}).sum()).backward();
    CHECK(x.grad().dtype() == dt);
    HG_CHECK_CLOSE_TOL(x.grad(), values(x64.grad()), 4 * hgtest::tol(dt));
  }
}

TEST_CASE("var and std: clear errors", "[ops][reduce][var][errors]") {
  REQUIRE_THROWS_WITH(var(hgtest::make({1, 2}, {2}, int64)), Contains("var") && Contains("floating"));
  REQUIRE_THROWS_WITH(halfgrad::std(hgtest::make({1, 2}, {2}, int64)), Contains("std") && Contains("floating"));
  REQUIRE_THROWS_WITH(var(zeros({2, 3}), {2}), Contains("var"));
  REQUIRE_THROWS_WITH(var(zeros({2, 3}), {0}, kNaN), Contains("correction"));
}

TEST_CASE("the new ops have no autocast row: they run in their inputs' dtypes", "[ops][amp]") {
  for (const char* op : {"sin", "cos", "erf", "floor", "round", "sign", "var", "std"})
    for (DeviceType d : {DeviceType::CPU, DeviceType::CUDA}) {
      INFO(op << " " << device_type_name(d));
      CHECK_FALSE(amp::lookup_policy(d, op).has_value());
    }
  amp::autocast region(DeviceType::CPU);
  CHECK(sin(ones({2}, float32)).dtype() == float32);
  CHECK(var(ones({2}, bfloat16)).dtype() == bfloat16);
}

TEST_CASE("CUDA sin, cos, erf, floor, round, sign, var and std match the CPU", "[cuda][ops][trig]") {
  using hgtest::cuda::dev;
  using hgtest::cuda::expect_same;
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"floor", [](const Tensor& x) { return floor(x); }},
      {"round", [](const Tensor& x) { return round(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"var dim 1", [](const Tensor& x) { return var(x, {1}); }},
      {"std all, correction 0", [](const Tensor& x) { return halfgrad::std(x, {}, 0.0); }},
  };
  for (DType dt : hgtest::kFloatDTypes)
    for (const auto& [name, op] : ops) {
      const Tensor x = hgtest::uniform({37, 29}, dt, -4, 4);
      const bool exact = name == "floor" || name == "round" || name == "sign";
      expect_same(op(dev(x)), op(x), name + " " + hgtest::dname(dt), exact);
      expect_same(op(dev(x).t()), op(x.t()), name + " transposed " + hgtest::dname(dt), exact);
    }
  for (const auto& [name, op] : ops) {
    if (name.rfind("var", 0) == 0 || name.rfind("std", 0) == 0) continue;
    const Tensor x = hgtest::leaf({6, 5}, -3, 3);
    const Tensor xg = hgtest::cuda::leaf_on(x.detach(), hgtest::cuda::kCuda);
    op(x).sum().backward();
    op(xg).sum().backward();
    expect_same(xg.grad(), x.grad(), name + " backward");
  }
  const Tensor x = hgtest::leaf({6, 5});
  const Tensor xg = hgtest::cuda::leaf_on(x.detach(), hgtest::cuda::kCuda);
  (var(x, {0}).sum() + halfgrad::std(x, {1}).sum()).backward();
  (var(xg, {0}).sum() + halfgrad::std(xg, {1}).sum()).backward();
  expect_same(xg.grad(), x.grad(), "var + std backward");
}
