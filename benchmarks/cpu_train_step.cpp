// CPU training-step benchmark: MLP 784-1024-1024-10, batch 256, SGD, in
// float32 and in bfloat16 AMP (autocast + GradScaler).
// LibTorch (C++) and PyTorch eager (python3-torch) run the same model and
// step; every variant runs in its own process, in blocks interleaved with the
// others so all see the same machine load, and we report median step times
// and their ratios (docs/performance.md: ratios, not absolute times).
//
//   build/benchmarks/cpu_train_step [--steps 40] [--threads 2]
#include <halfgrad.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#ifdef HALFGRAD_BENCH_LIBTORCH
#include "libtorch_step.h"
#endif
#include "cpu_bench.h"

namespace hg = halfgrad;

namespace {

constexpr int kBatch = 256, kIn = 784, kHidden = 1024, kClasses = 10;

// The same nn.Sequential as the LibTorch and PyTorch sides (ours runs its
// Linear/ReLU layers as one linear_chain op: on the CPU, each Linear + ReLU is
// one oneDNN GEMM with a ReLU post-op).
std::shared_ptr<hg::nn::Sequential> make_model() {
  using hg::nn::Linear, hg::nn::ReLU;
  return std::make_shared<hg::nn::Sequential>(std::make_shared<Linear>(kIn, kHidden), std::make_shared<ReLU>(),
                                              std::make_shared<Linear>(kHidden, kHidden), std::make_shared<ReLU>(),
                                              std::make_shared<Linear>(kHidden, kClasses));
}

// amp: the forward and loss under bfloat16 autocast, with a GradScaler.
std::function<void()> make_halfgrad_step(bool amp) {
  hg::manual_seed(0);
  auto model = make_model();
  auto optimizer = std::make_shared<hg::optim::SGD>(model->parameters(), hg::optim::SGDOptions{.lr = 0.01});
  auto criterion = std::make_shared<hg::nn::CrossEntropyLoss>();
  auto scaler = std::make_shared<hg::amp::GradScaler>(hg::amp::GradScalerOptions{.enabled = amp});
  auto x = hg::randn({kBatch, kIn});
  auto y = hg::randint(0, kClasses, {kBatch});
  return [=] {
    optimizer->zero_grad(/*set_to_none=*/true);
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16, /*enabled=*/amp);
      loss = (*criterion)(model->forward(x), y);
    }
    scaler->scale(loss).backward();
    scaler->step(*optimizer);
    scaler->update();
  };
}

// PyTorch eager (python3-torch), one block of steps of one mode in a child process.
std::vector<double> time_pytorch(const std::string& mode, int steps, int threads) {
  return bench::time_python(fmt::format("pytorch_cpu_step.py --mode {} --steps {} --threads {}", mode, steps, threads));
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 80, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  }
  omp_set_num_threads(threads);
  const double flops = 6.0 * kBatch * (double(kIn) * kHidden + double(kHidden) * kHidden + double(kHidden) * kClasses);
  fmt::print("MLP {}-{}-{}-{}, batch {}, SGD; {} threads; {:.2f} GFLOP per step (forward + backward)\n", kIn,
             kHidden, kHidden, kClasses, kBatch, threads, flops / 1e9);
  fmt::print("each variant in its own process, blocks of steps interleaved; median over all steps\n");

  struct Variant {
    std::string name;
    std::function<std::vector<double>(int)> run;  // block of n steps -> times
  };
  std::vector<Variant> variants{
      {"halfgrad", [](int n) { return bench::time_in_child([] { return make_halfgrad_step(false); }, n); }},
      {"halfgrad-amp", [](int n) { return bench::time_in_child([] { return make_halfgrad_step(true); }, n); }},
  };
#ifdef HALFGRAD_BENCH_LIBTORCH
  variants.push_back({"libtorch", [threads](int n) {
                        return bench::time_in_child(
                            [threads] { return bench::make_libtorch_step(kBatch, kIn, kHidden, kClasses, 0.01f, threads, false); }, n);
                      }});
  variants.push_back({"libtorch-amp", [threads](int n) {
                        return bench::time_in_child(
                            [threads] { return bench::make_libtorch_step(kBatch, kIn, kHidden, kClasses, 0.01f, threads, true); }, n);
                      }});
#else
  fmt::print("(LibTorch not found at build time: scripts/setup --bench installs it)\n");
#endif
  variants.push_back({"pytorch", [threads](int n) { return time_pytorch("float32", n, threads); }});
  variants.push_back({"pytorch-amp", [threads](int n) { return time_pytorch("amp", n, threads); }});

  constexpr int kBlocks = 4;
  std::map<std::string, std::vector<double>> times;
  for (int b = 0; b < kBlocks; ++b)
    for (auto& v : variants) {
      auto t = v.run((steps + kBlocks - 1) / kBlocks);
      times[v.name].insert(times[v.name].end(), t.begin(), t.end());
    }

  fmt::print("{:<14} {:>14} {:>10}\n", "", "median ms/step", "GFLOP/s");
  std::map<std::string, double> med;
  for (auto& v : variants) {
    if (times[v.name].empty()) {
      fmt::print("{:<14} {:>14}\n", v.name, "n/a");
      continue;
    }
    med[v.name] = bench::median(times[v.name]);
    fmt::print("{:<14} {:>14.2f} {:>10.1f}\n", v.name, med[v.name], flops / med[v.name] / 1e6);
  }
  auto ratio = [&](const char* what, const char* a, const char* b, const char* target) {
    if (med.count(a) && med.count(b)) fmt::print("{:<38} {:.2f}x ({})\n", what, med[a] / med[b], target);
  };
  ratio("float32: halfgrad / libtorch", "halfgrad", "libtorch", "target <= 1.00x");
  ratio("float32: halfgrad / pytorch eager", "halfgrad", "pytorch", "target <= 1.00x");
  ratio("bf16 AMP: halfgrad / pytorch eager", "halfgrad-amp", "pytorch-amp", "target <= 1.00x");
  ratio("bf16 AMP: halfgrad / libtorch", "halfgrad-amp", "libtorch-amp", "C++ against C++");
  ratio("halfgrad AMP speed-up over float32", "halfgrad", "halfgrad-amp", "target >= 3x");
}
