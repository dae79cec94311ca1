// Lesson 7 of docs/amp.md: fp8 ranges, and why a scale per tensor.
//
// fp8 has 8 bits where bfloat16 has 16: E4M3 keeps 3 fraction bits and
// spans 2^-9 .. 448, E5M2 keeps 2 and spans 2^-16 .. 57344 (core/float8.h).
// That is 18 and 32 binades; a tensor's values must land in them, or they
// saturate at the top (E4M3 has no infinity) or round to zero at the bottom.
// A gradient of 1e-4 is below E4M3's smallest subnormal; cast as it is, it
// becomes 0. So every fp8 tensor is stored with a scale of its own,
// round(x * s) with s = fp8_max / amax(x): its largest value lands on the
// format's largest, and the rest keep their relative precision (amp/fp8.h).
//
// Part 1 measures the two formats from their 256 bit patterns, then casts
// real and gradient-like tensors with and without the scale, counting the
// values flushed to zero and saturated.
//
// Part 2 trains a 784-256-128-10 MLP on Fashion-MNIST three ways from the
// same initial weights: float32; bf16 AMP (autocast); and the fp8 recipe
// (Transformer Engine's delayed scaling, amp::Fp8Recipe's defaults: Hybrid,
// history 1024, max) inside the same bf16 autocast, as Transformer Engine's
// users run it, so that only the three Linear GEMMs differ from bf16 AMP.
// "Delayed": the scale a step uses comes from the amaxes of earlier steps,
// kept in each layer's amax history; the lesson records fc1's and fc3's
// amaxes and scales (--csv) and plots them with the losses (--plot).
// On this machine the fp8 GEMMs are an exact CPU emulation (fp8 values,
// float32 sums), the numbers an H100 computes up to the order of the sums.
//
// The program checks its own numbers and exits non-zero if they differ from
// what this text says (CTest runs it on part of the training set; docs/amp.md
// has the full run's numbers). It needs Debian's dataset-fashion-mnist.
#include <halfgrad.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace hg = halfgrad;

