// The Optimizer base: zero_grad, param groups, parameters without grads, checks.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;

namespace {
// Any tensor's values as float64 in logical order (tests/test_util.h).
std::vector<double> values(const hg::Tensor& t) { return hgtest::values(t.detach().cpu()); }
}  // namespace

TEST_CASE("Optimizer::zero_grad drops gradients or zeroes them in place", "[optim]") {
  hg::Tensor a = hg::ones({3}).requires_grad_(), b = hg::ones({2}).requires_grad_();
  hg::optim::SGD opt({a, b}, {.lr = 0.1});
  (a.sum() * 2.0 + b.sum()).backward();
  const hg::Tensor ga = a.grad();
  REQUIRE(values(ga) == std::vector<double>{2, 2, 2});

  opt.zero_grad(/*set_to_none=*/false);
  CHECK(a.grad().is_same(ga));
  CHECK(values(a.grad()) == std::vector<double>{0, 0, 0});
  CHECK(values(b.grad()) == std::vector<double>{0, 0});
  opt.step();  // a zero gradient moves nothing
  CHECK(values(a) == std::vector<double>{1, 1, 1});

  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  opt.step();  // no gradients: nothing happens, no state is made
  CHECK(values(a) == std::vector<double>{1, 1, 1});
}

TEST_CASE("Parameters without a gradient are skipped and get no state", "[optim]") {
  hg::Tensor a = hg::ones({2}).requires_grad_(), b = hg::ones({2}).requires_grad_();
  hg::optim::Adam opt({a, b}, {.lr = 0.1});
  a.sum().backward();
  opt.step();
  CHECK(values(a)[0] < 1.0);
  CHECK(values(b) == std::vector<double>{1, 1});
  CHECK(opt.state(a)->step == 1);
  CHECK(opt.state(b) == nullptr);
}

TEST_CASE("Param groups carry their own learning rates", "[optim]") {
  hg::Tensor a = hg::zeros({2}).requires_grad_(), b = hg::zeros({2}).requires_grad_();
  hg::optim::SGD opt({a}, {.lr = 0.1});
  auto options = opt.defaults();
  options.lr = 1.0;
  opt.add_param_group({b}, options);
  REQUIRE(opt.num_param_groups() == 2);
  CHECK(opt.lr(0) == 0.1);
  CHECK(opt.lr(1) == 1.0);
  CHECK(opt.parameters().size() == 2);

  a.set_grad(hg::ones({2}));
  b.set_grad(hg::ones({2}));
  opt.step();
  CHECK(values(a)[1] == Approx(-0.1));
  CHECK(values(b)[0] == Approx(-1.0));

  opt.set_lr(0, 0.5);  // what an LR scheduler does
  CHECK(opt.param_groups()[0].options.lr == 0.5);
  opt.step();
  CHECK(values(a)[0] == Approx(-0.6));
  CHECK(values(b)[0] == Approx(-2.0));
  CHECK_THROWS_WITH(opt.lr(2), Contains("no parameter group 2"));
}

TEST_CASE("Param groups with defaults, and parameters in one group only", "[optim]") {
  hg::Tensor a = hg::zeros({2}).requires_grad_(), b = hg::zeros({2}).requires_grad_();
  hg::optim::AdamW opt({a}, {.lr = 0.01, .weight_decay = 0.0});
  opt.add_param_group({b});
  CHECK(opt.param_groups()[1].options.lr == 0.01);
  CHECK_THROWS_WITH(opt.add_param_group({a}), Contains("already in another parameter group"));
  hg::Tensor c = hg::zeros({1}).requires_grad_();
  CHECK_THROWS_WITH(opt.add_param_group({c, c}), Contains("appears twice"));
}

TEST_CASE("Optimizers take leaf floating tensors only", "[optim]") {
  hg::Tensor a = hg::ones({2}).requires_grad_();
  const hg::Tensor non_leaf = a * 2.0;
  CHECK_THROWS_WITH(hg::optim::SGD({non_leaf}, {.lr = 0.1}), Contains("not a leaf"));
  CHECK_THROWS_WITH(hg::optim::SGD({hg::zeros({2}, hg::int64)}, {.lr = 0.1}), Contains("only floating"));
  CHECK_THROWS_WITH(hg::optim::SGD({hg::Tensor()}, {.lr = 0.1}), Contains("undefined"));
}

TEST_CASE("Updates run under no_grad and keep parameters leaves", "[optim]") {
  hg::nn::Linear fc(4, 3);
  hg::optim::SGD opt(fc.parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    fc(hg::randn({5, 4})).sum().backward();
    opt.step();
  }
  CHECK(fc.weight.is_leaf());
  CHECK(fc.weight.requires_grad());
  CHECK(hg::autograd::grad_enabled());
}

TEST_CASE("A scaler hand-shake with tensors of the wrong kind is an Error that changes nothing", "[optim][amp]") {
  // The fused CPU kernels read inv_scale on the host and the CUDA ones on the
  // device: a flag or scale anywhere else (or of another dtype or size) must
  // be refused before any update, not read as whatever bytes are there.
  hg::Tensor a = hg::ones({4}).requires_grad_();
  hg::optim::SGD opt({a}, {.lr = 0.5, .momentum = 0.9});
  a.set_grad(hg::full({4}, 2.0));
  const auto ok = hg::zeros({}), one = hg::ones({});
  using Step = hg::amp::ScalerStep;
  for (const auto& [what, step] : std::vector<std::pair<std::string, Step>>{
           {"inv_scale float64", Step{ok, hg::ones({}, hg::float64)}},
           {"inv_scale of 2 elements", Step{ok, hg::ones({2})}},
           {"found_inf int64", Step{hg::zeros({}, hg::int64), one}},
       }) {
    INFO(what);
    CHECK_THROWS_WITH(opt.step(step), Contains("SGD.step") && Contains("one-element float32") &&
                                           Contains("float32[4] cpu"));
    CHECK(values(a) == std::vector<double>{1, 1, 1, 1});
    CHECK(opt.state(a) == nullptr);
  }
  opt.step(Step{ok, hg::full({}, 0.5)});  // the same step, well formed: unscale by 1/2, then update
  CHECK(values(a) == std::vector<double>{0.5, 0.5, 0.5, 0.5});
}
