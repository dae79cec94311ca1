// Lesson 3 of docs/amp.md: overflow, what the GradScaler can and cannot fix.
//
// float16 ends at 65504: a larger result rounds to inf. Here a layer's output
// passes that in the forward pass: fc1 of a 784-128-10 MLP on Fashion-MNIST
// has its weights multiplied by kGain, and its output is divided by kGain
// after the ReLU, so in float32 the gain cancels (as attention's q.k is
// divided by sqrt(d) only after the product; models trained in bfloat16 grow
// such activations by themselves, T5's feed-forward layers being the known
// case). Under float16 autocast fc1's GEMM writes float16: a batch whose
// largest activation passes 65504 holds an inf, and the loss and the
// gradients are NaN.
//
// The GradScaler sees the non-finite gradients, skips the step and halves the
// scale. That cures gradients that overflow because the loss was scaled too
// far; an activation overflows at every scale, so each such batch costs a step
// and a halving, and the scale slides down. The same loop under bfloat16
// autocast (float32's 8 exponent bits) has no inf and skips nothing; what it
// pays is precision: 8 significant bits to float16's 11.
//
// amp::DetectNonFinite names the op that made the first inf, and
// amp::non_finite_grads the gradients it reached.
//
// The program checks its own numbers and exits non-zero if they differ from
// what this text says (CTest runs it). It needs the Fashion-MNIST files
// (Debian's dataset-fashion-mnist; scripts/setup installs it).
#include <halfgrad.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hg = halfgrad;

namespace {

constexpr double kGain = 24576;  // 1.5 x 2^14: fc1's largest outputs land either side of 65504
constexpr int64_t kBatch = 64;
constexpr int kSteps = 32;
constexpr double kLr = 0.05;

struct Mlp : hg::nn::Module {
  hg::nn::Linear fc1{784, 128}, fc2{128, 10};
  hg::Tensor top, bottom;  // fc1's largest and smallest output in the last forward, as stored (+-inf if they overflowed)
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    hg::no_grad guard;
    fc1.weight.mul_(kGain);
    fc1.bias.mul_(kGain);
  }
  hg::Tensor forward(const hg::Tensor& x) {
    const auto h = fc1(x);  // up to ~8e4: past float16's 65504 for some batches
    top = h.detach().max().to(hg::kFloat);
    bottom = h.detach().min().to(hg::kFloat);
    return fc2(hg::relu(h) * (1.0 / kGain));
  }
};

struct Step {
  double top, bottom, loss, scale;  // fc1's largest and smallest output as stored; the scale after update()
  double top32;                     // fc1's largest output for the same batch and weights, computed in float32
  bool skipped;
};

struct Run {
  std::vector<Step> steps;
  double init_scale = 0;
  std::optional<hg::amp::NonFiniteOrigin> origin;  // at the first skipped step: where the first inf/NaN came from
  std::string grads;                              // and which gradients it reached
};

// kSteps of SGD with a GradScaler under autocast to `dtype` (the same seed,
// model and batches each time).
Run train(hg::DType dtype, const hg::Tensor& x, const hg::Tensor& y) {
  hg::manual_seed(0);
  Mlp model;
  hg::optim::SGD opt(model.parameters(), {.lr = kLr});
  hg::amp::GradScaler scaler;  // PyTorch's defaults: scale 65536, halve on inf/NaN, double after 2000 clean steps
  hg::amp::DetectNonFinite detect;
  Run run;
  run.init_scale = scaler.options().init_scale;
  for (int i = 0; i < kSteps; ++i) {
    // Each step's own first non-finite value: applied steps have some too (a
    // -inf that the ReLU zeroes; the float16 gradient of the constant 1/kGain,
    // which backward computes though nothing needs it, and which overflows).
    detect.reset();
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::kCPU, dtype);
      loss = hg::cross_entropy(model.forward(x.narrow(0, i * kBatch, kBatch)), y.narrow(0, i * kBatch, kBatch));
    }
    double top32;
    {
      hg::no_grad guard;  // the reference: the same batch through this step's fc1, in float32
      top32 = model.fc1(x.narrow(0, i * kBatch, kBatch)).max().item<double>();
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    const bool skipped = scaler.step(opt).skipped();
    if (skipped && !run.origin) {
      run.origin = detect.first();
      run.grads = hg::amp::describe(hg::amp::non_finite_grads(model.named_parameters()));
    }
    scaler.update();
    run.steps.push_back({model.top.item<double>(), model.bottom.item<double>(), loss.item<double>(),
                         scaler.get_scale(), top32, skipped});
  }
  return run;
}

