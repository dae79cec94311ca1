#include "libtorch_step.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <memory>

namespace bench {

std::function<void()> make_libtorch_step(int batch, int in, int hidden, int classes, float lr, int threads, bool amp) {
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  auto model = std::make_shared<torch::nn::Sequential>(
      torch::nn::Linear(in, hidden), torch::nn::ReLU(), torch::nn::Linear(hidden, hidden), torch::nn::ReLU(),
      torch::nn::Linear(hidden, classes));
  auto optimizer = std::make_shared<torch::optim::SGD>((*model)->parameters(), torch::optim::SGDOptions(lr));
  auto x = torch::randn({batch, in});
  auto y = torch::randint(0, classes, {batch}, torch::kLong);
  return [=] {
    // LibTorch 1.13's zero_grad() has no set_to_none: drop the grads by hand, as ours does
    for (auto& p : (*model)->parameters()) p.mutable_grad().reset();
    torch::Tensor loss;
    if (amp) {  // the C++ form of `with torch.autocast("cpu", dtype=torch.bfloat16):`
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
      at::autocast::increment_nesting();
      loss = torch::nn::functional::cross_entropy((*model)->forward(x), y);
      if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
      at::autocast::set_cpu_enabled(false);
    } else {
      loss = torch::nn::functional::cross_entropy((*model)->forward(x), y);
    }
    loss.backward();
    optimizer->step();
  };
}

}  // namespace bench
