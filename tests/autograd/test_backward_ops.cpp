// Backward of every differentiable op against central finite differences in
// float64 (autograd/gradcheck.h): elementwise ops with broadcasting, views,
// joins, reductions, matrix products, softmax and the losses. Inputs stay
// away from the kinks of relu/abs/clamp/max so the difference quotient is
// the derivative.
#include <catch2/catch.hpp>

#include "test_util.h"

using namespace halfgrad;
using hgtest::leaf;
using hgtest::leaf_away;
using hgtest::leaf_distinct;
using hgtest::leaf_from;
using hgtest::strided_leaf;

namespace {
using Fn = autograd::GradcheckFn;
struct Case {
  std::string name;
  Fn fn;
  std::vector<Tensor> inputs;
};

void run(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    INFO(c.name);
    HG_GRADCHECK(c.fn, c.inputs);
  }
}

Fn unary(std::function<Tensor(const Tensor&)> f) {
  return [f](const std::vector<Tensor>& in) { return f(in[0]); };
}
Fn binary(std::function<Tensor(const Tensor&, const Tensor&)> f) {
  return [f](const std::vector<Tensor>& in) { return f(in[0], in[1]); };
}

// Values in [-2, 2] at least 0.1 away from the clamp bounds used below.
Tensor clamp_input() {
  return leaf_from({-1.7, -0.9, -0.62, -0.38, -0.1, 0.12, 0.35, 0.6, 0.9, 1.3, 1.9, -0.15}, {3, 4});
}
}  // namespace

TEST_CASE("backward of unary ops", "[autograd][gradcheck]") {
  run({
      {"neg", unary([](auto& x) { return neg(x); }), {leaf({3, 4})}},
      {"exp", unary([](auto& x) { return exp(x); }), {leaf({3, 4})}},
      {"log", unary([](auto& x) { return log(x); }), {leaf({3, 4}, 0.2, 3)}},
      {"sqrt", unary([](auto& x) { return sqrt(x); }), {leaf({3, 4}, 0.2, 3)}},
      {"abs", unary([](auto& x) { return abs(x); }), {leaf_away({3, 4})}},
      {"relu", unary([](auto& x) { return relu(x); }), {leaf_away({3, 4})}},
      {"gelu", unary([](auto& x) { return gelu(x); }), {leaf({3, 4}, -3, 3)}},
      {"gelu tanh", unary([](auto& x) { return gelu(x, "tanh"); }), {leaf({3, 4}, -3, 3)}},
      {"gelu tanh, wide range", unary([](auto& x) { return gelu(x, "tanh"); }), {leaf({3, 4}, -6, 6)}},
      {"sigmoid", unary([](auto& x) { return sigmoid(x); }), {leaf({3, 4}, -4, 4)}},
      {"tanh", unary([](auto& x) { return tanh(x); }), {leaf({3, 4})}},
      {"pow(x, 2)", unary([](auto& x) { return pow(x, 2.0); }), {leaf({3, 4})}},
      {"pow(x, 3)", unary([](auto& x) { return pow(x, 3.0); }), {leaf({3, 4})}},
      {"pow(x, 0.5)", unary([](auto& x) { return pow(x, 0.5); }), {leaf({3, 4}, 0.2, 3)}},
      {"pow(x, -1.5)", unary([](auto& x) { return pow(x, -1.5); }), {leaf({3, 4}, 0.3, 3)}},
      {"clamp(-0.5, 0.75)", unary([](auto& x) { return clamp(x, -0.5, 0.75); }), {clamp_input()}},
      {"clamp(min -0.5)", unary([](auto& x) { return clamp(x, -0.5, std::nullopt); }), {clamp_input()}},
      {"clamp(max 0.75)", unary([](auto& x) { return clamp(x, std::nullopt, 0.75); }), {clamp_input()}},
      {"add(x, 2.5)", unary([](auto& x) { return add(x, 2.5); }), {leaf({3, 4})}},
      {"sub(x, 2.5)", unary([](auto& x) { return sub(x, 2.5); }), {leaf({3, 4})}},
      {"mul(x, 1.5)", unary([](auto& x) { return mul(x, 1.5); }), {leaf({3, 4})}},
      {"div(x, 3)", unary([](auto& x) { return div(x, 3.0); }), {leaf({3, 4})}},
      {"2 / x", unary([](auto& x) { return 2.0 / x; }), {leaf_away({3, 4}, 0.3, 2)}},
      {"1 - x", unary([](auto& x) { return 1.0 - x; }), {leaf({3, 4})}},
      {"x * x (same tensor twice)", unary([](auto& x) { return mul(x, x); }), {leaf({3, 4})}},
      {"exp on a strided leaf", unary([](auto& x) { return exp(x); }), {strided_leaf({3, 4})}},
      {"gelu on a strided leaf", unary([](auto& x) { return gelu(x); }), {strided_leaf({4, 3})}},
      {"gelu tanh on a strided leaf", unary([](auto& x) { return gelu(x, "tanh"); }), {strided_leaf({4, 3})}},
      {"0-d", unary([](auto& x) { return tanh(x); }), {leaf({})}},
  });
}

