// linear_chain: Linear layers with their activations as one op. Forward and
// backward against the unfused composition (linear, then relu / gelu per
// layer) in every dtype, finite differences in float64, only the wanted
// gradients, errors that name the layer, and autocast.
#include "test_util.h"

#include <halfgrad/amp/autocast.h>
#include <halfgrad/autograd/engine.h>

namespace hg = halfgrad;
using namespace hgtest;
using A = hg::Activation;
using Catch::Matchers::Contains;

namespace {
// One chain: in_features, then per layer its out_features, bias or not, activation.
struct Layer {
  int64_t out;
  bool bias;
  A act;
};
struct Chain {
  int64_t in;
  std::vector<Layer> layers;
};

const std::vector<Chain> kChains = {
    {12, {{16, true, A::ReLU}, {20, false, A::GELU}, {9, true, A::GELUTanh}, {5, true, A::None}}},
    {10, {{8, true, A::GELUTanh}, {13, true, A::ReLU}, {6, false, A::ReLU}}},
    {7, {{11, false, A::GELU}, {4, true, A::GELU}}},
};

Tensor activate(const Tensor& z, A act) {
  switch (act) {
    case A::ReLU: return hg::relu(z);
    case A::GELU: return hg::gelu(z);
    case A::GELUTanh: return hg::gelu(z, "tanh");
    case A::None: break;
  }
  return z;
}

// The composition linear_chain replaces, layer by layer.
Tensor unfused(Tensor h, const std::vector<Tensor>& w, const std::vector<Tensor>& b, const std::vector<A>& acts) {
  for (size_t i = 0; i < w.size(); ++i) h = activate(hg::linear(h, w[i], b[i]), acts[i]);
  return h;
}

// Parameters for `c` drawn in bfloat16 (exact in every dtype), as float64 CPU tensors.
struct Params {
  std::vector<Tensor> w, b;
  std::vector<A> acts;
};
Params draw(const Chain& c) {
  Params p;
  int64_t in = c.in;
  for (const Layer& l : c.layers) {
    const double bound = 1.5 / std::sqrt(static_cast<double>(in));
    p.w.push_back(uniform({l.out, in}, DType::BFloat16, -bound, bound).to(DType::Float64));
    p.b.push_back(l.bias ? uniform({l.out}, DType::BFloat16, -0.5, 0.5).to(DType::Float64) : Tensor());
    p.acts.push_back(l.act);
    in = l.out;
  }
  return p;
}

std::vector<Tensor> cast_leaves(const std::vector<Tensor>& ts, DType dt, bool requires_grad = true) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.to(dt).requires_grad_(requires_grad) : Tensor());
  return out;
}
}  // namespace

TEST_CASE("linear_chain equals linear and the activations layer by layer, with gradients, in every dtype",
          "[ops][linear][chain][backward]") {
  for (size_t ci = 0; ci < kChains.size(); ++ci)
    for (DType dt : kFloatDTypes) {
      INFO("chain " << ci << " " << dname(dt));
      const Chain& c = kChains[ci];
      const Params p = draw(c);
      // chain 0 takes a 3-d input: [2, 3, in]
      const Shape x_shape = ci == 0 ? Shape{2, 3, c.in} : Shape{6, c.in};
      Shape y_shape = x_shape;
      y_shape.back() = c.layers.back().out;
      const Tensor x0 = uniform(x_shape, DType::BFloat16, -1, 1), g0 = uniform(y_shape, DType::BFloat16, -1, 1);

      const Tensor xf = x0.to(dt).requires_grad_(), xu = x0.to(dt).requires_grad_();
      const auto wf = cast_leaves(p.w, dt), bf = cast_leaves(p.b, dt), wu = cast_leaves(p.w, dt),
                 bu = cast_leaves(p.b, dt);
      const Tensor yf = hg::linear_chain(xf, wf, bf, p.acts), yu = unfused(xu, wu, bu, p.acts);
      CHECK(yf.dtype() == dt);
      CHECK(yf.shape() == y_shape);
      CHECK(yf.grad_fn()->name == "linear_chain");
      HG_CHECK_CLOSE(yf, values(yu));
      {
        hg::no_grad off;  // nothing kept for backward: the same numbers
        HG_CHECK_CLOSE(hg::linear_chain(xf, wf, bf, p.acts), values(yu));
      }
      yf.backward(g0.to(dt));
      yu.backward(g0.to(dt));
      HG_CHECK_CLOSE_TOL(xf.grad(), values(xu.grad()), 2 * tol(dt));
      for (size_t i = 0; i < wf.size(); ++i) {
        INFO("layer " << i);
        CHECK(wf[i].grad().dtype() == dt);
        HG_CHECK_CLOSE_TOL(wf[i].grad(), values(wu[i].grad()), 2 * tol(dt));
        if (bf[i].defined()) HG_CHECK_CLOSE_TOL(bf[i].grad(), values(bu[i].grad()), 2 * tol(dt));
      }
    }
}

