// MobileNetV3's activations: hardswish, hardsigmoid, relu6 and prelu. Forward
// against float64 references written here, in every float dtype and layout;
// the kink points, NaN and inf as PyTorch 1.13 gives them (values taken with
// /usr/bin/python3, see each case); gradients by finite differences in
// float64 away from the kinks and against the reference derivative in the
// half types; prelu's [1] and [C] weights and its weight gradient; errors;
// prelu under CPU autocast; and CUDA against the CPU ("[cuda]").
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cuda_compare.h"
#include "test_util.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hgtest::values;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// float64 references, written from the definitions (not the library's math).
double relu6_ref(double x) { return std::isnan(x) ? x : std::min(std::max(x, 0.0), 6.0); }
double hardsigmoid_ref(double x) { return relu6_ref(x + 3.0) / 6.0; }
double hardswish_ref(double x) { return x * relu6_ref(x + 3.0) / 6.0; }
double relu6_grad_ref(double x) { return x > 0.0 && x < 6.0 ? 1.0 : 0.0; }
double hardsigmoid_grad_ref(double x) { return x > -3.0 && x < 3.0 ? 1.0 / 6.0 : 0.0; }
double hardswish_grad_ref(double x) { return x < -3.0 ? 0.0 : x > 3.0 ? 1.0 : (2.0 * x + 3.0) / 6.0; }

struct Act {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  double (*ref)(double);
  double (*grad_ref)(double);
  std::vector<double> kinks;
};

const std::vector<Act>& acts() {
  static const std::vector<Act> a = {
      {"hardswish", [](const Tensor& x) { return hg::hardswish(x); }, hardswish_ref, hardswish_grad_ref, {-3, 3}},
      {"hardsigmoid", [](const Tensor& x) { return hg::hardsigmoid(x); }, hardsigmoid_ref, hardsigmoid_grad_ref,
       {-3, 3}},
      {"relu6", [](const Tensor& x) { return hg::relu6(x); }, relu6_ref, relu6_grad_ref, {0, 6}},
  };
  return a;
}

// Uniform values in [-8, 8] (both flat parts and the slopes), moved 0.25 away
// from the kinks so that finite differences and rounding never straddle one.
Tensor away_from_kinks(const Shape& shape, DType dt, const std::vector<double>& kinks) {
  std::vector<double> v = values(hgtest::uniform(shape, DType::Float64, -8.0, 8.0));
  for (double& x : v)
    for (double k : kinks)
      if (std::fabs(x - k) < 0.2) x = k + (x < k ? -0.25 : 0.25);
  return hgtest::make(v, shape, dt);
}

struct View {
  std::string name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};

const std::vector<View>& views() {
  static const std::vector<View> v = {
      {"contiguous", {7, 9}, [](const Tensor& t) { return t; }},
      {"transposed", {9, 7}, [](const Tensor& t) { return t.t(); }},
      {"narrowed", {7, 12}, [](const Tensor& t) { return t.narrow(1, 2, 9); }},
      {"permuted 4-d", {2, 3, 4, 5}, [](const Tensor& t) { return t.permute({3, 1, 0, 2}); }},
      {"0-d", {}, [](const Tensor& t) { return t; }},
      {"empty", {0, 4}, [](const Tensor& t) { return t; }},
      {"long (vector path and tail)", {1027}, [](const Tensor& t) { return t; }},
  };
  return v;
}

std::vector<double> prelu_ref(const Tensor& x, const Tensor& w) {
  const auto xv = values(x), wv = values(w);
  const int64_t c = x.dim() >= 2 ? x.shape()[1] : 1;
  std::vector<double> out(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const int64_t ch = wv.size() == 1 ? 0 : hgtest::unravel(static_cast<int64_t>(i), x.shape())[1];
    (void)c;
    out[i] = xv[i] > 0 ? xv[i] : wv[static_cast<size_t>(ch)] * xv[i];
  }
  return out;
}