namespace {

// ---------------------------------------------------------------- part 1

struct Format {
  const char* name;
  hg::DType dtype;
  float (*decode)(uint8_t);
  float max;  // what the recipe's scales use (kE4M3Max, kE5M2Max)
};
const Format kE4M3{"E4M3", hg::float8_e4m3fn, hg::e4m3fn_bits_to_float, hg::kE4M3Max};
const Format kE5M2{"E5M2", hg::float8_e5m2, hg::e5m2_bits_to_float, hg::kE5M2Max};

struct Range {
  float largest = 0, smallest_normal = 0, smallest_subnormal = 0, gap_above_one = 0;
  int finite = 0, special = 0, per_binade = 0;  // values per full binade [2^e, 2^(e+1))
};

// Everything from the decoded patterns: no constant of the format is assumed.
Range measure(const Format& f) {
  Range r;
  std::vector<float> pos;
  for (int b = 0; b < 256; ++b) {
    const float v = f.decode(static_cast<uint8_t>(b));
    if (!std::isfinite(v)) ++r.special;
    else {
      ++r.finite;
      if (v > 0) pos.push_back(v);
    }
  }
  std::sort(pos.begin(), pos.end());
  r.smallest_subnormal = pos.front();
  r.largest = pos.back();
  r.gap_above_one = *std::upper_bound(pos.begin(), pos.end(), 1.0f) - 1.0f;
  std::map<int, int> binades;  // floor(log2 v) -> how many values
  for (float v : pos) ++binades[std::ilogb(v)];
  for (auto [e, n] : binades) r.per_binade = std::max(r.per_binade, n);
  // Subnormals are evenly spaced from 0, so their binades hold fewer values:
  // the first full binade starts at the smallest normal.
  for (auto [e, n] : binades)
    if (n == r.per_binade) {
      r.smallest_normal = std::ldexp(1.0f, e);
      break;
    }
  return r;
}

struct Cast {
  double zero = 0;       // share of the nonzero values that became 0
  double saturated = 0;  // share clipped to +-fp8_max
  double error = 0;      // sum |x' - x| / sum |x|, x' the value read back (times 1/s)
};

// x cast to `f` through the recipe's quantiser (hg::fp8_quantize), with scale s, and read back.
Cast cast(const hg::Tensor& x, const Format& f, float s) {
  const auto scale = hg::full({1}, s), amax = hg::zeros({1});
  const auto saturated = hg::zeros({1}, hg::kLong);
  const hg::Tensor back = hg::fp8_quantize(x, scale, f.dtype, amax, saturated).to(hg::kFloat) / s;
  const double zeros_in = hg::sum(hg::eq(x, 0.0)).item<double>();  // a 0 stays 0
  Cast c;
  c.zero = (hg::sum(hg::eq(back, 0.0)).item<double>() - zeros_in) / (x.numel() - zeros_in);
  c.saturated = static_cast<double>(saturated.item<int64_t>()) / x.numel();
  c.error = hg::sum(hg::abs(back - x)).item<double>() / hg::sum(hg::abs(x)).item<double>();
  return c;
}

float amax_of(const hg::Tensor& x) { return hg::amax(hg::abs(x)).item<float>(); }

// ---------------------------------------------------------------- part 2

constexpr int64_t kBatch = 64;
constexpr int kReadEvery = 10;  // steps between reads of the losses and the fp8 state

struct Mlp : hg::nn::Module {
  hg::nn::Linear fc1{784, 256}, fc2{256, 128}, fc3{128, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  hg::Tensor forward(const hg::Tensor& x) { return fc3(hg::relu(fc2(hg::relu(fc1(x))))); }
};

enum class Mode { Float32, Bf16, Fp8 };
const char* name(Mode m) {
  switch (m) {
    case Mode::Float32: return "float32";
    case Mode::Bf16: return "bf16 AMP";
    case Mode::Fp8: return "fp8 recipe (in bf16 AMP)";
  }
  return "";
}

struct Data {
  hg::Tensor x, y, test_x, test_y;  // images flattened to [N, 784], normalised
};

// One layer's fp8 state per step: amax[step][column] as recorded, and the
// scales read every kReadEvery steps (NaN between reads).
struct LayerTrace {
  std::vector<std::array<float, 3>> amax, scale;
  std::array<int64_t, 3> saturated{};
};

struct Result {
  double accuracy = 0, seconds = 0;
  std::vector<float> loss;  // per step
  LayerTrace fc1, fc3;      // fp8 only
};

// The last n steps' amaxes are rows 0..n-1 of the history (row 0 the newest):
// one read gives them all, and the current scales.
void read_fp8(const hg::nn::Linear& layer, int n, LayerTrace& t) {
  const auto rows = layer.fp8.amax_history.narrow(0, 0, n).contiguous().to_vector<float>();
  const auto scale = layer.fp8.scale.to_vector<float>();
  for (int r = n - 1; r >= 0; --r) {
    t.amax.push_back({rows[r * 3], rows[r * 3 + 1], rows[r * 3 + 2]});
    t.scale.push_back({NAN, NAN, NAN});
  }
  t.scale.back() = {scale[0], scale[1], scale[2]};
}

Result train(Mode mode, const Data& d, const hg::amp::Fp8Recipe& recipe, int epochs) {
  hg::manual_seed(0);  // the same initial weights and batches in every run
  Mlp model;
  if (mode == Mode::Fp8) hg::nn::enable_fp8(model, recipe);  // before the optimizer: buffers, not parameters
  hg::optim::Adam opt(model.parameters(), {.lr = 1e-3});
  const bool amp = mode != Mode::Float32, fp8 = mode == Mode::Fp8;
  auto forward = [&](const hg::Tensor& x) {
    hg::amp::autocast bf16(hg::DeviceType::CPU, std::nullopt, amp);  // bfloat16, the CPU's default
    hg::amp::fp8_autocast region(recipe, fp8);                        // the Linear GEMMs in fp8
    return model.forward(x);
  };

  Result r;
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = d.x.size(0);
  std::vector<hg::Tensor> losses;  // read every kReadEvery steps, not every step
  auto read = [&] {
    for (float l : hg::stack(losses).to_vector<float>()) r.loss.push_back(l);
    if (fp8) {
      read_fp8(model.fc1, static_cast<int>(losses.size()), r.fc1);
      read_fp8(model.fc3, static_cast<int>(losses.size()), r.fc3);
    }
    losses.clear();
  };
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const hg::Tensor order = hg::randperm(n);
    for (int64_t b = 0; b + kBatch <= n; b += kBatch) {
      const hg::Tensor idx = order.narrow(0, b, kBatch);
      const hg::Tensor loss = hg::cross_entropy(forward(d.x.index_select(0, idx)), d.y.index_select(0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses.push_back(loss.detach());
      if (static_cast<int>(losses.size()) == kReadEvery) read();
    }
  }
  if (!losses.empty()) read();
  if (fp8) {
    const auto s1 = model.fc1.fp8.saturated.to_vector<int64_t>(), s3 = model.fc3.fp8.saturated.to_vector<int64_t>();
    std::copy(s1.begin(), s1.end(), r.fc1.saturated.begin());
    std::copy(s3.begin(), s3.end(), r.fc3.saturated.begin());
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    hg::no_grad guard;  // the test set under the same precision (fp8 GEMMs for the fp8 model)
    r.accuracy = hg::sum(hg::eq(forward(d.test_x).argmax(1), d.test_y)).item<double>() / d.test_y.size(0);
  }
  return r;
}

// Delayed scaling, checked from the recorded amaxes: the scale read after
// step t was made at the start of step t from the max over the history's rows,
// the amaxes of steps t-L .. t-1 (scale 1 while they are all 0).
bool scales_follow_history(const LayerTrace& t, int64_t history_len, const float fp8_max[3]) {
  for (size_t step = 0; step < t.scale.size(); ++step) {
    if (std::isnan(t.scale[step][0])) continue;
    for (int c = 0; c < 3; ++c) {
      float m = 0;
      for (size_t k = step >= static_cast<size_t>(history_len) ? step - history_len : 0; k < step; ++k)
        m = std::max(m, t.amax[k][c]);
      const float expect = m > 0 ? fp8_max[c] / m : 1.0f;
      if (t.scale[step][c] != expect) {
        fmt::print("step {}, column {}: scale {} but fp8_max / max(history) = {}\n", step, c, t.scale[step][c], expect);
        return false;
      }
    }
  }
  return true;
}

bool claim(bool holds, const std::string& what) {
  if (!holds) fmt::print("differs from the lesson: {}\n", what);
  return holds;
}

struct Args {
  int64_t train = 60000;
  int epochs = 1;
  int64_t history = hg::amp::Fp8Recipe{}.amax_history_len;
  std::string csv, plot;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) hg::fail("lesson_fp8_ranges: {} needs a value", arg);
      return argv[++i];
    };
    if (arg == "--train") a.train = std::stoll(value());
    else if (arg == "--epochs") a.epochs = std::stoi(value());
    else if (arg == "--history") a.history = std::stoll(value());
    else if (arg == "--csv") a.csv = value();
    else if (arg == "--plot") a.plot = value();
    else
      hg::fail("lesson_fp8_ranges: unknown argument {}; usage: [--train N (<= 60000)] [--epochs E] [--history L] [--csv FILE] "
               "[--plot PNG (needs --csv and gnuplot)]",
               arg);
  }
  HG_CHECK(a.train >= kBatch && a.train <= 60000 && a.epochs >= 1 && a.history >= kReadEvery,
           "lesson_fp8_ranges: --train {} --epochs {} --history {} (at least {})", a.train, a.epochs, a.history,
           kReadEvery);
  return a;
}

