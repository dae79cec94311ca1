// MobileNetV3-small training step on the GPU: batch 256 of 224x224 images,
// 1000 classes, SGD with momentum, in float32 and in float16 AMP (the model's
// forward runs under autocast by itself; cross-entropy float32 by policy;
// GradScaler), against torchvision's model in PyTorch eager on the same GPU
// (benchmarks/pytorch_gpu.py mobilenet, a child process after ours).
//
// Work: about 0.06 GFLOP per image forward at 224x224 (torchvision: 56 MMACs),
// so ~3 x 2 x 0.056 x 256 = 86 GFLOP per step: tiny for an H200 (0.1 ms of
// tensor-core time); the step is bound by memory traffic of the depthwise and
// elementwise layers (a few GB of activations) and by per-op overhead.
// Timed with CUDA events around each step (median), blocks interleaved.
// Targets: AMP images/s >= 1.5x our float32; >= 0.9x PyTorch eager AMP.
//
//   build/benchmarks/gpu_mobilenet_step [--steps 20] [--warmup 5] [--batch 256]
#include "gpu_bench.h"

#include <memory>

namespace {

using namespace gpu_bench;

std::function<void()> make_step(int batch, bool amp) {
  hg::manual_seed(0);
  auto model = hg::nn::models::mobilenet_v3_small();
  model->to(hg::Device::cuda());
  auto opt = std::make_shared<hg::optim::SGD>(model->parameters(), hg::optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  auto crit = std::make_shared<hg::nn::CrossEntropyLoss>();
  auto scaler = std::make_shared<hg::amp::GradScaler>(hg::amp::GradScalerOptions{.enabled = amp});
  auto x = hg::randn({batch, 3, 224, 224}, hg::Device::cuda());
  auto y = hg::randint(0, 1000, {batch}, hg::Device::cuda());
  return [=] {
    opt->zero_grad(/*set_to_none=*/true);
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::DeviceType::CUDA, hg::float16, /*enabled=*/amp);
      loss = (*crit)(model->forward(x), y);
    }
    scaler->scale(loss).backward();
    scaler->step(*opt);
    scaler->update();
  };
}

}  // namespace

int main(int argc, char** argv) try {
  const int steps = int_arg(argc, argv, "--steps", 20), warmup = int_arg(argc, argv, "--warmup", 5);
  const int batch = int_arg(argc, argv, "--batch", 256);
  print_device();
  fmt::print("MobileNetV3-small training step, batch {} at 224x224, SGD momentum 0.9\n", batch);
  auto amp = make_step(batch, true);
  auto fp32 = make_step(batch, false);
  for (int i = 0; i < warmup; ++i) {
    amp();
    fp32();
  }
  device_sync();
  std::vector<double> t_amp, t_fp32;
  for (int b = 0; b < 2; ++b) {
    auto a = time_each(0, std::max(1, steps / 2), amp);
    auto f = time_each(0, std::max(1, steps / 2), fp32);
    t_amp.insert(t_amp.end(), a.begin(), a.end());
    t_fp32.insert(t_fp32.end(), f.begin(), f.end());
  }
  const double ms_amp = median(t_amp), ms_fp32 = median(t_fp32);
  const double ips_amp = batch * 1e3 / ms_amp, ips_fp32 = batch * 1e3 / ms_fp32;
  fmt::print("halfgrad  AMP {:.2f} ms/step ({:.0f} images/s), float32 {:.2f} ms/step ({:.0f} images/s)\n", ms_amp,
             ips_amp, ms_fp32, ips_fp32);
  const auto pt = run_pytorch(fmt::format("mobilenet --batch {} --size 224 --steps {} --warmup {}", batch, steps, warmup));
  const double pt_ips = get(pt, "mobilenet.amp.images_per_s");
  fmt::print("pytorch   AMP {} images/s, float32 {} images/s\n", num(pt_ips, 0),
             num(get(pt, "mobilenet.fp32.images_per_s"), 0));
  summary("MobileNetV3-small b256 AMP", "our AMP / our fp32 images/s", num(ips_amp, 0), num(ips_fp32, 0),
          ips_amp / ips_fp32, ">= 1.5x", ips_amp / ips_fp32 >= 1.5);
  summary("MobileNetV3-small b256 AMP", "our / PyTorch eager AMP images/s", num(ips_amp, 0), num(pt_ips, 0),
          pt_ips > 0 ? ips_amp / pt_ips : 0, ">= 0.9x", pt_ips > 0 && ips_amp / pt_ips >= 0.9);
  return 0;
} catch (const std::exception& e) {
  fmt::print("gpu_mobilenet_step: {}\n", e.what());
  return 1;
}
