// The overflow-streak warning (see overflow_warning.h).
#include <halfgrad/train/overflow_warning.h>

#include <fmt/format.h>

#include <halfgrad/core/error.h>

namespace halfgrad::train {

OverflowWarning::OverflowWarning(OverflowWarningOptions options) : options_(options) {
  HG_CHECK(options_.window > 0, "OverflowWarning: window must be > 0, got {}", options_.window);
  HG_CHECK(options_.max_skipped_share >= 0 && options_.max_skipped_share <= 1,
           "OverflowWarning: max_skipped_share must be in [0, 1], got {}", options_.max_skipped_share);
}

const char* OverflowWarning::advice() {
  return "lower the learning rate about 10x; check the model and the data for NaN/inf (a NaN input, a log of 0, "
         "a division by 0); if it persists, train in bfloat16 (float32's range) instead of float16";
}

std::optional<std::string> OverflowWarning::update(int64_t steps, int64_t skipped, std::optional<double> scale) {
  HG_CHECK(steps >= 0 && skipped >= 0 && skipped <= steps,
           "OverflowWarning::update: need 0 <= skipped <= steps, got skipped = {}, steps = {}", skipped, steps);
  total_steps_ += steps;
  chunks_.push_back({steps, skipped});
  window_steps_ += steps;
  window_skipped_ += skipped;
  // Keep the latest chunks that cover the window; drop older ones.
  while (chunks_.size() > 1 && window_steps_ - chunks_.front().steps >= options_.window) {
    window_steps_ -= chunks_.front().steps;
    window_skipped_ -= chunks_.front().skipped;
    chunks_.pop_front();
  }
  if (warned_) return std::nullopt;
  const double limit = options_.max_skipped_share * static_cast<double>(options_.window);
  // Scale the count to exactly `window` steps when the chunks cover more.
  const double skipped_per_window =
      window_steps_ > options_.window
          ? static_cast<double>(window_skipped_) * static_cast<double>(options_.window) / static_cast<double>(window_steps_)
          : static_cast<double>(window_skipped_);
  std::string why;
  if (skipped_per_window > limit) {
    why = fmt::format("the GradScaler skipped {} of the last {} optimizer steps (gradients with inf/NaN)",
                      window_skipped_, window_steps_);
  } else if (scale && *scale <= options_.scale_floor) {
    why = fmt::format("the loss scale fell to {} (floor {}): the gradients overflow even unscaled", *scale,
                      options_.scale_floor);
  } else {
    return std::nullopt;
  }
  warned_ = true;
  return fmt::format("warning: {} after {} steps; {}", why, total_steps_, advice());
}

}  // namespace halfgrad::train
