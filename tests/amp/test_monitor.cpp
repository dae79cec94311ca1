// amp::Monitor (amp/monitor.h): per-parameter gradient and per-module output
// statistics every N steps, checked against the tensors themselves; the
// first non-finite gradient (in backward's order) and op named for an inf
// planted in one layer's gradient and for an overflow planted in one
// activation; the scaler floor's Error carrying the monitor's line; JSON.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;

namespace {

// x * k: its backward multiplies the gradient by k too (an amplifier to plant overflows with).
struct Amplify : hg::nn::Module {
  double k;
  explicit Amplify(double k_) : k(k_) {}
  Tensor forward(const Tensor& x) const { return x * k; }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
};

const hg::amp::TensorStats* find(const std::vector<hg::amp::TensorStats>& v, const std::string& name) {
  for (const auto& s : v)
    if (s.name == name) return &s;
  return nullptr;
}

// One AMP step: zero_grad, forward under autocast(dtype), scaled backward, step, update.
template <typename Model>
void amp_step(Model& model, hg::amp::GradScaler& scaler, hg::optim::Optimizer& opt, const Tensor& x,
              const Tensor& target, hg::DType dtype) {
  opt.zero_grad();
  Tensor loss;
  if (dtype == hg::kFloat) {
    loss = hg::cross_entropy(model(x), target);
  } else {
    hg::amp::autocast region(hg::kCPU, dtype);
    loss = hg::cross_entropy(model(x), target);
  }
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
}

// Linear 0 and 2 without bias, so the Amplify's input (and layer 4's) is small.
// Braces: the layers draw their initial weights left to right with every
// compiler (a parenthesised argument list's order is unspecified: g++ and
// clang differ, and so would the non-finite values these tests name).
hg::nn::Sequential planted_gradient_overflow() {
  return hg::nn::Sequential{hg::nn::Linear(4, 8, false), hg::nn::ReLU(), hg::nn::Linear(8, 8, false), Amplify(1000.0),
                            hg::nn::Linear(8, 2)};
}

}  // namespace

TEST_CASE("Monitor records gradients (unscaled and as scaled) and module outputs every N steps", "[amp][monitor]") {
  hg::manual_seed(3);
  hg::nn::Sequential model(hg::nn::Linear(8, 16), hg::nn::ReLU(), hg::nn::Linear(16, 4));
  hg::amp::GradScaler scaler({.init_scale = 1024.0});
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01});
  hg::amp::Monitor monitor(model, scaler, {.every = 2});
  const Tensor x = hg::randn({32, 8});
  const Tensor target = hg::randint(0, 4, {32});
  std::vector<Tensor> scaled_grads;
  for (int step = 0; step < 5; ++step) {
    if (step == 2) {  // an evaluation pass between steps is not the recorded step's forward
      hg::no_grad guard;
      model(x);
    }
    opt.zero_grad();
    Tensor loss;
    {
      hg::amp::autocast region(hg::kCPU, hg::kBFloat16);
      loss = hg::cross_entropy(model(x), target);
    }
    scaler.scale(loss).backward();
    if (step == 4)
      for (const Tensor& p : model.parameters()) scaled_grads.push_back(p.grad().clone());
    scaler.step(opt);
    scaler.update();
  }
  CHECK(monitor.steps() == 5);
  REQUIRE(monitor.records().size() == 3);
  CHECK(monitor.records()[0].step == 0);
  CHECK(monitor.records()[1].step == 2);
  const hg::amp::MonitorRecord& r = monitor.records()[2];
  CHECK(r.step == 4);
  CHECK(r.scale == 1024.0);
  REQUIRE(r.skipped.has_value());
  CHECK_FALSE(*r.skipped);
  REQUIRE(r.grads.size() == 4);
  const std::vector<std::string> names{"0.weight", "0.bias", "2.weight", "2.bias"};
  for (size_t i = 0; i < 4; ++i) {
    const hg::amp::TensorStats& g = r.grads[i];
    CHECK(g.name == names[i]);
    CHECK(g.dtype == hg::DType::Float32);  // master gradients
    CHECK(g.hist.total() == scaled_grads[i].numel());
    const double max_scaled = hg::max(hg::abs(scaled_grads[i])).item<double>();
    CHECK(g.scaled.max_abs == max_scaled);
    CHECK(g.hist.max_abs == max_scaled / 1024.0);  // 1/1024 is exact
    // the scaled histogram is the gradient's own ...
    const Tensor counts = hg::amp::Log2Histogram::zeros(hg::kCPU);
    hg::amp::accumulate_log2_histogram(scaled_grads[i], counts);
    CHECK(hg::amp::Log2Histogram::read(counts).counts == g.scaled.counts);
    // ... and the unscaled one the same shifted down by log2(1024) = 10 binades
    for (int k = -30; k < 6; ++k) CHECK(g.hist.binade(k) == g.scaled.binade(k + 10));
    CHECK(g.scaled.share_below(std::ldexp(1.0, -24)) == g.hist.share_below(std::ldexp(1.0, -34)));
  }
  const auto* lin0 = find(r.activations, "0");
  const auto* relu = find(r.activations, "1");
  const auto* whole = find(r.activations, "(model)");
  REQUIRE(lin0);
  REQUIRE(relu);
  REQUIRE(whole);
  CHECK(lin0->dtype == hg::DType::BFloat16);  // the linear's output under bfloat16 autocast
  CHECK(lin0->calls == 1);
  CHECK(lin0->hist.total() == 32 * 16);
  CHECK(relu->hist.zeros_count() > 0);
  CHECK(whole->hist.total() == 32 * 4);
  CHECK(hg::amp::dtype_max(lin0->dtype) > 3e38);
  // the evaluation pass under no_grad at step 2 was not counted
  CHECK(find(monitor.records()[1].activations, "0")->calls == 1);
  CHECK(monitor.skips().empty());
}

