// Lesson 5 of docs/amp.md: bfloat16 against float16, range against precision.
//
// Both are 16 bits. float16 spends 5 on the exponent and 10 on the fraction
// (11 significant bits); bfloat16 is float32 cut in half: float32's 8
// exponent bits, 7 fraction bits (8 significant). So bfloat16 reaches 3.4e38
// and down to 1e-38 like float32, with about 2 decimal digits, and float16
// rounds 8 times finer but ends at 65504 and at 6e-8.
//
// The table below is measured from halfgrad's own conversions (hg::Half,
// hg::BFloat16 in core/half.h): the value just below inf, the gap above 1, and
// so on. Then the same small training (an MLP on Fashion-MNIST) runs under
// float16 autocast with a GradScaler, and under bfloat16 autocast with and
// without one: bfloat16 has float32's range, so its gradients need no scaling.
//
// The program checks its own numbers and exits non-zero if they differ from
// what this text says (CTest runs it). It needs the Fashion-MNIST files
// (Debian's dataset-fashion-mnist; scripts/setup installs it).
#include <halfgrad.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

namespace hg = halfgrad;

namespace {

// ---- the formats, measured ------------------------------------------------

struct Format {
  double max, min_normal, min_subnormal, eps;
  int bits;  // significant bits, the implicit leading 1 included
};

template <typename T>
double round_to(double v) {
  return static_cast<float>(T(static_cast<float>(v)));
}

// T is hg::Half or hg::BFloat16: 16-bit patterns, ordered like the values
// they hold for positive numbers, so "the next value" is the next pattern.
template <typename T>
Format measure() {
  Format f{};
  f.max = static_cast<float>(T::from_bits(T(std::numeric_limits<float>::infinity()).bits - 1));  // just below inf
  f.min_subnormal = static_cast<float>(T::from_bits(T(0.0f).bits + 1));                         // just above 0
  f.eps = static_cast<float>(T::from_bits(T(1.0f).bits + 1)) - 1.0;                               // the gap above 1
  f.bits = 1 - std::ilogb(f.eps);
  // The smallest normal: the last power of two p that still has the gap
  // p * eps above it (below it the subnormals' fixed gap is coarser).
  f.min_normal = 1;
  while (round_to<T>(f.min_normal / 2 * (1 + f.eps)) == f.min_normal / 2 * (1 + f.eps)) f.min_normal /= 2;
  return f;
}

// ---- the same training, five ways -------------------------------------------

constexpr int64_t kBatch = 64;
constexpr int kSteps = 300;  // one pass over 19200 images, the learning rate on a cosine from 0.05 to 0
constexpr int64_t kGrowthInterval = 50;  // PyTorch's default is 2000: here the scaler's moves show in 300 steps

struct Mlp : hg::nn::Module {
  hg::nn::Linear fc1{784, 256}, fc2{256, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  hg::Tensor forward(const hg::Tensor& x) { return fc2(hg::relu(fc1(x))); }
};

struct Setup {
  const char* name;
  std::optional<hg::DType> autocast;  // none: float32
  bool scaler;
};

struct Result {
  double accuracy = 0, loss = 0;  // test accuracy; mean training loss over the last 50 steps
  int skipped = 0, growths = 0, backoffs = 0, other_changes = 0;
  double final_scale = 0, max_scale = 0;
  std::vector<std::string> moves;  // "step 49: 2^16 -> 2^17"
  std::string first_skip;          // amp::DetectNonFinite's line for the first skipped step
  std::vector<hg::Tensor> params;  // the trained parameters
};

// One of the lesson's claims: says so when it does not hold.
bool claim(bool holds, const char* what) {
  if (!holds) fmt::print("differs from the lesson: {}\n", what);
  return holds;
}

std::string pow2(double s) {
  return std::ldexp(1.0, std::ilogb(s)) == s ? fmt::format("2^{}", std::ilogb(s)) : fmt::format("{:g}", s);
}

// "a, b, c, d,\n  e, ...": four to a line.
std::string lines(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : i % 4 ? ", " : ",\n  ") + items[i];
  return out;
}

Result train(const Setup& s, const hg::Tensor& x, const hg::Tensor& y, const hg::Tensor& tx, const hg::Tensor& ty) {
  hg::manual_seed(0);
  Mlp model;
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  hg::optim::CosineAnnealingLR schedule(opt, kSteps);
  hg::amp::GradScaler scaler({.growth_interval = kGrowthInterval, .enabled = s.scaler});
  const int64_t batches = x.size(0) / kBatch;
  std::optional<hg::amp::DetectNonFinite> detect;  // to say what overflowed at a skipped step (a slow debugging mode)
  if (s.scaler && s.autocast == hg::kHalf) detect.emplace();
  Result r;
  double scale = scaler.get_scale();
  r.max_scale = scale;
  for (int i = 0; i < kSteps; ++i) {
    const int64_t at = (i % batches) * kBatch;
    if (detect && r.skipped == 0) detect->reset();  // each step's own; after the first skip it keeps that one
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::kCPU, s.autocast, /*enabled=*/s.autocast.has_value());
      loss = hg::cross_entropy(model.forward(x.narrow(0, at, kBatch)), y.narrow(0, at, kBatch));
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    const bool skipped = scaler.step(opt).skipped();
    if (skipped && r.skipped++ == 0 && detect) r.first_skip = fmt::format("step {}: {}", i, detect->describe());
    scaler.update();
    schedule.step();
    if (i >= kSteps - 50) r.loss += loss.item<double>() / 50;
    const double now = scaler.get_scale();
    if (now != scale) {
      (now == 2 * scale ? r.growths : now == scale / 2 ? r.backoffs : r.other_changes) += 1;
      r.moves.push_back(fmt::format("step {}: {} -> {}", i, pow2(scale), pow2(now)));
    }
    scale = now;
    r.max_scale = std::max(r.max_scale, now);
  }
  r.final_scale = scale;
  r.params = model.parameters();
  hg::no_grad guard;
  hg::amp::autocast region(hg::kCPU, s.autocast, /*enabled=*/s.autocast.has_value());
  const auto pred = model.forward(tx).argmax(1);
  r.accuracy = hg::sum(hg::eq(pred, ty).to(hg::kLong)).item<double>() / ty.size(0);
  return r;
}

}  // namespace