// dL/dw for L = sum(g * prelu(x, w)): per channel, the sum of x * g over x <= 0.
std::vector<double> prelu_weight_grad_ref(const Tensor& x, const Tensor& g, int64_t nw) {
  const auto xv = values(x), gv = values(g);
  std::vector<double> out(static_cast<size_t>(nw), 0.0);
  for (size_t i = 0; i < xv.size(); ++i) {
    const int64_t ch = nw == 1 ? 0 : hgtest::unravel(static_cast<int64_t>(i), x.shape())[1];
    if (!(xv[i] > 0)) out[static_cast<size_t>(ch)] += xv[i] * gv[i];
  }
  return out;
}

}  // namespace

// ---- hardswish, hardsigmoid, relu6 -----------------------------------------------------------

TEST_CASE("hardswish, hardsigmoid and relu6 match float64 references in every dtype and layout",
          "[ops][activation][mobilenet]") {
  for (const auto& a : acts())
    for (DType dt : hgtest::kFloatDTypes)
      for (const auto& v : views()) {
        INFO(a.name << " " << hgtest::dname(dt) << " " << v.name);
        const Tensor x = v.view(hgtest::uniform(v.base, dt, -8.0, 8.0));
        const Tensor y = a.op(x);
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == x.shape());
        // the reference from the dtype's input values, rounded once to the dtype
        HG_CHECK_CLOSE(y, hgtest::round_all(hgtest::map1(values(x), a.ref), dt));
      }
}

TEST_CASE("the kink points, NaN and inf give PyTorch's values and gradients", "[ops][activation][mobilenet]") {
  // /usr/bin/python3 (torch 1.13), x = [-4, -3, -2, 0, 2, 3, 4, 6, 7, nan, inf, -inf]:
  //   F.hardswish: [-0, -0, -1/3, 0, 5/3, 3, 4, 6, 7, nan, inf, nan]
  //   F.hardsigmoid: [0, 0, 1/6, 1/2, 5/6, 1, 1, 1, 1, nan, 1, 0]
  //   F.relu6: [0, 0, 0, 0, 2, 3, 4, 6, 6, nan, 6, 0]
  // Gradients of sum(): PyTorch's scalar CPU loop and CUDA kernel (a 3-element
  // tensor takes the scalar loop on the CPU) give hardswish' = -0.5 at -3, 1.5
  // at 3, 1 for NaN; relu6' = 0 at 0 and 6, 1 for NaN; hardsigmoid' = 0 at -3
  // and 3 and for NaN. (Its vectorised CPU loop differs at x = 3 and for NaN:
  // the choice is documented in kernels/math.h.)
  const std::vector<double> x = {-4, -3, -2, 0, 2, 3, 4, 6, 7, kNaN, kInf, -kInf};
  struct Expect {
    std::function<Tensor(const Tensor&)> op;
    std::string name;
    std::vector<double> y, dy;
  };
  const std::vector<Expect> cases = {
      {[](const Tensor& t) { return hg::hardswish(t); }, "hardswish",
       {0, 0, -2.0 / 6.0, 0, 10.0 / 6.0, 3, 4, 6, 7, kNaN, kInf, kNaN},
       {0, -0.5, -2.0 / 3.0 + 0.5, 0.5, 2.0 / 3.0 + 0.5, 1.5, 1, 1, 1, 1, 1, 0}},
      {[](const Tensor& t) { return hg::hardsigmoid(t); }, "hardsigmoid",
       {0, 0, 1.0 / 6.0, 0.5, 5.0 / 6.0, 1, 1, 1, 1, kNaN, 1, 0},
       {0, 0, 1.0 / 6.0, 1.0 / 6.0, 1.0 / 6.0, 0, 0, 0, 0, 0, 0, 0}},
      {[](const Tensor& t) { return hg::relu6(t); }, "relu6", {0, 0, 0, 0, 2, 3, 4, 6, 6, kNaN, 6, 0},
       {0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0}},
  };
  for (const auto& c : cases)
    for (DType dt : hgtest::kFloatDTypes) {
      INFO(c.name << " " << hgtest::dname(dt));
      Tensor t = hgtest::make(x, {static_cast<int64_t>(x.size())}, dt);
      t.requires_grad_(true);
      const Tensor y = c.op(t);
      HG_CHECK_CLOSE(y, c.y);
      // NaN exactly where expected, and the exact kink values
      const auto yv = values(y);
      for (size_t i = 0; i < x.size(); ++i) {
        INFO("x = " << x[i]);
        CHECK(std::isnan(yv[i]) == std::isnan(c.y[i]));
        if (i != 2 && i != 4 && !std::isnan(c.y[i])) CHECK(yv[i] == hgtest::round_to(c.y[i], dt));
      }
      hg::sum(y).backward();
      REQUIRE(t.grad().defined());
      CHECK(t.grad().dtype() == dt);
      HG_CHECK_CLOSE(t.grad(), c.dy);
      const auto gv = values(t.grad());
      for (size_t i = 0; i < x.size(); ++i) {
        INFO("gradient at x = " << x[i]);
        CHECK(!std::isnan(gv[i]));
        if (i != 2 && i != 4) CHECK(gv[i] == hgtest::round_to(c.dy[i], dt));
      }
    }
}

