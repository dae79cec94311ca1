// nn::utils::clip_grad_norm_ and clip_grad_value_: float64 references, the
// AMP recipe (clip after scaler.unscale_), and CUDA against the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <halfgrad.h>

#include <halfgrad/amp/grad_norm.h>
#include "test_util.h"

namespace hg = halfgrad;
namespace utils = hg::nn::utils;
using Catch::Matchers::Contains;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
std::vector<double> values(const hg::Tensor& t) { return hgtest::values(t.detach().cpu()); }

// Parameters of several dtypes and shapes with random grads (one more than a
// 16384-element chunk, a 0-d one, an empty one, a non-contiguous one), and
// two without grads.
struct Params {
  std::vector<hg::Tensor> params;
  explicit Params(hg::Device device = hg::Device::cpu()) {
    const std::vector<std::pair<hg::Shape, hg::DType>> specs = {
        {{7, 5}, hg::float32},  {{33}, hg::float16},  {{2, 3, 4}, hg::bfloat16}, {{40000}, hg::float64},
        {{}, hg::float32},      {{0, 3}, hg::float32}, {{20000}, hg::float32},    {{5, 6}, hg::float32}};
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& [shape, dt] = specs[i];
      hg::Tensor p = hgtest::uniform(shape, dt).to(device).requires_grad_();
      hg::Tensor g = hgtest::uniform(shape, dt, -3.0, 3.0).to(device);
      if (i == 7) g = hgtest::uniform({6, 5}, dt, -3.0, 3.0).to(device).t();  // non-contiguous
      p.set_grad(g);
      params.push_back(p);
      if (i == 2) params.push_back(hgtest::uniform({3}, hg::float32).to(device).requires_grad_());  // no grad
    }
    params.push_back(hg::Tensor());  // undefined: skipped too
  }
  std::vector<std::vector<double>> grads() const {
    std::vector<std::vector<double>> out;
    for (const auto& p : params)
      if (p.defined() && p.grad().defined()) out.push_back(values(p.grad()));
    return out;
  }
};

double ref_norm(const std::vector<std::vector<double>>& grads, double p) {
  double acc = 0.0;
  for (const auto& g : grads)
    for (double v : g) acc = std::isinf(p) ? std::max(acc, std::abs(v)) : acc + std::pow(std::abs(v), p);
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

}  // namespace

TEST_CASE("clip_grad_norm_ against float64 references", "[nn]") {
  for (double p : {1.0, 2.0, 3.0, kInf}) {
    INFO("norm_type " << p);
    Params ps;
    const auto before = ps.grads();
    const double ref = ref_norm(before, p);
    REQUIRE(ref > 1.0);
    const double max_norm = ref / 3.0;
    const hg::Tensor total = utils::clip_grad_norm_(ps.params, max_norm, p);
    CHECK(total.dtype() == hg::float32);
    CHECK(total.dim() == 0);
    CHECK(total.device().is_cpu());
    HG_CHECK_CLOSE_TOL(total, std::vector<double>{ref}, 1e-6);
    const float coef = hg::amp::grad_norm::clip_coef(total.item<float>(), static_cast<float>(max_norm));
    CHECK(coef == Approx(max_norm / (ref + 1e-6)).epsilon(1e-6));
    size_t k = 0;
    for (const auto& param : ps.params) {
      if (!param.defined() || !param.grad().defined()) continue;
      const hg::Tensor g = param.grad();
      std::vector<double> want, exact;
      for (double v : before[k]) {
        want.push_back(v * max_norm / (ref + 1e-6));
        exact.push_back(v * static_cast<double>(coef));
      }
      INFO(g.describe());
      if (g.numel() > 0) HG_CHECK_CLOSE_TOL(g, want, hgtest::tol(g.dtype()) + 1e-6);
      // float32 and float64 grads are rounded once from the exact product
      if (g.dtype() == hg::float64) HG_CHECK_EXACT(g, exact);
      if (g.dtype() == hg::float32) {
        std::vector<double> rounded;
        for (double v : exact) rounded.push_back(static_cast<float>(v));
        HG_CHECK_EXACT(g, rounded);
      }
      ++k;
    }
    // the clipped gradients have the norm max_norm (up to the 1e-6 and rounding)
    HG_CHECK_CLOSE_TOL(hg::full({}, ref_norm(ps.grads(), p)), std::vector<double>{max_norm}, 2e-3);
  }
}

