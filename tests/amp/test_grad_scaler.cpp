// The loss scaler as behaviour: underflow and its cure, skipped steps that
// change nothing, the scale's trajectory, state dicts, and misuse errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
using hg::amp::GradScaler;

namespace {

// Bitwise equality: a skipped step must leave every byte as it was.
using hgtest::same_bits;

// loss = sum(w * x) * factor, with a float32 leaf w: grad = x * factor.
hg::Tensor toy_loss(const hg::Tensor& w, const hg::Tensor& x, double factor) {
  return hg::mul(hg::sum(hg::mul(w, x)), factor);
}

const hg::optim::AdamState* adam_state(hg::optim::Optimizer& opt, const hg::Tensor& w, int which) {
  return which == 1 ? static_cast<hg::optim::Adam&>(opt).state(w) : static_cast<hg::optim::AdamW&>(opt).state(w);
}

}  // namespace

TEST_CASE("float16 underflow: a 1e-8 gradient vanishes without scaling and survives with it", "[amp][scaler]") {
  // A float16 activation feeds a float32 loss (as under autocast): its
  // gradient arrives in float32 and is rounded to float16 by the cast's backward.
  const double tiny = 1e-8;  // below float16's smallest subnormal (6e-8)
  auto loss_of = [&](const hg::Tensor& act) { return hg::sum(hg::mul(act.to(hg::float32), tiny)); };
  auto act = hg::full({4}, 1.0, hg::float16).requires_grad_();
  loss_of(act).backward();
  CHECK(act.grad().dtype() == hg::float16);
  CHECK(act.grad().to(hg::float32).abs().sum().item<float>() == 0.0f);  // lost

  auto act2 = hg::full({4}, 1.0, hg::float16).requires_grad_();
  GradScaler scaler;
  scaler.scale(loss_of(act2)).backward();  // x 65536
  const float scaled = act2.grad().to(hg::float32).select(0, 0).item<float>();
  CHECK(scaled != 0.0f);
  CHECK(std::abs(scaled / 65536.0 - tiny) / tiny < 1e-2);  // unscaled in float32, it is 1e-8 again
}

TEST_CASE("An inf in a gradient skips the step, halves the scale, and changes no state", "[amp][scaler]") {
  for (int which = 0; which < 3; ++which) {
    hg::manual_seed(7);
    auto w = hg::randn({5}).requires_grad_();
    auto x = hg::randn({5});
    std::unique_ptr<hg::optim::Optimizer> opt;
    if (which == 0) opt = std::make_unique<hg::optim::SGD>(std::vector{w}, hg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    if (which == 1) opt = std::make_unique<hg::optim::Adam>(std::vector{w}, hg::optim::AdamOptions{.lr = 0.1});
    if (which == 2) opt = std::make_unique<hg::optim::AdamW>(std::vector{w}, hg::optim::AdamWOptions{.lr = 0.1});
    GradScaler scaler({.init_scale = 1024.0});

    // one clean step, so momentum / moments exist
    opt->zero_grad();
    scaler.scale(toy_loss(w, x, 1.0)).backward();
    REQUIRE(scaler.step(*opt).applied());
    scaler.update();

    const hg::Tensor w_before = w.clone();
    hg::optim::SGDState sgd_before;
    hg::optim::AdamState adam_before;
    if (which == 0) {
      auto* st = static_cast<hg::optim::SGD&>(*opt).state(w);
      sgd_before.momentum_buffer = st->momentum_buffer.clone();
    } else {
      const hg::optim::AdamState* st = adam_state(*opt, w, which);
      adam_before = {st->step, st->exp_avg.clone(), st->exp_avg_sq.clone(), {}};
    }

    opt->zero_grad();
    scaler.scale(toy_loss(w, hg::full({5}, INFINITY), 1.0)).backward();
    auto result = scaler.step(*opt);
    scaler.update();
    CHECK(result.skipped());
    CHECK(same_bits(w, w_before));
    if (which == 0) {
      CHECK(same_bits(static_cast<hg::optim::SGD&>(*opt).state(w)->momentum_buffer, sgd_before.momentum_buffer));
    } else {
      const hg::optim::AdamState* st = adam_state(*opt, w, which);
      CHECK(st->step == adam_before.step);
      CHECK(same_bits(st->exp_avg, adam_before.exp_avg));
      CHECK(same_bits(st->exp_avg_sq, adam_before.exp_avg_sq));
    }
    CHECK(scaler.get_scale() == 512.0);
    CHECK(scaler.growth_tracker() == 0);
  }
}

TEST_CASE("A NaN gradient is caught like an inf", "[amp][scaler]") {
  auto w = hg::ones({3}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 1.0});
  GradScaler scaler;
  scaler.scale(toy_loss(w, hg::full({3}, NAN), 1.0)).backward();
  CHECK(scaler.step(opt).skipped());
  scaler.update();
  CHECK(w.sum().item<float>() == 3.0f);
  CHECK(scaler.get_scale() == 32768.0);
}

