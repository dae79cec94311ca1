// CPU layer_norm benchmark: F.layer_norm over the last dim of x [rows, n]
// with weight and bias, forward alone (no_grad) and forward + backward (x,
// weight and bias require grad), float32 and bfloat16 (x, weight and bias all
// of one dtype: PyTorch 1.13 has no mixed case on the CPU). Three variants:
// hg::layer_norm (the fused kernels), the composite it replaced (mean, sub,
// mul, pow, add: the same ops, each a pass and a node), and PyTorch 1.13
// eager (pytorch_layer_norm.py). Each variant runs in a process of its own,
// blocks interleaved (cpu_bench.h); medians and ratios to PyTorch.
//
//   build/benchmarks/layer_norm [--steps 40] [--blocks 4] [--threads 2] [--shape 2048x128 ...]
//
// The default shapes are the GPT example's activations (docs/gpt.md): 2048 x 128
// (the cpu configuration) and 16384 x 384 (shakespeare-char).
#include <halfgrad.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include "cpu_bench.h"

namespace hg = halfgrad;

namespace {

// The layer_norm halfgrad had before the fused kernels (ops/layer_norm.cpp up
// to c243df3), written with the same public ops.
hg::Tensor composite_layer_norm(const hg::Tensor& x, const hg::Tensor& w, const hg::Tensor& b, double eps) {
  const hg::DType dt = x.dtype(), wide = hg::is_low_precision(dt) ? hg::float32 : dt;
  const hg::Tensor xw = x.to(wide);
  const hg::Tensor xc = hg::sub(xw, hg::mean(xw, {x.dim() - 1}, true));
  const hg::Tensor var = hg::mean(hg::mul(xc, xc), {x.dim() - 1}, true);
  hg::Tensor y = hg::mul(xc, hg::pow(hg::add(var, eps), -0.5));
  y = hg::mul(y, w.to(wide));
  y = hg::add(y, b.to(wide));
  return y.to(dt);
}

struct Case {
  int64_t rows, n;
  hg::DType dt;
  bool backward;
  std::string str() const {
    return fmt::format("{}x{} {} {}", rows, n, hg::dtype_name(dt), backward ? "fwd+bwd" : "fwd");
  }
};

std::function<void()> make_step(const Case& c, bool fused) {
  hg::manual_seed(0);
  hg::Tensor x = hg::randn({c.rows, c.n}).to(c.dt);
  hg::Tensor w = hg::add(hg::rand({c.n}), 0.5).to(c.dt);
  hg::Tensor b = hg::randn({c.n}).to(c.dt);
  const hg::Tensor g = hg::randn({c.rows, c.n}).to(c.dt);
  if (c.backward)
    for (hg::Tensor* t : {&x, &w, &b}) t->requires_grad_(true);
  return [=]() mutable {
    const auto run = [&] { return fused ? hg::layer_norm(x, {c.n}, w, b) : composite_layer_norm(x, w, b, 1e-5); };
    if (!c.backward) {
      hg::no_grad guard;
      run();
      return;
    }
    for (hg::Tensor* t : {&x, &w, &b}) t->set_grad(hg::Tensor());
    run().backward(g);
  };
}

std::vector<double> time_pytorch(const Case& c, int steps, int threads) {
  return bench::time_python(fmt::format("pytorch_layer_norm.py --rows {} --n {} --dtype {} --backward {} --steps {} "
                                        "--threads {}",
                                        c.rows, c.n, hg::dtype_name(c.dt), c.backward ? 1 : 0, steps, threads));
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 40, blocks = 4, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::string> shapes = {"2048x128", "16384x384"};
  CLI::App app{"layer_norm forward and forward + backward: halfgrad's fused kernels, the old composite, PyTorch "
               "(docs/performance.md)"};
  app.add_option("--steps", steps, "timed calls per variant")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--blocks", blocks, "rounds of interleaved blocks")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", threads)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--shape", shapes, "rows x n")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  hg::set_num_threads(threads);
  std::vector<Case> cases;
  for (const std::string& s : shapes) {
    const auto x = s.find('x');
    const int64_t rows = std::stoll(s.substr(0, x)), n = std::stoll(s.substr(x + 1));
    for (hg::DType dt : {hg::float32, hg::bfloat16})
      for (bool bwd : {false, true}) cases.push_back({rows, n, dt, bwd});
  }
  fmt::print("layer_norm over the last dim, weight and bias; {} threads; each variant in its own process, "
             "blocks interleaved; median ms per call\n",
             threads);
  fmt::print("PyTorch's allocator: {}\n\n", bench::python_malloc().empty() ? std::string("glibc malloc")
                                                                           : "LD_PRELOAD=" + bench::python_malloc());
  fmt::print("{:<28} {:>10} {:>10} {:>10} {:>12} {:>14}\n", "", "fused", "composite", "pytorch", "fused/pytorch",
             "composite/fused");
  const int per = (steps + blocks - 1) / blocks;
  for (const Case& c : cases) {
    std::map<std::string, std::vector<double>> t;
    for (int blk = 0; blk < blocks; ++blk) {
      for (const bool fused : {true, false}) {
        auto v = bench::time_in_child([c, fused] { return make_step(c, fused); }, per);
        auto& dst = t[fused ? "fused" : "composite"];
        dst.insert(dst.end(), v.begin(), v.end());
      }
      auto v = time_pytorch(c, per, threads);
      t["pytorch"].insert(t["pytorch"].end(), v.begin(), v.end());
    }
    const double f = bench::median(t["fused"]), m = bench::median(t["composite"]), p = bench::median(t["pytorch"]);
    fmt::print("{:<28} {:>10.3f} {:>10.3f} {:>10.3f} {:>11.2f}x {:>13.2f}x\n", c.str(), f, m, p, p > 0 ? f / p : 0.0,
               f > 0 ? m / f : 0.0);
    std::fflush(stdout);
  }
}