TEST_CASE("clip_grad_norm_ with max_norm above the norm leaves the gradients bit-identical", "[nn]") {
  for (double p : {1.0, 2.0, kInf}) {
    Params ps;
    const auto before = ps.grads();
    const double ref = ref_norm(before, p);
    const hg::Tensor total = utils::clip_grad_norm_(ps.params, ref * 2.0, p);
    HG_CHECK_CLOSE_TOL(total, std::vector<double>{ref}, 1e-6);
    const auto after = ps.grads();
    REQUIRE(after.size() == before.size());
    for (size_t i = 0; i < after.size(); ++i) CHECK(after[i] == before[i]);
  }
}

TEST_CASE("clip_grad_norm_ overloads, no gradients, model.parameters()", "[nn]") {
  hg::Tensor w = hgtest::uniform({4}, hg::float32).requires_grad_();
  w.set_grad(hgtest::make({3, 4, 0, 0}, {4}, hg::float32));
  const hg::Tensor n = utils::clip_grad_norm_(w, 1.0);
  CHECK(n.item<float>() == 5.0f);
  HG_CHECK_CLOSE_TOL(w.grad(), (std::vector<double>{0.6, 0.8, 0, 0}), 1e-6);

  hg::Tensor none = hg::ones({3}).requires_grad_();
  const hg::Tensor z = utils::clip_grad_norm_(std::vector<hg::Tensor>{none}, 1.0);
  CHECK(z.item<float>() == 0.0f);
  CHECK(z.dim() == 0);
  CHECK(utils::clip_grad_norm_(std::vector<hg::Tensor>{}, 1.0).item<float>() == 0.0f);

  hg::nn::Linear lin(3, 2);
  hg::mse_loss(lin(hgtest::uniform({4, 3}, hg::float32)), hgtest::uniform({4, 2}, hg::float32)).backward();
  std::vector<std::vector<double>> before;
  for (const auto& p : lin.parameters()) before.push_back(values(p.grad()));
  const double ref = ref_norm(before, 2.0);
  const hg::Tensor t = utils::clip_grad_norm_(lin.parameters(), ref / 2.0);
  HG_CHECK_CLOSE_TOL(t, std::vector<double>{ref}, 1e-6);
  std::vector<std::vector<double>> after;
  for (const auto& p : lin.parameters()) after.push_back(values(p.grad()));
  CHECK(ref_norm(after, 2.0) == Approx(ref / 2.0).epsilon(1e-5));
}

TEST_CASE("clip_grad_norm_ with NaN and inf gradients", "[nn]") {
  const double nan = std::nan("");
  for (double p : {1.0, 2.0, kInf}) {
    INFO("norm_type " << p);
    hg::Tensor a = hg::ones({3}).requires_grad_(), b = hg::ones({2}, hg::float16).requires_grad_();
    a.set_grad(hgtest::make({1, nan, 2}, {3}, hg::float32));
    b.set_grad(hgtest::make({1, 2}, {2}, hg::float16));
    // PyTorch: a NaN norm makes every gradient NaN
    const hg::Tensor t = utils::clip_grad_norm_({a, b}, 1.0, p);
    CHECK(std::isnan(t.item<float>()));
    for (double v : values(a.grad())) CHECK(std::isnan(v));
    for (double v : values(b.grad())) CHECK(std::isnan(v));

    // error_if_nonfinite: an Error naming the norm, and no gradient changed
    a.set_grad(hgtest::make({1, nan, 2}, {3}, hg::float32));
    b.set_grad(hgtest::make({1, 2}, {2}, hg::float16));
    CHECK_THROWS_WITH(utils::clip_grad_norm_({a, b}, 1.0, p, true),
                      Contains("total norm of order") && Contains("nan") && Contains("error_if_nonfinite"));
    CHECK(values(b.grad()) == std::vector<double>{1, 2});
    CHECK(values(a.grad())[2] == 2.0);
  }
  // an inf gradient: the norm is inf, finite grads become 0, the inf one NaN
  hg::Tensor a = hg::ones({3}).requires_grad_();
  a.set_grad(hgtest::make({1, kInf, -2}, {3}, hg::float32));
  const hg::Tensor t = utils::clip_grad_norm_(a, 1.0);
  CHECK(std::isinf(t.item<float>()));
  const auto g = values(a.grad());
  CHECK(g[0] == 0.0);
  CHECK(std::isnan(g[1]));
  CHECK(g[2] == 0.0);
  a.set_grad(hgtest::make({1, kInf, -2}, {3}, hg::float32));
  CHECK_THROWS_WITH(utils::clip_grad_norm_(a, 1.0, 2.0, true), Contains("inf"));
}

