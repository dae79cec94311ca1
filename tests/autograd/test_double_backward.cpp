// autograd::grad and double backward: grad returns gradients without touching
// any .grad, runs only what leads to its inputs, and checks its arguments;
// under create_graph the gradients have a graph, so second derivatives
// (gradgradcheck: double backward against finite differences of first-order
// gradients, float64) are right for the elementwise ops, the activations,
// reductions, matrix products and Linear (fused or chained), softmax and the
// losses, views and indexing; an op whose backward calls kernels directly
// raises an Error naming it when a second backward reaches it; and the AMP
// gradient penalty (PyTorch's AMP examples page) trains.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <halfgrad.h>
#include <halfgrad/autograd/gradcheck.h>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::values;

namespace {
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

void check_second(const std::string& name, const Fn& fn, const std::vector<Tensor>& inputs) {
  INFO(name);
  const auto r = gradgradcheck(fn, inputs, {.atol = 1e-5, .rtol = 1e-3, .raise = false});
  INFO(r.message);
  CHECK(r.ok);
}
}  // namespace

TEST_CASE("autograd::grad returns gradients and leaves every .grad alone", "[autograd][grad]") {
  const Tensor x = hgtest::leaf({3}), w = hgtest::leaf({3});
  const Tensor y = sum(mul(mul(x, x), w));  // dy/dx = 2 x w, dy/dw = x^2
  const auto g = autograd::grad({y}, {x});
  REQUIRE(g.size() == 1);
  const auto xv = values(x), wv = values(w), gv = values(g[0]);
  for (size_t i = 0; i < 3; ++i) CHECK(gv[i] == Approx(2 * xv[i] * wv[i]));
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());  // not an input: not accumulated either (PyTorch)
  CHECK_FALSE(g[0].requires_grad());  // no create_graph: a plain tensor
  // the graph was freed (retain_graph defaults to create_graph = false)
  REQUIRE_THROWS_WITH(autograd::grad({y}, {w}), Contains("second time"));
}

TEST_CASE("autograd::grad takes several outputs, grad_outputs and non-leaf inputs", "[autograd][grad]") {
  const Tensor x = hgtest::leaf({2, 3});
  const Tensor h = exp(x);           // a non-leaf input
  const Tensor a = mul(h, 2.0), b = sum(h);
  const Tensor u = hgtest::uniform({2, 3}, float64);
  const auto g = autograd::grad({a, b}, {h, x}, {u, Tensor()}, {.retain_graph = true});
  const auto uv = values(u), hv = values(h), gh = values(g[0]), gx = values(g[1]);
  for (size_t i = 0; i < 6; ++i) {
    CHECK(gh[i] == Approx(2 * uv[i] + 1));
    CHECK(gx[i] == Approx((2 * uv[i] + 1) * hv[i]));
  }
  // the graph was kept: backward still runs
  CHECK_NOTHROW(sum(a).backward());
  CHECK(x.grad().defined());
}

TEST_CASE("autograd::grad checks its arguments", "[autograd][grad][errors]") {
  const Tensor x = hgtest::leaf({3}), z = hgtest::leaf({2});
  const Tensor c = hgtest::uniform({3}, float64);
  const Tensor y = sum(exp(x));
  REQUIRE_THROWS_WITH(autograd::grad({y}, {c}, {}, {.retain_graph = true}),
                      Contains("input 0") && Contains("does not require grad"));
  REQUIRE_THROWS_WITH(autograd::grad({y}, {z}, {}, {.retain_graph = true}),
                      Contains("not used") && Contains("allow_unused"));
  const auto unused = autograd::grad({y}, {x, z}, {}, {.retain_graph = true, .allow_unused = true});
  CHECK(unused[0].defined());
  CHECK_FALSE(unused[1].defined());
  REQUIRE_THROWS_WITH(autograd::grad({exp(x)}, {x}), Contains("scalar outputs"));
  REQUIRE_THROWS_WITH(autograd::grad({y}, {x}, {c, c}), Contains("grad_outputs"));
  REQUIRE_THROWS_WITH(autograd::grad({}, {x}), Contains("no outputs"));
}

