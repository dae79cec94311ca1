// What amp::Monitor costs a training step (docs/amp.md states it): the same
// model and step without a monitor and with one recording every 100, 10 and
// 1 steps, blocks of steps interleaved (each round in a rotated order) so
// every variant sees the same machine load. Each step is timed alone, so a record's own cost (the histograms, the
// hooks, one read) is split from what the monitor adds to every step (the
// gradient-arrival hooks and the read of the found-inf flag).
//
//   build/benchmarks/monitor_overhead [--model mlp|mobilenet|both] [--rounds 3] [--steps 100]
#include <halfgrad.h>

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpu_bench.h"

namespace hg = halfgrad;

namespace {

struct Case {
  std::string name;
  std::shared_ptr<hg::nn::Module> module;
  std::function<hg::Tensor(const hg::Tensor&)> forward;
  hg::Tensor x, y;
};

Case make_case(const std::string& which) {
  hg::manual_seed(0);
  if (which == "mlp") {
    auto m = std::make_shared<hg::nn::Sequential>(hg::nn::Linear(784, 1024), hg::nn::ReLU(), hg::nn::Linear(1024, 1024),
                                                  hg::nn::ReLU(), hg::nn::Linear(1024, 10));
    return {"MLP 784-1024-1024-10, batch 256", m, [m](const hg::Tensor& x) { return (*m)(x); }, hg::randn({256, 784}),
            hg::randint(0, 10, {256})};
  }
  auto m = hg::nn::models::mobilenet_v3_small({.num_classes = 10});
  return {"MobileNetV3-small 32x32, batch 64 (channels-last)", m, [m](const hg::Tensor& x) { return (*m)(x); },
          hg::randn({64, 3, 32, 32}).contiguous(hg::MemoryFormat::ChannelsLast), hg::randint(0, 10, {64})};
}

struct Variant {
  std::string name;
  int64_t every;  // -1: no monitor
  std::unique_ptr<hg::amp::GradScaler> scaler;
  std::unique_ptr<hg::optim::Optimizer> opt;
  std::unique_ptr<hg::amp::Monitor> monitor;
  std::vector<double> plain_ms, record_ms;
  int64_t step = 0;
};

void run(const std::string& which, int rounds, int steps) {
  Case c = make_case(which);
  c.module->train();
  std::vector<Variant> variants;
  for (int64_t every : {-1, 100, 10, 1}) {
    Variant v;
    v.name = every < 0 ? "no monitor" : fmt::format("monitor, every {}", every);
    v.every = every;
    // bfloat16 autocast with the scaler on (scaled gradients, the found-inf flag: the monitor's full path)
    v.scaler = std::make_unique<hg::amp::GradScaler>(hg::amp::GradScalerOptions{.init_scale = 1024.0});
    v.opt = std::make_unique<hg::optim::SGD>(c.module->parameters(), hg::optim::SGDOptions{.lr = 1e-4});
    variants.push_back(std::move(v));
  }
  auto step = [&](Variant& v) {
    v.opt->zero_grad();
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::kCPU, hg::kBFloat16);
      loss = hg::cross_entropy(c.forward(c.x), c.y);
    }
    v.scaler->scale(loss).backward();
    v.scaler->step(*v.opt);
    v.scaler->update();
  };
  // The variants share the model: each block attaches its own monitor and
  // detaches it after (its step count, and so its records, start at 0).
  for (auto& v : variants)
    for (int i = 0; i < 3; ++i) step(v);  // warm-up: primitives, caches
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < variants.size(); ++k) {
      Variant& v = variants[(k + static_cast<size_t>(r)) % variants.size()];  // each round starts with another
      if (v.every > 0)
        v.monitor = std::make_unique<hg::amp::Monitor>(*c.module, *v.scaler, hg::amp::MonitorOptions{.every = v.every});
      for (int i = 0; i < steps; ++i) {
        const bool records = v.every > 0 && v.monitor->steps() % v.every == 0;
        const double ms = bench::time_ms([&] { step(v); });
        (records ? v.record_ms : v.plain_ms).push_back(ms);
      }
      v.monitor.reset();
    }
  fmt::print("\n{} (bfloat16 autocast, GradScaler on; {} rounds x {} steps per variant, interleaved)\n", c.name,
             rounds, steps);
  fmt::print("{:<20} {:>14} {:>14} {:>14} {:>16}\n", "variant", "plain step ms", "record step ms", "mean step ms",
             "vs no monitor");
  const double base = bench::median(variants[0].plain_ms);
  for (auto& v : variants) {
    const double plain = bench::median(v.plain_ms);
    const double rec = v.record_ms.empty() ? 0.0 : bench::median(v.record_ms);
    // the mean over a long run: every-th step records
    const double mean = v.every > 0 ? (plain * static_cast<double>(v.every - 1) + rec) / static_cast<double>(v.every)
                                    : plain;
    fmt::print("{:<20} {:>14.2f} {:>14} {:>14.2f} {:>+15.1f}%\n", v.name, plain,
               v.record_ms.empty() ? std::string("-") : fmt::format("{:.2f}", rec), mean, 100.0 * (mean / base - 1.0));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "both";
  int rounds = 3, steps = 100;
  CLI::App app{"The numerics monitor's cost on a training step (docs/performance.md)"};
  app.add_option("--model", model)->check(CLI::IsMember({"mlp", "mobilenet", "both"}))->capture_default_str();
  app.add_option("--rounds", rounds)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", steps)->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (model == "mlp" || model == "both") run("mlp", rounds, steps);
  if (model == "mobilenet" || model == "both") run("mobilenet", rounds, steps);
  return 0;
}
