#pragma once
// A tqdm-like progress bar for training loops:
//
//   epoch 1:  45%|████▌     | 450/1000 [00:12<00:14, 37.50it/s, 2.40k samples/s, lr=0.001, loss=0.412]
//
// description, percent, bar, step/total, elapsed<remaining, steps per second,
// an extra rate (samples per second, once samples are counted), and the
// caller's postfix fields in the order first set. The formats are tqdm's
// (format_interval, format_sizeof, format_num below; `{:5.2f}it/s`, or
// `s/it` below one step a second); step counts print in full (tqdm's default,
// unit_scale=False), the samples rate is scaled (tqdm's unit_scale: 2.40k).
//
// Two modes, chosen from the stream:
//   terminal  (std::cout/std::cerr on a tty): one line redrawn in place with
//             '\r' at most every min_interval seconds, as wide as the terminal
//             (TIOCGWINSZ, else $COLUMNS, else 80) less one column, the bar
//             filling what the text leaves, so it never wraps; close() ends it
//             with a newline.
//   plain     (a pipe, a log file, CI; any other std::ostream): no bar and no
//             '\r'; one line every log_every_steps steps or log_every_seconds
//             seconds, whichever comes first, and a final line at close().
// Tests (and programs with their own clock) inject the clock, the stream,
// the mode and the width through ProgressOptions.
//
// The rate is tqdm's: an exponential moving average (weight `smoothing`) of
// the rate between consecutive lines, bias-corrected; smoothing = 0 gives the
// average since the start. Remaining time = (total - n) / rate.
//
// progress(range, options) wraps any range with a size(): iterating it
// counts one step per item (after the loop body, as tqdm does) and closes the
// bar when the end is reached (or when the wrapper is destroyed):
//
//   for (auto& batch : hg::train::progress(loader, {.desc = "epoch 1", .samples_per_step = 64})) { ... }
#include <concepts>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace halfgrad::train {

// tqdm's formats. format_interval: "MM:SS" below an hour, else "H:MM:SS"
// (whole seconds, truncated). format_sizeof: three significant digits and an
// SI suffix (k, M, G, ...): "9.99", "12.3", "123", "1.23k", "45.6M".
// format_num: the shorter of "{:.3g}" (exponent without leading zeros, "1e-3")
// and the shortest round-trip form ("0.001"), as tqdm formats postfix numbers.
std::string format_interval(double seconds);
std::string format_sizeof(double num);
std::string format_num(double value);

struct ProgressOptions {
  std::string desc;                   // "epoch 1" prints as "epoch 1: "
  std::ostream* out = nullptr;        // nullptr: std::cerr (as tqdm: stdout stays for results)
  std::optional<bool> terminal;       // unset: isatty() of std::cout's/std::cerr's fd; any other stream: plain
  int width = 0;                      // terminal columns; 0: TIOCGWINSZ, else $COLUMNS, else 80
  std::function<double()> clock;      // seconds, any origin; unset: std::chrono::steady_clock
  double min_interval = 0.1;          // terminal: redraw at most this often (the end always redraws)
  int64_t log_every_steps = 0;        // plain: a line every this many steps; 0: total / 20 (100 without a total)
  double log_every_seconds = 30.0;    // plain: ... or when this long has passed since the last line
  double smoothing = 0.3;             // rate EMA weight of the newest interval; 0: average since the start
  std::string unit = "it";            // "it/s", "s/it"
  std::string sample_unit = "samples";  // ", 2.40k samples/s"
  int64_t samples_per_step = 0;       // update(steps) counts steps * this many samples
  bool ascii = false;                 // bar of " 123456789#" instead of Unicode eighth blocks
  bool disable = false;               // draw nothing, write() nothing (tqdm's disable: ranks other than 0)
};

class ProgressBar {
 public:
  // total <= 0: unknown length (no percent, bar or remaining time).
  explicit ProgressBar(int64_t total, ProgressOptions options = {});
  ~ProgressBar();  // close()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `steps` more steps done (and steps * samples_per_step samples).
  void update(int64_t steps = 1);
  // ... with an explicit sample count (e.g. a short last batch).
  void update(int64_t steps, int64_t samples);

