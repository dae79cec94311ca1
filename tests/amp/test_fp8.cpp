// fp8 training (amp/fp8.h): the fp8 Linear against a float64 reference of
// the same rounded inputs, delayed scaling step by step, the backward, the
// region's rules, a checkpoint round trip of the scales and histories, and a
// small model that trains.
#include <catch2/catch.hpp>

#include <cmath>

#include <halfgrad.h>

#include "cuda_compare.h"
#include "temp_dir.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;

namespace {

std::vector<double> doubles(const Tensor& t) { return t.detach().to(hg::kDouble).contiguous().to_vector<double>(); }

// x rounded the way the layer rounds it: (x * s) to the fp8 format, as float64.
std::vector<double> quantised(const Tensor& x, float s, hg::DType fp8) {
  auto v = doubles(x);
  for (auto& e : v) {
    const float y = static_cast<float>(e) * s;
    e = fp8 == hg::float8_e4m3fn ? hg::round_to_e4m3fn(y) : hg::round_to_e5m2(y, hg::Fp8Overflow::Saturate);
  }
  return v;
}

std::vector<double> transpose(const std::vector<double>& v, int64_t r, int64_t c) {
  std::vector<double> t(v.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[j * r + i] = v[i * c + j];
  return t;
}

float amax_of(const Tensor& t) { return hg::amax(hg::abs(t.detach().to(hg::kFloat))).item<float>(); }

}  // namespace

TEST_CASE("fp8 Linear: forward and backward match float64 on the same fp8 values, step after step", "[fp8]") {
  hg::manual_seed(3);
  hg::nn::Linear layer(24, 16);
  const hg::amp::Fp8Recipe recipe{.amax_history_len = 4};
  CHECK(hg::nn::enable_fp8(layer, recipe) == 1);
  float s_x = 1, s_w = 1, s_g = 1;  // the scales the layer should use, tracked by hand
  std::vector<float> hx, hw, hg_;   // amax histories, newest last
  auto scale_from = [](const std::vector<float>& h, float fmax, float prev) {
    float m = 0;
    for (size_t i = h.size() > 4 ? h.size() - 4 : 0; i < h.size(); ++i) m = std::max(m, h[i]);
    return m > 0 ? fmax / m : prev;
  };
  for (int step = 0; step < 5; ++step) {
    const Tensor x = (hgtest::uniform({6, 24}, hg::kFloat) * std::pow(4.0, step)).requires_grad_();
    Tensor y;
    {
      hg::amp::fp8_autocast region(recipe);
      y = layer(x);
    }
    s_x = scale_from(hx, 448, s_x);
    s_w = scale_from(hw, 448, s_w);
    INFO("step " << step << ": s_x " << s_x << ", s_w " << s_w);
    CHECK(layer.fp8.scale[0].item<float>() == s_x);
    CHECK(layer.fp8.scale[1].item<float>() == s_w);
    const auto xq = quantised(x, s_x, hg::float8_e4m3fn), wq = quantised(layer.weight, s_w, hg::float8_e4m3fn);
    auto ref = hgtest::matmul2d(xq, transpose(wq, 16, 24), 6, 24, 16);
    const auto b = doubles(layer.bias);
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 16; ++j) ref[i * 16 + j] = ref[i * 16 + j] / (double(s_x) * s_w) + b[j];
    REQUIRE(y.dtype() == hg::kFloat);
    const auto c = hgtest::compare(y, ref, 1e-6);
    { INFO(c.msg); CHECK(c.ok); }
    hx.push_back(amax_of(x));
    hw.push_back(amax_of(layer.weight));
    CHECK(layer.fp8.amax_history[0][0].item<float>() == hx.back());  // recorded while quantising

    // Backward: the gradient in E5M2 (Hybrid) with its own delayed scale.
    const Tensor g = hgtest::uniform({6, 16}, hg::kFloat) * std::pow(0.01, step);
    layer.zero_grad();
    y.backward(g);
    s_g = scale_from(hg_, 57344, s_g);
    CHECK(layer.fp8.scale[2].item<float>() == s_g);
    const auto gq = quantised(g, s_g, hg::float8_e5m2);
    auto dx = hgtest::matmul2d(gq, wq, 6, 16, 24);
    for (auto& e : dx) e /= double(s_g) * s_w;
    auto dw = hgtest::matmul2d(transpose(gq, 6, 16), xq, 16, 6, 24);
    for (auto& e : dw) e /= double(s_g) * s_x;
    const auto cx = hgtest::compare(x.grad(), dx, 1e-6), cw = hgtest::compare(layer.weight.grad(), dw, 1e-6);
    { INFO(cx.msg); CHECK(cx.ok); }
    { INFO(cw.msg); CHECK(cw.ok); }
    const auto cb = hgtest::compare(layer.bias.grad(), hgtest::reduce(doubles(g), {6, 16}, {0}, hgtest::RefReduce::Sum), 1e-6);
    { INFO(cb.msg); CHECK(cb.ok); }
    hg_.push_back(amax_of(g));
  }
  // The history holds the last four steps' amaxes, newest first (then the zeroed next row).
  CHECK(layer.fp8.amax_history.size(0) == 4);
}