TEST_CASE("hardswish, hardsigmoid and relu6 gradients pass gradcheck away from the kinks",
          "[ops][activation][mobilenet][grad]") {
  for (const auto& a : acts())
    for (const Shape& s : {Shape{6, 7}, Shape{}}) {
      INFO(a.name << " " << hg::shape_str(s));
      Tensor x = away_from_kinks(s, DType::Float64, a.kinks);
      x.requires_grad_(true);
      HG_GRADCHECK([&](const std::vector<Tensor>& in) { return a.op(in[0]); }, {x});
    }
  // an empty input: an empty gradient
  for (const auto& a : acts()) {
    Tensor e = hg::zeros({3, 0}, DType::Float64);
    e.requires_grad_(true);
    hg::sum(a.op(e)).backward();
    REQUIRE(e.grad().defined());
    CHECK(e.grad().shape() == Shape{3, 0});
  }
  // a non-contiguous leaf, through a permuted view
  for (const auto& a : acts()) {
    Tensor x = away_from_kinks({4, 5, 6}, DType::Float64, a.kinks);
    x.requires_grad_(true);
    HG_GRADCHECK([&](const std::vector<Tensor>& in) { return a.op(in[0].permute({2, 0, 1})); }, {x});
  }
}

TEST_CASE("hardswish, hardsigmoid and relu6 backward in every dtype matches the reference derivative",
          "[ops][activation][mobilenet][grad]") {
  for (const auto& a : acts())
    for (DType dt : hgtest::kFloatDTypes) {
      INFO(a.name << " " << hgtest::dname(dt));
      Tensor x = away_from_kinks({9, 13}, dt, a.kinks);
      x.requires_grad_(true);
      const Tensor g = hgtest::uniform({13, 9}, dt).t();  // a non-contiguous incoming gradient
      a.op(x).backward(g);
      REQUIRE(x.grad().defined());
      CHECK(x.grad().dtype() == dt);
      const auto xv = values(x), gv = values(g);
      std::vector<double> ref(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) ref[i] = gv[i] * a.grad_ref(xv[i]);
      HG_CHECK_CLOSE(x.grad(), ref);
    }
}