TEST_CASE("linear_chain: gradients by finite differences for each activation, with and without biases",
          "[ops][linear][chain][backward]") {
  for (A act : {A::ReLU, A::GELU, A::GELUTanh})
    for (A last : {act, A::None}) {
      INFO("activation " << static_cast<int>(act) << " last " << static_cast<int>(last));
      const Tensor x = leaf_away({4, 5}), w0 = leaf({6, 5}, -1, 1), b0 = leaf({6}), w1 = leaf({7, 6}, -1, 1);
      const Tensor w2 = leaf({3, 7}, -1, 1), b2 = leaf({3});
      // layer 1 has no bias
      HG_GRADCHECK(
          [act, last](const std::vector<Tensor>& in) {
            return hg::linear_chain(in[0], {in[1], in[3], in[4]}, {in[2], Tensor(), in[5]}, {act, act, last});
          },
          {x, w0, b0, w1, w2, b2});
    }
  // every activation in one chain, a 3-d input, no bias on the first layer
  const Tensor x = leaf_away({2, 2, 4}), w0 = leaf({5, 4}, -1, 1), w1 = leaf({6, 5}, -1, 1), b1 = leaf({6});
  const Tensor w2 = leaf({5, 6}, -1, 1), b2 = leaf({5}), w3 = leaf({2, 5}, -1, 1);
  HG_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return hg::linear_chain(in[0], {in[1], in[2], in[4], in[6]}, {Tensor(), in[3], in[5], Tensor()},
                                {A::ReLU, A::GELUTanh, A::GELU, A::ReLU});
      },
      {x, w0, w1, b1, w2, b2, w3});
}

// Saved::needs_grad: gradients nobody asked for are not computed (the first
// layer's dx), and frozen layers in the middle still pass the gradient down.
TEST_CASE("linear_chain gives exactly the gradients that are wanted", "[ops][linear][chain][backward]") {
  const Params p = draw(kChains[0]);
  const Tensor x = uniform({5, 12}, DType::Float64, -1, 1);
  struct Wanted {
    bool x;
    std::vector<bool> w, b;
  };
  for (const Wanted& want : {Wanted{false, {true, true, true, true}, {true, false, true, true}},
                             Wanted{false, {false, false, true, false}, {false, false, false, true}},
                             Wanted{false, {true, false, false, false}, {false, false, false, false}},
                             Wanted{true, {false, false, false, false}, {false, false, false, false}}}) {
    std::vector<Tensor> w, b, wu, bu;
    for (size_t i = 0; i < p.w.size(); ++i) {
      w.push_back(p.w[i].clone().requires_grad_(want.w[i]));
      wu.push_back(p.w[i].clone().requires_grad_(want.w[i]));
      b.push_back(p.b[i].defined() ? p.b[i].clone().requires_grad_(want.b[i]) : Tensor());
      bu.push_back(p.b[i].defined() ? p.b[i].clone().requires_grad_(want.b[i]) : Tensor());
    }
    const Tensor xf = x.clone().requires_grad_(want.x), xu = x.clone().requires_grad_(want.x);
    hg::sum(hg::linear_chain(xf, w, b, p.acts)).backward();
    hg::sum(unfused(xu, wu, bu, p.acts)).backward();
    CHECK(xf.grad().defined() == want.x);
    if (want.x) HG_CHECK_CLOSE(xf.grad(), values(xu.grad()));
    for (size_t i = 0; i < w.size(); ++i) {
      INFO("layer " << i);
      CHECK(w[i].grad().defined() == want.w[i]);
      if (want.w[i]) HG_CHECK_CLOSE(w[i].grad(), values(wu[i].grad()));
      if (!b[i].defined()) continue;
      CHECK(b[i].grad().defined() == want.b[i]);
      if (want.b[i]) HG_CHECK_CLOSE(b[i].grad(), values(bu[i].grad()));
    }
  }
}

