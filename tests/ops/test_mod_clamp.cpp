// remainder and fmod (tensor-tensor, tensor-scalar, operator%), clamp with
// tensor bounds and clamp_min/clamp_max, and the backward of maximum/minimum,
// against float64 references computed here: every float dtype and int64,
// broadcasting, permuted inputs, NaN and inf, gradcheck, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "test_util.h"

using namespace halfgrad;
using hgtest::values;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double ref_fmod(double a, double b) { return std::fmod(a, b); }
double ref_remainder(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

std::vector<DType> float_and_int() {
  auto d = hgtest::kFloatDTypes;
  d.push_back(DType::Int64);
  return d;
}

}  // namespace

TEST_CASE("remainder and fmod: signs of the divisor and of the dividend", "[ops][elementwise][remainder]") {
  for (DType dt : float_and_int())
    for (bool permuted : {false, true}) {
      INFO(hgtest::dname(dt) << (permuted ? " permuted" : ""));
      const bool is_int = dt == DType::Int64;
      // dividends of both signs, divisors away from 0 with both signs, broadcast over rows
      Tensor a = is_int ? hgtest::uniform({5, 4}, dt, -50, 50) : hgtest::uniform({5, 4}, dt, -10, 10);
      if (permuted) a = (is_int ? hgtest::uniform({4, 5}, dt, -50, 50) : hgtest::uniform({4, 5}, dt, -10, 10)).t();
      const Tensor b = is_int ? hgtest::make({3, -3, 7, -1}, {4}, dt) : hgtest::make({1.5, -2.25, 0.75, -3}, {4}, dt);
      const Tensor r = remainder(a, b), f = fmod(a, b);
      CHECK(r.dtype() == dt);
      CHECK(r.shape() == Shape{5, 4});
      const auto rr = hgtest::map2(a, b, ref_remainder), rf = hgtest::map2(a, b, ref_fmod);
      if (is_int) {
        HG_CHECK_EXACT(r, rr);
        HG_CHECK_EXACT(f, rf);
      } else {
        // the result of one fmod, rounded once
        HG_CHECK_CLOSE(r, hgtest::round_all(rr, dt));
        HG_CHECK_CLOSE(f, hgtest::round_all(rf, dt));
      }
      HG_CHECK_EXACT(a % b, values(r));
      HG_CHECK_EXACT(a.remainder(b), values(r));
      HG_CHECK_EXACT(a.fmod(b), values(f));
      // a scalar divisor takes the tensor's dtype
      const Tensor rs = remainder(a, -4.0), fs = fmod(a, 4.0);
      CHECK(rs.dtype() == dt);
      HG_CHECK_CLOSE(rs, hgtest::map1(values(a), [](double x) { return ref_remainder(x, -4); }));
      HG_CHECK_CLOSE(fs, hgtest::map1(values(a), [](double x) { return ref_fmod(x, 4); }));
      HG_CHECK_EXACT(a % 4.0, values(remainder(a, 4.0)));
    }
  // exact small cases (Python's -7 % 3 == 2, C's fmod(-7, 3) == -1)
  for (DType dt : float_and_int()) {
    INFO(hgtest::dname(dt));
    const Tensor a = hgtest::make({-7, 7, -7, 7, 0, 6}, {6}, dt), b = hgtest::make({3, 3, -3, -3, 5, -3}, {6}, dt);
    HG_CHECK_EXACT(remainder(a, b), (std::vector<double>{2, 1, -1, -2, 0, 0}));
    HG_CHECK_EXACT(fmod(a, b), (std::vector<double>{-1, 1, -1, 1, 0, 0}));
  }
  // floats: NaN and inf, a zero divisor gives NaN
  const Tensor a = hgtest::make({5, kInf, 5, kNaN, 5, -5.5}, {6}, DType::Float32);
  const Tensor b = hgtest::make({0, 2, kInf, 2, kNaN, kInf}, {6}, DType::Float32);
  HG_CHECK_EXACT(fmod(a, b), (std::vector<double>{kNaN, kNaN, 5, kNaN, kNaN, -5.5}));
  HG_CHECK_EXACT(remainder(a, b), (std::vector<double>{kNaN, kNaN, 5, kNaN, kNaN, kInf}));  // -5.5 + inf, as PyTorch
  // int64 extremes: no overflow for INT64_MIN % -1
  const int64_t lo = std::numeric_limits<int64_t>::min();
  const Tensor m = tensor(std::vector<int64_t>{lo, lo}, {2});
  const Tensor d = tensor(std::vector<int64_t>{-1, 3}, {2});
  CHECK(hgtest::ivalues(remainder(m, d)) == std::vector<int64_t>{0, lo % 3 + 3});
  CHECK(hgtest::ivalues(fmod(m, d)) == std::vector<int64_t>{0, lo % 3});
  // 0-d and empty
  CHECK(remainder(full({}, -7.0), full({}, 3.0)).item<double>() == 2.0);
  CHECK(fmod(full({}, -7.0), 3.0).item<double>() == -1.0);
  CHECK(remainder(zeros({0, 2}), ones({2})).shape() == Shape{0, 2});
  CHECK(remainder(zeros({0}, TensorOptions(DType::Int64)), zeros({0}, TensorOptions(DType::Int64))).numel() == 0);
  // mixed dtypes promote; an int tensor with a fractional scalar gives float32
  const Tensor i = hgtest::make({7, -7}, {2}, DType::Int64);
  CHECK(remainder(i, 2.5).dtype() == DType::Float32);
  HG_CHECK_EXACT(remainder(i, 2.5), (std::vector<double>{2, 0.5}));
  HG_CHECK_EXACT(fmod(i, hgtest::make({2.5}, {1}, DType::Float64)), (std::vector<double>{2, -2}));
}