TEST_CASE("Monitor names the gradient that first held an inf in backward, and the op", "[amp][monitor]") {
  hg::manual_seed(4);
  // At scale 4096 the logits' gradients are ~500; the Amplify's backward
  // multiplies the float16 gradient reaching it (~350) by 1000: inf in
  // float16. Layer 2's weight gradient is the first non-finite one backward
  // produces (layer 4's stays finite: its input is small); layer 0's follows.
  hg::nn::Sequential model = planted_gradient_overflow();
  hg::amp::GradScaler scaler({.init_scale = 4096.0});
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01});
  std::vector<std::string> lines;
  hg::amp::Monitor monitor(model, scaler, {.every = 1, .detect_anomaly = true, .on_skip = [&](const std::string& l) {
                                             lines.push_back(l);
                                           }});
  const Tensor x = hg::randn({4, 4}) * 0.01;
  const Tensor target = hg::tensor(std::vector<int64_t>{0, 1, 0, 1});
  const auto before = model.parameters()[0].clone();
  amp_step(model, scaler, opt, x, target, hg::kHalf);
  CHECK(hg::equal(model.parameters()[0], before));  // skipped
  REQUIRE(monitor.skips().size() == 1);
  REQUIRE(lines.size() == 1);
  const std::string& line = lines[0];
  INFO(line);
  CHECK(line.rfind("step 0 skipped (scale 4096): grad of 2.weight is inf and NaN (first of 2 non-finite gradients in "
                   "backward); first non-finite value: backward of mul",
                   0) == 0);
  CHECK_THAT(line, Catch::Contains("first non-finite value: backward of mul"));
  CHECK(monitor.last_skip() == line);
  REQUIRE(monitor.records().size() == 1);
  const hg::amp::MonitorRecord& r = monitor.records()[0];
  REQUIRE(r.skipped.has_value());
  CHECK(*r.skipped);
  CHECK(find(r.grads, "4.weight")->hist.non_finite() == 0);
  CHECK(find(r.grads, "2.weight")->hist.non_finite() > 0);
  CHECK(find(r.grads, "0.weight")->hist.non_finite() > 0);
}

TEST_CASE("Monitor on CUDA: no per-step sync unless asked, then the same line as on the CPU", "[amp][monitor][cuda]") {
  for (const bool ask : {false, true}) {
    hg::manual_seed(4);
    hg::nn::Sequential model = planted_gradient_overflow();
    model.to(hg::Device::cuda());
    hg::amp::GradScaler scaler({.init_scale = 4096.0});
    hg::optim::SGD opt(model.parameters(), {.lr = 0.01});
    hg::amp::MonitorOptions options{.every = 1};
    if (ask) options.explain_skips = true;
    hg::amp::Monitor monitor(model, scaler, options);
    const Tensor x = (hg::randn({4, 4}) * 0.01).cuda();
    const Tensor target = hg::tensor(std::vector<int64_t>{0, 1, 0, 1}).cuda();
    opt.zero_grad();
    Tensor loss;
    {
      hg::amp::autocast region(hg::kCUDA, hg::kHalf);
      loss = hg::cross_entropy(model(x), target);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    REQUIRE(monitor.records().size() == 1);
    if (!ask) {  // the flag was not read: nothing known, nothing explained
      CHECK_FALSE(monitor.records()[0].skipped.has_value());
      CHECK(monitor.skips().empty());
    } else {
      REQUIRE(monitor.skips().size() == 1);
      CHECK(monitor.skips()[0].message.rfind("step 0 skipped (scale 4096): grad of 2.weight is inf", 0) == 0);
    }
  }
}

TEST_CASE("Monitor shows an activation that overflowed float16, and the op that produced it", "[amp][monitor]") {
  hg::manual_seed(5);
  hg::nn::Sequential model(hg::nn::Linear(4, 8), Amplify(1e5), hg::nn::Linear(8, 2));
  hg::amp::GradScaler scaler;
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01});
  hg::amp::Monitor monitor(model, scaler, {.every = 10, .detect_anomaly = true});
  const Tensor x = hg::randn({4, 4});
  amp_step(model, scaler, opt, x, hg::tensor(std::vector<int64_t>{0, 1, 0, 1}), hg::kHalf);
  REQUIRE(monitor.records().size() == 1);
  const auto& acts = monitor.records()[0].activations;
  const auto* lin = find(acts, "0");
  const auto* amp_out = find(acts, "1");
  REQUIRE(lin);
  REQUIRE(amp_out);
  CHECK(lin->dtype == hg::DType::Float16);
  CHECK(lin->hist.non_finite() == 0);
  CHECK(lin->hist.max_abs < hg::amp::dtype_max(hg::DType::Float16));
  CHECK(amp_out->dtype == hg::DType::Float16);
  CHECK(amp_out->hist.non_finite() > 0);  // |x| * 1e5 > 65504 for most elements
  REQUIRE(monitor.skips().size() == 1);
  CHECK_THAT(monitor.last_skip(), Catch::Contains("first non-finite value: forward of mul -> float16[4, 8] cpu"));
}

