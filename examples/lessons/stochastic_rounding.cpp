// Lesson 6 of docs/amp.md: lost updates without master weights, and how
// stochastic rounding keeps them.
//
// Lesson 2 showed why AMP keeps float32 master weights: a bfloat16 weight w
// holds only values 2^(e-7) apart (e = floor(log2 |w|)), and an update
// smaller than half that gap rounds back to w. The master copy costs 4 bytes
// per parameter on top of the 2-byte bfloat16 one. Stochastic rounding (SR)
// keeps the parameters in bfloat16 alone: w_new = SR(w + update) rounds up
// with probability equal to the fraction of the gap, so each rounding is
// right on average, and small updates add up in expectation instead of
// vanishing (optim/stochastic_rounding.h; the random bits come from Philox
// keyed by a seed the optimizer draws from hg::manual_seed's generator).
//
// The same 784-256-10 MLP learns Fashion-MNIST from the same initial weights
// four ways, plain SGD with a learning rate small enough that most bfloat16
// updates are below half a gap:
//
//   float32                 weights, gradients and updates in float32;
//   bfloat16, round to nearest   model.to(kBFloat16), bfloat16 inputs, SGD
//                           rounds w - lr * g to nearest: PyTorch's default;
//   bfloat16 + SR           the same, SGD{.stochastic_rounding = true};
//   bfloat16 + master       the same, SGD{.master_weights = true} (a float32
//                           copy in the optimizer: the memory SR saves).
//
// It prints the test accuracies, writes a CSV of the test accuracy during
// training (--csv) and plots it with gnuplot where gnuplot is installed
// (--plot PNG). The program checks its own numbers and exits non-zero if
// they differ from what this text says (CTest runs it with --train 12000:
// under a minute on 2 cores; docs/amp.md has the full run's numbers). It
// needs the Fashion-MNIST files (Debian's dataset-fashion-mnist).
#include <halfgrad.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace hg = halfgrad;