TEST_CASE("clip_grad_norm_ and clip_grad_value_ reject bad arguments", "[nn]") {
  hgtest::expect_errors({
      {"norm_type 0", [] { hg::Tensor a = hg::ones({2}).requires_grad_(); a.set_grad(hg::ones({2})); utils::clip_grad_norm_(a, 1.0, 0.0); }, {"norm_type 0", "p > 0"}},
      {"norm_type -inf", [] { hg::Tensor a = hg::ones({2}).requires_grad_(); a.set_grad(hg::ones({2})); utils::clip_grad_norm_(a, 1.0, -kInf); }, {"norm_type -inf"}},
      {"norm_type NaN", [] { hg::Tensor a = hg::ones({2}).requires_grad_(); a.set_grad(hg::ones({2})); utils::clip_grad_norm_(a, 1.0, std::nan("")); }, {"norm_type nan"}},
      {"negative max_norm", [] { hg::Tensor a = hg::ones({2}).requires_grad_(); a.set_grad(hg::ones({2})); utils::clip_grad_norm_(a, -1.0); }, {"max_norm -1", ">= 0"}},
      {"negative clip_value", [] { hg::Tensor a = hg::ones({2}).requires_grad_(); a.set_grad(hg::ones({2})); utils::clip_grad_value_(a, -0.5); }, {"clip_value -0.5"}},
  });
}

TEST_CASE("clip_grad_value_ clamps every gradient", "[nn]") {
  for (hg::DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    hg::Tensor a = hgtest::uniform({4, 5}, dt).requires_grad_(), b = hgtest::uniform({7}, dt).requires_grad_();
    hg::Tensor c = hgtest::uniform({2}, dt).requires_grad_();  // no grad
    a.set_grad(hgtest::uniform({5, 4}, dt, -3.0, 3.0).t());    // non-contiguous
    b.set_grad(hgtest::uniform({7}, dt, -3.0, 3.0));
    const auto ga = values(a.grad()), gb = values(b.grad());
    utils::clip_grad_value_({a, b, c}, 1.25);
    std::vector<double> wa, wb;
    for (double v : ga) wa.push_back(std::clamp(v, -1.25, 1.25));
    for (double v : gb) wb.push_back(std::clamp(v, -1.25, 1.25));
    HG_CHECK_EXACT(a.grad(), wa);
    HG_CHECK_EXACT(b.grad(), wb);
    CHECK_FALSE(c.grad().defined());
  }
  hg::Tensor n = hg::ones({2}).requires_grad_();
  n.set_grad(hgtest::make({std::nan(""), 5}, {2}, hg::float32));
  utils::clip_grad_value_(n, 1.0);
  CHECK(std::isnan(values(n.grad())[0]));
  CHECK(values(n.grad())[1] == 1.0);
}

namespace {
struct TwoLayer : hg::nn::Module {
  hg::nn::Linear l1{6, 16}, l2{16, 3};
  TwoLayer() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  hg::Tensor forward(const hg::Tensor& x) { return l2(hg::relu(l1(x))); }
};
}  // namespace

TEST_CASE("clip_grad_norm_ in PyTorch's AMP recipe clips the unscaled gradients", "[nn][amp]") {
  const hg::Tensor x = hgtest::uniform({8, 6}, hg::float32), y = hgtest::uniform({8, 3}, hg::float32);
  hg::manual_seed(7);
  TwoLayer scaled_model;
  hg::manual_seed(7);
  TwoLayer plain_model;
  hg::optim::SGD opt(scaled_model.parameters(), {.lr = 0.1, .momentum = 0.9});
  hg::amp::GradScaler scaler({.init_scale = 4096.0});

  // the reference: fp32 gradients of the unscaled loss, clipped
  hg::mse_loss(plain_model.forward(x), y).backward();
  const double max_norm = 0.05;
  const hg::Tensor ref_total = utils::clip_grad_norm_(plain_model.parameters(), max_norm);
  REQUIRE(ref_total.item<float>() > 2 * max_norm);  // it does clip

  scaler.scale(hg::mse_loss(scaled_model.forward(x), y)).backward();
  scaler.unscale_(opt);
  const hg::Tensor total = utils::clip_grad_norm_(scaled_model.parameters(), max_norm);
  CHECK(total.item<float>() == ref_total.item<float>());
  const auto ps = scaled_model.parameters(), qs = plain_model.parameters();
  for (size_t i = 0; i < ps.size(); ++i) HG_CHECK_EXACT(ps[i].grad(), values(qs[i].grad()));
  const hg::Tensor w_before = ps[0].detach().clone();
  CHECK(scaler.step(opt).applied());
  scaler.update();
  // the step used the clipped gradients: w - lr * g (first momentum step)
  std::vector<double> want;
  const auto w0 = values(w_before), g0 = values(ps[0].grad());
  for (size_t i = 0; i < w0.size(); ++i) want.push_back(static_cast<float>(w0[i] - static_cast<float>(0.1f * static_cast<float>(g0[i]))));
  HG_CHECK_CLOSE_TOL(ps[0], want, 1e-6);

  // an overflow: unscale_ records it, clipping makes NaN grads, the step is skipped
  opt.zero_grad();
  const double scale_before = scaler.get_scale();
  scaler.scale(hg::mse_loss(scaled_model.forward(x), y) * kInf).backward();
  scaler.unscale_(opt);
  utils::clip_grad_norm_(scaled_model.parameters(), max_norm);
  std::vector<std::vector<double>> params_before;
  for (const auto& p : ps) params_before.push_back(values(p));
  const auto state_before = opt.state_dict();
  CHECK(scaler.step(opt).skipped());
  scaler.update();
  for (size_t i = 0; i < ps.size(); ++i) CHECK(values(ps[i]) == params_before[i]);
  CHECK(values(opt.state_dict().state.at(0).at("momentum_buffer")) == values(state_before.state.at(0).at("momentum_buffer")));
  CHECK(scaler.get_scale() == scale_before / 2);
}

