// MobileNetV3's activation layers: ReLU6, Hardswish, Hardsigmoid (inplace
// accepted and ignored) and PReLU (its "weight" parameter); reprs as PyTorch
// prints them; nn::functional's spellings.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hgtest::values;

TEST_CASE("ReLU6, Hardswish and Hardsigmoid run their functions and print as PyTorch", "[nn][activation][mobilenet]") {
  const Tensor x = hgtest::uniform({3, 8}, DType::Float32, -8, 8);
  CHECK(values(hg::nn::ReLU6()(x)) == values(hg::relu6(x)));
  CHECK(values(hg::nn::Hardswish()(x)) == values(hg::hardswish(x)));
  CHECK(values(hg::nn::Hardsigmoid()(x)) == values(hg::hardsigmoid(x)));
  // torch 1.13: ReLU6() ReLU6(inplace=True) Hardswish() Hardswish() Hardsigmoid() Hardsigmoid()
  CHECK(hg::nn::ReLU6().repr() == "ReLU6()");
  CHECK(hg::nn::ReLU6(true).repr() == "ReLU6(inplace=True)");
  CHECK(hg::nn::Hardswish().repr() == "Hardswish()");
  CHECK(hg::nn::Hardswish(true).repr() == "Hardswish()");
  CHECK(hg::nn::Hardsigmoid(true).repr() == "Hardsigmoid()");
  CHECK(hg::nn::ReLU6().parameters().empty());
}

TEST_CASE("inplace=true is accepted and ignored: the input is not changed", "[nn][activation][mobilenet]") {
  const Tensor x = hgtest::uniform({4, 5}, DType::Float32, -8, 8);
  const auto before = values(x);
  const Tensor a = hg::nn::ReLU6(true)(x), b = hg::nn::Hardswish(true)(x), c = hg::nn::Hardsigmoid(true)(x);
  CHECK(values(x) == before);
  CHECK(!hgtest::same_storage(a, x));
  CHECK(!hgtest::same_storage(b, x));
  CHECK(!hgtest::same_storage(c, x));
  CHECK(values(b) == values(hg::hardswish(x)));
}

TEST_CASE("PReLU has one float32 parameter \"weight\" filled with init", "[nn][activation][mobilenet][prelu]") {
  hg::nn::PReLU one;
  REQUIRE(one.named_parameters().size() == 1);
  CHECK(one.named_parameters()[0].first == "weight");
  CHECK(one.weight.shape() == Shape{1});
  CHECK(one.weight.dtype() == DType::Float32);
  CHECK(one.weight.requires_grad());
  CHECK(values(one.weight) == std::vector<double>{0.25});
  CHECK(one.repr() == "PReLU(num_parameters=1)");

  hg::nn::PReLU per_channel(3, 0.1);
  CHECK(per_channel.weight.shape() == Shape{3});
  CHECK(values(per_channel.weight) == hgtest::round_all({0.1, 0.1, 0.1}, DType::Float32));
  CHECK(per_channel.repr() == "PReLU(num_parameters=3)");
  CHECK(per_channel.state_dict().keys() == std::vector<std::string>{"weight"});
  CHECK(per_channel.num_parameters == 3);
  CHECK(per_channel.parameter_count() == 3);

  // forward = prelu(x, weight); backward reaches the weight
  const Tensor x = hgtest::away_from_zero({2, 3, 4}, DType::Float32);
  const Tensor y = per_channel(x);
  CHECK(values(y) == values(hg::prelu(x, per_channel.weight.detach())));
  hg::sum(y).backward();
  REQUIRE(per_channel.weight.grad().defined());
  CHECK(per_channel.weight.grad().shape() == Shape{3});

  hgtest::expect_errors({
      {"no parameters", [] { hg::nn::PReLU(0); }, {"PReLU", "num_parameters", "0"}},
      {"weights do not match the channels", [] { hg::nn::PReLU(2)(hgtest::uniform({2, 3}, DType::Float32)); },
       {"prelu", "2 parameters", "3 channels"}},
  });
}

TEST_CASE("the activation layers sit in a Sequential, with PyTorch's keys", "[nn][activation][mobilenet]") {
  hg::manual_seed(0);
  hg::nn::Sequential seq(hg::nn::Linear(4, 6), hg::nn::Hardswish(), hg::nn::PReLU(), hg::nn::Linear(6, 3),
                         hg::nn::ReLU6(true), hg::nn::Hardsigmoid());
  CHECK(seq.state_dict().keys() ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "3.weight", "3.bias"});
  const Tensor x = hgtest::uniform({5, 4}, DType::Float32);
  auto& l0 = seq.at<hg::nn::Linear>(0);
  auto& l3 = seq.at<hg::nn::Linear>(3);
  const Tensor w = seq.at<hg::nn::PReLU>(2).weight;
  const Tensor ref = hg::hardsigmoid(hg::relu6(l3(hg::prelu(hg::hardswish(l0(x)), w))));
  CHECK(values(seq(x)) == values(ref));
  CHECK(seq.repr() ==
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=6, bias=True)\n"
        "  (1): Hardswish()\n"
        "  (2): PReLU(num_parameters=1)\n"
        "  (3): Linear(in_features=6, out_features=3, bias=True)\n"
        "  (4): ReLU6(inplace=True)\n"
        "  (5): Hardsigmoid()\n"
        ")");
}

TEST_CASE("nn::functional spells the activations as PyTorch's F", "[nn][activation][mobilenet]") {
  namespace F = hg::nn::functional;
  const Tensor x = hgtest::uniform({6}, DType::Float32, -8, 8);
  const Tensor w = hg::full({1}, 0.2);
  CHECK(values(F::hardswish(x)) == values(hg::hardswish(x)));
  CHECK(values(F::hardsigmoid(x)) == values(hg::hardsigmoid(x)));
  CHECK(values(F::relu6(x)) == values(hg::relu6(x)));
  CHECK(values(F::prelu(x, w)) == values(hg::prelu(x, w)));
}