int main() try {
  const Format h = measure<hg::Half>(), b = measure<hg::BFloat16>();
  using F = std::numeric_limits<float>;
  fmt::print("the formats, measured from hg::Half and hg::BFloat16 (float32 from std::numeric_limits)\n\n");
  fmt::print("{:<34} {:>12} {:>12} {:>12}\n", "", "float16", "bfloat16", "float32");
  fmt::print("{:<34} {:>12.6g} {:>12.4g} {:>12.4g}\n", "largest finite", h.max, b.max, F::max());
  fmt::print("{:<34} {:>12.4g} {:>12.4g} {:>12.4g}\n", "smallest normal", h.min_normal, b.min_normal, F::min());
  fmt::print("{:<34} {:>12.4g} {:>12.4g} {:>12.4g}\n", "smallest subnormal", h.min_subnormal, b.min_subnormal,
             F::denorm_min());
  fmt::print("{:<34} {:>12} {:>12} {:>12}\n", "machine epsilon (the gap above 1)", pow2(h.eps), pow2(b.eps),
             pow2(F::epsilon()));
  fmt::print("{:<34} {:>12} {:>12} {:>12}\n", "significant bits", h.bits, b.bits, F::digits);
  fmt::print("{:<34} {:>12} {:>12} {:>12}\n", "exponent bits", 16 - h.bits, 16 - b.bits, 32 - F::digits);
  fmt::print("{:<34} {:>12.2f} {:>12.2f} {:>12.2f}\n", "decimal digits (bits x log10 2)", h.bits * std::log10(2.0),
             b.bits * std::log10(2.0), F::digits * std::log10(2.0));

  fmt::print("\nrounding a few values (relative error; inf: overflow, 0: underflow)\n\n");
  fmt::print("{:<28} {:>14} {:>10} {:>14} {:>10}\n", "value", "float16", "error", "bfloat16", "error");
  struct Value {
    const char* what;
    double v;
  };
  const std::vector<Value> values{{"0.1", 0.1},
                                  {"1/3", 1.0 / 3},
                                  {"pi", std::numbers::pi},
                                  {"1.001 (next to 1)", 1.001},
                                  {"1000.7", 1000.7},
                                  {"70000 (> 65504)", 70000},
                                  {"1e-6 (a float16 subnormal)", 1e-6},
                                  {"1e-8 (< 2^-25)", 1e-8}};
  for (const auto& [what, v] : values) {
    const double h16 = round_to<hg::Half>(v), b16 = round_to<hg::BFloat16>(v);
    fmt::print("{:<28} {:>14.7g} {:>10.2g} {:>14.7g} {:>10.2g}\n", what, h16, std::fabs(h16 - v) / v, b16,
               std::fabs(b16 - v) / v);
  }

  const auto train_set = hg::data::fashion_mnist(hg::data::kFashionMnistRoot, /*train=*/true);
  const auto test_set = hg::data::fashion_mnist(hg::data::kFashionMnistRoot, /*train=*/false);
  auto flat = [](const hg::Tensor& images) {
    return (images.reshape({images.size(0), 784}) - hg::data::kFashionMnistMean) / hg::data::kFashionMnistStd;
  };
  const int64_t n = kSteps * kBatch;  // one pass
  const auto x = flat(train_set.inputs().narrow(0, 0, n)), y = train_set.targets().narrow(0, 0, n);
  const auto tx = flat(test_set.inputs()), ty = test_set.targets();
  const std::vector<Setup> setups{{"float32", std::nullopt, false},
                                  {"float16 + GradScaler", hg::kHalf, true},
                                  {"float16, no scaler", hg::kHalf, false},
                                  {"bfloat16 + GradScaler", hg::kBFloat16, true},
                                  {"bfloat16, no scaler", hg::kBFloat16, false}};
  const hg::amp::GradScalerOptions o;  // the defaults but for the growth interval
  fmt::print("\n784-256-10 MLP, Fashion-MNIST, {} steps of batch {} (SGD, momentum 0.9, lr 0.05 on a cosine to 0),\n"
             "{} test images; GradScaler: scale {}, x{} after {} clean steps, x{} after an inf/NaN\n\n",
             kSteps, kBatch, ty.size(0), pow2(o.init_scale), o.growth_factor, kGrowthInterval, o.backoff_factor);
  fmt::print("{:<24} {:>9} {:>11} {:>8} {:>12} {:>10}\n", "", "test acc", "train loss", "skipped", "final scale",
             "max scale");
  std::vector<Result> results;
  for (const Setup& s : setups) {
    const Result& r = results.emplace_back(train(s, x, y, tx, ty));
    fmt::print("{:<24} {:>8.2f}% {:>11.4f} {:>8} {:>12} {:>10}\n", s.name, 100 * r.accuracy, r.loss, r.skipped,
               s.scaler ? pow2(r.final_scale) : "-", s.scaler ? pow2(r.max_scale) : "-");
  }
  const Result &f32 = results[0], &f16 = results[1], &bf16s = results[3], &bf16 = results[4];
  fmt::print("\nthe float16 scaler's moves:\n  {}\n", lines(f16.moves));
  fmt::print("the bfloat16 scaler's moves:\n  {}\n", lines(bf16s.moves));
  fmt::print("the first float16 skip, {}\n", f16.first_skip);
  bool same = true;  // bfloat16 with and without the scaler: scaling by 2^k and back is exact in its range
  for (size_t i = 0; i < bf16.params.size(); ++i) same = same && hg::equal(bf16.params[i], bf16s.params[i]);
  fmt::print("bfloat16 with and without the scaler: the trained weights are {}\n",
             same ? "bit for bit the same" : "different");

  // The lesson's claims, checked.
  bool ok = claim(h.eps == std::ldexp(1.0, -10) && b.eps == std::ldexp(1.0, -7) && h.bits == 11 && b.bits == 8,
                  "epsilon 2^-10 and 2^-7: 11 and 8 significant bits");
  ok &= claim(h.max == 65504 && h.min_normal == std::ldexp(1.0, -14) && h.min_subnormal == std::ldexp(1.0, -24),
              "float16's range: 65504, 2^-14, 2^-24");
  ok &= claim(b.min_normal == F::min() && b.min_subnormal == std::ldexp(1.0, -133) &&
                  b.max == (2 - b.eps) * std::ldexp(1.0, 127) && b.max < F::max(),
              "bfloat16's range: float32's exponents, (2 - 2^-7) x 2^127 at the top, 2^-133 at the bottom");
  ok &= claim(std::isinf(round_to<hg::Half>(70000)) && round_to<hg::Half>(1e-8) == 0 &&
                  std::fabs(round_to<hg::Half>(1e-6) - 1e-6) > 4 * std::fabs(round_to<hg::BFloat16>(1e-6) - 1e-6),
              "float16 overflows at 70000, underflows at 1e-8, and rounds 1e-6 coarser than bfloat16");
  bool powers = true;  // every scale change is a doubling or a halving, and every halving a skipped step
  for (const Result& r : results) powers = powers && r.other_changes == 0 && r.backoffs == r.skipped;
  ok &= claim(powers, "every scale change x2 or x0.5, one halving per skipped step");
  ok &= claim(bf16s.skipped == 0 && bf16s.growths == kSteps / kGrowthInterval,
              "bfloat16 + GradScaler skipped nothing and grew the scale every interval");
  ok &= claim(std::fabs(bf16.accuracy - f16.accuracy) < 0.015 && std::fabs(bf16.accuracy - f32.accuracy) < 0.015,
              "bfloat16 without a scaler within 1.5 points of float16 + GradScaler and of float32");
  ok &= claim(std::fabs(bf16.loss - f32.loss) < 0.05, "bfloat16's training loss within 0.05 of float32's");
  ok &= claim(same, "bfloat16 with and without the scaler trains to the same weights");
  fmt::print("{}\n", ok ? "as the lesson says: float16 rounds finer, bfloat16 reaches further; bfloat16 trains "
                          "without a scaler, as float16 does with one"
                        : "UNEXPECTED: the numbers above differ from the lesson");
  return ok ? 0 : 1;
} catch (const hg::Error& e) {
  fmt::print("lesson_bf16_vs_fp16: {}\n", e.what());
  if (!std::filesystem::is_directory(hg::data::kFashionMnistRoot))
    fmt::print("the lesson needs Fashion-MNIST: apt-get install dataset-fashion-mnist (scripts/setup does)\n");
  return 1;
}