TEST_CASE("create_graph gives gradients a graph: second and third derivatives of x^3", "[autograd][grad][double]") {
  const Tensor x = hgtest::leaf_from({-1.5, 0.5, 2.0}, {3});
  const Tensor g1 = autograd::grad({sum(pow(x, 3.0))}, {x}, {}, {.create_graph = true})[0];
  CHECK(g1.requires_grad());
  const Tensor g2 = autograd::grad({sum(g1)}, {x}, {}, {.create_graph = true})[0];
  const Tensor g3 = autograd::grad({sum(g2)}, {x})[0];
  const auto xv = values(x), v1 = values(g1), v2 = values(g2), v3 = values(g3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(v1[i] == Approx(3 * xv[i] * xv[i]));
    CHECK(v2[i] == Approx(6 * xv[i]));
    CHECK(v3[i] == Approx(6.0));
  }
  // backward(create_graph) writes a .grad that has a graph too
  const Tensor y = hgtest::leaf_from({0.5, 1.0}, {2});
  sum(mul(exp(y), y)).backward(Tensor(), false, true);
  REQUIRE(y.grad().requires_grad());
  const Tensor gg = autograd::grad({sum(y.grad())}, {y})[0];  // d/dy (e^y (1 + y)) = e^y (2 + y)
  const auto yv = values(y), ggv = values(gg);
  for (size_t i = 0; i < 2; ++i) CHECK(ggv[i] == Approx(std::exp(yv[i]) * (2 + yv[i])));
}

TEST_CASE("second derivatives of the elementwise ops and activations", "[autograd][double]") {
  const Tensor x = hgtest::leaf_away({2, 3}, 0.3, 1.8), y = hgtest::leaf_away({2, 3}, 0.5, 1.5);
  const Tensor pos = hgtest::leaf({2, 3}, 0.5, 2.0);
  using V = const std::vector<Tensor>&;
  check_second("mul", [](V in) { return mul(in[0], mul(in[1], in[0])); }, {x, y});
  check_second("div", [](V in) { return div(in[0], in[1]); }, {x, y});
  check_second("pow", [](V in) { return pow(in[0], in[1]); }, {pos, y});
  check_second("pow scalar", [](V in) { return pow(in[0], 3.0); }, {x});
  check_second("exp log sqrt", [](V in) { return add(exp(in[0]), mul(log(in[1]), sqrt(in[1]))); }, {x, pos});
  check_second("sin cos erf", [](V in) { return mul(sin(in[0]), add(cos(in[0]), erf(in[0]))); }, {x});
  check_second("tanh sigmoid", [](V in) { return mul(tanh(in[0]), sigmoid(in[0])); }, {x});
  check_second("gelu", [](V in) { return gelu(in[0]); }, {x});
  check_second("gelu tanh", [](V in) { return gelu(in[0], "tanh"); }, {x});
  check_second("relu abs", [](V in) { return mul(relu(in[0]), abs(in[0])); }, {x});
  check_second("hardswish", [](V in) { return hardswish(mul(in[0], 2.0)); }, {x});
  check_second("relu6 hardsigmoid", [](V in) { return mul(relu6(mul(in[0], 4.0)), hardsigmoid(in[0])); }, {x});
  check_second("maximum where", [](V in) { return where(gt(in[0], 0.0), maximum(in[0], in[1]), mul(in[1], in[1])); },
               {x, y});
  check_second("broadcast", [](V in) { return mul(in[0], exp(in[1].reshape({2, 3}).narrow(0, 0, 1))); }, {x, y});
}

TEST_CASE("second derivatives of reductions, views and indexing", "[autograd][double]") {
  const Tensor x = hgtest::leaf({3, 4});
  using V = const std::vector<Tensor>&;
  check_second("sum mean", [](V in) { return mul(sum(mul(in[0], in[0]), {1}), mean(in[0], {1})); }, {x});
  check_second("var std", [](V in) { return add(sum(var(in[0], {1})), mul(sum(halfgrad::std(in[0], {0})), 2.0)); }, {x});
  check_second("norm logsumexp", [](V in) { return add(norm(in[0]), logsumexp(in[0], {1})); }, {x});
  check_second("narrow slice", [](V in) { return mul(in[0].narrow(1, 1, 2), in[0].slice(1, 0, 4, 2)); }, {x});
  check_second("cat transpose", [](V in) { return mul(cat({in[0], exp(in[0])}, 0), cat({in[0], in[0]}, 0)).t(); },
               {x});
  check_second("expand permute", [](V in) { return mul(in[0].unsqueeze(0).expand({2, 3, 4}), in[0]).permute({2, 0, 1}); },
               {x});
  const Tensor idx = hgtest::make({2, 0, 2}, {3}, DType::Int64);
  check_second("index_select gather", [idx](V in) {
    return mul(index_select(in[0], 0, idx), gather(in[0], 0, idx.reshape({3, 1}).expand({3, 4}).contiguous()));
  }, {x});
}