  // Postfix fields ("key=value", comma-separated, in the order first set).
  // The list form replaces them all; the key forms set one, keeping its place.
  // Numbers print with format_num. Shown at the next line drawn.
  void set_postfix(std::vector<std::pair<std::string, std::string>> fields);
  void set_postfix(const std::string& key, std::string value);
  void set_postfix(const std::string& key, const char* value) { set_postfix(key, std::string(value)); }
  void set_postfix(const std::string& key, double value);
  template <std::integral I>  // counts ("skipped=3"); also keeps set_postfix("k", 0) unambiguous
  void set_postfix(const std::string& key, I value) {
    set_postfix(key, std::to_string(value));
  }
  void set_description(std::string desc);

  // A message on its own line: on a terminal the bar is cleared, the message
  // printed and the bar redrawn below it; in plain mode just the message.
  void write(std::string_view message);
  void refresh();  // draw now (terminal: redraw; plain: print a line)
  // The final line (terminal: redrawn, then '\n'; plain: printed unless the
  // last line already showed this step). Further calls do nothing.
  void close();

  int64_t n() const { return n_; }
  int64_t total() const { return total_; }
  bool is_terminal() const { return terminal_; }
  bool closed() const { return closed_; }
  // The line as it would be drawn now for `columns` columns (terminal form
  // when is_terminal(), else the plain form); no '\r', no newline.
  std::string format_line(int columns) const;

 private:
  void emit(double now);  // draw (terminal) or print (plain) a line
  void put(const std::string& text);  // one write, flushed
  int columns() const;
  std::optional<double> rate() const;
  std::optional<double> samples_rate() const;

  int64_t total_;
  ProgressOptions options_;
  std::ostream* out_;
  int fd_;
  bool terminal_;
  int64_t n_ = 0;
  int64_t samples_ = 0;
  bool counted_samples_ = false;
  std::vector<std::pair<std::string, std::string>> postfix_;
  double start_t_;
  double now_t_;  // the clock at the last update or draw
  double last_t_;  // the clock at the last line
  int64_t last_n_ = 0;
  int64_t last_samples_ = 0;
  bool printed_any_ = false;
  size_t last_columns_ = 0;  // terminal: the width of the line on screen
  // tqdm's bias-corrected EMAs of steps, samples and seconds between lines.
  double ema_dn_ = 0, ema_ds_ = 0, ema_dt_ = 0;
  int ema_calls_ = 0;
  bool closed_ = false;
};

// The range wrapper behind progress(); owns the range if given a temporary,
// refers to it otherwise.
template <typename Range>
class ProgressRange {
 public:
  ProgressRange(Range&& range, ProgressOptions options)
      : range_(std::forward<Range>(range)),
        bar_(std::make_unique<ProgressBar>(static_cast<int64_t>(std::size(range_)), std::move(options))) {}

  using base_iterator = decltype(std::begin(std::declval<Range&>()));
  using base_sentinel = decltype(std::end(std::declval<Range&>()));
  struct sentinel {
    base_sentinel end;
  };
  class iterator {
   public:
    iterator(base_iterator it, ProgressBar* bar) : it_(std::move(it)), bar_(bar) {}
    decltype(auto) operator*() const { return *it_; }
    iterator& operator++() {
      ++it_;
      bar_->update();
      return *this;
    }
    // Reaching the end closes the bar (the final line comes with the loop's end).
    friend bool operator==(const iterator& a, const sentinel& b) {
      const bool at_end = a.it_ == b.end;
      if (at_end) a.bar_->close();
      return at_end;
    }

   private:
    base_iterator it_;
    ProgressBar* bar_;
  };

  iterator begin() { return iterator(std::begin(range_), bar_.get()); }
  sentinel end() { return sentinel{std::end(range_)}; }
  ProgressBar& bar() { return *bar_; }

 private:
  Range range_;
  std::unique_ptr<ProgressBar> bar_;
};

template <typename Range>
ProgressRange<Range> progress(Range&& range, ProgressOptions options = {}) {
  return ProgressRange<Range>(std::forward<Range>(range), std::move(options));
}

}  // namespace halfgrad::train