TEST_CASE("relu6 of int64 is exact, as PyTorch; integer hardswish/hardsigmoid and bool are Errors",
          "[ops][activation][mobilenet][int64]") {
  const Tensor x = hgtest::make({-9, -1, 0, 3, 6, 7, 100}, {7}, DType::Int64);
  const Tensor y = hg::relu6(x);
  CHECK(y.dtype() == DType::Int64);
  HG_CHECK_EXACT(y, std::vector<double>({0, 0, 0, 3, 6, 6, 6}));
  HG_CHECK_EXACT(hg::relu6(hgtest::make({-9, 4, 8, 2, 5, 6}, {2, 3}, DType::Int64).t()),
                 std::vector<double>({0, 2, 4, 5, 6, 6}));
  hgtest::expect_errors({
      {"hardswish int64", [] { hg::hardswish(hgtest::iota({3}, DType::Int64)); },
       {"hardswish", "floating", "int64", ".to(float32)"}},
      {"hardsigmoid int64", [] { hg::hardsigmoid(hgtest::iota({3}, DType::Int64)); },
       {"hardsigmoid", "floating", "int64"}},
      {"relu6 bool", [] { hg::relu6(hgtest::random_bool({4})); }, {"relu6", "bool", "floating or int64"}},
      {"hardswish undefined", [] { hg::hardswish(Tensor()); }, {"hardswish", "input"}},
  });
}

TEST_CASE("hardswish, hardsigmoid and relu6 run in their input's dtype under autocast (no policy row)",
          "[ops][activation][mobilenet][amp]") {
  const Tensor x32 = hgtest::uniform({4, 5}, DType::Float32, -5, 5);
  const Tensor x16 = hgtest::uniform({4, 5}, DType::BFloat16, -5, 5);
  hg::amp::autocast region(hg::DeviceType::CPU);
  for (const auto& a : acts()) {
    INFO(a.name);
    CHECK(a.op(x32).dtype() == DType::Float32);
    CHECK(a.op(x16).dtype() == DType::BFloat16);
  }
}

// ---- prelu -------------------------------------------------------------------------------------

TEST_CASE("prelu with one weight and with one per channel matches the reference in every dtype",
          "[ops][activation][mobilenet][prelu]") {
  struct Case {
    std::string name;
    Shape base;
    std::function<Tensor(const Tensor&)> view;
    int64_t nw;
  };
  const std::vector<Case> cases = {
      {"4-d, one weight", {2, 3, 4, 5}, [](const Tensor& t) { return t; }, 1},
      {"4-d, per channel", {2, 3, 4, 5}, [](const Tensor& t) { return t; }, 3},
      {"4-d permuted, per channel", {4, 5, 2, 3}, [](const Tensor& t) { return t.permute({2, 3, 0, 1}); }, 3},
      {"2-d [N, C], per channel", {6, 4}, [](const Tensor& t) { return t; }, 4},
      {"2-d transposed, per channel", {4, 6}, [](const Tensor& t) { return t.t(); }, 4},
      {"3-d narrowed, per channel", {3, 7, 5}, [](const Tensor& t) { return t.narrow(1, 2, 4); }, 4},
      {"1-d, one weight", {9}, [](const Tensor& t) { return t; }, 1},
      {"0-d, one weight", {}, [](const Tensor& t) { return t; }, 1},
      {"empty batch, per channel", {0, 3, 2}, [](const Tensor& t) { return t; }, 3},
  };
  for (const auto& c : cases)
    for (DType dt : hgtest::kFloatDTypes) {
      INFO(c.name << " " << hgtest::dname(dt));
      const Tensor x = c.view(hgtest::uniform(c.base, dt));
      const Tensor w = hgtest::uniform({c.nw}, dt, 0.05, 0.9);
      const Tensor y = hg::prelu(x, w);
      CHECK(y.dtype() == dt);
      CHECK(y.shape() == x.shape());
      HG_CHECK_CLOSE(y, hgtest::round_all(prelu_ref(x, w), dt));
    }
  // a 0-d weight counts as one weight, as PyTorch
  const Tensor x = hgtest::uniform({3, 4}, DType::Float32);
  const Tensor w0 = hgtest::make({0.3}, {}, DType::Float32);
  HG_CHECK_CLOSE(hg::prelu(x, w0), prelu_ref(x, w0));
  // a NaN input stays NaN (x > 0 is false: w * NaN)
  const Tensor xn = hgtest::make({-2, kNaN, 3}, {3}, DType::Float32);
  const auto yn = values(hg::prelu(xn, hgtest::make({0.5}, {1}, DType::Float32)));
  CHECK(yn[0] == -1.0);
  CHECK(std::isnan(yn[1]));
  CHECK(yn[2] == 3.0);
}

