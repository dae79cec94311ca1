// Sequential runs Linear + ReLU/GELU as one fused op, and a run of such
// layers as one linear_chain: the trace shows which op ran, the values and
// gradients equal the unfused layers'.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <functional>
#include <tuple>

namespace hg = halfgrad;

namespace {
// The ops a forward of `model` dispatches under CPU autocast, from the trace.
std::vector<std::string> ops_run(const hg::nn::Sequential& model, const hg::Tensor& x) {
  std::vector<std::string> ops;
  hg::amp::set_trace_sink([&](const std::string& l) { ops.push_back(l.substr(11, l.find(' ', 11) - 11)); });
  {
    hg::amp::trace trace;
    hg::amp::autocast region(hg::DeviceType::CPU, std::nullopt, /*enabled=*/true);
    model.forward(x);
  }
  hg::amp::set_trace_sink(nullptr);
  return ops;
}

// The fused forward equals the layers one by one, and so does the first layer's weight gradient.
void check_same_as_unfused(hg::nn::Module& model, const hg::Tensor& fused, const hg::Tensor& unfused,
                           hg::nn::Linear& first) {
  CHECK(hg::max(hg::abs(hg::sub(fused, unfused))).item<float>() < 1e-6f);
  hg::sum(fused).backward();
  const hg::Tensor g_fused = first.weight.grad().clone();
  model.zero_grad();
  hg::sum(unfused).backward();
  CHECK(hg::max(hg::abs(hg::sub(g_fused, first.weight.grad()))).item<float>() < 1e-5f);
}
}  // namespace

TEST_CASE("Sequential runs Linear layers followed by ReLU or GELU as one linear_chain", "[nn][fusion]") {
  hg::manual_seed(4);
  hg::nn::Sequential model(std::make_shared<hg::nn::Linear>(6, 8), std::make_shared<hg::nn::ReLU>(),
                           std::make_shared<hg::nn::Linear>(8, 5), std::make_shared<hg::nn::GELU>(),
                           std::make_shared<hg::nn::Linear>(5, 2));
  auto x = hg::randn({3, 6});
  CHECK(ops_run(model, x) == std::vector<std::string>{"linear_chain"});

  // the same numbers as the layers one by one, in float32
  auto& l0 = model.at<hg::nn::Linear>(0);
  auto& l2 = model.at<hg::nn::Linear>(2);
  auto& l4 = model.at<hg::nn::Linear>(4);
  check_same_as_unfused(model, model.forward(x), l4(hg::gelu(l2(hg::relu(l0(x))))), l0);
  // the state dict is unchanged by fusion
  CHECK(model.state_dict().contains("0.weight"));
  CHECK(model.state_dict().contains("4.bias"));
}

TEST_CASE("Linear with an activation option (ReLU, GELUTanh)", "[nn][fusion]") {
  hg::manual_seed(5);
  const std::vector<std::tuple<hg::Activation, const char*, std::function<hg::Tensor(const hg::Tensor&)>>> cases = {
      {hg::Activation::ReLU, "activation=ReLU", [](const hg::Tensor& t) { return hg::relu(t); }},
      {hg::Activation::GELUTanh, "activation=GELUTanh", [](const hg::Tensor& t) { return hg::gelu(t, "tanh"); }}};
  for (const auto& [act, repr, unfused] : cases) {
    INFO(repr);
    hg::nn::Linear plain(4, 3), fused(4, 3, true, act);
    {
      hg::no_grad g;
      fused.weight.copy_(plain.weight);
      fused.bias.copy_(plain.bias);
    }
    auto x = hg::randn({5, 4});
    CHECK(hg::max(hg::abs(hg::sub(fused(x), unfused(plain(x))))).item<float>() < 1e-6f);
    CHECK_THAT(fused.repr(), Catch::Matchers::Contains(repr));
  }
}

TEST_CASE("Sequential chains Linear + GELU(\"tanh\") and Linear + GELU() layers, the last one activated too",
          "[nn][fusion]") {
  hg::manual_seed(6);
  hg::nn::Sequential model(std::make_shared<hg::nn::Linear>(6, 8), std::make_shared<hg::nn::GELU>("tanh"),
                           std::make_shared<hg::nn::Linear>(8, 5), std::make_shared<hg::nn::GELU>(),
                           std::make_shared<hg::nn::Linear>(5, 2), std::make_shared<hg::nn::GELU>("tanh"));
  auto x = hg::randn({3, 6});
  CHECK(ops_run(model, x) == std::vector<std::string>{"linear_chain"});

  // the numbers and gradients of the layers one by one, in float32
  auto& l0 = model.at<hg::nn::Linear>(0);
  auto& l2 = model.at<hg::nn::Linear>(2);
  auto& l4 = model.at<hg::nn::Linear>(4);
  auto fused = model.forward(x);
  // the tanh form really ran (the exact form differs by ~1e-4 here)
  auto exact = hg::gelu(l4(hg::gelu(l2(hg::gelu(l0(x))))));
  CHECK(hg::max(hg::abs(hg::sub(fused, exact))).item<float>() > 1e-5f);
  check_same_as_unfused(model, fused, hg::gelu(l4(hg::gelu(l2(hg::gelu(l0(x), "tanh")))), "tanh"), l0);
  CHECK_THAT(model.repr(), Catch::Matchers::Contains("(1): GELU(approximate='tanh')") &&
                               Catch::Matchers::Contains("(3): GELU(approximate='none')"));
}

