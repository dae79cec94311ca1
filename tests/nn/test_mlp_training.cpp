// The example's MLP on the example's data: the loss falls epoch by epoch.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include "tutorial_mlp.h"

namespace hg = halfgrad;

namespace {
using hgtest::MLP;  // tests/tutorial_mlp.h

std::vector<float> train(int epochs, auto make_optimizer) {
  hg::manual_seed(0);
  MLP model;
  hg::nn::CrossEntropyLoss criterion;
  auto optimizer = make_optimizer(model.parameters());
  const hg::Tensor inputs = hg::randn({100, 10});
  const hg::Tensor targets = hg::randint(0, 10, {100});
  std::vector<float> losses;
  for (int e = 0; e < epochs; ++e) {
    optimizer.zero_grad(true);
    hg::Tensor loss = criterion(model.forward(inputs), targets);
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<float>());
  }
  return losses;
}
}  // namespace

TEST_CASE("The MLP example trains with SGD: the loss falls every epoch", "[nn][optim]") {
  const auto losses = train(20, [](std::vector<hg::Tensor> p) { return hg::optim::SGD(std::move(p), {.lr = 0.01}); });
  for (size_t e = 1; e < losses.size(); ++e) CHECK(losses[e] < losses[e - 1]);
  CHECK(losses.front() > 2.0f);  // about log(10) at the start
  CHECK(losses.front() < 2.6f);
}

TEST_CASE("The MLP trains with Adam and AdamW", "[nn][optim]") {
  for (const auto& losses :
       {train(30, [](std::vector<hg::Tensor> p) { return hg::optim::Adam(std::move(p), {.lr = 1e-2}); }),
        train(30, [](std::vector<hg::Tensor> p) { return hg::optim::AdamW(std::move(p), {.lr = 1e-2}); })}) {
    CHECK(losses.back() < 0.8f * losses.front());
  }
}