TEST_CASE("backward of binary ops with broadcasting", "[autograd][gradcheck]") {
  struct Shapes {
    Shape a, b;
  };
  const std::vector<Shapes> shapes = {{{3, 4}, {3, 4}},      {{3, 1, 5}, {4, 1}}, {{4, 1}, {3, 1, 5}},
                                      {{2, 3}, {3}},          {{}, {2, 3}},        {{2, 3}, {}},
                                      {{2, 1, 3}, {1, 4, 1}}};
  for (const auto& s : shapes) {
    INFO(shape_str(s.a) << " with " << shape_str(s.b));
    run({
        {"add", binary([](auto& a, auto& b) { return add(a, b); }), {leaf(s.a), leaf(s.b)}},
        {"add alpha", binary([](auto& a, auto& b) { return add(a, b, -1.5); }), {leaf(s.a), leaf(s.b)}},
        {"sub", binary([](auto& a, auto& b) { return sub(a, b); }), {leaf(s.a), leaf(s.b)}},
        {"sub alpha", binary([](auto& a, auto& b) { return sub(a, b, 2.5); }), {leaf(s.a), leaf(s.b)}},
        {"mul", binary([](auto& a, auto& b) { return mul(a, b); }), {leaf(s.a), leaf(s.b)}},
        {"div", binary([](auto& a, auto& b) { return div(a, b); }), {leaf(s.a), leaf_away(s.b, 0.3, 2)}},
        {"pow", binary([](auto& a, auto& b) { return pow(a, b); }), {leaf(s.a, 0.3, 2), leaf(s.b, -2, 2)}},
        {"maximum", binary([](auto& a, auto& b) { return maximum(a, b); }),
         {leaf_distinct(s.a), leaf_distinct(s.b, 0.05)}},
        {"minimum", binary([](auto& a, auto& b) { return minimum(a, b); }),
         {leaf_distinct(s.a), leaf_distinct(s.b, 0.05)}},
    });
  }
  // one input without grad; strided inputs
  run({
      {"mul, b constant", binary([](auto& a, auto& b) { return mul(a, b); }),
       {leaf({3, 4}), hgtest::uniform({4}, float64)}},
      {"div, strided", binary([](auto& a, auto& b) { return div(a, b); }),
       {strided_leaf({3, 4}), leaf_away({3, 4}, 0.3, 2)}},
      {"add, strided both", binary([](auto& a, auto& b) { return add(a, b); }),
       {strided_leaf({3, 4}), strided_leaf({3, 4})}},
  });
}

TEST_CASE("backward of where", "[autograd][gradcheck]") {
  const Tensor cond = hgtest::random_bool({3, 1});
  const Tensor cond_full = hgtest::random_bool({3, 4});
  run({
      {"where broadcast", [cond](auto& in) { return where(cond, in[0], in[1]); }, {leaf({3, 4}), leaf({4})}},
      {"where full", [cond_full](auto& in) { return where(cond_full, in[0], in[1]); }, {leaf({3, 4}), leaf({3, 4})}},
      {"where scalar b", [cond_full](auto& in) { return where(cond_full, in[0], in[1]); }, {leaf({3, 4}), leaf({})}},
  });
}

