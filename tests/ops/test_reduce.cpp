// Reductions against float64 references: sum, mean, max, argmax over single
// and several dims, with and without keepdim, over all elements, on
// contiguous and permuted inputs, in every float dtype (and int64 for sum,
// max and argmax); half reductions accumulate in float32.
#include <catch2/catch.hpp>

#include <halfgrad/kernels/cascade_sum.h>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::RefReduce;
using hgtest::values;

namespace {
// Inputs of logical shape [4, 5, 6]: contiguous, and a permuted view.
std::vector<std::pair<std::string, Tensor>> inputs(DType dt) {
  // Floats centred at 1, not 0: a sum near zero would make the relative-error
  // check measure cancellation instead of the kernel (the norm of the reference
  // stays well away from 0 whatever the random stream gives).
  const double lo = dt == int64 ? -40 : -1, hi = dt == int64 ? 40 : 3;
  return {{"contiguous", hgtest::uniform({4, 5, 6}, dt, lo, hi)},
          {"permuted", hgtest::uniform({6, 4, 5}, dt, lo, hi).permute({1, 2, 0})}};
}

const std::vector<Shape> kDimSets = {{0}, {1}, {2}, {-1}, {0, 1}, {1, 2}, {0, 2}, {2, 0}, {0, 1, 2}};
}  // namespace

TEST_CASE("sum and mean over dims with keepdim", "[ops][reduce]") {
  std::vector<DType> dts = hgtest::kFloatDTypes;
  dts.push_back(int64);
  for (DType dt : dts)
    for (const auto& [layout, x] : inputs(dt))
      for (const Shape& dims : kDimSets)
        for (bool keepdim : {false, true}) {
          INFO(hgtest::dname(dt) << " " << layout << " dims " << shape_str(dims) << " keepdim " << keepdim);
          const auto d = hgtest::wrap_dims(dims, 3);
          const Tensor s = sum(x, dims, keepdim);
          CHECK(s.dtype() == dt);
          CHECK(s.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
          const auto ref_s = hgtest::reduce(values(x), x.shape(), d, RefReduce::Sum);
          if (dt == int64) {
            HG_CHECK_EXACT(s, ref_s);
            REQUIRE_THROWS_AS(mean(x, dims, keepdim), Error);
            continue;
          }
          HG_CHECK_CLOSE(s, ref_s);
          HG_CHECK_CLOSE(x.sum(dims, keepdim), ref_s);
          const Tensor m = mean(x, dims, keepdim);
          CHECK(m.dtype() == dt);
          CHECK(m.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
          HG_CHECK_CLOSE(m, hgtest::reduce(values(x), x.shape(), d, RefReduce::Mean));
          HG_CHECK_CLOSE(x.mean(dims, keepdim), hgtest::reduce(values(x), x.shape(), d, RefReduce::Mean));
        }
}

TEST_CASE("sum and mean over all elements", "[ops][reduce]") {
  for (DType dt : hgtest::kFloatDTypes) {
    for (const auto& [layout, x] : inputs(dt)) {
      INFO(hgtest::dname(dt) << " " << layout);
      const auto v = values(x);
      double s = 0;
      for (double e : v) s += e;
      const Tensor ts = sum(x), tm = mean(x);
      CHECK(ts.dim() == 0);
      CHECK(tm.dim() == 0);
      CHECK(ts.dtype() == dt);
      HG_CHECK_CLOSE(ts, std::vector<double>{s});
      HG_CHECK_CLOSE(tm, std::vector<double>{s / v.size()});
      HG_CHECK_CLOSE(x.sum(), std::vector<double>{s});
      HG_CHECK_CLOSE(x.mean(), std::vector<double>{s / v.size()});
    }
  }
  const Tensor i = hgtest::uniform({7, 3}, int64, -100, 100);
  double s = 0;
  for (double e : values(i)) s += e;
  CHECK(sum(i).dtype() == int64);
  CHECK(sum(i).item<int64_t>() == static_cast<int64_t>(s));
  // bool sums count, as int64
  const Tensor b = hgtest::random_bool({50});
  double count = 0;
  for (double e : values(b)) count += e;
  CHECK(sum(b).dtype() == int64);
  CHECK(sum(b).item<int64_t>() == static_cast<int64_t>(count));
  REQUIRE_THROWS_AS(mean(i), Error);
  REQUIRE_THROWS_WITH(mean(i), Contains("mean") && Contains("int64"));
}

TEST_CASE("half reductions accumulate in float32", "[ops][reduce]") {
  // Accumulating in the half type itself would stall at 2048 (fp16) / 256 (bf16).
  CHECK(sum(ones({4096}, float16)).item<float>() == 4096.f);
  CHECK(sum(ones({1000}, bfloat16)).item<float>() == 1000.f);
  HG_CHECK_EXACT(sum(ones({64, 64}, float16), {0}), std::vector<double>(64, 64.0));
  CHECK(mean(full({5000}, 0.1, float16)).item<float>() == Approx(hgtest::round_to(0.1, float16)).epsilon(1e-3));
  for (DType dt : {float16, bfloat16}) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({100000}, dt, 0.0, 1.0);
    double s = 0;
    for (double e : values(x)) s += e;
    HG_CHECK_CLOSE(sum(x), std::vector<double>{s});
    HG_CHECK_CLOSE(mean(x), std::vector<double>{s / 100000});
    const Tensor x2 = x.view({1000, 100});
    HG_CHECK_CLOSE(sum(x2, {0}), hgtest::reduce(values(x2), {1000, 100}, {0}, RefReduce::Sum));
    HG_CHECK_CLOSE(sum(x2, {1}), hgtest::reduce(values(x2), {1000, 100}, {1}, RefReduce::Sum));
  }
}

TEST_CASE("large reductions (threaded path)", "[ops][reduce]") {
  for (DType dt : {float32, float64}) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({513, 300}, dt);
    for (int64_t d : {0, 1}) {
      HG_CHECK_CLOSE(sum(x, {d}), hgtest::reduce(values(x), x.shape(), {d}, RefReduce::Sum));
      HG_CHECK_CLOSE(std::get<0>(max(x, d)), hgtest::reduce(values(x), x.shape(), {d}, RefReduce::Max));
      HG_CHECK_EXACT(argmax(x, d), hgtest::reduce(values(x), x.shape(), {d}, RefReduce::ArgMax));
    }
    HG_CHECK_CLOSE(sum(x.t(), {1}), hgtest::reduce(values(x.t()), {300, 513}, {1}, RefReduce::Sum));
  }
}

