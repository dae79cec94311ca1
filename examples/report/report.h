#pragma once
// halfgrad-report: one training run's folder (what `train_classifier --report
// DIR` writes) made into a page a person reads:
//   run.json       what the run was (model, precision, steps, peak memory)
//   metrics.csv    loss, loss scale and skipped steps every log_every steps
//   numerics.json  amp::Monitor's records and skipped-step lines
//   dtypes.json    the first step's forward, op by op, as autocast decided it
// load.cpp reads them (as hostile input: sizes, types and counts checked),
// figures.cpp draws them with gnuplot, page.cpp writes report.html.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace report {

inline constexpr int kBins = 60, kLowExp = -40, kHighExp = 16;  // amp::Log2Histogram's

struct Stats {
  std::string name, dtype;
  int64_t calls = 0;
  double max_abs = 0, scaled_max_abs = 0;
  std::vector<int64_t> hist, scaled_hist;  // kBins each (scaled: gradients only)
  int64_t total() const;
  // share of non-zero finite elements below 2^k (k in [kLowExp, kHighExp])
  static double share_below(const std::vector<int64_t>& h, int k);
  static double share(const std::vector<int64_t>& h, int bin);
};

struct Record {
  int64_t step = 0;
  double scale = 1;
  std::optional<bool> skipped;
  std::vector<Stats> grads, activations;
};

struct Skip {
  int64_t step = 0;
  double scale = 1;
  std::string message;
};

struct MetricsRow {
  bool epoch = false;
  int64_t step = 0;
  double loss = 0, loss_scale = 0, skipped = 0, test_loss = 0, accuracy = 0;  // NaN where the cell is empty
};

struct OpRow {
  std::string op, inputs, policy, ran_in;
  int64_t calls = 0;
};

struct Run {
  std::string dir;
  nlohmann::json info;  // run.json
  std::vector<MetricsRow> metrics;
  std::vector<Record> records;
  std::vector<Skip> skips;
  std::vector<OpRow> ops;
  std::string precision() const;
};

// Reads DIR's files; throws halfgrad::Error naming the file and what is wrong.
Run load_run(const std::string& dir);

struct Figure {
  std::string name;     // file stem under DIR/figures
  std::string title, caption;
  std::string svg;      // the SVG text, to inline in the page
};
// Draws the figures into out_dir/figures/NAME.{png,svg}; needs gnuplot.
std::vector<Figure> draw_figures(const Run& run, const std::string& out_dir);

// The page: summary, figures, skipped steps, per-tensor tables, dtype table,
// peak memory against `compare` (another run folder) when given.
std::string html_page(const Run& run, const std::optional<Run>& compare, const std::vector<Figure>& figures);

}  // namespace report
