// The loss monitor (non-finite losses found with one host read per window),
// the overflow-streak warning, and peak memory.
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

#include <halfgrad/amp/grad_scaler.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/train/loss_monitor.h>
#include <halfgrad/train/memory.h>
#include <halfgrad/train/overflow_warning.h>

namespace hg = halfgrad;
using namespace halfgrad::train;
using halfgrad::DType;
using halfgrad::Tensor;
using halfgrad::TensorOptions;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("NonFiniteMonitor: the mean of the finite losses per window, the first non-finite step",
          "[train][monitor]") {
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    NonFiniteMonitor m;
    // Losses exactly representable in every float dtype.
    const std::vector<double> first = {2.5, 2.0, 1.5, 1.25};
    for (double v : first) m.observe(hg::full({}, v, dt));
    auto r = m.read();
    CHECK(r.steps == 4);
    CHECK(r.finite_steps == 4);
    CHECK(r.finite());
    CHECK(r.mean_loss == (2.5 + 2.0 + 1.5 + 1.25) / 4);
    CHECK_FALSE(r.first_nonfinite_step.has_value());
    CHECK(*r.last_finite_loss == 1.25);

    // Steps 4..9: NaN forced at step 6, inf at step 8.
    const std::vector<double> second = {1.0, 0.75, kNaN, 0.5, kInf, -kInf};
    for (double v : second) m.observe(hg::full({1}, v, dt));  // one-element, not 0-d: fine too
    r = m.read();
    CHECK(r.steps == 6);
    CHECK_FALSE(r.finite());
    CHECK(r.nonfinite_steps == 3);
    CHECK(r.finite_steps == 3);
    CHECK(r.mean_loss == (1.0 + 0.75 + 0.5) / 3);
    REQUIRE(r.first_nonfinite_step.has_value());
    CHECK(*r.first_nonfinite_step == 6);
    CHECK(*r.last_finite_loss == 0.5);  // the latest finite one, not the inf after it

    // A window of only non-finite losses: mean NaN, the last finite loss kept from before.
    m.observe(hg::full({}, kNaN, dt));
    r = m.read();
    CHECK(std::isnan(r.mean_loss));
    CHECK(*r.first_nonfinite_step == 10);
    CHECK(*r.last_finite_loss == 0.5);
    // And the window after is clean again.
    m.observe(hg::full({}, 3.0, dt));
    r = m.read();
    CHECK(r.finite());
    CHECK(r.mean_loss == 3.0);
    CHECK(m.steps_observed() == 12);
  }
}

TEST_CASE("NonFiniteMonitor: a loss that requires grad, a resumed step count, an empty read", "[train][monitor]") {
  NonFiniteMonitor m(/*first_step=*/1000);
  auto empty = m.read();
  CHECK(empty.steps == 0);
  CHECK(std::isnan(empty.mean_loss));
  CHECK_FALSE(empty.last_finite_loss.has_value());
  Tensor w = hg::full({3}, 0.5).requires_grad_();
  Tensor loss = (w * w).sum();  // 0.75, with a grad_fn
  m.observe(loss);
  m.observe(hg::log(hg::zeros({})));  // -inf at step 1001
  loss.backward();                    // the monitor kept no graph alive, nothing breaks
  auto r = m.read();
  CHECK(r.mean_loss == 0.75);
  CHECK(*r.first_nonfinite_step == 1001);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1.0f, 1.0f, 1.0f});
}

TEST_CASE("NonFiniteMonitor counts the steps the GradScaler skipped and reads its scale", "[train][monitor]") {
  NonFiniteMonitor m;
  hg::amp::GradScaler scaler({.init_scale = 1024.0});
  scaler.scale(hg::ones({}));  // creates the scale tensor on the CPU
  m.observe(hg::full({}, 1.0), hg::amp::StepResult(hg::full({}, 0.0)));
  m.observe(hg::full({}, 1.0), hg::amp::StepResult(hg::full({}, 1.0)));  // skipped
  m.observe(hg::full({}, 1.0), hg::amp::StepResult(hg::full({}, 1.0)));  // skipped
  m.observe(hg::full({}, 1.0), hg::amp::StepResult());                   // no scaler: applied
  auto r = m.read(&scaler);
  CHECK(r.skipped_steps == 2);
  REQUIRE(r.loss_scale.has_value());
  CHECK(*r.loss_scale == 1024.0);
  m.observe(hg::full({}, 1.0), hg::amp::StepResult(hg::full({}, 0.0)));
  CHECK(m.read().skipped_steps == 0);  // per window
}

TEST_CASE("NonFiniteMonitor errors", "[train][monitor]") {
  hgtest::expect_errors({
      {"two-element loss", [] { NonFiniteMonitor().observe(hg::ones({2})); }, {"one-element floating", "[2]"}},
      {"integer loss", [] { NonFiniteMonitor().observe(hg::ones({}, DType::Int64)); }, {"one-element floating"}},
      {"undefined loss", [] { NonFiniteMonitor().observe(Tensor()); }, {"undefined"}},
  });
}