TEST_CASE("backward of views", "[autograd][gradcheck]") {
  run({
      {"view", unary([](auto& x) { return x.view({4, 6}); }), {leaf({2, 3, 4})}},
      {"view -1", unary([](auto& x) { return x.view({-1}); }), {leaf({2, 3, 4})}},
      {"reshape (copy of a strided leaf)", unary([](auto& x) { return x.reshape({12}); }), {strided_leaf({3, 4})}},
      {"transpose", unary([](auto& x) { return exp(x.transpose(0, 2)); }), {leaf({2, 3, 4})}},
      {"t", unary([](auto& x) { return x.t(); }), {leaf({3, 4})}},
      {"permute", unary([](auto& x) { return x.permute({2, 0, 1}); }), {leaf({2, 3, 4})}},
      {"narrow", unary([](auto& x) { return x.narrow(1, 1, 2); }), {leaf({2, 3, 4})}},
      {"narrow negative start", unary([](auto& x) { return x.narrow(-1, -3, 2); }), {leaf({2, 3, 4})}},
      {"select", unary([](auto& x) { return x.select(1, 2); }), {leaf({2, 3, 4})}},
      {"select negative", unary([](auto& x) { return x.select(0, -1); }), {leaf({2, 3, 4})}},
      {"unsqueeze", unary([](auto& x) { return x.unsqueeze(1); }), {leaf({3, 4})}},
      {"squeeze", unary([](auto& x) { return x.squeeze(); }), {leaf({3, 1, 4, 1})}},
      {"squeeze dim", unary([](auto& x) { return x.squeeze(1); }), {leaf({3, 1, 4})}},
      {"expand", unary([](auto& x) { return x.expand({2, 3, 4}); }), {leaf({3, 1})}},
      {"expand 0-d", unary([](auto& x) { return x.expand({2, 3}); }), {leaf({})}},
      {"flatten", unary([](auto& x) { return x.flatten(1); }), {leaf({2, 3, 4})}},
      {"contiguous", unary([](auto& x) { return x.t().contiguous(); }), {leaf({3, 4})}},
      {"clone", unary([](auto& x) { return x.clone(); }), {strided_leaf({3, 4})}},
      {"views chained", unary([](auto& x) { return x.t().unsqueeze(0).expand({2, 4, 3}).narrow(1, 1, 2); }),
       {leaf({3, 4})}},
      {"a view used twice", unary([](auto& x) { return mul(x.select(0, 0), x.select(0, 1)); }), {leaf({2, 5})}},
  });
}

TEST_CASE("backward of cat and stack", "[autograd][gradcheck]") {
  run({
      {"cat dim 0", [](auto& in) { return cat({in[0], in[1], in[2]}, 0); }, {leaf({2, 3}), leaf({1, 3}), leaf({4, 3})}},
      {"cat dim 1", [](auto& in) { return cat({in[0], in[1]}, 1); }, {leaf({2, 3}), leaf({2, 5})}},
      {"cat dim -1 strided", [](auto& in) { return cat({in[0], in[1]}, -1); }, {strided_leaf({3, 2}), leaf({3, 4})}},
      {"cat same tensor twice", [](auto& in) { return cat({in[0], in[0]}, 0); }, {leaf({2, 3})}},
      {"cat with a constant", [](auto& in) { return cat({in[0], in[1]}, 0); },
       {leaf({2, 3}), hgtest::uniform({2, 3}, float64)}},
      {"stack dim 0", [](auto& in) { return stack({in[0], in[1]}, 0); }, {leaf({2, 3}), leaf({2, 3})}},
      {"stack dim -1", [](auto& in) { return stack({in[0], in[1], in[0]}, -1); }, {leaf({2, 3}), leaf({2, 3})}},
  });
}

TEST_CASE("backward of reductions", "[autograd][gradcheck]") {
  run({
      {"sum all", unary([](auto& x) { return sum(x); }), {leaf({2, 3, 4})}},
      {"sum dim 1", unary([](auto& x) { return sum(x, {1}); }), {leaf({2, 3, 4})}},
      {"sum dims {0, 2} keepdim", unary([](auto& x) { return sum(x, {0, 2}, true); }), {leaf({2, 3, 4})}},
      {"sum dim -1 strided", unary([](auto& x) { return sum(x, {-1}); }), {strided_leaf({3, 4})}},
      {"mean all", unary([](auto& x) { return mean(x); }), {leaf({2, 3, 4})}},
      {"mean dims {1, 2}", unary([](auto& x) { return mean(x, {1, 2}); }), {leaf({2, 3, 4})}},
      {"mean dim 0 keepdim", unary([](auto& x) { return x.mean({0}, true); }), {leaf({2, 3, 4})}},
      {"max dim 1", unary([](auto& x) { return std::get<0>(max(x, 1)); }), {leaf_distinct({2, 3, 4})}},
      {"max dim 0 keepdim", unary([](auto& x) { return std::get<0>(max(x, 0, true)); }), {leaf_distinct({2, 3, 4})}},
      {"max dim -1 strided", unary([](auto& x) { return std::get<0>(max(x, -1)); }), {strided_leaf({3, 4})}},
      {"max all", unary([](auto& x) { return max(x); }), {leaf_distinct({3, 4})}},
      {"sum of a product", binary([](auto& a, auto& b) { return sum(mul(a, b), {0}); }), {leaf({3, 4}), leaf({4})}},
  });
}

