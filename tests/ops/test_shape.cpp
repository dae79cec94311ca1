// Joins and casts: cat and stack along every dim (strided inputs, dtype
// promotion), and the cast op to(dtype) between all six dtypes.
#include <catch2/catch.hpp>

#include <cmath>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::values;

namespace {
// Reference cat of row-major value lists along dim.
std::vector<double> ref_cat(const std::vector<Tensor>& ts, int64_t dim) {
  Shape out = ts[0].shape();
  out[dim] = 0;
  for (const auto& t : ts) out[dim] += t.shape()[dim];
  std::vector<double> r(static_cast<size_t>(hgtest::numel(out)));
  int64_t off = 0;
  for (const auto& t : ts) {
    const auto v = values(t);
    for (int64_t i = 0; i < t.numel(); ++i) {
      Shape idx = hgtest::unravel(i, t.shape());
      idx[dim] += off;
      r[hgtest::ravel(idx, out)] = v[i];
    }
    off += t.shape()[dim];
  }
  return r;
}
}  // namespace

TEST_CASE("cat along every dim, with strided inputs", "[ops][cat]") {
  std::vector<DType> dts = hgtest::kAllDTypes;
  for (DType dt : dts)
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      INFO(hgtest::dname(dt) << " dim " << dim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Shape s1 = {2, 3, 4}, s2 = {2, 3, 4}, s3 = {2, 3, 4};
      s2[d] = 1;
      s3[d] = 5;
      auto rnd = [&](Shape s) {
        return dt == boolean ? hgtest::random_bool(s) : hgtest::uniform(s, dt, -9, 9);
      };
      // the third input is a permuted view
      const Tensor a = rnd(s1), b = rnd(s2), c = rnd({s3[2], s3[0], s3[1]}).permute({1, 2, 0});
      REQUIRE(c.shape() == s3);
      const Tensor y = cat({a, b, c}, dim);
      Shape out = s1;
      out[d] = s1[d] + s2[d] + s3[d];
      CHECK(y.dtype() == dt);
      CHECK(y.shape() == out);
      HG_CHECK_EXACT(y, ref_cat({a, b, c}, d));
    }
  // a single tensor, and mixed dtypes promote
  const Tensor x = hgtest::uniform({3, 2}, float32);
  HG_CHECK_EXACT(cat({x}, 0), values(x));
  const Tensor h = hgtest::uniform({1, 2}, float16), i = hgtest::uniform({2, 2}, int64, -5, 5);
  const Tensor m = cat({h, x, i}, 0);
  CHECK(m.dtype() == float32);
  HG_CHECK_EXACT(m, ref_cat({h, x, i}, 0));
  CHECK(cat({h, hgtest::uniform({1, 2}, bfloat16)}, 0).dtype() == float32);
}

TEST_CASE("stack along every dim", "[ops][stack]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (int64_t dim : {0, 1, 2, -1}) {
      INFO(hgtest::dname(dt) << " dim " << dim);
      const Tensor a = hgtest::uniform({3, 4}, dt), b = hgtest::uniform({4, 3}, dt).t(), c = hgtest::uniform({3, 4}, dt);
      const Tensor y = stack({a, b, c}, dim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Shape out = {3, 4};
      out.insert(out.begin() + d, 3);
      CHECK(y.shape() == out);
      CHECK(y.dtype() == dt);
      HG_CHECK_EXACT(y, ref_cat({a.unsqueeze(d), b.unsqueeze(d), c.unsqueeze(d)}, d));
    }
  CHECK(stack({ones({2}), zeros({2})}).shape() == Shape{2, 2});
  CHECK(stack({full({}, 1.0), full({}, 2.0)}).shape() == Shape{2});
}

