// Lesson 2 of docs/amp.md, second half: lost updates in a real model.
//
// The first half (lost_updates.cpp) showed one weight of 1.0 that never moves
// in float16. Here a 784-256-10 MLP learns Fashion-MNIST three ways, with the
// same seed, data and plain SGD:
//
//   float32       weights, gradients and updates in float32;
//   AMP           float32 master weights, forward under float16 autocast,
//                 GradScaler: the optimizer updates the float32 weights;
//   pure float16  model.to(kHalf), float16 inputs, no master weights, no
//                 scaler: the optimizer computes w - lr * g in float16.
//
// A float16 weight w holds only the values 2^(e-10) apart near it (e =
// floor(log2 |w|)); an update smaller than half that gap rounds back to w and
// is lost. Whether that matters depends on lr x grad against the gap: the
// table tries three learning rates and counts, for each step, the weight
// elements with a nonzero gradient that did not change.
//
// The program checks its own numbers and exits non-zero if they differ from
// what this text says (CTest runs it). It needs the Fashion-MNIST files
// (Debian's dataset-fashion-mnist; scripts/setup installs it).
#include <halfgrad.h>

#include <cmath>
#include <filesystem>
#include <vector>

namespace hg = halfgrad;

namespace {

constexpr int64_t kTrain = 20000, kBatch = 64;  // one epoch: 312 steps
constexpr double kLrs[] = {0.01, 0.002, 0.0005};

struct Mlp : hg::nn::Module {
  hg::nn::Linear fc1{784, 256}, fc2{256, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  hg::Tensor forward(const hg::Tensor& x) { return fc2(hg::relu(fc1(x))); }
};

enum class Mode { Float32, Amp, PureFloat16 };
const char* name(Mode m) {
  return m == Mode::Float32 ? "float32" : m == Mode::Amp ? "AMP (float32 master)" : "pure float16";
}

struct Data {
  hg::Tensor x, y, test_x, test_y;  // images flattened to [N, 784], normalised
};

struct Result {
  double accuracy = 0;
  int64_t unchanged = 0, elements = 0;  // weight elements equal to their initial value at the end
  int64_t nonzero = 0, lost = 0;        // over all steps: elements with a gradient, and those that did not move
};

// One of the lesson's claims: says so when it does not hold.
bool claim(bool holds, const char* what) {
  if (!holds) fmt::print("differs from the lesson: {}\n", what);
  return holds;
}

int64_t count(const hg::Tensor& mask) { return hg::sum(mask).item<int64_t>(); }  // a bool sum is int64

// After a step, of one parameter's elements: those with a nonzero gradient,
// and those of them that the step left unchanged (a plain loop over the data:
// this runs every step, and costs less than a tensor op's temporaries).
template <typename T>
void count_updates(const hg::Tensor& param, const hg::Tensor& before, Result& r) {
  const hg::Tensor w = param.detach().contiguous(), w0 = before.contiguous(), g = param.grad().contiguous();
  const T *pw = w.data<T>(), *pw0 = w0.data<T>(), *pg = g.data<T>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (static_cast<float>(pg[i]) == 0.0f) continue;
    ++r.nonzero;
    r.lost += static_cast<float>(pw[i]) == static_cast<float>(pw0[i]);
  }
}

Result train(Mode mode, double lr, const Data& d) {
  hg::manual_seed(0);  // the same initial weights in every run
  Mlp model;
  const bool pure = mode == Mode::PureFloat16;
  if (pure) model.to(hg::kHalf);  // no master weights: the parameters themselves are float16
  hg::optim::SGD opt(model.parameters(), {.lr = lr});
  hg::amp::GradScaler scaler({.enabled = mode == Mode::Amp});
  const auto params = model.parameters();
  std::vector<hg::Tensor> initial;
  for (const auto& p : params) initial.push_back(p.detach().clone());
  const hg::Tensor x = pure ? d.x.to(hg::kHalf) : d.x;

  Result r;
  for (int64_t start = 0; start + kBatch <= kTrain; start += kBatch) {
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::kCPU, hg::kHalf, /*enabled=*/mode == Mode::Amp);
      loss = hg::cross_entropy(model.forward(x.narrow(0, start, kBatch)), d.y.narrow(0, start, kBatch));
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    std::vector<hg::Tensor> before;
    for (const auto& p : params) before.push_back(p.detach().clone());
    const bool skipped = scaler.step(opt).skipped();
    scaler.update();
    if (skipped) continue;  // (none here: these gradients stay finite)
    // Plain SGD moves every element whose gradient is nonzero, in exact arithmetic.
    for (size_t i = 0; i < params.size(); ++i)
      pure ? count_updates<hg::Half>(params[i], before[i], r) : count_updates<float>(params[i], before[i], r);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    r.unchanged += count(hg::eq(params[i].detach(), initial[i]));
    r.elements += params[i].numel();
  }
  hg::no_grad guard;
  const auto logits = model.forward(pure ? d.test_x.to(hg::kHalf) : d.test_x);
  r.accuracy = static_cast<double>(count(hg::eq(logits.argmax(1), d.test_y))) / d.test_y.size(0);
  return r;
}