TEST_CASE("backward of matrix products", "[autograd][gradcheck]") {
  run({
      {"mm", binary([](auto& a, auto& b) { return mm(a, b); }), {leaf({3, 5}), leaf({5, 4})}},
      {"mm strided", binary([](auto& a, auto& b) { return mm(a, b); }), {strided_leaf({3, 5}), strided_leaf({5, 4})}},
      {"mm of a transposed view", binary([](auto& a, auto& b) { return mm(a.t(), b); }), {leaf({5, 3}), leaf({5, 4})}},
      {"bmm", binary([](auto& a, auto& b) { return bmm(a, b); }), {leaf({2, 3, 5}), leaf({2, 5, 4})}},
      {"bmm strided", binary([](auto& a, auto& b) { return bmm(a, b); }), {strided_leaf({2, 3, 5}), leaf({2, 5, 4})}},
      {"matmul 1-d 1-d", binary([](auto& a, auto& b) { return matmul(a, b); }), {leaf({5}), leaf({5})}},
      {"matmul 2-d 1-d", binary([](auto& a, auto& b) { return matmul(a, b); }), {leaf({3, 5}), leaf({5})}},
      {"matmul 1-d 2-d", binary([](auto& a, auto& b) { return matmul(a, b); }), {leaf({5}), leaf({5, 4})}},
      {"matmul 3-d 2-d", binary([](auto& a, auto& b) { return matmul(a, b); }), {leaf({2, 3, 5}), leaf({5, 4})}},
      {"matmul 2-d 3-d", binary([](auto& a, auto& b) { return matmul(a, b); }), {leaf({3, 5}), leaf({2, 5, 4})}},
      {"matmul broadcast batch", binary([](auto& a, auto& b) { return matmul(a, b); }),
       {leaf({2, 1, 3, 4}), leaf({3, 4, 2})}},
      {"matmul 1-d 3-d", binary([](auto& a, auto& b) { return matmul(a, b); }), {leaf({5}), leaf({2, 5, 4})}},
      {"addmm", [](auto& in) { return addmm(in[0], in[1], in[2]); }, {leaf({4}), leaf({3, 5}), leaf({5, 4})}},
      {"addmm full bias, beta 0.5, alpha 2", [](auto& in) { return addmm(in[0], in[1], in[2], 0.5, 2.0); },
       {leaf({3, 4}), leaf({3, 5}), leaf({5, 4})}},
      {"addmm column bias", [](auto& in) { return addmm(in[0], in[1], in[2], 1.5, -1.0); },
       {leaf({3, 1}), leaf({3, 5}), strided_leaf({5, 4})}},
      {"addmm 0-d bias", [](auto& in) { return addmm(in[0], in[1], in[2]); }, {leaf({}), leaf({3, 5}), leaf({5, 4})}},
      {"linear with bias", [](auto& in) { return linear(in[0], in[1], in[2]); }, {leaf({3, 5}), leaf({4, 5}), leaf({4})}},
      {"linear without bias", [](auto& in) { return linear(in[0], in[1]); }, {leaf({3, 5}), leaf({4, 5})}},
      {"linear 3-d input", [](auto& in) { return linear(in[0], in[1], in[2]); },
       {leaf({2, 3, 5}), leaf({4, 5}), leaf({4})}},
      {"linear 1-d input", [](auto& in) { return linear(in[0], in[1], in[2]); }, {leaf({5}), leaf({4, 5}), leaf({4})}},
      {"linear strided input", [](auto& in) { return linear(in[0], in[1], in[2]); },
       {strided_leaf({3, 5}), strided_leaf({4, 5}), leaf({4})}},
  });
}