// The layers below the lowest wanted gradient are not touched: their saved
// inputs may even have changed in place since the forward.
TEST_CASE("linear_chain backward reads nothing below the lowest wanted gradient", "[ops][linear][chain][backward]") {
  const Params p = draw(kChains[0]);
  for (size_t lowest : {1, 2}) {
    INFO("lowest wanted layer " << lowest);
    std::vector<Tensor> w, b;
    for (size_t i = 0; i < p.w.size(); ++i) {
      w.push_back(p.w[i].clone().requires_grad_(i >= lowest));
      b.push_back(p.b[i].defined() ? p.b[i].clone().requires_grad_(i >= lowest) : Tensor());
    }
    Tensor x = uniform({5, 12}, DType::Float64, -1, 1);
    const Tensor ref = unfused(x, w, b, p.acts), y = hg::linear_chain(x, w, b, p.acts);
    hg::sum(ref).backward();
    const Tensor ref_grad = w.back().grad().clone();
    w.back().set_grad(Tensor());
    // changed after the forward: x, and the weights of the layers below `lowest`
    x.add_(hg::ones_like(x));
    for (size_t i = 0; i < lowest; ++i) w[i].add_(hg::ones_like(w[i]));
    hg::sum(y).backward();
    HG_CHECK_CLOSE(w.back().grad(), values(ref_grad));
  }
  // wanting layer 0's weight gradient reads x: an in-place change is caught
  Tensor x = uniform({5, 12}, DType::Float64, -1, 1);
  const auto w = cast_leaves(p.w, DType::Float64), b = cast_leaves(p.b, DType::Float64);
  const Tensor y = hg::linear_chain(x, w, b, p.acts);
  x.add_(hg::ones_like(x));
  REQUIRE_THROWS_WITH(hg::sum(y).backward(), Contains("linear_chain") && Contains("in-place"));
}

TEST_CASE("linear_chain backward twice needs retain_graph, and then gives the same gradients",
          "[ops][linear][chain][backward]") {
  const Params p = draw(kChains[1]);
  const auto w = cast_leaves(p.w, DType::Float64), b = cast_leaves(p.b, DType::Float64);
  const Tensor x = uniform({3, 10}, DType::Float64);
  const Tensor y = hg::sum(hg::linear_chain(x, w, b, p.acts));
  y.backward(Tensor(), /*retain_graph=*/true);
  const Tensor first = w[0].grad().clone();
  y.backward();
  HG_CHECK_CLOSE(w[0].grad(), values(hg::mul(first, 2.0)));
  REQUIRE_THROWS_WITH(y.backward(), Contains("retain_graph"));
}