TEST_CASE("The scale doubles after growth_interval clean steps, and stays finite", "[amp][scaler]") {
  auto w = hg::ones({3}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 1e-3});
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  std::vector<double> trajectory;
  for (int i = 0; i < 7; ++i) {
    opt.zero_grad();
    scaler.scale(toy_loss(w, hg::ones({3}), 1.0)).backward();
    scaler.step(opt);
    scaler.update();
    trajectory.push_back(scaler.get_scale());
  }
  CHECK(trajectory == std::vector<double>{8, 8, 16, 16, 16, 32, 32});
  // growth that would overflow float32 is not applied
  GradScaler big({.init_scale = 3e38, .growth_interval = 1});
  opt.zero_grad();
  big.scale(toy_loss(w, hg::ones({3}), 1e-38)).backward();
  big.step(opt);
  big.update();
  CHECK(big.get_scale() == Approx(3e38));
  CHECK(big.growth_tracker() == 0);
}

TEST_CASE("step() unscales: the update uses the true gradient", "[amp][scaler]") {
  auto w1 = hg::ones({4}).requires_grad_(), w2 = hg::ones({4}).requires_grad_();
  auto x = hg::tensor(std::vector<float>{1, 2, 3, 4});
  hg::optim::SGD plain({w1}, {.lr = 0.5}), scaled({w2}, {.lr = 0.5});
  toy_loss(w1, x, 1.0).backward();
  plain.step();
  GradScaler scaler;
  scaler.scale(toy_loss(w2, x, 1.0)).backward();
  scaler.step(scaled);
  CHECK(same_bits(w1, w2));
  CHECK(same_bits(w1.grad(), w2.grad()));  // .grad is unscaled afterwards
}

TEST_CASE("unscale_ before step lets the user clip true gradients", "[amp][scaler]") {
  auto w = hg::ones({2}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 1.0});
  GradScaler scaler;
  scaler.scale(toy_loss(w, hg::tensor(std::vector<float>{3, 4}), 1.0)).backward();
  scaler.unscale_(opt);
  CHECK(w.grad().select(0, 1).item<float>() == 4.0f);
  REQUIRE_THROWS_WITH(scaler.unscale_(opt),
                      "unscale_() has already been called on this optimizer since the last update().");
  scaler.step(opt);
  CHECK(w.select(0, 1).item<float>() == -3.0f);
  REQUIRE_THROWS_WITH(scaler.unscale_(opt), "unscale_() is being called after step().");
  REQUIRE_THROWS_WITH(scaler.step(opt), "step() has already been called since the last update().");
  scaler.update();
}

