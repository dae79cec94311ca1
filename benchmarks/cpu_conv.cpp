// CPU convolution benchmark: conv2d forward + backward for each distinct conv
// layer of MobileNetV3-small at 224x224 (the shapes come from torchvision's
// model through benchmarks/pytorch_cpu_conv.py --shapes), batch 16, in
// float32 and in bfloat16 autocast, halfgrad against PyTorch 1.13 eager
// (/usr/bin/python3). Every variant runs in its own process, in blocks
// interleaved with the others; we report per-shape medians and the ratio
// ours / PyTorch, and the sum of the medians over all shapes.
//
//   build/benchmarks/cpu_conv [--steps 5] [--blocks 3] [--batch 16] [--threads 2]
#include <halfgrad.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include "cpu_bench.h"

namespace hg = halfgrad;

namespace {

struct Shape {
  int64_t cin, cout, k, stride, pad, groups, h, w, bias;
  std::string arg() const {
    return fmt::format("{},{},{},{},{},{},{},{},{}", cin, cout, k, stride, pad, groups, h, w, bias);
  }
  std::string str() const {
    return fmt::format("{:>3}->{:<3} k{} s{} g{:<3} {:>3}x{:<3}{}", cin, cout, k, stride, groups, h, w,
                       bias ? " b" : "");
  }
};

std::vector<Shape> mobilenet_shapes() {
  const std::string cmd = fmt::format("/usr/bin/python3 {}/pytorch_cpu_conv.py --shapes 2>/dev/null", HALFGRAD_BENCH_DIR);
  std::vector<Shape> out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return out;
  Shape s{};
  while (fscanf(pipe, " %ld %ld %ld %ld %ld %ld %ld %ld %ld", &s.cin, &s.cout, &s.k, &s.stride, &s.pad, &s.groups,
                &s.h, &s.w, &s.bias) == 9)
    out.push_back(s);
  pclose(pipe);
  return out;
}

using Times = std::vector<std::vector<double>>;  // per shape, per step (ms)

// halfgrad in a child process: `steps` timed steps per shape (after 2 warm-up steps).
Times time_halfgrad(const std::vector<Shape>& shapes, bool amp, int steps, int batch) {
  const std::vector<double> flat = bench::in_child([&] {
    hg::manual_seed(0);
    // Build every layer first, then time step by step across the layers, so
    // a burst of load from elsewhere on the machine hits all shapes alike.
    struct Layer {
      std::unique_ptr<hg::nn::Conv2d> conv;
      hg::Tensor x, g;
    };
    std::vector<Layer> layers;
    for (const Shape& s : shapes) {
      Layer l;
      l.conv = std::make_unique<hg::nn::Conv2d>(s.cin, s.cout, s.k, s.stride, s.pad, 1, s.groups, s.bias != 0);
      l.x = hg::randn({batch, s.cin, s.h, s.w});
      if (s.cin != 3) l.x.requires_grad_(true);  // the stem's input needs no gradient
      hg::NoGradGuard ng;
      hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16, amp);
      const hg::Tensor y = (*l.conv)(l.x);
      l.g = hg::randn(y.shape()).to(y.dtype());
      layers.push_back(std::move(l));
    }
    auto step = [&](Layer& l) {
      l.conv->zero_grad(true);
      if (l.x.requires_grad()) l.x.set_grad(hg::Tensor());
      hg::Tensor y;
      {
        hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16, amp);
        y = (*l.conv)(l.x);
      }
      y.backward(l.g);
    };
    for (int i = 0; i < 2; ++i)
      for (Layer& l : layers) step(l);
    std::vector<double> out(shapes.size() * static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i)
      for (size_t j = 0; j < layers.size(); ++j)
        out[j * static_cast<size_t>(steps) + static_cast<size_t>(i)] = bench::time_ms([&] { step(layers[j]); });
    return out;
  });
  Times t(shapes.size());
  if (flat.size() != shapes.size() * static_cast<size_t>(steps)) return t;
  for (size_t i = 0; i < shapes.size(); ++i)
    t[i].assign(flat.begin() + static_cast<long>(i) * steps, flat.begin() + static_cast<long>(i + 1) * steps);
  return t;
}

Times time_pytorch(const std::vector<Shape>& shapes, bool amp, int steps, int batch, int threads) {
  std::string cmd = fmt::format("{}/usr/bin/python3 {}/pytorch_cpu_conv.py --mode {} --steps {} --batch {} --threads {}",
                                bench::python_env_prefix(), HALFGRAD_BENCH_DIR, amp ? "amp" : "float32", steps, batch,
                                threads);
  for (const Shape& s : shapes) cmd += " --shape " + s.arg();
  cmd += " 2>/dev/null";
  Times t(shapes.size());
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return t;
  size_t i;
  double ms;
  while (fscanf(pipe, " %zu %lf", &i, &ms) == 2)
    if (i < t.size()) t[i].push_back(ms);
  pclose(pipe);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5, blocks = 3, batch = 16, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CLI::App app{"MobileNetV3-small's conv layers, forward + backward, halfgrad vs PyTorch (docs/performance.md)"};
  app.add_option("--steps", steps, "steps per block")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--blocks", blocks, "interleaved blocks")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", batch)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", threads)->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  const std::vector<Shape> shapes = mobilenet_shapes();
  if (shapes.empty()) {
    fmt::print("no shapes: /usr/bin/python3 with torch and torchvision is needed (benchmarks/pytorch_cpu_conv.py)\n");
    return 1;
  }
  fmt::print("conv2d forward + backward, MobileNetV3-small's {} distinct conv layers at 224x224, batch {}, {} threads\n",
             shapes.size(), batch, threads);
  fmt::print("each variant in its own process, {} blocks of {} steps interleaved; medians in ms\n", blocks, steps);

  const char* names[] = {"halfgrad f32", "pytorch f32", "halfgrad bf16", "pytorch bf16"};
  std::vector<Times> all(4, Times(shapes.size()));
  for (int b = 0; b < blocks; ++b) {
    for (int v = 0; v < 4; ++v) {
      const bool amp = v >= 2;
      const Times t = v % 2 == 0 ? time_halfgrad(shapes, amp, steps, batch)
                                 : time_pytorch(shapes, amp, steps, batch, threads);
      for (size_t i = 0; i < shapes.size(); ++i) all[v][i].insert(all[v][i].end(), t[i].begin(), t[i].end());
    }
  }
  fmt::print("{:<32} {:>9} {:>9} {:>6}   {:>9} {:>9} {:>6}\n", "layer (in->out k s g HxW)", "ours f32", "torch", "ratio",
             "ours bf16", "torch", "ratio");
  double total[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < shapes.size(); ++i) {
    double m[4];
    for (int v = 0; v < 4; ++v) total[v] += (m[v] = bench::median(all[v][i]));
    fmt::print("{:<32} {:>9.3f} {:>9.3f} {:>6.2f}   {:>9.3f} {:>9.3f} {:>6.2f}\n", shapes[i].str(), m[0], m[1],
               m[1] > 0 ? m[0] / m[1] : 0.0, m[2], m[3], m[3] > 0 ? m[2] / m[3] : 0.0);
  }
  fmt::print("{:<32} {:>9.2f} {:>9.2f} {:>6.2f}   {:>9.2f} {:>9.2f} {:>6.2f}\n", "total", total[0], total[1],
             total[0] / total[1], total[2], total[3], total[2] / total[3]);
  (void)names;
}