TEST_CASE("backward of softmax and log_softmax", "[autograd][gradcheck]") {
  for (int64_t dim : {-1, 0, 1, 2}) {
    INFO("dim " << dim);
    run({
        {"softmax", unary([dim](auto& x) { return softmax(x, dim); }), {leaf({2, 3, 4})}},
        {"log_softmax", unary([dim](auto& x) { return log_softmax(x, dim); }), {leaf({2, 3, 4})}},
    });
  }
  run({
      {"softmax strided", unary([](auto& x) { return softmax(x, 1); }), {strided_leaf({3, 4})}},
      {"log_softmax strided", unary([](auto& x) { return log_softmax(x, 0); }), {strided_leaf({3, 4})}},
  });
}

TEST_CASE("backward of the losses", "[autograd][gradcheck]") {
  const Tensor t = hgtest::make({0, 3, 1, 4, 2, 3}, {6}, int64);
  const Tensor t_ign = hgtest::make({0, -100, 1, 4, -100, 3}, {6}, int64);
  const Tensor t_ign2 = hgtest::make({0, 2, 1, 4, 2, 3}, {6}, int64);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    INFO("reduction " << (r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none"));
    run({
        {"cross_entropy", [=](auto& in) { return cross_entropy(in[0], t, r); }, {leaf({6, 5})}},
        {"cross_entropy ignore_index -100", [=](auto& in) { return cross_entropy(in[0], t_ign, r); }, {leaf({6, 5})}},
        {"cross_entropy ignore_index 2", [=](auto& in) { return cross_entropy(in[0], t_ign2, r, 2); }, {leaf({6, 5})}},
        {"cross_entropy strided logits", [=](auto& in) { return cross_entropy(in[0], t, r); }, {strided_leaf({6, 5})}},
        {"nll_loss", [=](auto& in) { return nll_loss(in[0], t, r); }, {leaf({6, 5})}},
        {"nll_loss ignore_index", [=](auto& in) { return nll_loss(in[0], t_ign2, r, 2); }, {leaf({6, 5})}},
        {"nll_loss of log_softmax", [=](auto& in) { return nll_loss(log_softmax(in[0], 1), t_ign, r); },
         {leaf({6, 5})}},
        {"mse_loss", [=](auto& in) { return mse_loss(in[0], in[1], r); }, {leaf({3, 4}), leaf({3, 4})}},
        {"mse_loss strided target", [=](auto& in) { return mse_loss(in[0], in[1], r); },
         {leaf({3, 4}), strided_leaf({3, 4})}},
        {"mse_loss constant target", [=](auto& in) { return mse_loss(in[0], in[1], r); },
         {leaf({3, 4}), hgtest::uniform({3, 4}, float64)}},
    });
  }
}

TEST_CASE("backward of dropout (fixed seed) and a small network", "[autograd][gradcheck]") {
  run({
      {"dropout train", unary([](auto& x) {
         manual_seed(123);  // the same mask at every evaluation
         return dropout(x, 0.4, true);
       }),
       {leaf({4, 5})}},
      {"dropout eval", unary([](auto& x) { return dropout(x, 0.4, false); }), {leaf({4, 5})}},
      {"MLP: linear-gelu-linear-cross_entropy",
       [](auto& in) {
         const Tensor h = gelu(linear(in[0], in[1], in[2]));
         const Tensor logits = linear(h, in[3], in[4]);
         return cross_entropy(logits, hgtest::make({0, 2, 1, 2}, {4}, int64));
       },
       {leaf({4, 3}), leaf({5, 3}), leaf({5}), leaf({3, 5}), leaf({3})}},
      {"shared subexpression", unary([](auto& x) {
         const Tensor a = exp(x);
         return add(mul(a, a), sigmoid(a));
       }),
       {leaf({3, 3})}},
  });
}

TEST_CASE("backward of linear with a strided 3-d input and of ops at special points", "[autograd][gradcheck]") {
  run({
      {"linear strided 3-d input", [](auto& in) { return linear(in[0], in[1], in[2]); },
       {strided_leaf({2, 5, 3}), leaf({4, 3}), leaf({4})}},
      {"softmax over a dim of size 1", unary([](auto& x) { return softmax(x, 1); }), {leaf({3, 1})}},
      {"pow tensor with an integer-valued exponent and negative base",
       binary([](auto& a, auto& b) { return pow(a, b); }),
       {leaf_away({4}, 0.5, 2), leaf_from({2.0, 3.0, 1.0, 2.0}, {4}).detach()}},
  });
}

// PyTorch's gradient conventions at non-differentiable points and special
// values. These are not finite-difference checks: at a tie or at 0 the
// difference quotient is not the convention.
TEST_CASE("maximum/minimum split the gradient evenly at ties, as PyTorch", "[autograd][conventions]") {
  // Known deviation (see the report): halfgrad sends the whole gradient to the
  // first argument at a tie (ge/le masks); PyTorch gives grad / 2 to each.
  Tensor a = leaf_from({1.0, 2.0, 3.0}, {3}), b = leaf_from({1.0, 0.0, 5.0}, {3});
  sum(maximum(a, b)).backward();
  CHECK(hgtest::values(a.grad()) == std::vector<double>{0.5, 1.0, 0.0});
  CHECK(hgtest::values(b.grad()) == std::vector<double>{0.5, 0.0, 1.0});
  Tensor c = leaf_from({1.0, 2.0}, {2}), d = leaf_from({1.0, 3.0}, {2});
  sum(minimum(c, d)).backward();
  CHECK(hgtest::values(c.grad()) == std::vector<double>{0.5, 1.0});
  CHECK(hgtest::values(d.grad()) == std::vector<double>{0.5, 0.0});
}

TEST_CASE("max() over all elements spreads the gradient evenly over ties, as PyTorch",
          "[autograd][conventions]") {
  // Known deviation (see the report): PyTorch's full max() backward is
  // evenly_distribute_backward; halfgrad's goes to the first maximum only.
  // (max(x, dim) sends it to the returned index in both.)
  Tensor x = leaf_from({1.0, 3.0, 3.0, 2.0}, {4});
  max(x).backward();
  CHECK(hgtest::values(x.grad()) == std::vector<double>{0.0, 0.5, 0.5, 0.0});
}

TEST_CASE("max(x, dim) at ties sends the gradient to the returned index", "[autograd][conventions]") {
  Tensor x = leaf_from({1.0, 3.0, 3.0, 2.0, 2.0, 0.0}, {2, 3});
  sum(std::get<0>(max(x, 1))).backward();
  CHECK(hgtest::values(x.grad()) == std::vector<double>{0, 1, 0, 1, 0, 0});
}

TEST_CASE("relu, abs and clamp gradients at their kinks follow PyTorch", "[autograd][conventions]") {
  Tensor x = leaf_from({-1.0, 0.0, 2.0}, {3});
  sum(relu(x)).backward();
  CHECK(hgtest::values(x.grad()) == std::vector<double>{0, 0, 1});  // relu'(0) = 0
  Tensor y = leaf_from({-1.0, 0.0, 2.0}, {3});
  sum(abs(y)).backward();
  CHECK(hgtest::values(y.grad()) == std::vector<double>{-1, 0, 1});  // sign(0) = 0
  Tensor z = leaf_from({-1.0, -0.5, 0.0, 0.75, 1.0}, {5});
  sum(clamp(z, -0.5, 0.75)).backward();
  CHECK(hgtest::values(z.grad()) == std::vector<double>{0, 1, 1, 1, 0});  // bounds inclusive
}

TEST_CASE("pow gradients at a zero base are finite, as PyTorch", "[autograd][conventions]") {
  // Known deviation (see the report): d/dy x^y = x^y log(x) is 0 * -inf = NaN
  // at x = 0 (PyTorch masks it to 0 where x == 0 and y >= 0), and
  // pow(x, 0.0)'s gradient 0 * x^-1 is NaN at x = 0 (PyTorch returns 0).
  Tensor x = leaf_from({0.0, 2.0}, {2}), y = leaf_from({2.0, 3.0}, {2});
  sum(pow(x, y)).backward();
  const auto gy = hgtest::values(y.grad());
  CHECK(gy[0] == 0.0);
  CHECK(gy[1] == Approx(8.0 * std::log(2.0)));
  CHECK(hgtest::values(x.grad()) == std::vector<double>{0.0, 12.0});
  Tensor z = leaf_from({0.0, 2.0}, {2});
  sum(pow(z, 0.0)).backward();
  CHECK(hgtest::values(z.grad()) == std::vector<double>{0.0, 0.0});
}