TEST_CASE("Sequential keeps a lone Linear + activation as one linear_relu / linear_gelu op", "[nn][fusion]") {
  hg::manual_seed(8);
  hg::nn::Sequential model(std::make_shared<hg::nn::Linear>(6, 8), std::make_shared<hg::nn::ReLU>(),
                           std::make_shared<hg::nn::Tanh>(), std::make_shared<hg::nn::Linear>(8, 5),
                           std::make_shared<hg::nn::GELU>("tanh"), std::make_shared<hg::nn::Sigmoid>(),
                           std::make_shared<hg::nn::Linear>(5, 4), std::make_shared<hg::nn::GELU>(),
                           std::make_shared<hg::nn::Linear>(4, 2));
  const auto x = hg::randn({3, 6});
  // the last two Linear layers form a run: a chain
  CHECK(ops_run(model, x) ==
        std::vector<std::string>{"linear_relu", "tanh", "linear_gelu_tanh", "sigmoid", "linear_chain"});
  auto& l0 = model.at<hg::nn::Linear>(0);
  auto& l3 = model.at<hg::nn::Linear>(3);
  auto& l6 = model.at<hg::nn::Linear>(6);
  auto& l8 = model.at<hg::nn::Linear>(8);
  const auto unfused = l8(hg::gelu(l6(hg::sigmoid(hg::gelu(l3(hg::tanh(hg::relu(l0(x)))), "tanh")))));
  CHECK(hg::max(hg::abs(hg::sub(model.forward(x), unfused))).item<float>() < 1e-6f);
}

TEST_CASE("Sequential ends a chain at a Linear without activation and takes Linear layers built with one",
          "[nn][fusion]") {
  hg::manual_seed(9);
  // 0+1, 2 | 3+4, 5+6, 7: two chains (layer 2 has no activation, so the first ends there)
  hg::nn::Sequential model(std::make_shared<hg::nn::Linear>(6, 8), std::make_shared<hg::nn::ReLU>(),
                           std::make_shared<hg::nn::Linear>(8, 7), std::make_shared<hg::nn::Linear>(7, 5),
                           std::make_shared<hg::nn::GELU>(), std::make_shared<hg::nn::Linear>(5, 4),
                           std::make_shared<hg::nn::ReLU>(), std::make_shared<hg::nn::Linear>(4, 2));
  const auto x = hg::randn({3, 6});
  CHECK(ops_run(model, x) == std::vector<std::string>{"linear_chain", "linear_chain"});
  auto l = [&](size_t i) -> hg::nn::Linear& { return model.at<hg::nn::Linear>(i); };
  const auto unfused = l(7)(hg::relu(l(5)(hg::gelu(l(3)(l(2)(hg::relu(l(0)(x))))))));
  const auto fused = model.forward(x);
  CHECK(hg::max(hg::abs(hg::sub(fused, unfused))).item<float>() < 1e-6f);
  hg::sum(fused).backward();
  const hg::Tensor g_fused = l(0).weight.grad().clone(), gb_fused = l(3).bias.grad().clone();
  model.zero_grad();
  hg::sum(unfused).backward();
  CHECK(hg::max(hg::abs(hg::sub(g_fused, l(0).weight.grad()))).item<float>() < 1e-5f);
  CHECK(hg::max(hg::abs(hg::sub(gb_fused, l(3).bias.grad()))).item<float>() < 1e-5f);

  // a Linear built with an activation is a chain layer like Linear + ReLU
  hg::nn::Sequential built(std::make_shared<hg::nn::Linear>(6, 8, true, hg::Activation::ReLU),
                           std::make_shared<hg::nn::Linear>(8, 3, true, hg::Activation::GELUTanh),
                           std::make_shared<hg::nn::ReLU>());
  CHECK(ops_run(built, x) == std::vector<std::string>{"linear_chain", "relu"});
  auto& b0 = built.at<hg::nn::Linear>(0);
  auto& b1 = built.at<hg::nn::Linear>(1);
  CHECK(hg::max(hg::abs(hg::sub(built.forward(x), hg::relu(b1(b0(x)))))).item<float>() < 1e-6f);
}

namespace {
// A Linear whose own forward scales its output: fusing it would drop the scaling.
struct ScaledLinear : hg::nn::Linear {
  using Linear::Linear;
  hg::Tensor forward(const hg::Tensor& x) const { return hg::mul(Linear::forward(x), 100.0); }
};
// A ReLU subclass that is not a ReLU.
struct LeakyishReLU : hg::nn::ReLU {
  hg::Tensor forward(const hg::Tensor& x) const { return hg::add(hg::relu(x), hg::mul(x, 0.5)); }
};
}  // namespace

TEST_CASE("Sequential never fuses a subclass of Linear, ReLU or GELU: its own forward runs", "[nn][fusion]") {
  hg::manual_seed(3);
  const hg::Tensor x = hg::randn({4, 5});
  SECTION("a Linear subclass followed by ReLU") {
    auto sub = std::make_shared<ScaledLinear>(5, 3);
    hg::nn::Sequential model(sub, std::make_shared<hg::nn::ReLU>());
    const hg::Tensor want = hg::relu(sub->forward(x));
    CHECK(hg::max(hg::abs(hg::sub(model.forward(x), want))).item<float>() == 0.f);
    CHECK(ops_run(model, x) == std::vector<std::string>{"linear", "mul", "relu"});
  }
  SECTION("a ReLU subclass between two Linear layers") {
    auto l1 = std::make_shared<hg::nn::Linear>(5, 6);
    auto act = std::make_shared<LeakyishReLU>();
    auto l2 = std::make_shared<hg::nn::Linear>(6, 2);
    hg::nn::Sequential model(l1, act, l2);
    const hg::Tensor want = l2->forward(act->forward(l1->forward(x)));
    CHECK(hg::max(hg::abs(hg::sub(model.forward(x), want))).item<float>() < 1e-6f);
  }
}
