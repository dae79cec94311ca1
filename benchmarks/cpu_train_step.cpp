// CPU training-step benchmark: MLP 784-1024-1024-10, batch 256, float32, SGD.
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

std::function<void()> make_halfgrad_step() {
  hg::manual_seed(0);
  auto model = std::make_shared<Net>();
  auto optimizer = std::make_shared<hg::optim::SGD>(model->parameters(), hg::optim::SGDOptions{.lr = 0.01});
  auto criterion = std::make_shared<hg::nn::CrossEntropyLoss>();
  auto x = hg::randn({kBatch, kIn});
  auto y = hg::randint(0, kClasses, {kBatch});
  return [=] {
    optimizer->zero_grad(/*set_to_none=*/true);
    auto loss = (*criterion)(model->forward(x), y);
    loss.backward();
    optimizer->step();
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

}  // namespace

int main(int argc, char** argv) {
  int steps = 40, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  }
  omp_set_num_threads(threads);
  const double flops = 6.0 * kBatch * (double(kIn) * kHidden + double(kHidden) * kHidden + double(kHidden) * kClasses);
  fmt::print("MLP {}-{}-{}-{}, batch {}, float32, SGD; {} threads; {:.2f} GFLOP per step (forward + backward)\n", kIn,
             kHidden, kHidden, kClasses, kBatch, threads, flops / 1e9);

  std::vector<std::pair<std::string, std::function<void()>>> runs{{"halfgrad", make_halfgrad_step()}};
#ifdef HALFGRAD_BENCH_LIBTORCH
  runs.emplace_back("libtorch", bench::make_libtorch_step(kBatch, kIn, kHidden, kClasses, 0.01f, threads));
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

  fmt::print("{:<10} {:>14} {:>10}\n", "", "median ms/step", "GFLOP/s");
  std::vector<double> med;
  for (size_t r = 0; r < runs.size(); ++r) {
    med.push_back(median(times[r]));
    fmt::print("{:<10} {:>14.2f} {:>10.1f}\n", runs[r].first, med.back(), flops / med.back() / 1e6);
  }
  if (runs.size() == 2) fmt::print("ratio halfgrad / libtorch: {:.2f}x (target <= 1.00x)\n", med[0] / med[1]);
}
