#include "libtorch_step.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <memory>

namespace {

std::function<void()> make_step(const int* sizes, int n_sizes, int batch, float lr, int threads, bool amp) {
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  auto model = std::make_shared<torch::nn::Sequential>();
  for (int i = 0; i + 1 < n_sizes; ++i) {
    if (i > 0) (*model)->push_back(torch::nn::ReLU());
    (*model)->push_back(torch::nn::Linear(sizes[i], sizes[i + 1]));
  }
  auto optimizer = std::make_shared<torch::optim::SGD>((*model)->parameters(), torch::optim::SGDOptions(lr));
  auto x = torch::randn({batch, sizes[0]});
  auto y = torch::randint(0, sizes[n_sizes - 1], {batch}, torch::kLong);
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

}  // namespace

extern "C" bool bench_make_libtorch_step(const int* sizes, int n_sizes, int batch, float lr, int threads, bool amp,
                                         std::function<void()>* step, char* error, int error_size) {
  try {
    *step = make_step(sizes, n_sizes, batch, lr, threads, amp);
    return true;
  } catch (const std::exception& e) {
    if (error) std::snprintf(error, static_cast<size_t>(error_size), "%s", e.what());
    return false;
  }
}
