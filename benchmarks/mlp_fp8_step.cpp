// The MLP training step in fp8 against bf16 AMP and float32: `--layers`
// Linear(width, width) layers with ReLU between, `width` classes,
// cross-entropy, SGD(lr=0.01), through the public API. Three variants share
// one model (its weights move a little with every step; the timing does not
// care):
//   fp32       no autocast: exact float32 GEMMs
//   bf16-amp   hg::amp::autocast(device, bfloat16); no loss scaling (bf16 needs none)
//   fp8        the same bf16 autocast plus hg::amp::fp8_autocast(recipe) around
//              the forward, with hg::nn::enable_fp8(model, recipe) done once:
//              every Linear runs as amp::fp8_linear (E4M3 forward, E5M2
//              gradients: the Hybrid recipe, delayed scaling with an amax
//              history of `--history` steps), one layer at a time; the
//              rest of the step (ReLU, loss) in bf16 as under AMP.
//
// The work: forward 1 GEMM per layer, backward 2 (the first layer needs no
// input gradient), each 2 x batch x width^2 FLOP. On a GPU the default is
// the MLP 4x4096 of gpu_mlp_step --model large: batch 8192, 11 GEMMs of
// 0.275 TFLOP = 3.02 TFLOP per step, compute-bound; timed with CUDA events
// around each step, in blocks interleaved across the variants (fewer float32
// steps per block: they are ~10x longer). No PyTorch side: PyTorch has no fp8
// Linear without Transformer Engine.
//
// On the CPU (default: 4 x 1024, batch 512, 11.8 GFLOP per step) fp8 is an
// exact emulation (fp8 decoded to float32, oneDNN float32 GEMMs) plus the
// quantisation and amax passes, so the fp8 row measures what the emulation
// costs against bf16 AMP and float32, not an fp8 speed-up. Host clock per step,
// blocks interleaved.
//
//   build/benchmarks/mlp_fp8_step [--device cuda|cpu] [--width 4096 | 1024] [--layers 4]
//                                 [--batch 8192 | 512] [--steps 30 | 12] [--warmup 5 | 2]
//                                 [--blocks 3] [--history 1024] [--threads N]
#include "fp8_bench.h"

#include <CLI/CLI.hpp>

#include <memory>

namespace {

using namespace fp8_bench;

struct Variant {
  std::string name;
  bool autocast, fp8;
  std::vector<double> ms;
  hg::Tensor loss;
  std::string error;
};

std::string loss_str(const Variant& v) {
  try {
    return v.loss.defined() ? fmt::format("{:.4f}", v.loss.item<float>()) : "n/a";
  } catch (const std::exception&) {
    return "error";
  }
}

bool finite_loss(const Variant& v) {
  try {
    return v.loss.defined() && std::isfinite(v.loss.item<float>());
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"MLP training step: fp8 (nn::enable_fp8 + amp::fp8_autocast) vs bf16 AMP vs float32"};
  std::string device = default_device();
  int64_t width = 0, layers = 4, batch = 0, history = 1024;
  int steps = 0, warmup = -1, blocks = 3, threads = 0;
  app.add_option("--device", device, "cuda or cpu (default: cuda when usable)")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--width", width, "layer width and classes (default 4096 on cuda, 1024 on cpu)");
  app.add_option("--layers", layers, "Linear layers")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", batch, "batch size (default 8192 on cuda, 512 on cpu)");
  app.add_option("--steps", steps, "timed steps per variant (fp32 on cuda: a fifth) (default 30 on cuda, 12 on cpu)");
  app.add_option("--warmup", warmup, "untimed steps per variant first (default 5 on cuda, 2 on cpu)");
  app.add_option("--blocks", blocks, "interleaved blocks")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--history", history, "fp8 amax history length")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (default: OpenMP's)");
  CLI11_PARSE(app, argc, argv);
  if (!usable(device, "mlp_fp8_step")) return 77;
  const bool cuda = device == "cuda";
  if (width <= 0) width = cuda ? 4096 : 1024;
  if (batch <= 0) batch = cuda ? 8192 : 512;
  if (steps <= 0) steps = cuda ? 30 : 12;
  if (warmup < 0) warmup = cuda ? 5 : 2;
  if (threads > 0) hg::set_num_threads(threads);
  print_device(cuda);

  const double gemm = 2.0 * batch * width * width;
  const double flop = gemm * (3.0 * layers - 1);
  const int block = std::max(1, steps / blocks);
  const int fp32_block = cuda ? std::max(1, block / 5) : block;
  const std::string shape = fmt::format("{}x{} b{}", layers, width, batch);
  fmt::print("MLP {} x Linear({}, {}), batch {}, {} classes, SGD: {:.4f} TFLOP per step; {} per step, {} blocks of {} "
             "steps ({} float32), interleaved, after {} warm-ups\n",
             layers, width, width, batch, width, flop / 1e12, cuda ? "CUDA events" : "host clock", blocks, block,
             fp32_block, warmup);
  if (!cuda)
    fmt::print("CPU: fp8 is an exact emulation here (fp8 decoded to float32, oneDNN float32 GEMMs, plus the\n"
               "quantisation passes): the fp8 row measures the emulation's cost, not an fp8 speed-up.\n");

