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
// Both frameworks run NCHW and channels-last (NHWC) images; the targets take
// each one's faster layout. Targets: AMP images/s >= 1.5x our float32; >= 0.9x
// PyTorch eager AMP.
//
//   build/benchmarks/gpu_mobilenet_step [--steps 20] [--warmup 5] [--batch 256]
#include "gpu_bench.h"

#include <memory>

namespace {

using namespace gpu_bench;

std::function<void()> make_step(int batch, bool amp, bool channels_last) {
  hg::manual_seed(0);
  auto model = hg::nn::models::mobilenet_v3_small();
  model->to(hg::Device::cuda());
  auto opt = std::make_shared<hg::optim::SGD>(model->parameters(), hg::optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  auto crit = std::make_shared<hg::nn::CrossEntropyLoss>();
  auto scaler = std::make_shared<hg::amp::GradScaler>(hg::amp::GradScalerOptions{.enabled = amp});
  auto x = hg::randn({batch, 3, 224, 224}, hg::Device::cuda());
  if (channels_last) x = x.contiguous(hg::MemoryFormat::ChannelsLast);  // every layer then keeps NHWC
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
  fmt::print("MobileNetV3-small training step, batch {} at 224x224, SGD momentum 0.9; NCHW and NHWC images\n", batch);
  // variants: [layout][amp]
  std::function<void()> step[2][2];
  for (int cl = 0; cl < 2; ++cl)
    for (int amp = 0; amp < 2; ++amp) step[cl][amp] = make_step(batch, amp == 1, cl == 1);
  for (int i = 0; i < warmup; ++i)
    for (auto& layout : step)
      for (auto& s : layout) s();
  device_sync();
  std::vector<double> t[2][2];
  for (int b = 0; b < 2; ++b)
    for (int cl = 0; cl < 2; ++cl)
      for (int amp = 0; amp < 2; ++amp) {
        auto v = time_each(0, std::max(1, steps / 2), step[cl][amp]);
        t[cl][amp].insert(t[cl][amp].end(), v.begin(), v.end());
      }
  double ips[2][2];
  for (int cl = 0; cl < 2; ++cl) {
    for (int amp = 0; amp < 2; ++amp) ips[cl][amp] = batch * 1e3 / median(t[cl][amp]);
    fmt::print("halfgrad {}  AMP {:.0f} images/s, float32 {:.0f} images/s\n", cl ? "NHWC" : "NCHW", ips[cl][1],
               ips[cl][0]);
  }
  double pt[2][2] = {};
  for (int cl = 0; cl < 2; ++cl) {
    const auto r = run_pytorch(fmt::format("mobilenet --batch {} --size 224 --steps {} --warmup {} --channels-last {}",
                                           batch, steps, warmup, cl));
    pt[cl][1] = get(r, "mobilenet.amp.images_per_s");
    pt[cl][0] = get(r, "mobilenet.fp32.images_per_s");
    fmt::print("pytorch  {}  AMP {} images/s, float32 {} images/s\n", cl ? "NHWC" : "NCHW", num(pt[cl][1], 0),
               num(pt[cl][0], 0));
  }
  // each framework's faster layout
  const double ours_amp = std::max(ips[0][1], ips[1][1]), ours_fp32 = std::max(ips[0][0], ips[1][0]);
  const double pt_amp = std::max(pt[0][1], pt[1][1]);
  summary("MobileNetV3-small b256 AMP", "our AMP / our fp32 images/s (best layouts)", num(ours_amp, 0),
          num(ours_fp32, 0), ours_amp / ours_fp32, ">= 1.5x", ours_amp / ours_fp32 >= 1.5);
  summary("MobileNetV3-small b256 AMP", "our / PyTorch eager AMP images/s (best layouts)", num(ours_amp, 0),
          num(pt_amp, 0), pt_amp > 0 ? ours_amp / pt_amp : 0, ">= 0.9x", pt_amp > 0 && ours_amp / pt_amp >= 0.9);
  return 0;
} catch (const std::exception& e) {
  fmt::print("gpu_mobilenet_step: {}\n", e.what());
  return 1;
}