TEST_CASE("max and argmax over a dim with keepdim", "[ops][reduce]") {
  std::vector<DType> dts = hgtest::kFloatDTypes;
  dts.push_back(int64);
  for (DType dt : dts)
    for (const auto& [layout, x] : inputs(dt))
      for (int64_t dim : {0, 1, 2, -1, -3})
        for (bool keepdim : {false, true}) {
          INFO(hgtest::dname(dt) << " " << layout << " dim " << dim << " keepdim " << keepdim);
          const std::vector<int64_t> d{dim < 0 ? dim + 3 : dim};
          const auto [m, mi] = max(x, dim, keepdim);
          HG_CHECK_EXACT(mi, hgtest::reduce(values(x), x.shape(), d, RefReduce::ArgMax));
          const Tensor a = argmax(x, dim, keepdim);
          CHECK(m.dtype() == dt);
          CHECK(a.dtype() == int64);
          CHECK(m.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
          CHECK(a.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
          HG_CHECK_EXACT(m, hgtest::reduce(values(x), x.shape(), d, RefReduce::Max));  // max is exact
          HG_CHECK_EXACT(a, hgtest::reduce(values(x), x.shape(), d, RefReduce::ArgMax));
        }
}

TEST_CASE("max and argmax over all elements and ties give the first index", "[ops][reduce]") {
  std::vector<DType> dts = hgtest::kFloatDTypes;
  dts.push_back(int64);
  for (DType dt : dts) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({6, 7}, dt, -30, 30).t();
    const auto v = values(x);
    const auto it = std::max_element(v.begin(), v.end());  // the first maximum
    CHECK(max(x).dim() == 0);
    CHECK(max(x).dtype() == dt);
    CHECK(max(x).item<double>() == *it);
    CHECK(argmax(x).dim() == 0);
    CHECK(argmax(x).item<int64_t>() == it - v.begin());
    // ties: the first occurrence, as PyTorch
    const Tensor t = hgtest::make({1, 5, 2, 5, 5, 0}, {2, 3}, dt);
    CHECK(argmax(t).item<int64_t>() == 1);
    HG_CHECK_EXACT(argmax(t, 1), (std::vector<double>{1, 0}));
    HG_CHECK_EXACT(argmax(t, 0), (std::vector<double>{1, 0, 0}));  // column 1 is a tie: the first row
  }
  // negative values only; NaN wins as in PyTorch
  CHECK(max(hgtest::make({-3, -1, -2}, {3}, float32)).item<float>() == -1.f);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(max(hgtest::make({1, nan, 2}, {3}, float32)).item<float>()));
  CHECK(argmax(hgtest::make({1, nan, 2}, {3}, float32)).item<int64_t>() == 1);
}