TEST_CASE("second derivatives of matrix products and Linear, fused and chained", "[autograd][double]") {
  const Tensor a = hgtest::leaf({3, 4}), b = hgtest::leaf({4, 2}), c = hgtest::leaf({2, 3, 4});
  const Tensor w = hgtest::leaf({5, 4}), bias = hgtest::leaf({5}), w2 = hgtest::leaf({3, 5}), b2 = hgtest::leaf({3});
  using V = const std::vector<Tensor>&;
  check_second("mm", [](V in) { return mul(mm(in[0], in[1]), mm(in[0], in[1])); }, {a, b});
  check_second("matmul bmm", [](V in) { return sin(matmul(in[0], in[1])); }, {c, b});
  check_second("addmm", [](V in) { return tanh(addmm(in[2], in[0], in[1], 0.5, 2.0)); }, {a, b, hgtest::leaf({2})});
  for (Activation act : {Activation::None, Activation::ReLU, Activation::GELU, Activation::GELUTanh}) {
    check_second("linear " + std::to_string(static_cast<int>(act)),
                 [act](V in) { return tanh(linear(in[0], in[1], in[2], act)); }, {c, w, bias});
    check_second("linear_chain " + std::to_string(static_cast<int>(act)), [act](V in) {
      // sin: bounded, so finite differences of a large output cannot drown a small derivative
      return sin(linear_chain(in[0], {in[1], in[3]}, {in[2], in[4]}, {act, Activation::GELU}));
    }, {a, w, bias, w2, b2});
  }
}

TEST_CASE("second derivatives of softmax and the losses", "[autograd][double]") {
  const Tensor x = hgtest::leaf({4, 5}), t = hgtest::leaf({4, 5});
  const Tensor target = hgtest::make({1, 4, 0, 2}, {4}, DType::Int64);
  using V = const std::vector<Tensor>&;
  check_second("softmax", [](V in) { return mul(softmax(in[0], 1), softmax(in[0], 0)); }, {x});
  check_second("log_softmax", [](V in) { return mul(log_softmax(in[0], 1), in[0]); }, {x});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    check_second("cross_entropy", [&](V in) { return mul(cross_entropy(in[0], target, r), 3.0); }, {x});
    check_second("cross_entropy ignore_index", [&](V in) { return cross_entropy(in[0], target, r, 4); }, {x});
    check_second("nll_loss", [&](V in) { return nll_loss(log_softmax(mul(in[0], in[0]), 1), target, r); }, {x});
    check_second("mse_loss", [&](V in) { return mse_loss(mul(in[0], in[0]), in[1], {.reduction = r}); }, {x, t});
  }
  check_second("bce with logits", [](V in) { return binary_cross_entropy_with_logits(in[0], sigmoid(in[1])); }, {x, t});
  check_second("smooth_l1", [](V in) { return smooth_l1_loss(mul(in[0], in[0]), in[1]); }, {x, t});
}

// layer_norm's backward is a fused kernel; under create_graph it is written
// with ops (ops/layer_norm.cpp), and gives the kernel's first derivatives.
TEST_CASE("second derivatives of layer_norm through its fused op", "[autograd][double][layer_norm]") {
  const Tensor x = hgtest::leaf({3, 5}), w = hgtest::leaf({5}, 0.5, 1.5), b = hgtest::leaf({5});
  using V = const std::vector<Tensor>&;
  check_second("layer_norm affine", [](V in) {
    const Tensor y = layer_norm(in[0], {5}, in[1], in[2]);
    return mul(y, y);
  }, {x, w, b});
  check_second("layer_norm plain", [](V in) { return mul(layer_norm(in[0], {5}), in[0]); }, {x});
  check_second("layer_norm two dims", [](V in) {
    const Tensor y = layer_norm(in[0], {2, 3}, in[1], Tensor());
    return mul(y, y);
  }, {hgtest::leaf({2, 2, 3}), hgtest::leaf({2, 3}, 0.5, 1.5)});
  // the create_graph formula's first derivatives are the kernel's
  const Tensor y = sum(mul(layer_norm(x, {5}, w, b), layer_norm(x, {5}, w, b)));
  const auto with_graph = autograd::grad({y}, {x, w, b}, {}, {.create_graph = true});
  const auto plain = autograd::grad({y}, {x, w, b});
  for (size_t i = 0; i < 3; ++i) {
    INFO("input " << i);
    HG_CHECK_CLOSE_TOL(with_graph[i], values(plain[i]), 1e-12);
  }
}

