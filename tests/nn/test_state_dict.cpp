// state_dict / load_state_dict: round trips, dtype conversion, and the errors.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;

namespace {

struct MLP : hg::nn::Module {
  hg::nn::Linear linear1, linear2;
  explicit MLP(int64_t hidden = 100) : linear1(10, hidden), linear2(hidden, 10) {
    register_module("linear1", linear1);
    register_module("linear2", linear2);
  }
  hg::Tensor forward(const hg::Tensor& x) { return linear2(hg::relu(linear1(x))); }
};

// Any tensor's values as float64 in logical order (tests/test_util.h).
std::vector<double> values(const hg::Tensor& t) { return hgtest::values(t.detach().cpu()); }

}  // namespace

TEST_CASE("state_dict holds the parameters by name, sharing their storage", "[nn]") {
  MLP model;
  const auto sd = model.state_dict();
  CHECK(sd.keys() == std::vector<std::string>{"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"});
  const hg::Tensor& w = sd.at("linear1.weight");
  CHECK(w.storage() == model.linear1.weight.storage());
  CHECK_FALSE(w.requires_grad());  // detached, like PyTorch's state_dict()
  CHECK_THROWS_WITH(sd.at("linear3.weight"), Contains("linear3.weight") && Contains("linear1.bias"));
}

TEST_CASE("load_state_dict copies values into the existing parameters", "[nn]") {
  hg::manual_seed(1);
  MLP a;
  hg::manual_seed(2);
  MLP b;
  REQUIRE(values(a.linear1.weight) != values(b.linear1.weight));
  const hg::Tensor b_weight = b.linear1.weight;

  const auto result = b.load_state_dict(a.state_dict());
  CHECK(result.missing_keys.empty());
  CHECK(result.unexpected_keys.empty());
  for (const auto& [key, t] : a.state_dict()) CHECK(values(b.state_dict().at(key)) == values(t));
  CHECK(b.linear1.weight.is_same(b_weight));  // same tensors, new values
  CHECK(b.linear1.weight.requires_grad());
  CHECK(b.linear1.weight.is_leaf());
  // A copy, not an alias: changing a does not change b.
  {
    hg::no_grad guard;
    a.linear1.weight.fill_(7.0);
  }
  CHECK(values(b.linear1.weight)[0] != 7.0);
}

TEST_CASE("load_state_dict of a model's own state dict changes nothing", "[nn]") {
  MLP a;
  const auto before = values(a.linear1.weight);
  a.load_state_dict(a.state_dict());
  CHECK(values(a.linear1.weight) == before);
}

TEST_CASE("load_state_dict converts dtypes", "[nn]") {
  MLP a;
  MLP b;
  b.to(hg::float64);
  b.load_state_dict(a.state_dict());
  CHECK(b.linear2.bias.dtype() == hg::float64);
  CHECK(values(b.linear2.bias) == values(a.linear2.bias));  // float32 -> float64 is exact
}

TEST_CASE("load_state_dict names a missing key", "[nn]") {
  MLP a, b;
  hg::nn::StateDict sd = a.state_dict();
  sd.erase("linear2.bias");
  const auto before = values(b.linear1.weight);
  CHECK_THROWS_WITH(b.load_state_dict(sd), Contains("missing key \"linear2.bias\"") && Contains("strict=false") &&
                                               Contains("MLP"));
  CHECK(values(b.linear1.weight) == before);  // nothing was loaded

  const auto result = b.load_state_dict(sd, /*strict=*/false);
  CHECK(result.missing_keys == std::vector<std::string>{"linear2.bias"});
  CHECK(values(b.linear1.weight) == values(a.linear1.weight));
}

TEST_CASE("load_state_dict names an unexpected key", "[nn]") {
  MLP a, b;
  hg::nn::StateDict sd = a.state_dict();
  sd.insert("linear3.weight", hg::zeros({2, 2}));
  CHECK_THROWS_WITH(b.load_state_dict(sd), Contains("unexpected key \"linear3.weight\""));
  CHECK(b.load_state_dict(sd, false).unexpected_keys == std::vector<std::string>{"linear3.weight"});
}

TEST_CASE("load_state_dict names a mis-shaped tensor and both shapes, even when not strict", "[nn]") {
  MLP small(50), big(100);
  for (bool strict : {true, false}) {
    CHECK_THROWS_WITH(big.load_state_dict(small.state_dict(), strict),
                      Contains("size mismatch for \"linear1.weight\": the state dict has [50, 10], the model has "
                               "[100, 10]") &&
                          Contains("same sizes"));
  }
}

TEST_CASE("StateDict keeps insertion order and replaces in place", "[nn]") {
  hg::nn::StateDict sd;
  sd.insert("b", hg::zeros({1}));
  sd.insert("a", hg::zeros({2}));
  sd.insert("b", hg::zeros({3}));
  CHECK(sd.keys() == std::vector<std::string>{"b", "a"});
  CHECK(sd.at("b").shape() == hg::Shape{3});
  CHECK(sd.erase("b"));
  CHECK_FALSE(sd.contains("b"));
  CHECK(sd.at("a").shape() == hg::Shape{2});
  CHECK(sd.size() == 1);
}