TEST_CASE("remainder and fmod backward", "[ops][elementwise][remainder][backward]") {
  // away from the jumps of floor(a / b)
  const Tensor a = hgtest::leaf_from({5.3, -5.3, 2.2, -0.7, 3.9, 1.1}, {2, 3});
  const Tensor b = hgtest::leaf_from({1.5, -2.0, 0.9}, {3});
  autograd::gradcheck([](const std::vector<Tensor>& in) { return remainder(in[0], in[1]); }, {a, b});
  autograd::gradcheck([](const std::vector<Tensor>& in) { return fmod(in[0], in[1]); }, {a, b});
  autograd::gradcheck([](const std::vector<Tensor>& in) { return fmod(in[0].t(), 1.7); }, {a});
  // grad_b = -g * floor(a / b) and -g * trunc(a / b)
  const Tensor x = hgtest::leaf_from({-7, 7}, {2}), y = hgtest::leaf_from({2, 2}, {2});
  remainder(x, y).sum().backward();
  HG_CHECK_EXACT(x.grad(), (std::vector<double>{1, 1}));
  HG_CHECK_EXACT(y.grad(), (std::vector<double>{4, -3}));
  const Tensor x2 = hgtest::leaf_from({-7, 7}, {2}), y2 = hgtest::leaf_from({2, 2}, {2});
  fmod(x2, y2).sum().backward();
  HG_CHECK_EXACT(y2.grad(), (std::vector<double>{3, -3}));
}

TEST_CASE("remainder and fmod errors", "[ops][elementwise][remainder][errors]") {
  using hgtest::ErrorCase;
  hgtest::expect_errors({
      {"int64 remainder by a zero tensor",
       [] { (void)remainder(tensor(std::vector<int64_t>{1, 2}), tensor(std::vector<int64_t>{1, 0})); },
       {"remainder", "division by zero"}},
      {"int64 fmod by the scalar 0", [] { (void)fmod(tensor(std::vector<int64_t>{1, 2}), 0.0); }, {"fmod", "zero"}},
      {"bool inputs", [] { (void)remainder(ones({2}, TensorOptions(DType::Bool)), ones({2}, TensorOptions(DType::Bool))); },
       {"remainder", "bool"}},
      {"shapes", [] { (void)fmod(ones({2}), ones({3})); }, {"fmod"}},
      {"undefined", [] { (void)remainder(Tensor(), ones({1})); }, {"remainder", "undefined"}},
  });
}