TEST_CASE("reduction argument errors", "[ops][reduce][errors]") {
  const Tensor x = ones({2, 3});
  REQUIRE_THROWS_WITH(sum(x, {2}), Contains("sum") && Contains("2"));
  REQUIRE_THROWS_WITH(sum(x, {0, 0}), Contains("sum"));
  REQUIRE_THROWS_WITH(max(x, 5), Contains("max"));
  REQUIRE_THROWS_WITH(argmax(x, -3), Contains("argmax"));
  REQUIRE_THROWS_AS(max(zeros({0})), Error);
}

TEST_CASE("max and argmax over a non-empty dim of an empty tensor give an empty result", "[ops][reduce]") {
  // Known bug (see the report): PyTorch returns values/indices of shape [0]
  // for ones(2, 0).max(0); halfgrad's kernel refuses any empty input
  // ("max/argmax: cannot reduce over an empty dimension of float32[2, 0]").
  Tensor m, a;
  REQUIRE_NOTHROW(m = std::get<0>(max(ones({2, 0}), 0)));
  REQUIRE_NOTHROW(a = argmax(ones({2, 0}), 0));
  CHECK(m.shape() == Shape{0});
  CHECK(a.shape() == Shape{0});
}

namespace {
// max over columns of |got - ref| / |ref|, ref summed in float64.
double column_rel_error(const Tensor& x, const Tensor& got) {
  const Tensor xf = x.to(float64).contiguous(), gf = got.to(float64);
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  const double* p = xf.data<double>();
  const double* g = gf.data<double>();
  double worst = 0;
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0;
    for (int64_t i = 0; i < rows; ++i) s += p[i * cols + j];
    worst = std::max(worst, std::abs(g[j] - s) / std::abs(s));
  }
  return worst;
}
}  // namespace

TEST_CASE("float32 sums add pairwise: no saturation at 2^24, error O(log n)", "[ops][reduce][large]") {
  SECTION("2^27 + 2^26 ones, over all elements and along a long row") {
    // One running float32 sum stops counting at 2^24 = 16777216.
    const int64_t n = (int64_t{1} << 27) + (int64_t{1} << 26);
    const Tensor x = ones({n});
    CHECK(sum(x).item<double>() == static_cast<double>(n));
    CHECK(mean(x).item<double>() == 1.0);
    CHECK(values(sum(x.view({2, n / 2}), {1})) == std::vector<double>{n / 2.0, n / 2.0});
    CHECK(sum(ones({n}, bfloat16)).item<double>() == static_cast<double>(n));
  }
  SECTION("2^25 rows along the leading dim (the bias-gradient path)") {
    const int64_t rows = int64_t{1} << 25;
    CHECK(values(sum(ones({rows, 2}), {0})) == std::vector<double>{double(rows), double(rows)});
    CHECK(values(mean(ones({rows, 2}), {0})) == std::vector<double>{1.0, 1.0});
  }
  SECTION("2e7 uniform values: relative error near float32's epsilon") {
    manual_seed(7);
    const Tensor x = rand({20000000});
    const float* p = x.data<float>();
    double ref = 0;
    for (int64_t i = 0; i < x.numel(); ++i) ref += p[i];
    const double err = std::abs(sum(x).item<double>() - ref) / ref;
    INFO("relative error " << err << " (PyTorch 1.13: 2.7e-8; one running float: 1e-5)");
    CHECK(err < 1.2e-7);
  }
  SECTION("[200000, 100].sum(0) and a permuted view") {
    manual_seed(8);
    const Tensor x = rand({200000, 100});
    const double err = column_rel_error(x, sum(x, {0}));
    INFO("worst column's relative error " << err << " (PyTorch 1.13: 2.7e-7)");
    CHECK(err < 2.5e-7);
    const Tensor xt = rand({100, 200000}).t();  // reduced dim innermost after packing: the row path
    CHECK(column_rel_error(xt, sum(xt, {0})) < 2.5e-7);
  }
}

