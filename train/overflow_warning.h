#pragma once
// When mixed precision goes wrong, the GradScaler keeps skipping steps and
// halving its scale; the loop still "runs" but learns nothing. This watches
// the skipped-step counts and the scale at each read (NonFiniteMonitor's
// LossReport has both) and says, once, that it is time to act:
//
//   - more than max_skipped_share of the last `window` optimizer steps were
//     skipped (the default: more than 50 of the last 200), or
//   - the scale fell to scale_floor or below (default 1.0: the loss is no
//     longer scaled up at all, so float16's range is not the problem).
//
// The share counts over a full window even at the start (a few skipped steps
// while the scaler calibrates from 65536 are routine and stay far below it).
// Fed per read, the window is counted in whole reads: it covers the latest
// reads that together hold at least `window` steps.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace halfgrad::train {

struct OverflowWarningOptions {
  int64_t window = 200;
  double max_skipped_share = 0.25;
  double scale_floor = 1.0;
};

class OverflowWarning {
 public:
  explicit OverflowWarning(OverflowWarningOptions options = {});

  // `steps` optimizer steps since the previous call, `skipped` of them
  // skipped; `scale` the scaler's scale now (omit it without a scaler). The
  // warning text the first time a condition holds, else nothing.
  std::optional<std::string> update(int64_t steps, int64_t skipped, std::optional<double> scale = std::nullopt);

  bool warned() const { return warned_; }
  int64_t skipped_in_window() const { return window_skipped_; }
  int64_t steps_in_window() const { return window_steps_; }
  static const char* advice();

 private:
  OverflowWarningOptions options_;
  struct Chunk {
    int64_t steps, skipped;
  };
  std::deque<Chunk> chunks_;
  int64_t window_steps_ = 0, window_skipped_ = 0;
  int64_t total_steps_ = 0;
  bool warned_ = false;
};

}  // namespace halfgrad::train