TEST_CASE("prelu's input and weight gradients pass gradcheck", "[ops][activation][mobilenet][prelu][grad]") {
  for (const Shape& s : {Shape{2, 3, 4}, Shape{5, 3}, Shape{3, 3, 2, 2}}) {
    for (int64_t nw : {int64_t{1}, int64_t{3}}) {
      INFO(hg::shape_str(s) << " weights " << nw);
      Tensor x = hgtest::leaf_away(s);  // |x| >= 0.25: away from the kink at 0
      Tensor w = hgtest::leaf({nw}, 0.1, 0.9);
      HG_GRADCHECK([](const std::vector<Tensor>& in) { return hg::prelu(in[0], in[1]); }, {x, w});
    }
  }
  // 1-d and 0-d inputs, one weight; a permuted input
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return hg::prelu(in[0], in[1]); },
               {hgtest::leaf_away({7}), hgtest::leaf({1}, 0.1, 0.9)});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return hg::prelu(in[0], in[1]); },
               {hgtest::leaf_away({}), hgtest::leaf({1}, 0.1, 0.9)});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return hg::prelu(in[0].permute({1, 0, 2}), in[1]); },
               {hgtest::leaf_away({4, 2, 3}), hgtest::leaf({4}, 0.1, 0.9)});
}

TEST_CASE("prelu's gradients in every dtype against the reference; only the wanted ones",
          "[ops][activation][mobilenet][prelu][grad]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (int64_t nw : {int64_t{1}, int64_t{3}}) {
      INFO(hgtest::dname(dt) << " weights " << nw);
      Tensor x = hgtest::away_from_zero({4, 3, 5}, dt);
      Tensor w = hgtest::uniform({nw}, dt, 0.1, 0.9);
      x.requires_grad_(true);
      w.requires_grad_(true);
      const Tensor g = hgtest::uniform({4, 3, 5}, dt);
      hg::prelu(x, w).backward(g);
      REQUIRE(x.grad().defined());
      REQUIRE(w.grad().defined());
      CHECK(x.grad().dtype() == dt);
      CHECK(w.grad().dtype() == dt);
      CHECK(w.grad().shape() == Shape{nw});
      const auto xv = values(x), gv = values(g), wv = values(w);
      std::vector<double> dx(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        const size_t ch = nw == 1 ? 0 : static_cast<size_t>(hgtest::unravel(static_cast<int64_t>(i), x.shape())[1]);
        dx[i] = xv[i] > 0 ? gv[i] : wv[ch] * gv[i];
      }
      HG_CHECK_CLOSE(x.grad(), dx);
      // the half types round each x * g before the float32 sum: a looser bound there
      const double wt = dt == DType::Float64 || dt == DType::Float32 ? hgtest::tol(dt) : 2e-2;
      HG_CHECK_CLOSE_TOL(w.grad(), prelu_weight_grad_ref(x, g, nw), wt);
    }
  // only the weight wants a gradient (a frozen input), and only the input
  Tensor x = hgtest::away_from_zero({3, 2}, DType::Float64);
  Tensor w = hgtest::leaf({2}, 0.1, 0.9);
  hg::sum(hg::prelu(x, w)).backward();
  CHECK(!x.grad().defined());
  HG_CHECK_CLOSE(w.grad(), prelu_weight_grad_ref(x, hg::ones({3, 2}, DType::Float64), 2));
  Tensor x2 = hgtest::leaf_away({3, 2});
  const Tensor w2 = hgtest::uniform({2}, DType::Float64, 0.1, 0.9);
  hg::sum(hg::prelu(x2, w2)).backward();
  CHECK(x2.grad().defined());
  CHECK(!w2.grad().defined());
}

