// Sequential runs Linear + ReLU/GELU as one fused op: the trace shows the
// fused op, the values and gradients equal the unfused layers'.
#include <catch2/catch.hpp>

#include <halfgrad.h>

namespace hg = halfgrad;

TEST_CASE("Sequential fuses Linear followed by ReLU or GELU into one op", "[nn][fusion]") {
  hg::manual_seed(4);
  hg::nn::Sequential model(std::make_shared<hg::nn::Linear>(6, 8), std::make_shared<hg::nn::ReLU>(),
                           std::make_shared<hg::nn::Linear>(8, 5), std::make_shared<hg::nn::GELU>(),
                           std::make_shared<hg::nn::Linear>(5, 2));
  auto x = hg::randn({3, 6});
  std::vector<std::string> ops;
  hg::amp::set_trace_sink([&](const std::string& l) { ops.push_back(l.substr(11, l.find(' ', 11) - 11)); });
  hg::Tensor y;
  {
    hg::amp::trace trace;
    hg::amp::autocast region(hg::DeviceType::CPU, std::nullopt, /*enabled=*/true);
    y = model.forward(x);
  }
  hg::amp::set_trace_sink(nullptr);
  CHECK(ops == std::vector<std::string>{"linear_relu", "linear_gelu", "linear"});

  // the same numbers as the layers one by one, in float32
  auto& l0 = model.at<hg::nn::Linear>(0);
  auto& l2 = model.at<hg::nn::Linear>(2);
  auto& l4 = model.at<hg::nn::Linear>(4);
  auto fused = model.forward(x);
  auto unfused = l4(hg::gelu(l2(hg::relu(l0(x)))));
  CHECK(hg::max(hg::abs(hg::sub(fused, unfused))).item<float>() < 1e-6f);
  hg::sum(fused).backward();
  const hg::Tensor g_fused = l0.weight.grad().clone();
  model.zero_grad();
  hg::sum(unfused).backward();
  CHECK(hg::max(hg::abs(hg::sub(g_fused, l0.weight.grad()))).item<float>() < 1e-5f);
  // the state dict is unchanged by fusion
  CHECK(model.state_dict().contains("0.weight"));
  CHECK(model.state_dict().contains("4.bias"));
}

TEST_CASE("Linear with an activation option", "[nn][fusion]") {
  hg::manual_seed(5);
  hg::nn::Linear plain(4, 3), fused(4, 3, true, hg::Activation::ReLU);
  {
    hg::no_grad g;
    fused.weight.copy_(plain.weight);
    fused.bias.copy_(plain.bias);
  }
  auto x = hg::randn({5, 4});
  CHECK(hg::max(hg::abs(hg::sub(fused(x), hg::relu(plain(x))))).item<float>() == 0.0f);
  CHECK_THAT(fused.repr(), Catch::Matchers::Contains("activation=ReLU"));
}

TEST_CASE("Sequential fuses Linear + GELU(\"tanh\") as linear_gelu_tanh and Linear + GELU() as linear_gelu",
          "[nn][fusion]") {
  hg::manual_seed(6);
  hg::nn::Sequential model(std::make_shared<hg::nn::Linear>(6, 8), std::make_shared<hg::nn::GELU>("tanh"),
                           std::make_shared<hg::nn::Linear>(8, 5), std::make_shared<hg::nn::GELU>(),
                           std::make_shared<hg::nn::Linear>(5, 2), std::make_shared<hg::nn::GELU>("tanh"));
  auto x = hg::randn({3, 6});
  std::vector<std::string> ops;
  hg::amp::set_trace_sink([&](const std::string& l) { ops.push_back(l.substr(11, l.find(' ', 11) - 11)); });
  {
    hg::amp::trace trace;
    hg::amp::autocast region(hg::DeviceType::CPU, std::nullopt, /*enabled=*/true);
    model.forward(x);
  }
  hg::amp::set_trace_sink(nullptr);
  CHECK(ops == std::vector<std::string>{"linear_gelu_tanh", "linear_gelu", "linear_gelu_tanh"});

  // the numbers and gradients of the layers one by one, in float32
  auto& l0 = model.at<hg::nn::Linear>(0);
  auto& l2 = model.at<hg::nn::Linear>(2);
  auto& l4 = model.at<hg::nn::Linear>(4);
  auto fused = model.forward(x);
  auto unfused = hg::gelu(l4(hg::gelu(l2(hg::gelu(l0(x), "tanh")))), "tanh");
  CHECK(hg::max(hg::abs(hg::sub(fused, unfused))).item<float>() < 1e-6f);
  // the tanh form really ran (the exact form differs by ~1e-4 here)
  auto exact = hg::gelu(l4(hg::gelu(l2(hg::gelu(l0(x))))));
  CHECK(hg::max(hg::abs(hg::sub(fused, exact))).item<float>() > 1e-5f);
  hg::sum(fused).backward();
  const hg::Tensor g_fused = l0.weight.grad().clone();
  model.zero_grad();
  hg::sum(unfused).backward();
  CHECK(hg::max(hg::abs(hg::sub(g_fused, l0.weight.grad()))).item<float>() < 1e-5f);
  CHECK_THAT(model.repr(), Catch::Matchers::Contains("(1): GELU(approximate='tanh')") &&
                               Catch::Matchers::Contains("(3): GELU(approximate='none')"));
}

TEST_CASE("Linear with the GELUTanh activation option", "[nn][fusion]") {
  hg::manual_seed(7);
  hg::nn::Linear plain(4, 3), fused(4, 3, true, hg::Activation::GELUTanh);
  {
    hg::no_grad g;
    fused.weight.copy_(plain.weight);
    fused.bias.copy_(plain.bias);
  }
  auto x = hg::randn({5, 4});
  CHECK(hg::max(hg::abs(hg::sub(fused(x), hg::gelu(plain(x), "tanh")))).item<float>() < 1e-6f);
  CHECK_THAT(fused.repr(), Catch::Matchers::Contains("activation=GELUTanh"));
}