TEST_CASE("clamp with tensor bounds: broadcasting, min > max, NaN", "[ops][elementwise][clamp]") {
  for (DType dt : float_and_int())
    for (bool permuted : {false, true}) {
      INFO(hgtest::dname(dt) << (permuted ? " permuted" : ""));
      const bool is_int = dt == DType::Int64;
      const double s = is_int ? 10 : 1;
      Tensor x = hgtest::uniform({4, 5}, dt, -3 * s, 3 * s);
      if (permuted) x = hgtest::uniform({5, 4}, dt, -3 * s, 3 * s).t();
      const Tensor lo = hgtest::uniform({4, 1}, dt, -2 * s, 0);  // per row
      const Tensor hi = hgtest::uniform({5}, dt, -0.5 * s, 2 * s);  // per column: some below lo (min > max)
      const auto vx = values(x), vl = values(lo), vh = values(hi);
      std::vector<double> both, only_lo, only_hi;
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          const double v = vx[i * 5 + j], l = vl[i], h = vh[j];
          both.push_back(std::min(std::max(v, l), h));
          only_lo.push_back(std::max(v, l));
          only_hi.push_back(std::min(v, h));
        }
      HG_CHECK_EXACT(clamp(x, lo, hi), both);
      HG_CHECK_EXACT(clamp(x, lo, std::nullopt), only_lo);
      HG_CHECK_EXACT(clamp(x, std::nullopt, hi), only_hi);
      HG_CHECK_EXACT(clamp_min(x, lo), only_lo);
      HG_CHECK_EXACT(clamp_max(x, hi), only_hi);
      HG_CHECK_EXACT(x.clamp(lo, hi), both);
      HG_CHECK_EXACT(x.clamp_min(lo), only_lo);
      HG_CHECK_EXACT(x.clamp_max(hi), only_hi);
      CHECK(clamp(x, lo, hi).dtype() == dt);
    }
  // the scalar forms
  const Tensor x = hgtest::make({-2, -0.5, 0.5, 2}, {4}, DType::Float32);
  HG_CHECK_EXACT(clamp_min(x, 0.0), (std::vector<double>{0, 0, 0.5, 2}));
  HG_CHECK_EXACT(clamp_max(x, 0.0), (std::vector<double>{-2, -0.5, 0, 0}));
  HG_CHECK_EXACT(x.clamp(-1.0, 1.0), (std::vector<double>{-1, -0.5, 0.5, 1}));
  HG_CHECK_EXACT(clamp(x, -1, 1), (std::vector<double>{-1, -0.5, 0.5, 1}));  // int literals: the scalar form
  HG_CHECK_EXACT(x.clamp(0, std::nullopt), (std::vector<double>{0, 0, 0.5, 2}));
  HG_CHECK_EXACT(x.clamp_min(1.0), (std::vector<double>{1, 1, 1, 2}));
  HG_CHECK_EXACT(x.clamp_max(-1.0), (std::vector<double>{-2, -1, -1, -1}));
  // min > max gives max; NaN in x or in a bound propagates (PyTorch)
  const Tensor v = hgtest::make({1, 5, kNaN, 1, 1}, {5}, DType::Float32);
  const Tensor l = hgtest::make({3, 3, 0, kNaN, 0}, {5}, DType::Float32);
  const Tensor h = hgtest::make({2, 2, 1, 2, kNaN}, {5}, DType::Float32);
  HG_CHECK_EXACT(clamp(v, l, h), (std::vector<double>{2, 2, kNaN, kNaN, kNaN}));
  // promotion: a float32 bound on an int64 tensor
  const Tensor xi = hgtest::make({-5, 5}, {2}, DType::Int64);
  const Tensor c = clamp(xi, hgtest::make({-1.5}, {1}, DType::Float32), std::nullopt);
  CHECK(c.dtype() == DType::Float32);
  HG_CHECK_EXACT(c, (std::vector<double>{-1.5, 5}));
  // 0-d bounds and an empty x
  HG_CHECK_EXACT(clamp(x, full({}, -1.0), full({}, 1.0)), (std::vector<double>{-1, -0.5, 0.5, 1}));
  CHECK(clamp(zeros({0, 3}), zeros({3}), ones({1})).shape() == Shape{0, 3});
}