TEST_CASE("fp8 Linear: saturations are counted and the E4M3-only recipe quantises gradients in E4M3", "[fp8]") {
  hg::nn::Linear layer(8, 4, false);
  const hg::amp::Fp8Recipe recipe{.format = hg::amp::Fp8Format::E4M3, .amax_history_len = 2};
  hg::nn::enable_fp8(layer, recipe);
  const Tensor x = hg::full({2, 8}, 1000.0).requires_grad_();  // scale 1 on the first step: 1000 > 448
  Tensor y;
  {
    hg::amp::fp8_autocast region(recipe);
    y = layer(x);
  }
  CHECK(layer.fp8.saturated[0].item<int64_t>() == 16);
  y.backward(hg::full({2, 4}, 1e-3));
  // E4M3's smallest subnormal is 2^-9 ~ 0.00195: 1e-3 at scale 1 rounds to 2^-9... or 0; its saturation count stays 0.
  CHECK(layer.fp8.saturated[2].item<int64_t>() == 0);
  CHECK(x.grad().defined());
  CHECK(!layer.state_dict().contains("fp8_saturated"));
}

TEST_CASE("fp8_autocast: region rules and Errors", "[fp8]") {
  hg::nn::Linear layer(4, 3);
  const Tensor x = hg::ones({2, 4});
  CHECK(!hg::amp::is_fp8_enabled());
  {
    hg::amp::fp8_autocast region;
    CHECK(hg::amp::is_fp8_enabled());
    CHECK(hg::amp::fp8_recipe().amax_history_len == 1024);
    CHECK_THROWS_WITH(layer(x), Catch::Contains("enable_fp8"));
    {
      hg::amp::fp8_autocast off({}, false);
      CHECK(!hg::amp::is_fp8_enabled());
      CHECK(hg::equal(layer(x), hg::linear(x, layer.weight, layer.bias)));
    }
    CHECK(hg::amp::is_fp8_enabled());
  }
  CHECK(!hg::amp::is_fp8_enabled());
  hg::nn::enable_fp8(layer, {.amax_history_len = 8});
  {
    hg::amp::fp8_autocast region({.amax_history_len = 16});
    CHECK_THROWS_WITH(layer(x), Catch::Contains("8 rows but the recipe asks for 16"));
  }
  CHECK_THROWS_WITH(hg::nn::enable_fp8(layer, {.amax_history_len = 16}), Catch::Contains("already has an amax history"));
  CHECK_THROWS_WITH(hg::amp::fp8_autocast({.amax_history_len = 0}), Catch::Contains("amax_history_len"));
  // Under bf16 autocast the fp8 GEMM writes bfloat16, as autocast's linear would.
  {
    hg::amp::autocast bf16(hg::DeviceType::CPU);
    hg::amp::fp8_autocast region({.amax_history_len = 8});
    CHECK(layer(x).dtype() == hg::kBFloat16);
  }
}

TEST_CASE("fp8 state: scales and histories survive a checkpoint round trip bit for bit", "[fp8]") {
  hg::manual_seed(11);
  const hg::amp::Fp8Recipe recipe{.amax_history_len = 5};
  auto make = [&] {
    auto m = std::make_shared<hg::nn::Sequential>();
    m->push_back(hg::nn::Linear(6, 8));
    m->push_back(hg::nn::ReLU());
    m->push_back(hg::nn::Linear(8, 3));
    return m;
  };
  auto model = make();
  CHECK(hg::nn::enable_fp8(*model, recipe) == 2);
  auto step = [&](hg::nn::Sequential& m, const Tensor& x) {
    Tensor y;
    {
      hg::amp::fp8_autocast region(recipe);
      y = m.forward(x);
    }
    y.sum().backward();
    return y;
  };
  for (int i = 0; i < 3; ++i) step(*model, hgtest::uniform({4, 6}, hg::kFloat, -3, 3));
  hgtest::TempDir dir;
  hg::nn::save(*model, dir / "fp8.safetensors");

  auto copy = make();
  hg::nn::enable_fp8(*copy, recipe);
  hg::nn::load(*copy, dir / "fp8.safetensors");
  const auto a = model->state_dict(), b = copy->state_dict();
  for (const char* key : {"0.fp8_scale", "0.fp8_scale_inv", "0.fp8_amax_history", "2.fp8_scale", "2.fp8_amax_history"}) {
    INFO(key);
    REQUIRE(a.find(key) != nullptr);
    CHECK(hgtest::same_bits(*a.find(key), *b.find(key)));
  }
  CHECK(hg::amax(a.at("0.fp8_amax_history")).item<float>() > 0);
  // Both continue identically.
  const Tensor x = hgtest::uniform({4, 6}, hg::kFloat, -3, 3);
  CHECK(hg::equal(step(*model, x), step(*copy, x)));
  CHECK(hg::equal(model->state_dict().at("2.fp8_scale"), copy->state_dict().at("2.fp8_scale")));
}

