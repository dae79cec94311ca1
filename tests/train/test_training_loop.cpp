// The instruments together in a small training loop, as train_classifier
// will use them: the tutorial MLP under CPU autocast with a GradScaler, a
// plain progress bar, a read of the loss monitor every 10 steps feeding the
// bar, the metrics CSV and the overflow warning, and a stop on a non-finite
// loss (an input poisoned with NaN at step 25).
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include <unistd.h>

#include "test_util.h"
#include "tutorial_mlp.h"

#include <halfgrad.h>

namespace hg = halfgrad;

TEST_CASE("a training loop with the progress bar, the metrics CSV and a stop on a non-finite loss",
          "[train][loop]") {
  hg::manual_seed(0);
  hgtest::MLP model;
  hg::nn::CrossEntropyLoss criterion;
  hg::optim::SGD optimizer(model.parameters(), {.lr = 0.1});
  hg::amp::GradScaler scaler({.init_scale = 1024.0});
  const hg::Tensor inputs = hg::randn({64, 10});
  const hg::Tensor targets = hg::randint(0, 10, {64});
  hg::Tensor poisoned = inputs.clone();
  poisoned.index_put_({3, 4}, std::numeric_limits<double>::quiet_NaN());

  double t = 0;
  std::ostringstream log;
  const std::string path = fmt::format("/tmp/halfgrad_test_loop_{}.csv", static_cast<long>(getpid()));
  hg::train::MetricsCsv csv(path);
  hg::train::NonFiniteMonitor monitor;
  hg::train::OverflowWarning overflow;
  hg::train::ProgressBar bar(40, {.desc = "epoch 0", .out = &log, .clock = [&] { return t; },
                                  .log_every_steps = 10, .smoothing = 0, .samples_per_step = 64});
  std::optional<hg::train::LossReport> stopped;
  double first_mean = 0, last_mean = 0;
  for (int64_t step = 0; step < 40 && !stopped; ++step) {
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16);
      loss = criterion(model.forward(step == 25 ? poisoned : inputs), targets);
    }
    optimizer.zero_grad();
    scaler.scale(loss).backward();
    const auto result = scaler.step(optimizer);
    scaler.update();
    monitor.observe(loss, result);
    t += 0.5;
    if ((step + 1) % 10 == 0) {
      const auto r = monitor.read(&scaler);
      (step == 9 ? first_mean : last_mean) = r.mean_loss;
      bar.set_postfix({{"loss", hg::train::format_num(r.mean_loss)},
                       {"scale", hg::train::format_num(r.loss_scale.value_or(0))},
                       {"skipped", std::to_string(r.skipped_steps)}});
      csv.write({.kind = hg::train::RowKind::Step, .step = step + 1, .epoch = 0, .loss = r.mean_loss, .lr = 0.1,
                 .loss_scale = r.loss_scale, .skipped = r.skipped_steps, .seconds = t});
      if (auto w = overflow.update(10, r.skipped_steps, r.loss_scale)) bar.write(*w);
      if (!r.finite()) stopped = r;
    }
    bar.update();
  }
  bar.close();

  REQUIRE(stopped.has_value());
  CHECK(*stopped->first_nonfinite_step == 25);
  CHECK(stopped->nonfinite_steps == 1);
  CHECK(stopped->skipped_steps == 1);        // the NaN's gradients: the scaler skipped that step
  CHECK(*stopped->loss_scale == 512.0);      // and halved the scale
  CHECK(std::isfinite(*stopped->last_finite_loss));
  CHECK(last_mean < first_mean);             // it learned before the stop
  CHECK_FALSE(overflow.warned());            // one skipped step is no streak

  const auto rows = hg::train::read_metrics_csv(path);
  REQUIRE(rows.size() == 3);
  CHECK(rows[2].step == 30);
  CHECK(*rows[2].skipped == 1);
  CHECK(*rows[2].loss_scale == 512.0);
  CHECK(std::isfinite(*rows[2].loss));  // the mean of the window's finite losses
  std::remove(path.c_str());

  // The log: a line at 10, 20 and 30 steps, with the postfix of the read before each.
  std::istringstream lines(log.str());
  std::vector<std::string> got;
  for (std::string l; std::getline(lines, l);) got.push_back(l);
  REQUIRE(got.size() == 3);
  CHECK_THAT(got[0], Catch::Matchers::StartsWith("epoch 0:  25% 10/40 [00:05<00:15,  2.00it/s, 128 samples/s, loss="));
  CHECK_THAT(got[2], Catch::Matchers::StartsWith("epoch 0:  75% 30/40 [00:15<00:05,  2.00it/s, 128 samples/s, loss="));
  CHECK_THAT(got[2], Catch::Matchers::EndsWith("scale=512, skipped=1]"));
}
