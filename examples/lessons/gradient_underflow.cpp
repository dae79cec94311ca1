// Lesson 1 of docs/amp.md: gradient underflow, seen in a model's own gradients.
//
// A small MLP (784-256-256-10, as for Fashion-MNIST, on random data) runs its
// forward under float16 autocast; its loss is scaled down by 1/1024, as a mean
// over a large batch or a late stage of training makes gradients small. The
// gradients flowing back through the float16 activations are rounded to
// float16 on their way: those below 2^-24 (float16's smallest subnormal)
// become 0. The log2 histogram (amp/numerics.h) of the weight gradients,
// against the same model in float32, shows the loss; the GradScaler's 65536
// (2^16) lifts them into float16's range and gives them back.
//
// The program checks its own numbers and exits non-zero if they differ from
// what this text says (CTest runs it).
#include <halfgrad.h>

#include <cmath>
#include <vector>

namespace hg = halfgrad;

namespace {

struct Mlp : hg::nn::Module {
  hg::nn::Linear fc1{784, 256}, fc2{256, 256}, fc3{256, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  hg::Tensor forward(const hg::Tensor& x) { return fc3(hg::relu(fc2(hg::relu(fc1(x))))); }
};

enum class Mode { Float32, Float16, Float16Scaled };

// The weight gradients' histogram after one backward in `mode` (the same model,
// data and seed each time).
hg::amp::Log2Histogram gradients(Mode mode) {
  hg::manual_seed(0);
  Mlp model;
  const auto x = hg::randn({64, 784}), y = hg::randint(0, 10, {64});
  hg::nn::CrossEntropyLoss criterion;
  hg::Tensor loss;
  {
    hg::amp::autocast region(hg::kCPU, hg::kHalf, /*enabled=*/mode != Mode::Float32);
    loss = criterion(model.forward(x), y) * (1.0 / 1024);
  }
  const double scale = mode == Mode::Float16Scaled ? 65536.0 : 1.0;
  (loss * scale).backward();
  auto counts = hg::amp::Log2Histogram::zeros(hg::Device::cpu());
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.dim() < 2) continue;  // the weights: most of the elements
    hg::amp::accumulate_log2_histogram(p.grad() / scale, counts);  // unscaled, as the optimizer sees them
  }
  return hg::amp::Log2Histogram::read(counts);
}

}  // namespace

int main() {
  const auto f32 = gradients(Mode::Float32), f16 = gradients(Mode::Float16), scaled = gradients(Mode::Float16Scaled);
  const double sub = std::ldexp(1.0, -24), normal = std::ldexp(1.0, -14);
  fmt::print("weight gradients of a 784-256-256-10 MLP, loss / 1024, {} elements\n", f32.total());
  fmt::print("log2 histogram: share of the elements per binade (float16 subnormals below 2^-14, zero below 2^-24)\n\n");
  fmt::print("{:>10} {:>10} {:>16} {:>18}\n", "binade", "float32", "float16 autocast", "float16, scale 2^16");
  auto row = [&](const char* label, int64_t a, int64_t b, int64_t c) {
    if (a == 0 && b == 0 && c == 0) return;
    const double n = static_cast<double>(f32.total());
    fmt::print("{:>10} {:>9.2f}% {:>15.2f}% {:>17.2f}%\n", label, 100 * a / n, 100 * b / n, 100 * c / n);
  };
  row("0", f32.zeros_count(), f16.zeros_count(), scaled.zeros_count());
  row("< 2^-40", f32.counts[1], f16.counts[1], scaled.counts[1]);
  for (int k = hg::amp::Log2Histogram::kLowExp; k < hg::amp::Log2Histogram::kHighExp; ++k) {
    const std::string label = fmt::format("2^{}{}", k, k == -24 ? " <-" : "");
    row(label.c_str(), f32.binade(k), f16.binade(k), scaled.binade(k));
  }
  fmt::print("\n('<-': float16's smallest subnormal; everything below 2^-14 is a float16 subnormal)\n");
  fmt::print("below 2^-24 in float32 (would be 0 in float16):   {:.2f}%\n", 100 * f32.share_below(sub));
  fmt::print("zeros with float16 autocast, no scaling:          {:.2f}%\n",
             100.0 * f16.zeros_count() / f16.total());
  fmt::print("zeros with float16 autocast, loss scaled by 2^16: {:.2f}%\n",
             100.0 * scaled.zeros_count() / scaled.total());
  fmt::print("float16 subnormals (2^-24 .. 2^-14) in float32:   {:.2f}%\n",
             100 * (f32.share_below(normal) - f32.share_below(sub)));

  // The lesson's claims, checked: a real share underflows without scaling
  // (zeros where float32 has none), and scaling gives nearly all of it back.
  const double zeros_f32 = static_cast<double>(f32.zeros_count()), zeros_f16 = static_cast<double>(f16.zeros_count());
  const double zeros_scaled = static_cast<double>(scaled.zeros_count());
  const bool ok = f32.share_below(sub) > 0.01 && zeros_f16 > zeros_f32 + 0.01 * f32.total() &&
                  zeros_scaled < zeros_f32 + 0.1 * (zeros_f16 - zeros_f32) && f16.non_finite() == 0 &&
                  scaled.non_finite() == 0;
  fmt::print("{}\n", ok ? "as the lesson says: float16 lost the small gradients, loss scaling kept them"
                        : "UNEXPECTED: the numbers above differ from the lesson");
  return ok ? 0 : 1;
}