// The gap between float16 values near |v| (the next float16 above it, minus it).
double half_gap(double v) {
  const hg::Half h(static_cast<float>(v));
  return static_cast<float>(hg::Half::from_bits(h.bits + 1)) - static_cast<float>(h);
}

}  // namespace

int main() try {
  const auto train_set = hg::data::fashion_mnist(hg::data::kFashionMnistRoot, /*train=*/true);
  const auto test_set = hg::data::fashion_mnist(hg::data::kFashionMnistRoot, /*train=*/false);
  auto flat = [](const hg::Tensor& images) {
    return (images.reshape({images.size(0), 784}) - hg::data::kFashionMnistMean) / hg::data::kFashionMnistStd;
  };
  const Data d{flat(train_set.inputs().narrow(0, 0, kTrain)), train_set.targets().narrow(0, 0, kTrain),
               flat(test_set.inputs()), test_set.targets()};

  // Why updates get lost: the size of a typical fc1 weight and of its first gradient.
  hg::manual_seed(0);
  Mlp probe;
  hg::cross_entropy(probe.forward(d.x.narrow(0, 0, kBatch)), d.y.narrow(0, 0, kBatch)).backward();
  const double w_mean = probe.fc1.weight.detach().abs().mean().item<double>();
  const double g_mean = probe.fc1.weight.grad().abs().mean().item<double>();
  fmt::print("784-256-10 MLP, Fashion-MNIST: {} training images (one epoch, batch {}, plain SGD), {} test images\n\n",
             kTrain, kBatch, d.test_y.size(0));
  fmt::print("fc1.weight at the start: mean |w| = {:.3g}; float16 values there are {:.3g} apart, so an update\n"
             "below {:.3g} rounds back to w. Its first gradient: mean |g| = {:.3g}, so mean |lr x g| is\n",
             w_mean, half_gap(w_mean), half_gap(w_mean) / 2, g_mean);
  for (double lr : kLrs) fmt::print("  {:.3g} at lr {}\n", lr * g_mean, lr);

  fmt::print("\n{:>7}  {:<22} {:>9} {:>22} {:>26}\n", "lr", "weights", "test acc", "weights never changed",
             "updates lost (grad != 0)");
  std::vector<std::vector<Result>> results;
  for (double lr : kLrs) {
    auto& row = results.emplace_back();
    for (Mode m : {Mode::Float32, Mode::Amp, Mode::PureFloat16}) {
      const Result r = row.emplace_back(train(m, lr, d));
      fmt::print("{:>7}  {:<22} {:>8.2f}% {:>21.2f}% {:>25.2f}%\n", m == Mode::Float32 ? fmt::format("{}", lr) : "",
                 name(m), 100 * r.accuracy, 100.0 * r.unchanged / r.elements, 100.0 * r.lost / r.nonzero);
    }
  }
  const Result &f32 = results.back()[0], &amp = results.back()[1], &pure = results.back()[2];
  fmt::print("\nat lr {}: {} nonzero gradient elements over the epoch in float32, {} in pure float16:\n"
             "the gradients did not underflow; the updates made from them were rounded away.\n",
             kLrs[2], f32.nonzero, pure.nonzero);

  // The lesson's claims, checked.
  bool amp_ok = true, f32_ok = true, pure_ok = true;
  double prev_lost = 0;
  for (const auto& row : results) {
    const double lost = static_cast<double>(row[2].lost) / row[2].nonzero;
    amp_ok = amp_ok && std::fabs(row[1].accuracy - row[0].accuracy) < 0.01;
    f32_ok = f32_ok && static_cast<double>(row[0].lost) / row[0].nonzero < 0.01;
    pure_ok = pure_ok && lost > 0.1 && lost > prev_lost;
    prev_lost = lost;
  }
  bool ok = claim(amp_ok, "AMP's test accuracy within 1 point of float32's at every learning rate");
  ok &= claim(f32_ok, "float32 loses under 1% of its updates");
  ok &= claim(pure_ok, "pure float16 loses over 10% of its updates, more as the learning rate falls");
  ok &= claim(std::fabs(results[0][2].accuracy - results[0][0].accuracy) < 0.01,
              "at the largest learning rate pure float16 is within 1 point of float32");
  ok &= claim(pure.accuracy < amp.accuracy - 0.05, "at the smallest learning rate pure float16 is 5+ points below AMP");
  ok &= claim(static_cast<double>(pure.unchanged) / pure.elements > 0.25,
              "at the smallest learning rate over 25% of the pure float16 weights never changed");
  ok &= claim(pure.nonzero > 0.99 * f32.nonzero, "pure float16 has as many nonzero gradients as float32 (1%)");
  fmt::print("{}\n", ok ? "as the lesson says: AMP trains as float32 does; pure float16 loses updates, and at a small "
                          "learning rate most of them and the accuracy with them"
                        : "UNEXPECTED: the numbers above differ from the lesson (see above)");
  return ok ? 0 : 1;
} catch (const hg::Error& e) {
  fmt::print("lesson_pure_fp16: {}\n", e.what());
  if (!std::filesystem::is_directory(hg::data::kFashionMnistRoot))
    fmt::print("the lesson needs Fashion-MNIST: apt-get install dataset-fashion-mnist (scripts/setup does)\n");
  return 1;
}