TEST_CASE("GradScaler misuse errors", "[amp][scaler]") {
  REQUIRE_THROWS_AS(GradScaler({.growth_factor = 1.0}), hg::Error);
  REQUIRE_THROWS_AS(GradScaler({.backoff_factor = 1.0}), hg::Error);
  GradScaler scaler;
  REQUIRE_THROWS_WITH(scaler.update(), Catch::Matchers::StartsWith("No inf checks were recorded prior to update.") &&
                                           Catch::Matchers::Contains("scaler.scale(loss).backward()"));
  // float16 parameters: their grads are float16, unscaling them is refused
  auto w16 = hg::ones({3}, hg::float16).requires_grad_();
  hg::optim::SGD opt({w16}, {.lr = 0.1});
  scaler.scale(hg::sum(w16)).backward();
  REQUIRE_THROWS_WITH(scaler.step(opt), Catch::Matchers::StartsWith("Attempting to unscale FP16 gradients."));
  // bfloat16 gradients are supported (PyTorch's CUDA unscale is not)
  auto wb = hg::ones({3}, hg::bfloat16).requires_grad_();
  hg::optim::SGD optb({wb}, {.lr = 0.5});
  GradScaler sb;
  sb.scale(hg::sum(wb)).backward();
  CHECK(sb.step(optb).applied());
  CHECK(wb.to(hg::float32).sum().item<float>() == 1.5f);
}

TEST_CASE("step() when no parameter has a gradient is PyTorch's error, with the remedy", "[amp][scaler]") {
  // PyTorch: `assert len(found_inf_per_device) > 0, "No inf checks were
  // recorded for this optimizer."` after unscale_ found no .grad to check.
  // (Catch2 2's `a && b` keeps references to a and b: named matchers, combined in place.)
  const auto says_no_checks = Catch::Matchers::Contains("GradScaler.step: No inf checks were recorded for this optimizer.");
  const auto says_remedy = Catch::Matchers::Contains("scaler.scale(loss).backward() before scaler.step(optimizer)");
  const auto no_update = Catch::Matchers::StartsWith("No inf checks were recorded prior to update.");
  auto w = hg::ones({2}).requires_grad_(), frozen = hg::ones({2}).requires_grad_();
  const auto x = hg::tensor(std::vector<float>{3, 4});
  hg::optim::SGD opt({w}, {.lr = 1.0});
  GradScaler scaler;
  hg::Tensor scaled = scaler.scale(toy_loss(w, x, 1.0));  // no backward yet
  REQUIRE_THROWS_WITH(scaler.step(opt), says_no_checks && says_remedy);
  CHECK(same_bits(w, hg::ones({2})));
  REQUIRE_THROWS_WITH(scaler.update(), no_update);
  CHECK(scaler.get_scale() == 65536.0);
  // the same after an explicit unscale_ (which itself, as PyTorch's, accepts no grads)
  scaler.unscale_(opt);
  REQUIRE_THROWS_WITH(scaler.step(opt), says_no_checks && says_remedy);
  REQUIRE_THROWS_WITH(scaler.update(), no_update);
  // the optimizer is not stuck: after the backward the step is applied
  scaled.backward();
  CHECK(scaler.step(opt).applied());
  CHECK(w.select(0, 1).item<float>() == -3.0f);
  scaler.update();
  // zero_grad() (set_to_none) between backward and step drops every gradient
  scaler.scale(toy_loss(w, x, 1.0)).backward();
  opt.zero_grad();
  REQUIRE_THROWS_WITH(scaler.step(opt), says_no_checks && says_remedy);
  CHECK(w.select(0, 1).item<float>() == -3.0f);
  // one parameter with a gradient is enough, as in PyTorch
  hg::optim::SGD two({w, frozen}, {.lr = 1.0});
  scaler.scale(toy_loss(w, x, 1.0)).backward();
  CHECK(scaler.step(two).applied());
  CHECK(same_bits(frozen, hg::ones({2})));
  scaler.update();
  // a disabled scaler only calls optimizer.step(), as PyTorch's does
  GradScaler off({.enabled = false});
  opt.zero_grad();
  CHECK(off.step(opt).applied());
}