  std::vector<Variant> vs{{"fp32", false, false, {}, {}, {}},
                          {"bf16-amp", true, false, {}, {}, {}},
                          {"fp8 (+ bf16 autocast)", true, true, {}, {}, {}}};
  const hg::amp::Fp8Recipe recipe{.amax_history_len = history};
  std::string error;
  int64_t saturated = -1;
  try {
    hg::manual_seed(0);
    const hg::Device dev = cuda ? hg::Device::cuda() : hg::Device::cpu();
    const hg::DeviceType dev_type = cuda ? hg::DeviceType::CUDA : hg::DeviceType::CPU;
    hg::nn::Sequential model;
    for (int64_t l = 0; l < layers; ++l) {
      model.push_back(std::make_shared<hg::nn::Linear>(width, width));
      if (l + 1 < layers) model.push_back(std::make_shared<hg::nn::ReLU>());
    }
    model.to(dev);
    hg::nn::enable_fp8(model, recipe);  // layers run in fp8 only inside fp8_autocast
    hg::optim::SGD optimizer(model.parameters(), hg::optim::SGDOptions{.lr = 0.01});
    hg::nn::CrossEntropyLoss criterion;
    const hg::Tensor x = hg::randn({batch, width}, dev);
    const hg::Tensor y = hg::randint(0, width, {batch}, dev);
    auto step = [&](Variant& v) {
      optimizer.zero_grad(/*set_to_none=*/true);
      {
        hg::amp::autocast region(dev_type, hg::bfloat16, /*enabled=*/v.autocast);
        hg::amp::fp8_autocast fp8_region(recipe, /*enabled=*/v.fp8);
        v.loss = criterion(model.forward(x), y);
      }
      v.loss.backward();
      optimizer.step();
    };
    for (Variant& v : vs) {
      try {
        for (int i = 0; i < warmup; ++i) step(v);
        sync(cuda);
      } catch (const std::exception& e) {
        v.error = e.what();
      }
    }
    for (int b = 0; b < blocks; ++b)
      for (Variant& v : vs) {
        if (!v.error.empty()) continue;
        try {
          const auto ms = time_each(cuda, 0, v.autocast ? block : fp32_block, [&] { step(v); });
          v.ms.insert(v.ms.end(), ms.begin(), ms.end());
        } catch (const std::exception& e) {
          v.error = e.what();
        }
      }
    // Values clipped to the fp8 formats' largest, all layers, all steps.
    saturated = 0;
    for (const auto& [name, m] : model.named_modules())
      if (const auto* lin = dynamic_cast<const hg::nn::Linear*>(m); lin && lin->fp8.defined())
        saturated += hg::sum(lin->fp8.saturated).item<int64_t>();
  } catch (const std::exception& e) {
    error = e.what();
  }

  fmt::print("\n{:<22} {:>10} {:>9} {:>9} {:>10}\n", "halfgrad", "median ms", "steps/s", "TFLOP/s", "last loss");
  std::map<std::string, double> med;
  for (const Variant& v : vs) {
    med[v.name] = v.error.empty() && error.empty() ? median(v.ms) : 0;
    fmt::print("{:<22} {:>10} {:>9} {:>9} {:>10}\n", v.name, num(med[v.name], 3),
               num(med[v.name] > 0 ? 1e3 / med[v.name] : 0, 2),
               num(med[v.name] > 0 ? flop / (med[v.name] * 1e-3) / 1e12 : 0, cuda ? 1 : 3), loss_str(v));
    if (!v.error.empty()) fmt::print("  {}: error: {}\n", v.name, v.error);
  }
  if (!error.empty()) fmt::print("error: {}\n", error);
  if (saturated >= 0) {
    // Each fp8 step quantises, per layer, its input, its weight and its output's gradient.
    const double quantised = double(warmup + vs[2].ms.size()) * layers * (2.0 * batch * width + double(width) * width);
    fmt::print("fp8: {} of {:.3g} quantised values saturated (clipped to the format's largest, delayed scaling)\n",
               saturated, quantised);
  }
  const double fp32 = med["fp32"], bf16 = med["bf16-amp"], fp8 = med["fp8 (+ bf16 autocast)"];
  auto speedup = [](double slow, double fast) { return slow > 0 && fast > 0 ? slow / fast : 0.0; };
  fmt::print("speed-ups (time over time, > 1: faster): fp8 over bf16 AMP {}, fp8 over fp32 {}, bf16 AMP over fp32 {}\n",
             ratio_str(speedup(bf16, fp8)), ratio_str(speedup(fp32, fp8)), ratio_str(speedup(fp32, bf16)));
  if (!cuda && fp8 > 0 && bf16 > 0 && fp32 > 0)
    fmt::print("CPU emulation cost: the fp8 step takes {:.2f}x the time of the bf16 AMP step and {:.2f}x that of the "
               "float32 step\n",
               fp8 / bf16, fp8 / fp32);

  const bool finite = finite_loss(vs[2]);
  const std::string ours = !vs[2].error.empty() || !error.empty() ? "error" : !finite ? "NaN loss" : num(fp8, 3);
  summary(fmt::format("MLP {} fp8 step", shape), "fp8 ms, bf16 AMP ms: speed-up", ours, num(bf16, 3),
          speedup(bf16, fp8), "> 1.0x", finite && speedup(bf16, fp8) > 1.0, cuda, "n/a: CPU emulation");
  summary(fmt::format("MLP {} fp8 vs fp32", shape), "fp8 ms, fp32 ms: speed-up", ours, num(fp32, 3),
          speedup(fp32, fp8), "> 1.0x", finite && speedup(fp32, fp8) > 1.0, cuda, "n/a: CPU emulation");
  bool failed = !error.empty();
  for (const Variant& v : vs) failed |= !v.error.empty();
  return failed ? 1 : 0;
}