TEST_CASE("clamp with tensor bounds backward: to x inside, to the bound taken", "[ops][elementwise][clamp][backward]") {
  // values away from the bounds: finite differences are smooth
  const Tensor x = hgtest::leaf_from({-2, -0.5, 0.4, 2, 1.3, -1.7}, {2, 3});
  const Tensor lo = hgtest::leaf_from({-1, -0.2, 0.1}, {3});
  const Tensor hi = hgtest::leaf_from({1}, {1});
  autograd::gradcheck([](const std::vector<Tensor>& in) { return clamp(in[0], in[1], in[2]); }, {x, lo, hi});
  autograd::gradcheck([](const std::vector<Tensor>& in) { return clamp_min(in[0].t(), in[1].unsqueeze(1)); }, {x, lo});
  autograd::gradcheck([](const std::vector<Tensor>& in) { return clamp_max(in[0], in[1]); }, {x, hi});
  // the masks: x == min gives x the gradient; min > max gives max the gradient
  const Tensor a = hgtest::leaf_from({0, 5, 3, 1}, {4});
  const Tensor l = hgtest::leaf_from({0, 3, 1, 2}, {4});
  const Tensor h = hgtest::leaf_from({1, 4, 2, 1.5}, {4});
  clamp(a, l, h).sum().backward();
  HG_CHECK_EXACT(a.grad(), (std::vector<double>{1, 0, 0, 0}));
  HG_CHECK_EXACT(l.grad(), (std::vector<double>{0, 0, 0, 0}));  // the last: x < min but min > max
  HG_CHECK_EXACT(h.grad(), (std::vector<double>{0, 1, 1, 1}));
  // broadcast bounds sum their gradient
  const Tensor b = hgtest::leaf_from({-3, -4, 0.5, 5}, {4});
  const Tensor bl = hgtest::leaf_from({-1}, {1});
  clamp(b, bl, std::nullopt).sum().backward();
  HG_CHECK_EXACT(bl.grad(), (std::vector<double>{2}));
  HG_CHECK_EXACT(b.grad(), (std::vector<double>{0, 0, 1, 1}));
}

TEST_CASE("clamp with tensor bounds errors", "[ops][elementwise][clamp][errors]") {
  using hgtest::ErrorCase;
  hgtest::expect_errors({
      {"no bound", [] { (void)clamp(ones({2}), std::optional<Tensor>(), std::optional<Tensor>()); }, {"clamp", "min"}},
      {"shapes", [] { (void)clamp(ones({2}), ones({3}), std::nullopt); }, {"clamp"}},
      {"undefined bound", [] { (void)clamp_min(ones({2}), Tensor()); }, {"clamp", "undefined"}},
  });
}

TEST_CASE("maximum and minimum backward: ties split in half, NaN passes to both", "[ops][elementwise][backward]") {
  autograd::gradcheck([](const std::vector<Tensor>& in) { return maximum(in[0], in[1]); },
                      {hgtest::leaf_distinct({3, 4}), hgtest::leaf_distinct({4}, 0.05)});
  autograd::gradcheck([](const std::vector<Tensor>& in) { return minimum(in[0].t(), in[1]); },
                      {hgtest::leaf_distinct({4, 3}), hgtest::leaf_distinct({3, 1}, 0.05)});
  for (bool is_max : {true, false}) {
    INFO((is_max ? "maximum" : "minimum"));
    const Tensor x = hgtest::leaf_from({1, 2, 3, kNaN}, {4});
    const Tensor y = hgtest::leaf_from({2, 2, 1, 0}, {4});
    (is_max ? maximum(x, y) : minimum(x, y)).sum().backward();
    // PyTorch: where(x == y, g / 2, g) masked to 0 where x loses
    const std::vector<double> win{1, 0.5, 0, 1}, lose{0, 0.5, 1, 1};
    HG_CHECK_EXACT(x.grad(), is_max ? lose : win);
    HG_CHECK_EXACT(y.grad(), is_max ? win : lose);
  }
}