TEST_CASE("CascadeSum, a CUDA thread's running sum: exact past 2^24, error O(log n)", "[ops][reduce]") {
  kernels::CascadeSum<float> ones_sum;
  const int64_t n = int64_t{1} << 25;
  for (int64_t i = 0; i < n; ++i) ones_sum.add(1.0f);
  CHECK(ones_sum.total() == static_cast<float>(n));  // a plain float stops at 2^24

  manual_seed(9);
  const Tensor x = rand({1000000});
  const float* p = x.data<float>();
  kernels::CascadeSum<float> s;
  float plain = 0;
  double ref = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    s.add(p[i]);
    plain += p[i];
    ref += p[i];
  }
  const double err = std::abs(s.total() - ref) / ref, plain_err = std::abs(plain - ref) / ref;
  INFO("cascade " << err << ", one running float " << plain_err);
  CHECK(err < 1e-7);
  CHECK(err < plain_err / 10);
  kernels::CascadeSum<int64_t> ints;
  for (int64_t i = 1; i <= 1000; ++i) ints.add(i);
  CHECK(ints.total() == 500500);
}

// Column sums (a sum over dim 0, as a Linear's bias gradient) of every width
// up to 40 and row counts around the kernel's leaf of 16 rows: the last
// columns of a width that is not a multiple of 16 take a whole 16-lane group
// (overlapping the previous group, or reading past the row inside the block),
// so each column is checked alone. Contiguous inputs reach that kernel
// directly; widths past its 256-column chunks leave a last chunk of 1, 4 or
// 15 columns inside longer rows, and over 1024 rows the block partials are
// summed again. A strided input is packed first (another path, checked too).
TEST_CASE("column sums of narrow and ragged widths, each column alone", "[ops][reduce]") {
  auto check = [](DType dt, int64_t r, int64_t w, int64_t pad) {
    INFO(hgtest::dname(dt) << " rows " << r << " width " << w << " row stride " << w + pad);
    const Tensor full = hgtest::uniform({r, w + pad}, dt, 0.5, 2.0);
    const Tensor x = pad ? full.slice(1, 0, w) : full;
    const std::vector<double> v = values(x), s = values(sum(x, {0}));
    REQUIRE(s.size() == static_cast<size_t>(w));
    for (int64_t j = 0; j < w; ++j) {
      double ref = 0;
      for (int64_t i = 0; i < r; ++i) ref += v[i * w + j];
      const double tol = (dt == bfloat16 ? 1e-2 : dt == float32 ? 1e-6 : 1e-13) * ref;
      if (!(std::abs(s[j] - ref) <= tol)) {
        FAIL_CHECK("column " << j << ": " << s[j] << ", expected " << ref);
        break;
      }
    }
  };
  for (DType dt : {float32, bfloat16, float64}) {
    for (int64_t w = 1; w <= 40; ++w)
      for (int64_t r : {1, 2, 15, 16, 17, 33, 100})
        for (int64_t pad : {0, 3}) check(dt, r, w, pad);
    for (int64_t w : {257, 260, 271})
      for (int64_t r : {1, 17, 100, 1025, 2100}) check(dt, r, w, 0);
  }
}
