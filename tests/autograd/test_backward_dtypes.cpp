// Backward formulas run in the forward's dtype. For each op, the gradients
// computed in float32, float16 and bfloat16 are compared with the float64
// gradients of the same input values and the same upstream gradient
// (the float64 ones are themselves checked by finite differences in
// test_backward_ops.cpp). Tolerances allow a few roundings per formula.
#include <catch2/catch.hpp>

#include "test_util.h"

using namespace halfgrad;

namespace {
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct In {
  Shape shape;
  double lo = -2, hi = 2;
  bool away = false;
  bool grad = true;
};

struct Case {
  std::string name;
  Fn fn;
  std::vector<In> inputs;
};

void check_dtypes(const Case& c) {
  // the inputs' values, exactly representable in every dtype (generated in bfloat16)
  std::vector<std::vector<double>> vals;
  for (const auto& in : c.inputs) {
    const Tensor t = in.away ? hgtest::away_from_zero(in.shape, bfloat16, in.lo, in.hi)
                             : hgtest::uniform(in.shape, bfloat16, in.lo, in.hi);
    vals.push_back(hgtest::values(t));
  }
  auto make_inputs = [&](DType dt) {
    std::vector<Tensor> ts;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      Tensor t = hgtest::make(vals[i], c.inputs[i].shape, dt);
      if (c.inputs[i].grad) t.requires_grad_(true);
      ts.push_back(t);
    }
    return ts;
  };
  const std::vector<Tensor> ref_in = make_inputs(float64);
  const Tensor ref_out = c.fn(ref_in);
  const Tensor upstream = hgtest::uniform(ref_out.shape(), bfloat16, -1, 1);  // exact in every dtype
  ref_out.backward(upstream.to(float64));
  for (DType dt : {float32, float16, bfloat16}) {
    INFO(c.name << " in " << hgtest::dname(dt));
    const std::vector<Tensor> in = make_inputs(dt);
    const Tensor out = c.fn(in);
    CHECK(out.dtype() == dt);
    out.backward(upstream.to(dt));
    for (size_t i = 0; i < in.size(); ++i) {
      if (!c.inputs[i].grad) continue;
      INFO("gradient of input " << i);
      REQUIRE(in[i].grad().defined());
      CHECK(in[i].grad().dtype() == dt);
      CHECK(in[i].grad().shape() == in[i].shape());
      HG_CHECK_CLOSE_TOL(in[i].grad(), hgtest::values(ref_in[i].grad()), 4 * hgtest::tol(dt));
    }
  }
}

Fn f1(std::function<Tensor(const Tensor&)> f) {
  return [f](const std::vector<Tensor>& in) { return f(in[0]); };
}
Fn f2(std::function<Tensor(const Tensor&, const Tensor&)> f) {
  return [f](const std::vector<Tensor>& in) { return f(in[0], in[1]); };
}
}  // namespace

TEST_CASE("backward of elementwise ops in float32, float16 and bfloat16", "[autograd][dtypes]") {
  const std::vector<Case> cases = {
      {"neg", f1([](auto& x) { return neg(x); }), {{{3, 5}}}},
      {"exp", f1([](auto& x) { return exp(x); }), {{{3, 5}}}},
      {"log", f1([](auto& x) { return log(x); }), {{{3, 5}, 0.25, 3}}},
      {"sqrt", f1([](auto& x) { return sqrt(x); }), {{{3, 5}, 0.25, 3}}},
      {"abs", f1([](auto& x) { return abs(x); }), {{{3, 5}, 0.25, 2, true}}},
      {"relu", f1([](auto& x) { return relu(x); }), {{{3, 5}, 0.25, 2, true}}},
      {"gelu", f1([](auto& x) { return gelu(x); }), {{{3, 5}, -3, 3}}},
      {"gelu tanh", f1([](auto& x) { return gelu(x, "tanh"); }), {{{3, 5}, -3, 3}}},
      {"sigmoid", f1([](auto& x) { return sigmoid(x); }), {{{3, 5}, -4, 4}}},
      {"tanh", f1([](auto& x) { return tanh(x); }), {{{3, 5}}}},
      {"pow(x, 2)", f1([](auto& x) { return pow(x, 2.0); }), {{{3, 5}}}},
      {"pow(x, -1.5)", f1([](auto& x) { return pow(x, -1.5); }), {{{3, 5}, 0.5, 3}}},
      {"clamp", f1([](auto& x) { return clamp(x, -0.5, 0.75); }), {{{3, 5}}}},
      {"add alpha, broadcast", f2([](auto& a, auto& b) { return add(a, b, 1.5); }), {{{3, 1, 5}}, {{4, 1}}}},
      {"sub, broadcast", f2([](auto& a, auto& b) { return sub(a, b); }), {{{2, 5}}, {{5}}}},
      {"mul, broadcast", f2([](auto& a, auto& b) { return mul(a, b); }), {{{3, 1, 5}}, {{4, 1}}}},
      {"div, broadcast", f2([](auto& a, auto& b) { return div(a, b); }), {{{3, 5}}, {{5}, 0.5, 2, true}}},
      {"pow tensor", f2([](auto& a, auto& b) { return pow(a, b); }), {{{3, 5}, 0.5, 2}, {{3, 5}, -1.5, 1.5}}},
      {"maximum", f2([](auto& a, auto& b) { return maximum(a, b); }), {{{3, 5}}, {{3, 5}}}},
      {"where", f2([](auto& a, auto& b) { return where(gt(a, b), a, mul(b, 2.0)); }), {{{3, 5}}, {{5}}}},
  };
  for (const auto& c : cases) check_dtypes(c);
}