TEST_CASE("prelu's weight gradient with a NaN input is NaN, as PyTorch", "[ops][activation][mobilenet][prelu]") {
  // torch 1.13: F.prelu(tensor([-1, 0, 1, nan]), tensor([0.5])).backward(ones(4)):
  // x.grad = [0.5, 0.5, 1, 0.5], w.grad = [nan]
  Tensor x = hgtest::make({-1, 0, 1, kNaN}, {4}, DType::Float32);
  Tensor w = hgtest::make({0.5}, {1}, DType::Float32);
  x.requires_grad_(true);
  w.requires_grad_(true);
  hg::sum(hg::prelu(x, w)).backward();
  HG_CHECK_EXACT(x.grad(), std::vector<double>({0.5, 0.5, 1, 0.5}));
  CHECK(std::isnan(values(w.grad())[0]));
}

TEST_CASE("prelu under CPU autocast runs in bfloat16 and gives float32 parameters float32 gradients",
          "[ops][activation][mobilenet][prelu][amp]") {
  // halfgrad's CPU list has prelu in lower precision (PyTorch 2's; torch 1.13's CPU list has no prelu row).
  Tensor x = hgtest::uniform({2, 3, 4}, DType::Float32);
  Tensor w = hg::full({3}, 0.25);
  x.requires_grad_(true);
  w.requires_grad_(true);
  Tensor y;
  {
    hg::amp::autocast region(hg::DeviceType::CPU);
    y = hg::prelu(x, w);
  }
  CHECK(y.dtype() == DType::BFloat16);
  const Tensor xb = x.detach().to(DType::BFloat16), wb = w.detach().to(DType::BFloat16);
  HG_CHECK_CLOSE(y, hgtest::round_all(prelu_ref(xb, wb), DType::BFloat16));
  hg::sum(y.to(DType::Float32)).backward();
  CHECK(x.grad().dtype() == DType::Float32);
  CHECK(w.grad().dtype() == DType::Float32);
  HG_CHECK_CLOSE_TOL(w.grad(), prelu_weight_grad_ref(xb, hg::ones({2, 3, 4}), 3), 2e-2);
  // a float64 input is not cast (autocast casts float32 only)
  hg::amp::autocast region(hg::DeviceType::CPU);
  CHECK(hg::prelu(hgtest::uniform({2, 3}, DType::Float64), hgtest::uniform({3}, DType::Float64)).dtype() ==
        DType::Float64);
}

TEST_CASE("prelu errors name the op, the shapes and the remedy", "[ops][activation][mobilenet][prelu][errors]") {
  hgtest::expect_errors({
      {"weight count does not match the channels",
       [] { hg::prelu(hgtest::uniform({2, 3, 4}, DType::Float32), hg::full({2}, 0.25)); },
       {"prelu", "[2, 3, 4]", "2 parameters", "3 channels", "num_parameters"}},
      {"a 1-d input has one channel (as PyTorch)",
       [] { hg::prelu(hgtest::uniform({3}, DType::Float32), hg::full({3}, 0.25)); },
       {"prelu", "3 parameters", "1 channels"}},
      {"a 2-d weight", [] { hg::prelu(hgtest::uniform({2, 3}, DType::Float32), hg::full({1, 3}, 0.25)); },
       {"prelu", "scalar or a 1-d", "[1, 3]"}},
      {"mixed dtypes outside autocast",
       [] { hg::prelu(hgtest::uniform({2, 3}, DType::Float32), hg::full({3}, 0.25, DType::Float64)); },
       {"prelu", "float32", "float64", "autocast"}},
      {"integer input", [] { hg::prelu(hgtest::iota({2, 3}, DType::Int64), hg::full({3}, 0.25)); },
       {"prelu", "floating", "int64"}},
      {"undefined weight", [] { hg::prelu(hgtest::uniform({2, 3}, DType::Float32), Tensor()); },
       {"prelu", "weight"}},
  });
}

