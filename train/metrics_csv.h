#pragma once
// The training run's metrics as CSV, for plots (scripts/plot-metrics) and for
// comparing runs:
//
//   kind,step,epoch,loss,lr,loss_scale,skipped,samples_per_s,test_loss,accuracy,seconds
//   step,100,0,0.512345679,0.001,65536,0,51234.5,,,12.25
//   epoch,938,0,0.412,0.001,32768,3,50123.1,0.398,0.8712,110.5
//
// One `step` row per logged step (loss: the mean since the previous step
// row; skipped: optimizer steps skipped by the GradScaler since the previous
// row), one `epoch` row at the end of each epoch (loss: the epoch's mean
// training loss; test_loss and accuracy from the evaluation; skipped: in the
// epoch). step counts optimizer steps from the start of the run, epoch counts
// from 0, seconds is wall time since the start of the run. A field with no
// value is left empty. Doubles print as {:.9g} (round-trips a float32 exactly
// and a double to 9 digits); nan, inf, -inf as such.
//
// Crash-safe by appending: every row goes to the file in one write(2) on an
// O_APPEND descriptor, so after a crash (or a stop on a non-finite loss) the
// file holds every row written, whole. Opening with append = true continues an
// existing file (a resumed run): its header must be ours, and a last line cut
// short by a crash is dropped. append = false starts the file afresh.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace halfgrad::train {

enum class RowKind { Step, Epoch };

struct MetricsRow {
  RowKind kind = RowKind::Step;
  int64_t step = 0;
  int64_t epoch = 0;
  std::optional<double> loss;
  std::optional<double> lr;
  std::optional<double> loss_scale;
  std::optional<int64_t> skipped;
  std::optional<double> samples_per_s;
  std::optional<double> test_loss;
  std::optional<double> accuracy;  // a fraction in [0, 1]
  std::optional<double> seconds;
  bool operator==(const MetricsRow&) const = default;  // NaN != NaN, as for doubles
};

class MetricsCsv {
 public:
  static constexpr const char* kHeader =
      "kind,step,epoch,loss,lr,loss_scale,skipped,samples_per_s,test_loss,accuracy,seconds";

  explicit MetricsCsv(std::string path, bool append = false);
  ~MetricsCsv();
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;

  void write(const MetricsRow& row);  // one line, on disk (the OS's cache) when this returns
  void close();                       // further writes are an Error
  const std::string& path() const { return path_; }

  // The line write() puts in the file, without the newline.
  static std::string format_row(const MetricsRow& row);

 private:
  void write_all(const std::string& text);
  std::string path_;
  int fd_ = -1;
};

// Every row of a metrics file (checks the header; an Error names the bad line).
std::vector<MetricsRow> read_metrics_csv(const std::string& path);

}  // namespace halfgrad::train
