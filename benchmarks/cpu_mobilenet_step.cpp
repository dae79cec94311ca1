// CPU training-step benchmark of MobileNetV3-small (torchvision's network):
// SGD with momentum, cross-entropy, float32 and bfloat16 autocast, side by side
// with PyTorch 1.13 + torchvision 0.14 eager (pytorch_cpu_mobilenet.py), at
// batch 64 of 224x224 images (ImageNet's shape) and batch 256 of 32x32 (the
// shape train_classifier uses for Fashion-MNIST). Each variant runs in its own
// process, blocks of steps interleaved (cpu_bench.h); medians and ratios.
// PyTorch runs with tcmalloc preloaded when it is installed (as its CPU
// performance guide recommends; bench::python_malloc), halfgrad with its own
// caching host allocator.
//
//   build/benchmarks/cpu_mobilenet_step [--steps 8] [--threads 2] [--only 32] [--ours-only 1]
//                                       [--layout nchw|nhwc|both] [--mode float32|amp]
//
// Both frameworks run in both memory layouts: row-major images (NCHW), and
// channels-last ones (NHWC; PyTorch's model.to(memory_format=torch.channels_last)
// too, our conv weights stay row-major: docs/convnets.md). The targets compare
// each framework's faster layout.
#include <halfgrad.h>

#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include "cpu_bench.h"

namespace hg = halfgrad;

namespace {

struct Shape {
  int batch, size;
};

std::function<void()> make_halfgrad_step(Shape s, bool amp, bool channels_last) {
  hg::manual_seed(0);
  auto model = hg::nn::models::mobilenet_v3_small();
  auto optimizer = std::make_shared<hg::optim::SGD>(model->parameters(), hg::optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  auto criterion = std::make_shared<hg::nn::CrossEntropyLoss>();
  auto x = hg::randn({s.batch, 3, s.size, s.size});
  if (channels_last) x = x.contiguous(hg::MemoryFormat::ChannelsLast);
  auto y = hg::randint(0, 1000, {s.batch});
  return [=] {
    optimizer->zero_grad(/*set_to_none=*/true);
    hg::Tensor loss;
    {
      // the model's forward turns autocast on by itself; `enabled=false` keeps it float32
      hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16, /*enabled=*/amp);
      loss = (*criterion)(model->forward(x), y);
    }
    loss.backward();
    optimizer->step();
  };
}

std::vector<double> time_pytorch(Shape s, const char* mode, int steps, int threads, bool channels_last) {
  return bench::time_python(
      fmt::format("pytorch_cpu_mobilenet.py --mode {} --batch {} --size {} --steps {} --threads {} --channels-last {}",
                  mode, s.batch, s.size, steps, threads, channels_last ? 1 : 0));
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 8, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), only = 0;
  bool ours_only = false;  // no PyTorch children (profiling our step)
  std::string layouts = "both", mode;  // mode empty: float32 and amp
  CLI::App app{"MobileNetV3-small CPU training step, halfgrad vs PyTorch eager, float32 and bf16 AMP "
               "(docs/performance.md)"};
  app.add_option("--steps", steps, "timed steps per variant")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", threads)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--only", only, "one image size: 224 or 32 (default both)")->check(CLI::IsMember({224, 32}));
  app.add_option("--ours-only", ours_only, "1: no PyTorch children (profiling our step)");
  app.add_option("--layout", layouts)->check(CLI::IsMember({"nchw", "nhwc", "both"}))->capture_default_str();
  app.add_option("--mode", mode, "float32 or amp (default both)")->check(CLI::IsMember({"float32", "amp"}));
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  fmt::print("MobileNetV3-small training step (SGD momentum 0.9, cross-entropy, 1000 classes); {} threads\n", threads);
  fmt::print("each variant in its own process, blocks of steps interleaved; median over all steps\n");
  fmt::print("nhwc: images (and so every activation) in channels-last memory; nchw: row-major\n");
  if (!ours_only)
    fmt::print("PyTorch's allocator: {}\n", bench::python_malloc().empty() ? std::string("glibc malloc (no tcmalloc: "
               "scripts/setup --bench installs it)") : "LD_PRELOAD=" + bench::python_malloc());
  for (const Shape s : {Shape{64, 224}, Shape{256, 32}}) {
    if (only != 0 && only != s.size) continue;
    struct Variant {
      std::string name;
      std::function<std::vector<double>(int)> run;
    };
    std::vector<Variant> variants;
    for (const bool cl : {false, true}) {
      if (layouts != "both" && (layouts == "nhwc") != cl) continue;
      const std::string suffix = cl ? "-nhwc" : "-nchw";
      for (const bool amp : {false, true}) {
        if ((mode == "amp" && !amp) || (mode == "float32" && amp)) continue;
        const std::string kind = amp ? "-amp" : "";
        variants.push_back({"halfgrad" + kind + suffix, [s, amp, cl](int n) {
                              return bench::time_in_child([s, amp, cl] { return make_halfgrad_step(s, amp, cl); }, n, 2);
                            }});
        if (!ours_only)
          variants.push_back({"pytorch" + kind + suffix, [s, threads, amp, cl](int n) {
                                return time_pytorch(s, amp ? "amp" : "float32", n, threads, cl);
                              }});
      }
    }
    constexpr int kBlocks = 2;
    std::map<std::string, std::vector<double>> times;
    for (int b = 0; b < kBlocks; ++b)
      for (auto& v : variants) {
        auto t = v.run((steps + kBlocks - 1) / kBlocks);
        times[v.name].insert(times[v.name].end(), t.begin(), t.end());
      }
    fmt::print("\nbatch {} at {}x{}\n{:<22} {:>14} {:>10}\n", s.batch, s.size, s.size, "", "median ms/step", "images/s");
    std::map<std::string, double> med;
    for (auto& v : variants) {
      if (times[v.name].empty()) {
        fmt::print("{:<22} {:>14}\n", v.name, "n/a");
        continue;
      }
      med[v.name] = bench::median(times[v.name]);
      fmt::print("{:<22} {:>14.1f} {:>10.1f}\n", v.name, med[v.name], s.batch * 1e3 / med[v.name]);
    }
    // each framework's faster layout
    auto best = [&](const std::string& stem) {
      double b = 0;
      for (const char* suffix : {"-nchw", "-nhwc"})
        if (med.count(stem + suffix) && (b == 0 || med[stem + suffix] < b)) b = med[stem + suffix];
      return b;
    };
    auto ratio = [&](const std::string& what, double a, double b, const char* target) {
      if (a > 0 && b > 0) fmt::print("{:<46} {:.2f}x ({})\n", what, a / b, target);
    };
    fmt::print("\n");
    for (const char* suffix : {"-nchw", "-nhwc"}) {
      const std::string sx = suffix;
      ratio("float32: halfgrad / pytorch" + sx, med["halfgrad" + sx], med["pytorch" + sx], "same layout");
      ratio("bf16 AMP: halfgrad / pytorch" + sx, med["halfgrad-amp" + sx], med["pytorch-amp" + sx], "same layout");
    }
    ratio("float32: best halfgrad / best pytorch", best("halfgrad"), best("pytorch"), "target <= 1.00x");
    ratio("bf16 AMP: best halfgrad / best pytorch", best("halfgrad-amp"), best("pytorch-amp"), "target <= 1.00x");
    ratio("halfgrad AMP speed-up over float32 (best)", best("halfgrad"), best("halfgrad-amp"), "target > 1x");
  }
}