TEST_CASE("fp8 training: a small MLP learns under the fp8 recipe as it does in float32", "[fp8]") {
  // y = sin(x0) + x1 * x2 on 256 points; 300 Adam steps.
  auto train = [](bool fp8) {
    hg::manual_seed(5);
    const Tensor x = hgtest::uniform({256, 3}, hg::kFloat, -2, 2);
    const Tensor target = (hg::sin(x.narrow(1, 0, 1)) + x.narrow(1, 1, 1) * x.narrow(1, 2, 1));
    hg::nn::Sequential model;
    model.push_back(hg::nn::Linear(3, 64));
    model.push_back(hg::nn::ReLU());
    model.push_back(hg::nn::Linear(64, 1));
    const hg::amp::Fp8Recipe recipe{.amax_history_len = 16};
    if (fp8) hg::nn::enable_fp8(model, recipe);
    hg::optim::Adam opt(model.parameters(), {.lr = 1e-2});
    double loss = 0;
    for (int i = 0; i < 300; ++i) {
      Tensor y;
      {
        hg::amp::fp8_autocast region(recipe, fp8);
        y = model.forward(x);
      }
      Tensor l = hg::mse_loss(y, target);
      opt.zero_grad();
      l.backward();
      opt.step();
      loss = l.item<double>();
    }
    return loss;
  };
  const double f32 = train(false), f8 = train(true);
  INFO("float32 loss " << f32 << ", fp8 loss " << f8);
  CHECK(f32 < 0.05);
  CHECK(f8 < 2 * f32 + 0.02);
}

TEST_CASE("fp8 Linear on CUDA matches the CPU emulation [cuda]", "[fp8][cuda]") {
  hg::manual_seed(9);
  const hg::amp::Fp8Recipe recipe{.amax_history_len = 4};
  hg::nn::Linear cpu(64, 32);
  hg::nn::Linear gpu(64, 32);
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(hg::Device::cuda());
  hg::nn::enable_fp8(cpu, recipe);
  hg::nn::enable_fp8(gpu, recipe);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = hgtest::uniform({16, 64}, hg::kFloat, -4, 4);
    const Tensor xc = x.clone().requires_grad_(), xg = x.to(hg::Device::cuda()).requires_grad_();
    Tensor yc, yg;
    {
      hg::amp::fp8_autocast region(recipe);
      yc = cpu(xc);
      yg = gpu(xg);
    }
    hgtest::cuda::expect_same(yg, yc, "fp8 linear forward", false, 1e-6);
    const Tensor g = hgtest::uniform({16, 32}, hg::kFloat, -1e-3, 1e-3);
    yc.backward(g);
    yg.backward(g.to(hg::Device::cuda()));
    hgtest::cuda::expect_same(xg.grad(), xc.grad(), "dx", false, 1e-6);
    hgtest::cuda::expect_same(gpu.weight.grad(), cpu.weight.grad(), "dW", false, 1e-6);
    CHECK(hg::equal(gpu.fp8.scale.cpu(), cpu.fp8.scale));
    CHECK(hg::equal(gpu.fp8.amax_history.cpu(), cpu.fp8.amax_history));
  }
}

TEST_CASE("fp8 layers in the numerics monitor: scales, amaxes and saturations per layer", "[fp8][monitor]") {
  hg::manual_seed(2);
  hg::nn::Sequential model(hg::nn::Linear(8, 16), hg::nn::ReLU(), hg::nn::Linear(16, 4));
  const hg::amp::Fp8Recipe recipe{.amax_history_len = 8};
  hg::nn::enable_fp8(model, recipe);
  hg::amp::GradScaler scaler({.init_scale = 1.0});
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01});
  hg::amp::Monitor monitor(model, scaler, {.every = 1});
  std::vector<Tensor> inputs;
  for (int step = 0; step < 3; ++step) {
    inputs.push_back(hgtest::uniform({5, 8}, hg::kFloat, -500, 500));
    if (step == 0) inputs.back()[0][0].fill_(600.0);  // the largest of all: step 0 saturates (scale 1), no later one
    Tensor y;
    {
      hg::amp::fp8_autocast region(recipe);
      y = model.forward(inputs.back());
    }
    opt.zero_grad();
    scaler.scale(y.sum()).backward();
    scaler.step(opt);
    scaler.update();
  }
  REQUIRE(monitor.records().size() == 3);
  for (size_t r = 0; r < 3; ++r) {
    const auto& rec = monitor.records()[r];
    REQUIRE(rec.fp8.size() == 2);
    CHECK(rec.fp8[0].name == "0");
    CHECK(rec.fp8[1].name == "2");
    CHECK(rec.fp8[0].amax[0] == amax_of(inputs[r]));  // the input's amax of that step
  }
  const auto& first = monitor.records()[0].fp8[0];
  CHECK(first.scale[0] == 1.0f);  // nothing in the history yet
  CHECK(first.saturated[0] > 0);
  const auto& second = monitor.records()[1].fp8[0];
  CHECK(second.scale[0] == 448.0f / amax_of(inputs[0]));  // delayed: from step 0's amax
  CHECK(second.saturated[0] == 0);                        // counted per record, and none once scaled
  CHECK(monitor.json().find("\"fp8\"") != std::string::npos);
}