TEST_CASE("linear_chain rejects bad layers with an error naming the layer", "[ops][linear][chain][errors]") {
  const Tensor x = hg::randn({4, 6}), w0 = hg::randn({5, 6}), b0 = hg::randn({5}), w1 = hg::randn({3, 5});
  using V = std::vector<Tensor>;
  REQUIRE_THROWS_AS(hg::linear_chain(x, V{}, V{}, {}), hg::Error);
  REQUIRE_THROWS_WITH(hg::linear_chain(x, V{}, V{}, {}), Contains("linear_chain") && Contains("at least one layer"));
  REQUIRE_THROWS_WITH(hg::linear_chain(x, {w0, w1}, {b0}, {A::ReLU, A::None}),
                      Contains("linear_chain") && Contains("2 weights, 1 biases and 2 activations"));
  REQUIRE_THROWS_WITH(hg::linear_chain(x, {w0, w1}, {b0, Tensor()}, {A::ReLU}), Contains("1 activations"));
  // layer 1's weight does not take layer 0's 5 outputs
  REQUIRE_THROWS_WITH(hg::linear_chain(x, {w0, hg::randn({3, 4})}, {b0, Tensor()}, {A::ReLU, A::None}),
                      Contains("linear_chain: layer 1") && Contains("[3, 4]") &&
                          Contains("the output of layer 0 has 5") && Contains("[out_features, 5]"));
  REQUIRE_THROWS_WITH(hg::linear_chain(hg::randn({4, 7}), {w0, w1}, {b0, Tensor()}, {A::ReLU, A::None}),
                      Contains("layer 0") && Contains("the input") && Contains("[4, 7]"));
  REQUIRE_THROWS_WITH(hg::linear_chain(x, {w0, w1}, {b0, hg::randn({5})}, {A::ReLU, A::None}),
                      Contains("layer 1: bias") && Contains("3 elements"));
  REQUIRE_THROWS_WITH(hg::linear_chain(x, {w0, hg::randn({3, 5, 1})}, {b0, Tensor()}, {A::ReLU, A::None}),
                      Contains("layer 1: weight must be 2-d"));
  REQUIRE_THROWS_WITH(hg::linear_chain(x, {w0, w1.to(hg::float16)}, {b0, Tensor()}, {A::ReLU, A::None}),
                      Contains("layer 1: weight") && Contains("float16") && Contains("float32") &&
                          Contains("amp::autocast"));
  REQUIRE_THROWS_WITH(hg::linear_chain(x, {w0, w1}, {b0.to(hg::float64), Tensor()}, {A::ReLU, A::None}),
                      Contains("layer 0: bias") && Contains("float64"));
  REQUIRE_THROWS_WITH(hg::linear_chain(hg::ones({4, 6}, hg::int64), {w0, w1}, {b0, Tensor()}, {A::ReLU, A::None}),
                      Contains("linear_chain") && Contains("floating"));
}

TEST_CASE("linear_chain runs in the lower-precision dtype under autocast, as linear", "[ops][linear][chain][amp]") {
  const Tensor x = hg::randn({4, 8});
  const Tensor w0 = hg::randn({6, 8}).requires_grad_(), b0 = hg::randn({6}).requires_grad_();
  const Tensor w1 = hg::randn({3, 6}).requires_grad_();
  std::vector<std::string> lines;
  hg::amp::set_trace_sink([&](const std::string& l) { lines.push_back(l); });
  hg::Tensor y;
  {
    hg::amp::trace trace;
    hg::amp::autocast region(hg::DeviceType::CPU);
    y = hg::linear_chain(x, {w0, w1}, {b0, Tensor()}, {A::GELUTanh, A::ReLU});
  }
  hg::amp::set_trace_sink(nullptr);
  CHECK(y.dtype() == hg::bfloat16);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Contains("linear_chain") && Contains("lower_precision"));
  hg::sum(y.to(hg::float32)).backward();
  CHECK(w0.grad().dtype() == hg::float32);
  CHECK(b0.grad().dtype() == hg::float32);
  CHECK(w1.grad().dtype() == hg::float32);
}