// fc1's output for the batch `x`, computed under autocast to `dtype` (float32 if none), in float64.
hg::Tensor fc1_output(std::optional<hg::DType> dtype, const hg::Tensor& x) {
  hg::manual_seed(0);
  Mlp model;
  hg::no_grad guard;
  hg::amp::autocast region(hg::kCPU, dtype, /*enabled=*/dtype.has_value());
  return model.fc1(x).to(hg::kDouble);
}

// One of the lesson's claims: says so when it does not hold.
bool claim(bool holds, const char* what) {
  if (!holds) fmt::print("differs from the lesson: {}\n", what);
  return holds;
}

std::string pow2(double s) { return fmt::format("2^{}", std::ilogb(s)); }

}  // namespace

int main() try {
  const auto train_set = hg::data::fashion_mnist(hg::data::kFashionMnistRoot, /*train=*/true);
  const int64_t n = kSteps * kBatch;
  const auto x = (train_set.inputs().narrow(0, 0, n).reshape({n, 784}) - hg::data::kFashionMnistMean) /
                 hg::data::kFashionMnistStd;
  const auto y = train_set.targets().narrow(0, 0, n);

  const Run f16 = train(hg::kHalf, x, y), bf16 = train(hg::kBFloat16, x, y);

  fmt::print("784-128-10 MLP, fc1 weights x {} (its output / {} after the ReLU), Fashion-MNIST, batch {}, SGD lr {}\n",
             kGain, kGain, kBatch, kLr);
  const hg::amp::GradScalerOptions o;  // the defaults, PyTorch's
  fmt::print("GradScaler defaults (scale {}, x{} after an inf/NaN, x{} after {} clean steps)\n\n", pow2(o.init_scale),
             o.backoff_factor, o.growth_factor, o.growth_interval);
  fmt::print("{:>4} {:>10} | {:>10}{:36} | {:>10}\n", "", "float32", "float16", "", "bfloat16");
  fmt::print("{:>4} {:>10} | {:>10} {:>10} {:>8} {:>8} {:>6} | {:>10} {:>8} {:>8} {:>6}\n", "step", "max fc1",
             "max fc1", "min fc1", "loss", "step", "scale", "max fc1", "loss", "step", "scale");
  for (int i = 0; i < kSteps; ++i) {
    const Step &a = f16.steps[i], &b = bf16.steps[i];
    fmt::print("{:>4} {:>10.1f} | {:>10.1f} {:>10.1f} {:>8.4f} {:>8} {:>6} | {:>10.1f} {:>8.4f} {:>8} {:>6}\n", i,
               a.top32, a.top, a.bottom, a.loss, a.skipped ? "skipped" : "applied", pow2(a.scale), b.top, b.loss,
               b.skipped ? "skipped" : "applied", pow2(b.scale));
  }

  int skipped16 = 0, skippedbf = 0, zeroed = 0;  // zeroed: a -inf that the ReLU turned into 0
  for (const Step& s : f16.steps) {
    skipped16 += s.skipped;
    zeroed += !s.skipped && std::isinf(s.bottom);
  }
  for (const Step& s : bf16.steps) skippedbf += s.skipped;
  fmt::print("\nfloat16:  {} of {} steps skipped, the scale went from {} to {}\n", skipped16, kSteps,
             pow2(f16.init_scale), pow2(f16.steps.back().scale));
  fmt::print("          {} applied steps had a -inf in fc1's output: the ReLU made it 0\n", zeroed);
  fmt::print("bfloat16: {} of {} steps skipped, the scale stayed at {}\n", skippedbf, kSteps,
             pow2(bf16.steps.back().scale));
  if (f16.origin) {
    fmt::print("\nat the first skipped float16 step, amp::DetectNonFinite:\n  first non-finite value: {} of {} -> {} ({}) "
               "holds {} inf, {} NaN\n",
               f16.origin->phase, f16.origin->op, f16.origin->tensor, f16.origin->policy, f16.origin->inf,
               f16.origin->nan);
    std::string grads = f16.grads;  // one gradient to a line
    for (size_t at = grads.find("; "); at != std::string::npos; at = grads.find("; ", at)) grads.replace(at, 2, "\n  ");
    fmt::print("and amp::non_finite_grads:\n  {}\n", grads);
  }

  // Range against precision: the largest activation, and one inside float16's range, in each format.
  size_t hi = 0, lo = 0;
  for (size_t i = 0; i < f16.steps.size(); ++i) {
    if (f16.steps[i].top32 > f16.steps[hi].top32) hi = i;
    if (f16.steps[i].top32 < f16.steps[lo].top32) lo = i;
  }
  fmt::print("\nthe same activations rounded to each format (float16: 11 significant bits, bfloat16: 8)\n");
  fmt::print("{:>22} {:>12} {:>12} {:>12} {:>12}\n", "float32", "float16", "rel. error", "bfloat16", "rel. error");
  for (size_t i : {hi, lo}) {
    const float v = static_cast<float>(f16.steps[i].top32);
    const double h = static_cast<float>(hg::Half(v)), b = static_cast<float>(hg::BFloat16(v));
    fmt::print("{:>22.3f} {:>12.1f} {:>12.2g} {:>12.1f} {:>12.2g}\n", v, h, std::fabs(h - v) / v, b,
               std::fabs(b - v) / v);
  }

  // ... and over a whole in-range batch (the first): fc1's output against float32's.
  const auto first = x.narrow(0, 0, kBatch);
  const auto h32 = fc1_output(std::nullopt, first);
  auto error = [&](hg::DType t) {
    return ((fc1_output(t, first) - h32).abs().mean() / h32.abs().mean()).item<double>();
  };
  const double err16 = error(hg::kHalf), errbf = error(hg::kBFloat16);
  fmt::print("fc1's output for step 0's batch against float32, mean |error| / mean |output|: float16 {:.2g}, "
             "bfloat16 {:.2g}\n(their unit roundoffs: 2^-11 = {:.2g}, 2^-8 = {:.2g})\n",
             err16, errbf, std::ldexp(1.0, -11), std::ldexp(1.0, -8));

  // The lesson's claims, checked.
  bool cause = true, halving = true, bf16_finite = true;
  double scale = f16.init_scale;
  for (int i = 0; i < kSteps; ++i) {
    const Step &a = f16.steps[i], &b = bf16.steps[i];
    // (float16's GEMM reads rounded inputs: a batch within 0.2% of 65504 could go either way)
    cause = cause && a.skipped == std::isinf(a.top) &&
            (a.skipped ? a.top32 > 65504 * 0.998 : a.top32 < 65504 * 1.002);
    halving = halving && a.scale == (a.skipped ? scale / 2 : scale);
    scale = a.scale;
    bf16_finite = bf16_finite && std::isfinite(b.top) && std::isfinite(b.bottom) && std::isfinite(b.loss) &&
                  std::fabs(b.top - b.top32) <= 0.01 * b.top32;
  }
  bool ok = claim(skipped16 > 0 && skipped16 < kSteps, "float16 skipped some steps, not all");
  ok &= claim(cause, "float16 skipped exactly the steps whose fc1 output held +inf (float32's max past 65504)");
  ok &= claim(halving, "each float16 skip halved the scale, and each applied step kept it");
  ok &= claim(skippedbf == 0 && bf16.steps.back().scale == bf16.init_scale, "bfloat16 skipped no step");
  ok &= claim(bf16_finite, "bfloat16's activations and losses finite, its max within 1% of float32's");
  ok &= claim(errbf > 2 * err16 && err16 < std::ldexp(1.0, -11) && errbf < std::ldexp(1.0, -8),
              "bfloat16's rounding error over 2x float16's, each below its unit roundoff");
  ok &= claim(f16.origin && f16.origin->phase == "forward" && f16.origin->op == "linear" && f16.origin->inf > 0,
              "amp::DetectNonFinite names the forward of linear");
  fmt::print("{}\n", ok ? "as the lesson says: float16 skipped every step whose activation passed 65504 and halved "
                          "the scale each time; bfloat16 skipped none"
                        : "UNEXPECTED: the numbers above differ from the lesson");
  return ok ? 0 : 1;
} catch (const hg::Error& e) {
  fmt::print("lesson_overflow: {}\n", e.what());
  if (!std::filesystem::is_directory(hg::data::kFashionMnistRoot))
    fmt::print("the lesson needs Fashion-MNIST: apt-get install dataset-fashion-mnist (scripts/setup does)\n");
  return 1;
}
