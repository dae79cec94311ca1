// End to end: the tutorial's MLP trained under AMP ends within a small
// tolerance of the same run in float32.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include "tutorial_mlp.h"

namespace hg = halfgrad;

namespace {

using hgtest::MLP;  // tests/tutorial_mlp.h

// Train for `epochs` and return the final loss.
float train(bool amp, hg::DType low, int epochs) {
  hg::manual_seed(0);
  MLP model;
  hg::nn::CrossEntropyLoss criterion;
  hg::optim::SGD optimizer(model.parameters(), {.lr = 0.1});
  hg::amp::GradScaler scaler({.enabled = amp});
  auto inputs = hg::randn({100, 10});
  auto targets = hg::randint(0, 10, {100});
  float last = 0;
  for (int e = 0; e < epochs; ++e) {
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::DeviceType::CPU, low, amp);
      loss = criterion(model.forward(inputs), targets);
    }
    optimizer.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(optimizer);
    scaler.update();
    last = loss.item<float>();
  }
  return last;
}

}  // namespace

TEST_CASE("The MLP under AMP trains like the float32 run", "[amp][training]") {
  const float fp32 = train(false, hg::bfloat16, 60);
  const float bf16 = train(true, hg::bfloat16, 60);
  const float fp16 = train(true, hg::float16, 60);
  const float start = train(false, hg::bfloat16, 1);
  INFO("start " << start << " fp32 " << fp32 << " bf16 " << bf16 << " fp16 " << fp16);
  CHECK(fp32 < start - 0.1f);  // it learns
  CHECK(std::abs(bf16 - fp32) < 0.02f * fp32);
  CHECK(std::abs(fp16 - fp32) < 0.005f * fp32);
}