TEST_CASE("A disabled scaler passes everything through", "[amp][scaler]") {
  auto w = hg::ones({2}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 1.0});
  GradScaler scaler({.enabled = false});
  auto loss = toy_loss(w, hg::ones({2}), 1.0);
  CHECK(scaler.scale(loss).is_same(loss));
  loss.backward();
  CHECK(scaler.step(opt).applied());
  scaler.update();
  CHECK(scaler.get_scale() == 1.0);
  CHECK(w.sum().item<float>() == 0.0f);
  CHECK(scaler.state_dict().empty());
}

TEST_CASE("GradScaler state_dict round trip with PyTorch's keys", "[amp][scaler]") {
  auto w = hg::ones({2}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 1e-3});
  GradScaler a({.init_scale = 256.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 10});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    a.scale(toy_loss(w, hg::ones({2}), 1.0)).backward();
    a.step(opt);
    a.update();
  }
  const auto sd = a.state_dict();
  CHECK(sd.at("scale") == 256.0);
  CHECK(sd.at("growth_factor") == 4.0);
  CHECK(sd.at("backoff_factor") == 0.25);
  CHECK(sd.at("growth_interval") == 10.0);
  CHECK(sd.at("_growth_tracker") == 3.0);
  GradScaler b;
  b.load_state_dict(sd);
  CHECK(b.state_dict() == sd);
  REQUIRE_THROWS_WITH(b.load_state_dict({}), Catch::Matchers::Contains("state dict is empty"));
}

TEST_CASE("The scale moves by factors applied in double and rounded once, as PyTorch", "[amp][scaler]") {
  auto w = hg::ones({2}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 1e-3});
  GradScaler scaler({.init_scale = 65536.0, .growth_factor = 1.1, .backoff_factor = 0.9, .growth_interval = 1});
  float expected = 65536.0f;
  for (int i = 0; i < 6; ++i) {
    const bool overflow = i % 3 == 2;
    opt.zero_grad();
    scaler.scale(toy_loss(w, overflow ? hg::full({2}, INFINITY) : hg::ones({2}), 1.0)).backward();
    scaler.step(opt);
    scaler.update();
    expected = static_cast<float>(static_cast<double>(expected) * (overflow ? 0.9 : 1.1));
    CHECK(static_cast<float>(scaler.get_scale()) == expected);
  }
}

TEST_CASE("GradScaler min_scale: the scale stops at the floor with an Error that says why", "[amp][scaler]") {
  auto w = hg::ones({2}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 0.1});
  GradScaler scaler({.init_scale = 4.0, .min_scale = 1.0});
  scaler.set_explain([&] { return hg::amp::describe(hg::amp::non_finite_grads({{"layer.weight", w}})); });
  const hg::Tensor inf = hg::full({2}, INFINITY);
  auto overflowing_step = [&] {
    opt.zero_grad();
    scaler.scale((w * inf).sum()).backward();  // d/dw = inf
    scaler.step(opt);
    scaler.update();
  };
  overflowing_step();
  CHECK(scaler.get_scale() == 2.0);
  overflowing_step();
  CHECK(scaler.get_scale() == 1.0);  // at the floor: allowed
  std::string message;
  try {
    overflowing_step();  // 0.5 would be below it
  } catch (const hg::Error& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Matchers::Contains("below min_scale = 1"));
  CHECK_THAT(message, Catch::Matchers::Contains("3 steps in a row skipped"));
  CHECK_THAT(message, Catch::Matchers::Contains("grad of layer.weight (float32[2] cpu) holds 2 inf, 0 NaN"));
  CHECK(scaler.get_scale() == 1.0);                          // held at the floor
  CHECK(hgtest::values(w.detach()) == std::vector<double>{1.0, 1.0});  // no step was applied
  // a clean step resets the count; without a floor the scale would have gone on halving
  opt.zero_grad();
  scaler.scale(w.sum()).backward();
  CHECK(scaler.step(opt).applied());
  scaler.update();
  CHECK(scaler.get_scale() == 1.0);
  hgtest::expect_errors({{"a floor above the initial scale",
                          [] { GradScaler s({.init_scale = 2.0, .min_scale = 4.0}); },
                          {"min_scale", "no larger than init_scale"}}});
}