TEST_CASE("backward of reductions, views and joins in float32, float16 and bfloat16", "[autograd][dtypes]") {
  const std::vector<Case> cases = {
      {"sum dims", f1([](auto& x) { return sum(x, {0, 2}); }), {{{3, 4, 5}}}},
      {"sum all", f1([](auto& x) { return sum(x); }), {{{3, 4, 5}}}},
      {"mean dim", f1([](auto& x) { return mean(x, {1}, true); }), {{{3, 4, 5}}}},
      {"max dim", f1([](auto& x) { return std::get<0>(max(x, 1)); }), {{{3, 4, 5}}}},
      {"views", f1([](auto& x) { return exp(x.t().narrow(0, 1, 3).unsqueeze(0).expand({2, 3, 4})); }), {{{4, 5}}}},
      {"cat", f2([](auto& a, auto& b) { return cat({a, b.t()}, 1); }), {{{3, 2}}, {{4, 3}}}},
      {"stack", f2([](auto& a, auto& b) { return stack({a, b, a}, 1); }), {{{3, 2}}, {{3, 2}}}},
  };
  for (const auto& c : cases) check_dtypes(c);
}

TEST_CASE("backward of matrix products in float32, float16 and bfloat16", "[autograd][dtypes]") {
  const std::vector<Case> cases = {
      {"mm", f2([](auto& a, auto& b) { return mm(a, b); }), {{{6, 7}}, {{7, 5}}}},
      {"mm transposed", f2([](auto& a, auto& b) { return mm(a.t(), b); }), {{{7, 6}}, {{7, 5}}}},
      {"bmm", f2([](auto& a, auto& b) { return bmm(a, b); }), {{{2, 3, 7}}, {{2, 7, 4}}}},
      {"matmul broadcast", f2([](auto& a, auto& b) { return matmul(a, b); }), {{{2, 1, 3, 7}}, {{3, 7, 4}}}},
      {"matmul 1-d", f2([](auto& a, auto& b) { return matmul(a, b); }), {{{7}}, {{7, 4}}}},
      {"addmm", [](auto& in) { return addmm(in[0], in[1], in[2], 0.5, 2.0); }, {{{5}}, {{6, 7}}, {{7, 5}}}},
      {"linear 3-d", [](auto& in) { return linear(in[0], in[1], in[2]); }, {{{2, 3, 7}}, {{5, 7}}, {{5}}}},
      {"linear no bias", [](auto& in) { return linear(in[0], in[1]); }, {{{4, 7}}, {{5, 7}}}},
  };
  for (const auto& c : cases) check_dtypes(c);
}

TEST_CASE("backward of softmax and the losses in float32, float16 and bfloat16", "[autograd][dtypes]") {
  auto targets = [] { return hgtest::make({0, 3, 1, 4, -100, 2}, {6}, int64); };
  const std::vector<Case> cases = {
      {"softmax last", f1([](auto& x) { return softmax(x, -1); }), {{{3, 4, 5}}}},
      {"softmax dim 0", f1([](auto& x) { return softmax(x, 0); }), {{{3, 4, 5}}}},
      {"log_softmax last", f1([](auto& x) { return log_softmax(x, -1); }), {{{3, 4, 5}}}},
      {"log_softmax dim 1", f1([](auto& x) { return log_softmax(x, 1); }), {{{3, 4, 5}}}},
      {"cross_entropy mean", f1([=](auto& x) { return cross_entropy(x, targets()); }), {{{6, 5}, -3, 3}}},
      {"cross_entropy sum", f1([=](auto& x) { return cross_entropy(x, targets(), Reduction::Sum); }),
       {{{6, 5}, -3, 3}}},
      {"cross_entropy none", f1([=](auto& x) { return cross_entropy(x, targets(), Reduction::None); }),
       {{{6, 5}, -3, 3}}},
      {"nll_loss mean", f1([=](auto& x) { return nll_loss(x, targets()); }), {{{6, 5}, -3, 0}}},
      {"nll_loss none", f1([=](auto& x) { return nll_loss(x, targets(), Reduction::None); }), {{{6, 5}, -3, 0}}},
      {"mse_loss mean", f2([](auto& a, auto& b) { return mse_loss(a, b); }), {{{4, 5}}, {{4, 5}}}},
      {"mse_loss none", f2([](auto& a, auto& b) { return mse_loss(a, b, Reduction::None); }), {{{4, 5}}, {{4, 5}}}},
  };
  for (const auto& c : cases) check_dtypes(c);
}