// ---- CUDA against the CPU ----------------------------------------------------------------------

TEST_CASE("CUDA hardswish, hardsigmoid, relu6 and prelu match the CPU, forward and backward",
          "[cuda][ops][activation][mobilenet]") {
  using hgtest::cuda::dev;
  using hgtest::cuda::expect_same;
  using hgtest::cuda::kCpu;
  using hgtest::cuda::kCuda;
  using hgtest::cuda::leaf_on;
  for (const auto& a : acts())
    for (DType dt : hgtest::kFloatDTypes)
      for (const auto& v : views()) {
        const std::string what = a.name + " " + hgtest::dname(dt) + " " + v.name;
        const Tensor base = hgtest::uniform(v.base, dt, -8.0, 8.0);
        expect_same(a.op(v.view(dev(base))), a.op(v.view(base)), what, /*exact=*/true);
      }
  // kinks, NaN and inf: the same values and gradients on both devices
  const std::vector<double> special = {-4, -3, -2, 0, 2, 3, 4, 6, 7, kNaN, kInf, -kInf};
  for (const auto& a : acts())
    for (DType dt : hgtest::kFloatDTypes) {
      const std::string what = a.name + " special values " + hgtest::dname(dt);
      const Tensor base = hgtest::make(special, {12}, dt);
      Tensor xc = leaf_on(base, kCpu), xg = leaf_on(base, kCuda);
      const Tensor yc = a.op(xc), yg = a.op(xg);
      expect_same(yg, yc, what, true);
      hg::sum(yc).backward();
      hg::sum(yg).backward();
      expect_same(xg.grad(), xc.grad(), what + " grad", true);
    }
  for (const auto& a : acts())
    for (DType dt : hgtest::kFloatDTypes) {
      const Tensor base = away_from_kinks({33, 17}, dt, a.kinks), g = hgtest::uniform({33, 17}, dt);
      Tensor xc = leaf_on(base, kCpu), xg = leaf_on(base, kCuda);
      a.op(xc).backward(g);
      a.op(xg).backward(dev(g));
      expect_same(xg.grad(), xc.grad(), a.name + " backward " + hgtest::dname(dt), true);
    }
  const Tensor i64 = hgtest::uniform({5, 7}, DType::Int64, -10, 10);
  expect_same(hg::relu6(dev(i64)), hg::relu6(i64), "relu6 int64", true);
  for (DType dt : hgtest::kFloatDTypes)
    for (int64_t nw : {int64_t{1}, int64_t{6}}) {
      const std::string what = "prelu " + hgtest::dname(dt) + " weights " + std::to_string(nw);
      const Tensor xb = hgtest::uniform({4, 6, 5, 3}, dt), wb = hgtest::uniform({nw}, dt, 0.1, 0.9);
      const Tensor g = hgtest::uniform({4, 6, 5, 3}, dt);
      Tensor xc = leaf_on(xb, kCpu), xg = leaf_on(xb, kCuda), wc = leaf_on(wb, kCpu), wg = leaf_on(wb, kCuda);
      const Tensor yc = hg::prelu(xc.permute({0, 1, 3, 2}), wc), yg = hg::prelu(xg.permute({0, 1, 3, 2}), wg);
      expect_same(yg, yc, what, true);
      yc.backward(g.permute({0, 1, 3, 2}));
      yg.backward(dev(g).permute({0, 1, 3, 2}));
      expect_same(xg.grad(), xc.grad(), what + " dx", true);
      expect_same(wg.grad(), wc.grad(), what + " dweight");  // a reduction: within the dtype's tolerance
    }
}