TEST_CASE("cat and stack errors name the op and the shapes", "[ops][cat][errors]") {
  REQUIRE_THROWS_WITH(cat({ones({2, 3}), ones({3, 3})}, 1), Contains("cat") && Contains("[2, 3]") && Contains("[3, 3]"));
  REQUIRE_THROWS_WITH(cat({ones({2, 3}), ones({2})}, 0), Contains("cat"));
  REQUIRE_THROWS_WITH(cat({}, 0), Contains("cat"));
  REQUIRE_THROWS_WITH(cat({ones({2, 3})}, 2), Contains("cat"));
  REQUIRE_THROWS_WITH(stack({ones({2, 3}), ones({3, 2})}), Contains("stack") && Contains("[2, 3]") && Contains("[3, 2]"));
}

TEST_CASE("the cast op between all dtypes", "[ops][cast]") {
  // values chosen away from rounding midpoints; all within the float16 range
  const std::vector<double> v = {-2.75, -1.0, -0.0, 0.0, 0.5, 1.0, 3.25, 100.0, 1.0 / 3.0, 65519.0, -0.3, 7.9};
  auto expected = [](double x, DType to) -> double {
    switch (to) {
      case DType::Int64: return std::trunc(x);  // toward zero, as a C++ cast and PyTorch
      case DType::Bool: return x != 0 ? 1.0 : 0.0;
      default: return hgtest::round_to(x, to);  // IEEE round to nearest even
    }
  };
  for (DType from : hgtest::kAllDTypes) {
    const Tensor src = hgtest::make(v, {3, 4}, from);
    const auto sv = values(src);
    for (DType to : hgtest::kAllDTypes) {
      INFO(hgtest::dname(from) << " -> " << hgtest::dname(to));
      const Tensor y = src.to(to);
      CHECK(y.dtype() == to);
      CHECK(y.shape() == Shape{3, 4});
      std::vector<double> ref;
      for (double x : sv) ref.push_back(expected(x, to));
      HG_CHECK_EXACT(y, ref);
      // strided source: the same values in transposed order
      const Tensor yt = src.t().to(to);
      CHECK(yt.shape() == Shape{4, 3});
      std::vector<double> reft;
      for (double x : values(src.t())) reft.push_back(expected(x, to));
      HG_CHECK_EXACT(yt, reft);
      // 0-d
      CHECK(src.select(0, 1).select(0, 2).to(to).dim() == 0);
    }
  }
  // rounding happens once per cast: float32 -> float16 of values just past the largest half
  HG_CHECK_EXACT(hgtest::make({65519.0, 65520.0, 1e-8}, {3}, float32).to(float16), (std::vector<double>{65504.0, INFINITY, 0.0}));
  // the sign of zero survives a cast
  CHECK(std::signbit(values(hgtest::make({-0.0}, {1}, float32).to(bfloat16))[0]));
  CHECK(std::signbit(values(hgtest::make({-0.0}, {1}, float64).to(float16))[0]));
  // bool from NaN is true (x != 0)
  CHECK(values(hgtest::make({NAN}, {1}, float32).to(boolean))[0] == 1.0);
}

TEST_CASE("a size-0 dim anywhere: the tensor is contiguous and every op handles it as PyTorch", "[shape][empty]") {
  for (const Shape& s : std::vector<Shape>{{2, 0}, {0, 3}, {2, 0, 3}, {0}}) {
    INFO(shape_str(s));
    const Tensor x = randn(s);
    CHECK(x.is_contiguous());
    CHECK(x.view({-1}).shape() == Shape{0});
    CHECK(x.reshape({0, 7}).shape() == Shape{0, 7});
    CHECK(relu(x).shape() == s);
    CHECK(add(x, ones({1})).shape() == s);
    CHECK(sum(x).item<double>() == 0.0);
    CHECK(std::isnan(mean(x).item<double>()));
  }
  CHECK(zeros({2, 0}).t().contiguous().shape() == Shape{0, 2});
  CHECK(values(sum(zeros({2, 0}), {1})) == std::vector<double>{0, 0});
  CHECK(values(mm(zeros({2, 0}), zeros({0, 3}))) == std::vector<double>(6, 0.0));  // an empty inner dim sums to 0
  CHECK(softmax(zeros({0, 4}), 1).shape() == Shape{0, 4});
  CHECK(std::isnan(cross_entropy(zeros({0, 4}), zeros({0}, int64)).item<double>()));  // PyTorch: nan
}