TEST_CASE("OverflowWarning: once, when the share of skipped steps in the window is too high", "[train][overflow]") {
  OverflowWarning w;  // window 200, more than 25% (50 steps)
  // The scaler's calibration at the start: a few skipped steps, no warning.
  CHECK_FALSE(w.update(50, 8, 8192.0).has_value());
  CHECK_FALSE(w.update(50, 0, 8192.0).has_value());
  CHECK_FALSE(w.update(50, 20, 4096.0).has_value());
  CHECK_FALSE(w.update(50, 22, 2048.0).has_value());  // 50 of the last 200: not more than 25%
  CHECK(w.steps_in_window() == 200);
  // The oldest read (8 skipped) leaves the window; 0 + 20 + 22 + 30 = 72 of the last 200.
  const auto msg = w.update(50, 30, 1024.0);
  REQUIRE(msg.has_value());
  CHECK(w.skipped_in_window() == 72);
  CHECK_THAT(*msg, Catch::Matchers::Contains("skipped 72 of the last 200 optimizer steps"));
  CHECK_THAT(*msg, Catch::Matchers::Contains("after 250 steps"));
  CHECK_THAT(*msg, Catch::Matchers::Contains("lower the learning rate about 10x"));
  CHECK_THAT(*msg, Catch::Matchers::Contains("check the model and the data for NaN/inf"));
  CHECK(w.warned());
  CHECK_FALSE(w.update(50, 50, 512.0).has_value());  // said once
}

TEST_CASE("OverflowWarning: the scale reaching the floor, and a custom window", "[train][overflow]") {
  OverflowWarning w;
  CHECK_FALSE(w.update(10, 1, 2.0).has_value());
  CHECK_FALSE(w.update(10, 1).has_value());  // no scale given: only the share counts
  const auto msg = w.update(10, 1, 1.0);
  REQUIRE(msg.has_value());
  CHECK_THAT(*msg, Catch::Matchers::Contains("loss scale fell to 1"));

  // Reads larger than the window: the count is scaled to the window.
  OverflowWarning small({.window = 10, .max_skipped_share = 0.5, .scale_floor = 0});
  CHECK_FALSE(small.update(100, 50, 0.5).has_value());  // 5 per 10 steps: not more than half
  CHECK(small.update(100, 51, 0.5).has_value());
  hgtest::expect_errors({
      {"skipped > steps", [] { OverflowWarning().update(3, 4); }, {"skipped <= steps"}},
      {"zero window", [] { OverflowWarning({.window = 0}); }, {"window"}},
      {"share above 1", [] { OverflowWarning({.max_skipped_share = 2}); }, {"max_skipped_share"}},
  });
}

TEST_CASE("peak memory on the CPU: the process's peak RSS, grows with touched memory", "[train][memory]") {
  const uint64_t before = peak_memory_bytes(hg::Device::cpu());
  CHECK(before > 1024 * 1024);  // any process has more than 1 MiB resident
  // Touch 64 MiB more than the peak so far: the peak must rise by about that.
  const int64_t n = static_cast<int64_t>((before + (64u << 20)) / sizeof(float));
  Tensor big = hg::ones({n});
  CHECK(big.sum().item() == static_cast<double>(n));
  const uint64_t after = peak_memory_bytes(hg::Device::cpu());
  CHECK(after >= before + (48u << 20));
  CHECK_FALSE(reset_peak_memory(hg::Device::cpu()));  // cannot be reset on the CPU
}

TEST_CASE("format_bytes: binary units, one decimal", "[train][memory]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.0 KiB");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(uint64_t{123} * 1024 * 1024 + 400 * 1024) == "123.4 MiB");
  CHECK(format_bytes((uint64_t{1} << 20) - 1) == "1.0 MiB");  // not "1024.0 KiB"
  CHECK(format_bytes(uint64_t{2} << 30) == "2.0 GiB");
  CHECK(format_bytes(uint64_t{5} << 40) == "5.0 TiB");
}

TEST_CASE("peak memory on CUDA: the pool's high-water mark", "[cuda][train][memory]") {
  const hg::Device dev = hg::Device::cuda();
  hg::cuda::synchronize();
  REQUIRE(reset_peak_memory(dev));
  const uint64_t base = peak_memory_bytes(dev);
  {
    Tensor a = hg::empty({64 << 20}, TensorOptions(DType::Float32, dev));  // 256 MiB
    CHECK(peak_memory_bytes(dev) >= base + (uint64_t{256} << 20));
  }
  hg::cuda::synchronize();
  const uint64_t peak = peak_memory_bytes(dev);
  CHECK(peak >= base + (uint64_t{256} << 20));  // freed, but the mark stays
  REQUIRE(reset_peak_memory(dev));
  CHECK(peak_memory_bytes(dev) < peak);

  // The loss monitor on the device gives what it gives on the CPU.
  NonFiniteMonitor m;
  for (double v : {1.5, kNaN, 2.5}) m.observe(hg::full({}, v, TensorOptions(DType::Float16, dev)));
  const auto r = m.read();
  CHECK(r.mean_loss == 2.0);
  CHECK(*r.first_nonfinite_step == 1);
  CHECK(*r.last_finite_loss == 2.5);
}
