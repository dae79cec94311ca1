// CPU training-step benchmark: MLP 784-1024-1024-10, batch 256, SGD, in
// float32 and in bfloat16 AMP (autocast + GradScaler).
// With LibTorch available, the same model and step run in the same process,
// interleaved in blocks so both see the same machine load; we report median
// step times and their ratio (DESIGN.md section 7: ratios, not absolute times).
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

namespace hg = halfgrad;

namespace {

constexpr int kBatch = 256, kIn = 784, kHidden = 1024, kClasses = 10;

struct Net : hg::nn::Module {
  hg::nn::Linear fc1{kIn, kHidden}, fc2{kHidden, kHidden}, fc3{kHidden, kClasses};
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  hg::Tensor forward(const hg::Tensor& x) { return fc3(hg::relu(fc2(hg::relu(fc1(x))))); }
};

// amp: the forward and loss under bfloat16 autocast, with a GradScaler.
std::function<void()> make_halfgrad_step(bool amp) {
  hg::manual_seed(0);
  auto model = std::make_shared<Net>();
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double time_ms(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// PyTorch eager (python3-torch), when importable: its float32 and bf16 AMP
// medians, measured right after ours in the same run.
std::map<std::string, double> run_pytorch(const std::string& script, int steps, int threads) {
  std::map<std::string, double> out;
  const std::string cmd = fmt::format("python3 {} --steps {} --threads {} 2>/dev/null", script, steps, threads);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return out;
  char mode[32];
  double ms;
  while (fscanf(pipe, " pytorch %31s %lf", mode, &ms) == 2) out[std::string("pytorch-") + mode] = ms;
  pclose(pipe);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 40, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  }
  omp_set_num_threads(threads);
  const double flops = 6.0 * kBatch * (double(kIn) * kHidden + double(kHidden) * kHidden + double(kHidden) * kClasses);
  fmt::print("MLP {}-{}-{}-{}, batch {}, SGD; {} threads; {:.2f} GFLOP per step (forward + backward)\n", kIn,
             kHidden, kHidden, kClasses, kBatch, threads, flops / 1e9);

  std::vector<std::pair<std::string, std::function<void()>>> runs{{"halfgrad", make_halfgrad_step(false)}};
#ifdef HALFGRAD_BENCH_LIBTORCH
  runs.emplace_back("libtorch", bench::make_libtorch_step(kBatch, kIn, kHidden, kClasses, 0.01f, threads, false));
#endif
  runs.emplace_back("halfgrad-amp", make_halfgrad_step(true));
#ifdef HALFGRAD_BENCH_LIBTORCH
  runs.emplace_back("libtorch-amp", bench::make_libtorch_step(kBatch, kIn, kHidden, kClasses, 0.01f, threads, true));
#else
  fmt::print("(LibTorch not found at build time: scripts/setup --bench installs it)\n");
#endif
  for (auto& [name, step] : runs)
    for (int i = 0; i < 3; ++i) step();  // warm-up: primitive caches, allocator

  constexpr int kBlock = 5;  // interleave blocks of steps
  std::vector<std::vector<double>> times(runs.size());
  for (int done = 0; done < steps; done += kBlock)
    for (size_t r = 0; r < runs.size(); ++r)
      for (int i = 0; i < kBlock; ++i) times[r].push_back(time_ms(runs[r].second));

  fmt::print("{:<14} {:>14} {:>10}\n", "", "median ms/step", "GFLOP/s");
  std::map<std::string, double> med;
  for (size_t r = 0; r < runs.size(); ++r) {
    med[runs[r].first] = median(times[r]);
    fmt::print("{:<14} {:>14.2f} {:>10.1f}\n", runs[r].first, med[runs[r].first], flops / med[runs[r].first] / 1e6);
  }
  const std::string script = std::string(HALFGRAD_BENCH_DIR) + "/pytorch_cpu_step.py";
  for (const auto& [name, ms] : run_pytorch(script, steps, threads)) {
    med[name] = ms;
    fmt::print("{:<14} {:>14.2f} {:>10.1f}\n", name, ms, flops / ms / 1e6);
  }
  if (!med.count("pytorch-amp")) fmt::print("(python3-torch not importable: no PyTorch eager rows)\n");
  if (med.count("pytorch-amp"))
    fmt::print("bf16 AMP: halfgrad / pytorch eager = {:.2f}x (target <= 1.00x)\n",
               med["halfgrad-amp"] / med["pytorch-amp"]);
  if (med.count("libtorch")) {
    fmt::print("float32: halfgrad / libtorch = {:.2f}x (target <= 1.00x)\n", med["halfgrad"] / med["libtorch"]);
    fmt::print("bf16 AMP: halfgrad / libtorch = {:.2f}x (target <= 1.00x)\n", med["halfgrad-amp"] / med["libtorch-amp"]);
  }
  fmt::print("halfgrad AMP speed-up over its float32 step: {:.2f}x (target >= 3x)\n", med["halfgrad"] / med["halfgrad-amp"]);
}