void write_csv(const std::string& path, const std::vector<Result>& runs) {
  std::ofstream out(path);
  out << "step,loss_fp32,loss_bf16,loss_fp8";
  for (const char* layer : {"fc1", "fc3"})
    for (const char* what : {"amax", "scale"})
      for (const char* col : {"x", "w", "dy"}) out << ',' << layer << '_' << what << '_' << col;
  out << '\n';
  const Result& f8 = runs[2];
  for (size_t s = 0; s < f8.loss.size(); ++s) {
    out << s << ',' << runs[0].loss[s] << ',' << runs[1].loss[s] << ',' << f8.loss[s];
    for (const LayerTrace* t : {&f8.fc1, &f8.fc3}) {
      for (float v : t->amax[s]) out << ',' << v;
      for (float v : t->scale[s]) out << ',' << (std::isnan(v) ? std::string() : fmt::format("{}", v));  // blank: not read
    }
    out << '\n';
  }
  HG_CHECK(out.good(), "lesson_fp8_ranges: could not write {}", path);
}

}  // namespace

int main(int argc, char** argv) try {
  const Args args = parse(argc, argv);

  // ---- Part 1: what the formats hold.
  const Range e4 = measure(kE4M3), e5 = measure(kE5M2);
  fmt::print("the fp8 formats, measured from their 256 bit patterns (hg::e4m3fn_bits_to_float, e5m2_bits_to_float)\n\n");
  fmt::print("{:<44} {:>12} {:>12}\n", "", "E4M3", "E5M2");
  fmt::print("{:<44} {:>12g} {:>12g}\n", "largest finite", e4.largest, e5.largest);
  fmt::print("{:<44} {:>12} {:>12}\n", "smallest normal", fmt::format("2^{}", std::ilogb(e4.smallest_normal)),
             fmt::format("2^{}", std::ilogb(e5.smallest_normal)));
  fmt::print("{:<44} {:>12} {:>12}\n", "smallest subnormal", fmt::format("2^{}", std::ilogb(e4.smallest_subnormal)),
             fmt::format("2^{}", std::ilogb(e5.smallest_subnormal)));
  fmt::print("{:<44} {:>12.3g} {:>12.3g}\n", "", e4.smallest_subnormal, e5.smallest_subnormal);
  fmt::print("{:<44} {:>12.1f} {:>12.1f}\n", "binades, smallest subnormal to largest", std::log2(e4.largest / e4.smallest_subnormal),
             std::log2(e5.largest / e5.smallest_subnormal));
  fmt::print("{:<44} {:>12} {:>12}\n", "values per binade (normal range)", e4.per_binade, e5.per_binade);
  fmt::print("{:<44} {:>12g} {:>12g}\n", "gap above 1 (relative spacing)", e4.gap_above_one, e5.gap_above_one);
  fmt::print("{:<44} {:>11.2f}% {:>11.2f}%\n", "largest relative rounding error (half a gap)", 50 * e4.gap_above_one,
             50 * e5.gap_above_one);
  fmt::print("{:<44} {:>12} {:>12}\n", "finite values / NaN and inf patterns", fmt::format("{} / {}", e4.finite, e4.special),
             fmt::format("{} / {}", e5.finite, e5.special));
  const float bf_max = hg::BFloat16::from_bits(0x7f7f), bf_min = hg::BFloat16::from_bits(0x0001);
  fmt::print("(bfloat16, for comparison: {:.3g} .. {:.3g}, {:.0f} binades, 128 values per binade)\n\n", bf_min, bf_max,
             std::log2(double(bf_max) / bf_min));

  // A model's tensors: the first batch through the untrained MLP in float32.
  const auto train_set = hg::data::fashion_mnist(hg::data::kFashionMnistRoot, /*train=*/true);
  const auto test_set = hg::data::fashion_mnist(hg::data::kFashionMnistRoot, /*train=*/false);
  auto flat = [](const hg::Tensor& images) {
    return (images.reshape({images.size(0), 784}) - hg::data::kFashionMnistMean) / hg::data::kFashionMnistStd;
  };
  const Data d{flat(train_set.inputs().narrow(0, 0, args.train)), train_set.targets().narrow(0, 0, args.train),
               flat(test_set.inputs()), test_set.targets()};
  hg::manual_seed(0);
  Mlp probe;
  const hg::Tensor x0 = d.x.narrow(0, 0, kBatch);
  // The layers' outputs: their gradients (dY) are what the backward quantises.
  const hg::Tensor h1 = probe.fc1(x0), logits = probe.fc3(hg::relu(probe.fc2(hg::relu(h1))));
  const auto dys = hg::autograd::grad({hg::cross_entropy(logits, d.y.narrow(0, 0, kBatch))}, {h1, logits});
  hg::manual_seed(1);
  const hg::Tensor small = hg::randn({65536}) * 1e-3;  // gradient-like values, N(0, 1e-3^2)
  struct Case {
    std::string what;
    hg::Tensor x;
  };
  const std::vector<Case> cases = {
      {"fc1's input (normalised pixels)", x0},
      {"fc1.weight at init", probe.fc1.weight.detach()},
      {"N(0, 1e-3)", small},
      {"fc1's output gradient (a real dY)", dys[0]},
      {"fc3's output gradient (the logits')", dys[1]},
      {"the same x 2^16 (a GradScaler's scale)", dys[1] * 65536.0},
  };
  fmt::print("each tensor cast to fp8 and read back, without a scale (s = 1) and with s = fp8_max / amax\n"
             "(to zero: share of its nonzero values that became 0; saturated: clipped to +-fp8_max;\n"
             " error: sum |x' - x| / sum |x|)\n\n");
  fmt::print("{:<42} {:>9} {:>5} | {:^26} | {:^26}\n", "", "", "", "s = 1", "s = fp8_max / amax");
  fmt::print("{:<42} {:>9} {:>5} | {:>8} {:>9} {:>7} | {:>8} {:>9} {:>7}\n", "tensor", "amax", "fmt", "to zero",
             "saturated", "error", "to zero", "saturated", "error");
  std::map<std::string, std::map<std::string, std::pair<Cast, Cast>>> table;  // what -> format -> (s = 1, scaled)
  for (const Case& c : cases) {
    const float amax = amax_of(c.x);
    for (const Format* f : {&kE4M3, &kE5M2}) {
      const Cast raw = cast(c.x, *f, 1.0f), scaled = cast(c.x, *f, f->max / amax);
      table[c.what][f->name] = {raw, scaled};
      fmt::print("{:<42} {:>9.3g} {:>5} | {:>7.2f}% {:>8.2f}% {:>6.1f}% | {:>7.2f}% {:>8.2f}% {:>6.1f}%\n",
                 f == &kE4M3 ? c.what : "", amax, f->name, 100 * raw.zero, 100 * raw.saturated, 100 * raw.error,
                 100 * scaled.zero, 100 * scaled.saturated, 100 * scaled.error);
    }
  }
  fmt::print("\n");

  // ---- Part 2: training under each recipe.
  // Transformer Engine's defaults: Hybrid, history 1024, max, margin 0 (--history changes the length).
  const hg::amp::Fp8Recipe recipe{.amax_history_len = args.history};
  fmt::print("784-256-128-10 MLP, Fashion-MNIST: {} training images x {} epoch(s), batch {}, Adam lr 1e-3; "
             "{} test images\nfp8 recipe: Hybrid (E4M3 forward, E5M2 gradients), amax history {}, max, margin {}, "
             "inside bf16 autocast\n\n",
             args.train, args.epochs, kBatch, d.test_y.size(0), recipe.amax_history_len, recipe.margin);
  fmt::print("{:<28} {:>9} {:>12} {:>9}\n", "run", "test acc", "final loss", "seconds");
  std::vector<Result> runs;
  for (Mode m : {Mode::Float32, Mode::Bf16, Mode::Fp8}) {
    const Result& r = runs.emplace_back(train(m, d, recipe, args.epochs));
    double tail = 0;  // the mean loss of the last 50 steps
    const size_t k = std::min<size_t>(50, r.loss.size());
    for (size_t i = r.loss.size() - k; i < r.loss.size(); ++i) tail += r.loss[i] / k;
    fmt::print("{:<28} {:>8.2f}% {:>12.4f} {:>9.1f}\n", name(m), 100 * r.accuracy, tail, r.seconds);
  }
  const Result &f32 = runs[0], &bf16 = runs[1], &f8 = runs[2];

  // What delayed scaling did in the fp8 run.
  const float fwd_max[3] = {hg::kE4M3Max, hg::kE4M3Max, hg::kE5M2Max};
  fmt::print("\nthe fp8 run's scales (s = fp8_max / amax over the last {} steps; x, W in E4M3, dY in E5M2):\n",
             recipe.amax_history_len);
  fmt::print("{:<6} {:<4} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10}\n", "layer", "", "first amax", "last amax",
             "max amax", "final scale", "saturated", "share");
  const char* cols[3] = {"x", "W", "dY"};
  const double steps = static_cast<double>(f8.loss.size());
  for (auto [layer, t, in, out] : {std::tuple{"fc1", &f8.fc1, 784, 256}, std::tuple{"fc3", &f8.fc3, 128, 10}}) {
    const double per_step[3] = {double(kBatch) * in, double(out) * in, double(kBatch) * out};  // elements of x, W, dY
    for (int c = 0; c < 3; ++c) {
      float mx = 0;
      for (const auto& a : t->amax) mx = std::max(mx, a[c]);
      fmt::print("{:<6} {:<4} {:>12.4g} {:>12.4g} {:>12.4g} {:>12.4g} {:>10} {:>9.4f}%\n", c == 0 ? layer : "",
                 cols[c], t->amax.front()[c], t->amax.back()[c], mx, t->scale.back()[c], t->saturated[c],
                 100 * t->saturated[c] / (steps * per_step[c]));
    }
  }
  fmt::print("(saturated: values past the amax the delayed scale was made from, clipped to it; share: of all the\n"
             " values quantised over the run)\n");

  if (!args.csv.empty()) {
    write_csv(args.csv, runs);
    fmt::print("\nlosses and fc1's, fc3's amaxes per step, scales every {} steps: {}\n", kReadEvery, args.csv);
    if (!args.plot.empty()) {
      const std::string cmd = fmt::format(
          "command -v gnuplot >/dev/null && gnuplot -e \"csv='{}'; out='{}'; title='{} images x {} epoch(s), batch "
          "{}, Adam lr 1e-3; fp8: Hybrid, history {}'\" '{}'",
          args.csv, args.plot, args.train, args.epochs, kBatch, recipe.amax_history_len, HALFGRAD_LESSON_PLOT);
      if (std::system(cmd.c_str()) == 0) fmt::print("plot: {}\n", args.plot);
      else fmt::print("no plot: gnuplot is not installed (apt-get install gnuplot-nox)\n");
    }
  }

  // The lesson's claims, checked.
  fmt::print("\n");
  bool ok = claim(e4.largest == hg::kE4M3Max && e5.largest == hg::kE5M2Max && e4.smallest_normal == 0x1p-6f &&
                      e5.smallest_normal == 0x1p-14f && e4.smallest_subnormal == 0x1p-9f &&
                      e5.smallest_subnormal == 0x1p-16f && e4.per_binade == 8 && e5.per_binade == 4,
                  "E4M3: 448, 2^-6, 2^-9, 8 per binade; E5M2: 57344, 2^-14, 2^-16, 4 per binade");
  const auto& g = table["N(0, 1e-3)"];
  ok &= claim(g.at("E4M3").first.zero > 0.5 && g.at("E4M3").second.zero < 0.001,
              "N(0, 1e-3) in E4M3: over half flushed to 0 without a scale, under 0.1% with one");
  const auto& real = table["fc1's output gradient (a real dY)"];
  ok &= claim(real.at("E4M3").first.zero > 0.5 && real.at("E4M3").second.zero < 0.01 &&
                  real.at("E5M2").second.zero < 0.01,
              "the real dY: over half flushed to 0 in E4M3 without a scale, under 1% with one, in E4M3 and E5M2");
  const auto& big = table["the same x 2^16 (a GradScaler's scale)"];
  ok &= claim(big.at("E4M3").first.saturated > 0.001 && big.at("E4M3").second.saturated == 0 &&
                  big.at("E5M2").first.saturated == 0,
              "the logits' gradient x 2^16: E4M3 saturates without a scale, not with one; E5M2 holds it");
  for (const auto& [what, per] : table)
    for (const auto& [fmt_name, rs] : per)
      ok &= claim(rs.second.error < (fmt_name == std::string("E4M3") ? 0.04 : 0.08),
                  fmt::format("{} in {} with its scale: error under {}", what, fmt_name,
                             fmt_name == std::string("E4M3") ? "4%" : "8%"));
  ok &= claim(scales_follow_history(f8.fc1, recipe.amax_history_len, fwd_max) &&
                  scales_follow_history(f8.fc3, recipe.amax_history_len, fwd_max),
              "every scale read equals fp8_max / the max of the earlier steps' amaxes (delayed scaling)");
  ok &= claim(std::fabs(bf16.accuracy - f32.accuracy) < 0.01, "bf16 AMP within 1 point of float32");
  ok &= claim(std::fabs(f8.accuracy - bf16.accuracy) < 0.01, "the fp8 recipe within 1 point of bf16 AMP");
  fmt::print("{}\n", ok ? "as the lesson says: unscaled, fp8 flushes small values to zero and saturates large ones; "
                          "with a scale per tensor they fit, and the fp8 recipe trains as bf16 AMP does"
                        : "UNEXPECTED: the numbers above differ from the lesson (see above)");
  return ok ? 0 : 1;
} catch (const hg::Error& e) {
  fmt::print("lesson_fp8_ranges: {}\n", e.what());
  if (!std::filesystem::is_directory(hg::data::kFashionMnistRoot))
    fmt::print("the lesson needs Fashion-MNIST: apt-get install dataset-fashion-mnist (scripts/setup does)\n");
  return 1;
}