TEST_CASE("a second backward through an op that is not twice differentiable is an Error naming it",
          "[autograd][double][errors]") {
  const Tensor x = hgtest::leaf({1, 2, 5, 5}), w = hgtest::leaf({3, 2, 3, 3});
  const Tensor y = sum(mul(conv2d(x, w), conv2d(x, w)));
  // first-order gradients are as without create_graph
  const auto g = autograd::grad({y}, {w}, {}, {.create_graph = true});
  const auto plain = autograd::grad({sum(mul(conv2d(x, w), conv2d(x, w)))}, {w});
  CHECK(values(g[0]) == values(plain[0]));
  REQUIRE(g[0].requires_grad());
  REQUIRE_THROWS_WITH(sum(mul(g[0], g[0])).backward(),
                      Contains("conv2d backward") && Contains("double backward through conv2d is not supported"));
  // pooling's gradient is linear in the incoming one: an Error only where that has a graph
  const Tensor p = max_pool2d(x, 2);
  const Tensor gp = autograd::grad({sum(mul(p, p))}, {x}, {}, {.create_graph = true})[0];
  REQUIRE_THROWS_WITH(autograd::grad({sum(gp)}, {x}), Contains("double backward through max_pool2d"));
  const Tensor gq = autograd::grad({sum(max_pool2d(mul(x, x), 2))}, {x}, {}, {.create_graph = true})[0];
  CHECK_NOTHROW(autograd::grad({sum(gq)}, {x}));  // 2 x times a constant mask: no second pooling backward
  // a first derivative that needs no second one is fine: no Error without a second backward
  CHECK_NOTHROW(autograd::grad({sum(conv2d(x, w))}, {x}, {}, {.create_graph = true}));
}

namespace {
// The MLP of PyTorch's AMP examples page: Linear -> ReLU -> Linear.
struct Net : nn::Module {
  nn::Linear fc1{4, 8}, fc2{8, 3};
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};

// loss + ||d loss / d params||, the penalised objective, at the model's parameters.
Tensor penalised(Net& net, const Tensor& x, const Tensor& target, bool create_graph) {
  const Tensor loss = cross_entropy(net.forward(x), target);
  const auto grads = autograd::grad({loss}, net.parameters(), {}, {.create_graph = create_graph});
  Tensor norm2 = zeros({}, loss.options());
  for (const Tensor& g : grads) norm2 = add(norm2, sum(mul(g, g)));
  return add(loss, sqrt(norm2));
}
}  // namespace

TEST_CASE("the gradient penalty's gradient matches finite differences of the penalised loss",
          "[autograd][double][penalty]") {
  manual_seed(3);
  Net net;
  net.to(DType::Float64);
  const Tensor x = hgtest::uniform({6, 4}, float64);
  const Tensor target = hgtest::make({0, 2, 1, 1, 0, 2}, {6}, DType::Int64);
  penalised(net, x, target, true).backward();
  auto params = net.parameters();
  const Tensor w = params[0];  // fc1.weight
  const auto analytical = values(w.grad());
  const double eps = 1e-6;
  for (int64_t i : {0, 5, 13, 30}) {
    double f[2];
    for (int s = 0; s < 2; ++s) {
      {
        no_grad guard;
        w.view({-1}).narrow(0, i, 1).add_(ones({1}, w.options()), s == 0 ? eps : -2 * eps);
      }
      f[s] = penalised(net, x, target, false).item<double>();
    }
    {
      no_grad guard;
      w.view({-1}).narrow(0, i, 1).add_(ones({1}, w.options()), eps);
    }
    CHECK(analytical[static_cast<size_t>(i)] == Approx((f[0] - f[1]) / (2 * eps)).epsilon(1e-5).margin(1e-7));
  }
}