TEST_CASE("clip_grad_norm_ on CUDA matches the CPU", "[nn][cuda]") {
  const hg::Device cuda = hg::Device::cuda();
  for (double p : {1.0, 2.0, 3.0, kInf}) {
    INFO("norm_type " << p);
    Params cpu;
    // the same parameters and grads on the GPU, and 140 more small ones (two launches)
    std::vector<hg::Tensor> gpu;
    for (const auto& q : cpu.params) {
      if (!q.defined()) continue;
      hg::Tensor t = q.detach().to(cuda).requires_grad_();
      if (q.grad().defined()) t.set_grad(q.grad().to(cuda));
      gpu.push_back(t);
    }
    for (int i = 0; i < 140; ++i) {
      hg::Tensor c = hgtest::uniform({3 + i % 5}, hg::float32).requires_grad_();
      c.set_grad(hgtest::uniform({3 + i % 5}, hg::float32));
      cpu.params.push_back(c);
      hg::Tensor d = c.detach().to(cuda).requires_grad_();
      d.set_grad(c.grad().to(cuda));
      gpu.push_back(d);
    }
    const double ref = ref_norm(cpu.grads(), p);
    const hg::Tensor tc = utils::clip_grad_norm_(cpu.params, ref / 2.0, p);
    const hg::Tensor tg = utils::clip_grad_norm_(gpu, ref / 2.0, p);
    CHECK(tg.device() == cuda);
    CHECK(tg.dtype() == hg::float32);
    HG_CHECK_CLOSE_TOL(tg, std::vector<double>{ref}, 1e-6);
    HG_CHECK_CLOSE_TOL(tg, values(tc), 1e-6);
    std::vector<hg::Tensor> cpu_defined;
    for (const auto& q : cpu.params)
      if (q.defined()) cpu_defined.push_back(q);
    REQUIRE(cpu_defined.size() == gpu.size());
    for (size_t i = 0; i < gpu.size(); ++i) {
      if (!gpu[i].grad().defined()) continue;
      INFO(gpu[i].grad().describe());
      if (gpu[i].numel() > 0)
        HG_CHECK_CLOSE_TOL(gpu[i].grad(), values(cpu_defined[i].grad()), hgtest::tol(gpu[i].dtype()) + 1e-6);
    }
    // above the norm: bit-identical
    const auto before = [&] {
      std::vector<std::vector<double>> out;
      for (const auto& q : gpu)
        if (q.grad().defined()) out.push_back(values(q.grad()));
      return out;
    }();
    utils::clip_grad_norm_(gpu, ref * 10.0, p);
    size_t k = 0;
    for (const auto& q : gpu)
      if (q.grad().defined()) CHECK(values(q.grad()) == before[k++]);
  }
  // NaN on the device: NaN grads, or an Error with error_if_nonfinite
  hg::Tensor a = hg::ones({3}).to(cuda).requires_grad_();
  a.set_grad(hgtest::make({1, std::nan(""), 2}, {3}, hg::float32).to(cuda));
  CHECK_THROWS_WITH(utils::clip_grad_norm_(a, 1.0, 2.0, true), Contains("nan"));
  CHECK(std::isnan(utils::clip_grad_norm_(a, 1.0).item<float>()));
  for (double v : values(a.grad())) CHECK(std::isnan(v));
  // clip_grad_value_ on the device
  hg::Tensor b = hg::ones({4}).to(cuda).requires_grad_();
  b.set_grad(hgtest::make({-3, 0.5, 2, -0.25}, {4}, hg::float32).to(cuda));
  utils::clip_grad_value_(b, 1.0);
  CHECK(values(b.grad()) == std::vector<double>{-1, 0.5, 1, -0.25});
}
