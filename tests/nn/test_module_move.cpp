// Sequential(Linear(5, 16), ReLU(), Linear(16, 3)) takes temporaries, as in
// PyTorch: leaf layers move with their registered tensors; a module with
// member sub-modules refuses to move (its children would dangle).
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;

TEST_CASE("Sequential takes layers by value and owns moved copies with the same parameters", "[nn][sequential]") {
  hg::manual_seed(3);
  hg::nn::Linear probe(5, 16);
  const auto w0 = probe.weight.to_vector<float>();
  // Braces: C++ evaluates a braced list left to right (PyTorch's draw order);
  // in parentheses the order of the arguments is unspecified (GCC: right to left).
  hg::manual_seed(3);
  hg::nn::Sequential model{hg::nn::Linear(5, 16), hg::nn::ReLU(), hg::nn::Linear(16, 3)};
  REQUIRE(model.size() == 3);
  // The moved layer holds the very values drawn at construction (same draw order as `probe`).
  CHECK(model.at<hg::nn::Linear>(0).weight.to_vector<float>() == w0);
  const auto named = model.named_parameters();
  REQUIRE(named.size() == 4);
  CHECK(named[0].first == "0.weight");
  CHECK(named[3].first == "2.bias");
  // The registry and the layer's member are one tensor: an update through one shows in the other.
  CHECK(named[0].second.is_same(model.at<hg::nn::Linear>(0).weight));
  const hg::Tensor x = hg::randn({4, 5});
  const hg::Tensor y = model(x);
  CHECK(y.sizes() == hg::Shape({4, 3}));
  const hg::Tensor ref = model.at<hg::nn::Linear>(2)(hg::relu(model.at<hg::nn::Linear>(0)(x)));
  HG_CHECK_CLOSE_TOL(y, hgtest::values(ref), 1e-6);
  y.sum().backward();
  CHECK(model.at<hg::nn::Linear>(0).weight.grad().defined());
}

TEST_CASE("a moved-from layer is empty; mixing temporaries, shared_ptrs and references works", "[nn][sequential]") {
  hg::nn::Linear a(3, 4);
  hg::nn::Linear b(std::move(a));
  CHECK(b.parameters().size() == 2);
  CHECK(a.parameters().empty());
  auto shared = std::make_shared<hg::nn::Linear>(4, 2);
  hg::nn::ReLU member;
  hg::nn::Sequential model(std::move(b), member, shared);
  CHECK(model.size() == 3);
  CHECK(&model.at<hg::nn::Linear>(2) == shared.get());
  CHECK(&model.at<hg::nn::ReLU>(1) == &member);
  CHECK(model(hg::randn({2, 3})).sizes() == hg::Shape({2, 2}));
}

namespace {
struct WithMember : hg::nn::Module {
  hg::nn::Linear fc{2, 2};
  WithMember() { register_module("fc", fc); }
};
}  // namespace

TEST_CASE("moving a module with a member sub-module is an Error that leaves it intact", "[nn][sequential]") {
  WithMember m;
  CHECK_THROWS_WITH(WithMember(std::move(m)), Catch::Contains("cannot move a module whose sub-module 'fc' is a member"));
  CHECK(m.named_parameters().size() == 2);
  // A Sequential owns its children by shared_ptr: it moves.
  hg::nn::Sequential s(hg::nn::Linear(2, 2));
  hg::nn::Sequential t(std::move(s));
  CHECK(t.parameters().size() == 2);
}