TEST_CASE("the scaler's floor Error carries the monitor's line", "[amp][monitor]") {
  hg::manual_seed(4);
  hg::nn::Sequential model = planted_gradient_overflow();
  hg::amp::GradScaler scaler({.init_scale = 4096.0, .min_scale = 2048.0});
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01});
  hg::amp::Monitor monitor(model, scaler, {.every = 0});
  const Tensor x = hg::randn({4, 4}) * 0.01;
  const Tensor target = hg::tensor(std::vector<int64_t>{0, 1, 0, 1});
  amp_step(model, scaler, opt, x, target, hg::kHalf);  // 4096 -> 2048
  std::string message;
  try {
    amp_step(model, scaler, opt, x, target, hg::kHalf);  // 2048 -> 1024 < the floor
  } catch (const hg::Error& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains("below min_scale = 2048"));
  CHECK_THAT(monitor.last_skip(), Catch::StartsWith("step 1 skipped (scale 2048): grad of 2.weight is "));
  CHECK_THAT(message, Catch::Contains(monitor.last_skip()));  // the monitor's whole line
  CHECK(monitor.records().empty());  // every = 0: nothing recorded unless asked
}

TEST_CASE("Monitor: record_next on demand, JSON written atomically", "[amp][monitor]") {
  hg::manual_seed(6);
  hg::nn::Sequential model(hg::nn::Linear(3, 5), hg::nn::ReLU(), hg::nn::Linear(5, 2));
  hg::amp::GradScaler scaler({.enabled = false});  // float32: scale 1, nothing skipped
  hg::optim::SGD opt(model.parameters(), {.lr = 0.1});
  hg::amp::Monitor monitor(model, scaler, {.every = 0});
  const Tensor x = hg::randn({6, 3});
  const Tensor target = hg::randint(0, 2, {6});
  amp_step(model, scaler, opt, x, target, hg::kFloat);
  monitor.record_next();
  amp_step(model, scaler, opt, x, target, hg::kFloat);
  amp_step(model, scaler, opt, x, target, hg::kFloat);
  REQUIRE(monitor.records().size() == 1);
  const auto& r = monitor.records()[0];
  CHECK(r.step == 1);
  CHECK(r.scale == 1.0);
  CHECK(r.skipped == std::optional<bool>(false));
  REQUIRE(r.grads.size() == 4);
  CHECK(r.grads[0].hist.counts == r.grads[0].scaled.counts);  // at scale 1 they agree
  hgtest::TempDir dir;
  monitor.write_json(dir / "numerics.json");
  const std::string text = hgtest::read_bytes(dir / "numerics.json");
  CHECK_THAT(text, Catch::Contains("\"format\": \"halfgrad-numerics-1\""));
  CHECK_THAT(text, Catch::Contains("\"name\": \"2.weight\""));
  CHECK_THAT(text, Catch::Contains("\"steps\": 3"));
}

TEST_CASE("the monitor's own ops stay out of the autocast trace and the graph", "[amp][monitor]") {
  hg::manual_seed(7);
  hg::nn::Sequential model(hg::nn::Linear(3, 4), hg::nn::ReLU(), hg::nn::Linear(4, 2));
  hg::amp::GradScaler scaler;
  hg::optim::SGD opt(model.parameters(), {.lr = 0.1});
  hg::amp::Monitor monitor(model, scaler, {.every = 1});
  std::vector<std::string> ops;
  hg::amp::set_op_trace_sink([&](const hg::amp::OpTrace& t) { ops.push_back(t.op); });
  Tensor loss;
  {
    hg::amp::trace tracing;
    hg::amp::autocast region(hg::kCPU, hg::kBFloat16);
    loss = hg::cross_entropy(model(hg::randn({5, 3})), hg::randint(0, 2, {5}));
  }
  hg::amp::set_op_trace_sink(nullptr);
  CHECK(ops == std::vector<std::string>{"linear", "relu", "linear", "cross_entropy"});
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
  REQUIRE(monitor.records().size() == 1);
  CHECK(monitor.records()[0].activations.size() == 4);  // (model), 0, 1, 2
}
