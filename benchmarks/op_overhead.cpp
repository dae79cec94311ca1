// Host cost of the dispatcher, for callgrind (docs/performance.md, "Per-op host
// cost"): `op_overhead add N` runs N adds of two 1-element tensors (the kernel
// is nothing, so what is counted is the op's path: autocast lookup, checks,
// the output tensor, and with `grad` the autograd node); `op_overhead seed N`
// runs N steps of the seed MLP (PyTorch's AMP tutorial: Linear(10, 100),
// ReLU, Linear(100, 10), batch 100, SGD), `seed-amp` under bf16 autocast with
// a GradScaler. Run twice with different N and subtract, so set-up cancels:
//
//   OMP_NUM_THREADS=1 valgrind --tool=callgrind build/benchmarks/op_overhead seed 100
//   OMP_NUM_THREADS=1 valgrind --tool=callgrind build/benchmarks/op_overhead seed 300
#include <halfgrad.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace hg = halfgrad;

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "seed";
  const int n = argc > 2 ? std::atoi(argv[2]) : 100;
  if (what == "add" || what == "add-grad") {
    hg::Tensor a = hg::ones({1}), b = hg::ones({1});
    if (what == "add-grad") a.requires_grad_();
    for (int i = 0; i < n; ++i) {
      hg::Tensor c = a + b;
    }
    return 0;
  }
  const bool amp = what == "seed-amp";
  hg::manual_seed(0);
  hg::nn::Sequential model(hg::nn::Linear(10, 100), hg::nn::ReLU(), hg::nn::Linear(100, 10));
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01});
  hg::nn::CrossEntropyLoss criterion;
  hg::amp::GradScaler scaler({.enabled = amp});
  const hg::Tensor x = hg::randn({100, 10}), y = hg::randint(0, 10, {100});
  auto step = [&] {
    opt.zero_grad(/*set_to_none=*/true);
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::kCPU, hg::kBFloat16, amp);
      loss = criterion(model(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  for (int i = 0; i < 20 + n; ++i) step();  // 20 warm-up steps, the same in every run
  return 0;
}