namespace {

constexpr int64_t kBatch = 64;
constexpr int kEvalEvery = 50;  // steps between the CSV's test-accuracy points

struct Mlp : hg::nn::Module {
  hg::nn::Linear fc1{784, 256}, fc2{256, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  hg::Tensor forward(const hg::Tensor& x) { return fc2(hg::relu(fc1(x))); }
};

enum class Mode { Float32, Nearest, Stochastic, Master };
constexpr Mode kModes[] = {Mode::Float32, Mode::Nearest, Mode::Stochastic, Mode::Master};
const char* name(Mode m) {
  switch (m) {
    case Mode::Float32: return "float32";
    case Mode::Nearest: return "bfloat16, round to nearest";
    case Mode::Stochastic: return "bfloat16 + SR";
    case Mode::Master: return "bfloat16 + float32 master";
  }
  return "";
}
const char* key(Mode m) {
  switch (m) {
    case Mode::Float32: return "fp32";
    case Mode::Nearest: return "bf16_rtn";
    case Mode::Stochastic: return "bf16_sr";
    case Mode::Master: return "bf16_master";
  }
  return "";
}

struct Data {
  hg::Tensor x, y, test_x, test_y;  // images flattened to [N, 784], normalised
};

struct Result {
  double accuracy = 0;
  double unchanged = 0;                      // share of weight elements never changed
  std::vector<std::pair<int, double>> curve;  // (step, test accuracy)
  double seconds = 0;
};

int64_t count(const hg::Tensor& mask) { return hg::sum(mask).item<int64_t>(); }

double accuracy(Mlp& model, const hg::Tensor& x, const hg::Tensor& y) {
  hg::no_grad guard;
  return static_cast<double>(count(hg::eq(model.forward(x).argmax(1), y))) / y.size(0);
}

Result train(Mode mode, const Data& d, double lr, int epochs, const hg::Tensor& probe_x, const hg::Tensor& probe_y) {
  hg::manual_seed(0);  // the same initial weights (rounded to bfloat16 where stored so) in every run
  Mlp model;
  const bool low = mode != Mode::Float32;
  if (low) model.to(hg::kBFloat16);  // no AMP: the parameters themselves are bfloat16
  hg::optim::SGD opt(model.parameters(), {.lr = lr,
                                          .master_weights = mode == Mode::Master,
                                          .stochastic_rounding = mode == Mode::Stochastic});
  const auto params = model.parameters();
  std::vector<hg::Tensor> initial;
  for (const auto& p : params) initial.push_back(p.detach().clone());
  const hg::Tensor x = low ? d.x.to(hg::kBFloat16) : d.x;
  const hg::Tensor px = low ? probe_x.to(hg::kBFloat16) : probe_x;

  Result r;
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = d.x.size(0);
  int step = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t b = 0; b + kBatch <= n; b += kBatch, ++step) {
      if (step % kEvalEvery == 0) r.curve.emplace_back(step, accuracy(model, px, probe_y));
      const hg::Tensor loss = hg::cross_entropy(model.forward(x.narrow(0, b, kBatch)), d.y.narrow(0, b, kBatch));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
  r.curve.emplace_back(step, accuracy(model, px, probe_y));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t unchanged = 0, elements = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    unchanged += count(hg::eq(params[i].detach(), initial[i]));
    elements += params[i].numel();
  }
  r.unchanged = static_cast<double>(unchanged) / elements;
  r.accuracy = accuracy(model, low ? d.test_x.to(hg::kBFloat16) : d.test_x, d.test_y);
  return r;
}

// The gap between bfloat16 values near |v|.
double bf16_gap(double v) {
  const hg::BFloat16 b(static_cast<float>(v));
  return static_cast<float>(hg::BFloat16::from_bits(b.bits + 1)) - static_cast<float>(b);
}

bool claim(bool holds, const std::string& what) {
  if (!holds) fmt::print("differs from the lesson: {}\n", what);
  return holds;
}

struct Args {
  int64_t train = 60000;
  int epochs = 1;
  double lr = 0.003;
  std::string csv, plot;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) hg::fail("lesson_stochastic_rounding: {} needs a value", arg);
      return argv[++i];
    };
    if (arg == "--train") a.train = std::stoll(value());
    else if (arg == "--epochs") a.epochs = std::stoi(value());
    else if (arg == "--lr") a.lr = std::stod(value());
    else if (arg == "--csv") a.csv = value();
    else if (arg == "--plot") a.plot = value();
    else
      hg::fail("lesson_stochastic_rounding: unknown argument {}; usage: [--train N (<= 60000)] [--epochs E] [--lr LR] "
               "[--csv FILE] [--plot PNG (needs --csv and gnuplot)]",
               arg);
  }
  HG_CHECK(a.train >= kBatch && a.train <= 60000 && a.epochs >= 1, "lesson_stochastic_rounding: --train {} --epochs {}",
           a.train, a.epochs);
  return a;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args args = parse(argc, argv);
  const auto train_set = hg::data::fashion_mnist(hg::data::kFashionMnistRoot, /*train=*/true);
  const auto test_set = hg::data::fashion_mnist(hg::data::kFashionMnistRoot, /*train=*/false);
  auto flat = [](const hg::Tensor& images) {
    return (images.reshape({images.size(0), 784}) - hg::data::kFashionMnistMean) / hg::data::kFashionMnistStd;
  };
  const Data d{flat(train_set.inputs().narrow(0, 0, args.train)), train_set.targets().narrow(0, 0, args.train),
               flat(test_set.inputs()), test_set.targets()};
  // The curve's points: the first 2000 test images (the final accuracy uses all 10000).
  const hg::Tensor probe_x = d.test_x.narrow(0, 0, 2000), probe_y = d.test_y.narrow(0, 0, 2000);

  // Why bfloat16 loses updates here: a typical fc1 weight against its first update.
  hg::manual_seed(0);
  Mlp probe;
  hg::cross_entropy(probe.forward(d.x.narrow(0, 0, kBatch)), d.y.narrow(0, 0, kBatch)).backward();
  const double w_mean = probe.fc1.weight.detach().abs().mean().item<double>();
  const double g_mean = probe.fc1.weight.grad().abs().mean().item<double>();
  fmt::print("784-256-10 MLP, Fashion-MNIST: {} training images x {} epoch(s), batch {}, plain SGD lr {}; "
             "{} test images\n\n",
             args.train, args.epochs, kBatch, args.lr, d.test_y.size(0));
  fmt::print("fc1.weight at the start: mean |w| = {:.3g}; bfloat16 values there are {:.3g} apart, so an update\n"
             "below {:.3g} rounds back to w under round-to-nearest. Its first gradient: mean |g| = {:.3g}, so the\n"
             "mean update lr x |g| is {:.3g}: most updates are below half a gap.\n\n",
             w_mean, bf16_gap(w_mean), bf16_gap(w_mean) / 2, g_mean, args.lr * g_mean);

  fmt::print("{:<28} {:>9} {:>22} {:>9}\n", "parameters", "test acc", "weights never changed", "seconds");
  std::vector<Result> results;
  for (Mode m : kModes) {
    const Result& r = results.emplace_back(train(m, d, args.lr, args.epochs, probe_x, probe_y));
    fmt::print("{:<28} {:>8.2f}% {:>21.2f}% {:>9.1f}\n", name(m), 100 * r.accuracy, 100 * r.unchanged, r.seconds);
  }
  const Result &f32 = results[0], &rtn = results[1], &sr = results[2], &master = results[3];
  fmt::print("\nbytes per parameter (weights + optimizer state, plain SGD has none; docs/amp.md has Adam's):\n"
             "  float32 {}, AMP's float32 master + bfloat16 copy {}, bfloat16 + float32 master in the optimizer {}, "
             "bfloat16 + SR {}\n",
             4, 6, 6, 2);

  if (!args.csv.empty()) {
    {
    std::ofstream out(args.csv);
    out << "step";
    for (Mode m : kModes) out << ',' << key(m);
    out << '\n';
    for (size_t i = 0; i < f32.curve.size(); ++i) {
      out << f32.curve[i].first;
      for (const Result& r : results) out << ',' << r.curve[i].second;
      out << '\n';
    }
    HG_CHECK(out.good(), "lesson_stochastic_rounding: could not write {}", args.csv);
    }  // closed: gnuplot reads it
    fmt::print("test accuracy during training (first 2000 test images): {}\n", args.csv);
    if (!args.plot.empty()) {
      const std::string cmd = fmt::format(
          "command -v gnuplot >/dev/null && gnuplot -e \"csv='{}'; out='{}'; title='plain SGD lr {}, {} images x {} "
          "epoch(s), batch {}'\" '{}'",
          args.csv, args.plot, args.lr, args.train, args.epochs, kBatch, HALFGRAD_LESSON_PLOT);
      if (std::system(cmd.c_str()) == 0) fmt::print("plot: {}\n", args.plot);
      else fmt::print("no plot: gnuplot is not installed (apt-get install gnuplot-nox)\n");
    }
  }

  // The lesson's claims, checked.
  bool ok = claim(std::fabs(sr.accuracy - f32.accuracy) < 0.01, "bfloat16 + SR within 1 point of float32");
  ok &= claim(std::fabs(master.accuracy - f32.accuracy) < 0.01, "bfloat16 + master within 1 point of float32");
  ok &= claim(rtn.accuracy < f32.accuracy - 0.03, "bfloat16 round-to-nearest 3+ points below float32");
  ok &= claim(rtn.unchanged > 0.25 && sr.unchanged < 0.1,
              "over 25% of the round-to-nearest weights never changed, under 10% with SR");
  fmt::print("{}\n", ok ? "as the lesson says: without master weights bfloat16 rounds most small updates away; "
                          "stochastic rounding keeps them on average and trains as float32 does"
                        : "UNEXPECTED: the numbers above differ from the lesson (see above)");
  return ok ? 0 : 1;
} catch (const hg::Error& e) {
  fmt::print("lesson_stochastic_rounding: {}\n", e.what());
  if (!std::filesystem::is_directory(hg::data::kFashionMnistRoot))
    fmt::print("the lesson needs Fashion-MNIST: apt-get install dataset-fashion-mnist (scripts/setup does)\n");
  return 1;
}