namespace {
float bf16(float x) { return static_cast<float>(BFloat16(x)); }
float sigmoid_f(float x) { return 1.f / (1.f + std::exp(-x)); }
float gelu_grad_f(float x) {
  const float cdf = 0.5f * (1.f + std::erf(x * 0.70710678118654752440f));
  const float pdf = std::exp(-0.5f * x * x) * 0.39894228040143267794f;
  return cdf + x * pdf;
}

// d(sum(out * g))/dx for one op, with x and g given as bfloat16 values.
std::vector<float> bf16_grad(const std::function<Tensor(const Tensor&)>& op, const std::vector<double>& x, double g) {
  Tensor t = hgtest::make(x, {static_cast<int64_t>(x.size())}, bfloat16).requires_grad_(true);
  op(t).backward(full({static_cast<int64_t>(x.size())}, g, bfloat16));
  std::vector<float> out;
  for (double v : hgtest::values(t.grad())) out.push_back(static_cast<float>(v));
  return out;
}
}  // namespace

TEST_CASE("half backward formulas compute in float32 and round once", "[autograd][dtype]") {
  // bfloat16 inputs over [-4, 4], a gradient that is not a power of two.
  std::vector<double> x;
  for (double v = -4; v <= 4; v += 1.0 / 64) x.push_back(hgtest::round_to(v, bfloat16));
  const double g = 3.515625;
  const float gf = static_cast<float>(g);
  SECTION("sigmoid (PyTorch: grad * (1 - y) * y on the saved bfloat16 output)") {
    const auto got = bf16_grad([](const Tensor& t) { return sigmoid(t); }, x, g);
    for (size_t i = 0; i < x.size(); ++i) {
      const float y = bf16(sigmoid_f(static_cast<float>(x[i])));
      INFO("x = " << x[i]);
      CHECK(got[i] == bf16(gf * (1.f - y) * y));
    }
    // The case PyTorch 1.13 was compared on: rounding each step gave 0.61328125.
    CHECK(bf16_grad([](const Tensor& t) { return sigmoid(t); }, {-1.2265625}, g)[0] == 0.6171875f);
  }
  SECTION("tanh (grad * (1 - y * y))") {
    const auto got = bf16_grad([](const Tensor& t) { return tanh(t); }, x, g);
    for (size_t i = 0; i < x.size(); ++i) {
      const float y = bf16(std::tanh(static_cast<float>(x[i])));
      INFO("x = " << x[i]);
      CHECK(got[i] == bf16(gf * (1.f - y * y)));
    }
  }
  SECTION("gelu (grad * gelu'(x)), alone and as Linear + GELU") {
    const auto got = bf16_grad([](const Tensor& t) { return gelu(t); }, x, g);
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("x = " << x[i]);
      CHECK(got[i] == bf16(gf * gelu_grad_f(static_cast<float>(x[i]))));
    }
  }
}

TEST_CASE("NaN in backward as PyTorch: relu passes the gradient, a NaN max takes it", "[autograd][nan]") {
  const double nan = std::nan("");
  Tensor x = hgtest::make({nan, 1.0, -1.0}, {3}, float32).requires_grad_(true);
  relu(x).backward(full({3}, 2.0));
  const auto gr = hgtest::values(x.grad());
  CHECK(gr[0] == 2.0);  // threshold_backward: NaN <= 0 is false
  CHECK(gr[1] == 2.0);
  CHECK(gr[2] == 0.0);

  Tensor m = hgtest::make({1.0, nan, 3.0, 2.0}, {4}, float32).requires_grad_(true);
  max(m).backward();
  CHECK(hgtest::values(m.grad()) == std::vector<double>{0, 1, 0, 0});
  Tensor m2 = hgtest::make({nan, 1.0, nan}, {3}, float32).requires_grad_(true);
  max(m2).backward();
  CHECK(hgtest::values(m2.grad()) == std::vector<double>{0.5, 0, 0.5});
}
