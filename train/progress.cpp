// The progress bar (see progress.h): tqdm's line, drawn in place on a
// terminal or printed now and then elsewhere.
#include <halfgrad/train/progress.h>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>

#include <halfgrad/core/error.h>

namespace halfgrad::train {

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Display columns of UTF-8 text: one per code point (the bar's blocks, and
// the text we print, are all single-width).
size_t columns_of(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The first `cols` columns of s (cut on a code-point boundary).
std::string first_columns(std::string_view s, size_t cols) {
  size_t seen = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == cols) break;
      ++seen;
    }
  }
  return std::string(s.substr(0, i));
}

// tqdm's Bar: `width` cells, full cells then one partial cell then blanks.
std::string bar_text(double frac, size_t width, bool ascii) {
  static const char* const unicode[] = {" ", "\u258F", "\u258E", "\u258D", "\u258C",
                                        "\u258B", "\u258A", "\u2589", "\u2588"};
  static const char* const plain[] = {" ", "1", "2", "3", "4", "5", "6", "7", "8", "9", "#"};
  const char* const* charset = ascii ? plain : unicode;
  const int nsyms = ascii ? 10 : 8;
  frac = std::clamp(frac, 0.0, 1.0);
  const auto ticks = static_cast<int64_t>(frac * static_cast<double>(width) * nsyms);
  const auto full = static_cast<size_t>(ticks / nsyms);
  const auto part = static_cast<int>(ticks % nsyms);
  std::string out;
  for (size_t i = 0; i < full; ++i) out += charset[nsyms];
  if (full < width) {
    out += charset[part];
    for (size_t i = full + 1; i < width; ++i) out += ' ';
  }
  return out;
}

std::string rate_text(std::optional<double> rate, const std::string& unit) {
  if (!rate || *rate <= 0) return "?" + unit + "/s";
  if (*rate < 1.0) return fmt::format("{:5.2f}s/{}", 1.0 / *rate, unit);
  return fmt::format("{:5.2f}{}/s", *rate, unit);
}

}  // namespace

std::string format_interval(double seconds) {
  const auto t = static_cast<int64_t>(std::max(0.0, seconds));
  const int64_t s = t % 60, m = (t / 60) % 60, h = t / 3600;
  if (h) return fmt::format("{:d}:{:02d}:{:02d}", h, m, s);
  return fmt::format("{:02d}:{:02d}", m, s);
}

std::string format_sizeof(double num) {
  static constexpr const char* units[] = {"", "k", "M", "G", "T", "P", "E", "Z"};
  for (const char* unit : units) {
    if (std::abs(num) < 999.5) {
      if (std::abs(num) < 99.95) {
        if (std::abs(num) < 9.995) return fmt::format("{:1.2f}{}", num, unit);
        return fmt::format("{:2.1f}{}", num, unit);
      }
      return fmt::format("{:3.0f}{}", num, unit);
    }
    num /= 1000.0;
  }
  return fmt::format("{:3.1f}Y", num);
}

std::string format_num(double value) {
  std::string g = fmt::format("{:.3g}", value);
  // "1e-03" -> "1e-3", "1e+05" -> "1e+5" (tqdm strips the exponent's zeros).
  for (const char* from : {"+0", "-0"}) {
    const auto pos = g.find(from, g.find('e') == std::string::npos ? g.size() : g.find('e'));
    if (pos != std::string::npos) g.erase(pos + 1, 1);
  }
  std::string shortest = fmt::format("{}", value);
  return g.size() < shortest.size() ? g : shortest;
}

ProgressBar::ProgressBar(int64_t total, ProgressOptions options)
    : total_(std::max<int64_t>(total, 0)), options_(std::move(options)) {
  static std::ostream nowhere(nullptr);  // a stream without a buffer: every write is dropped
  out_ = options_.disable ? &nowhere : options_.out ? options_.out : &std::cerr;
  fd_ = out_ == &std::cout ? STDOUT_FILENO : (out_ == &std::cerr || out_ == &std::clog) ? STDERR_FILENO : -1;
  terminal_ = options_.terminal.value_or(fd_ >= 0 && isatty(fd_) == 1);
  if (!options_.clock) options_.clock = steady_seconds;
  HG_CHECK(options_.smoothing >= 0 && options_.smoothing <= 1,
           "ProgressBar: smoothing must be in [0, 1] (0: the average rate), got {}", options_.smoothing);
  HG_CHECK(options_.log_every_steps >= 0 && options_.log_every_seconds >= 0 && options_.min_interval >= 0,
           "ProgressBar: log_every_steps, log_every_seconds and min_interval must be >= 0");
  if (options_.log_every_steps == 0)
    options_.log_every_steps = total_ > 0 ? std::max<int64_t>(1, (total_ + 19) / 20) : 100;
  start_t_ = now_t_ = last_t_ = options_.clock();
  if (terminal_) emit(start_t_);  // show 0% at once: the first step may be slow
}

ProgressBar::~ProgressBar() {
  try {
    close();
  } catch (...) {  // a destructor must not throw (the stream may have failed)
  }
}

void ProgressBar::update(int64_t steps) { update(steps, steps * options_.samples_per_step); }

void ProgressBar::update(int64_t steps, int64_t samples) {
  if (closed_) return;
  n_ += steps;
  samples_ += samples;
  counted_samples_ = counted_samples_ || samples != 0;
  const double now = options_.clock();
  now_t_ = now;
  const bool at_end = total_ > 0 && n_ >= total_;
  if (terminal_) {
    if (at_end || now - last_t_ >= options_.min_interval) emit(now);
  } else if (at_end || n_ - last_n_ >= options_.log_every_steps || now - last_t_ >= options_.log_every_seconds) {
    emit(now);
  }
}

void ProgressBar::set_postfix(std::vector<std::pair<std::string, std::string>> fields) {
  postfix_ = std::move(fields);
}

void ProgressBar::set_postfix(const std::string& key, std::string value) {
  for (auto& [k, v] : postfix_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  postfix_.emplace_back(key, std::move(value));
}

void ProgressBar::set_postfix(const std::string& key, double value) { set_postfix(key, format_num(value)); }

void ProgressBar::set_description(std::string desc) { options_.desc = std::move(desc); }

void ProgressBar::write(std::string_view message) {
  if (terminal_ && !closed_ && printed_any_) {
    put('\r' + std::string(last_columns_, ' ') + '\r' + std::string(message) + '\n');
    last_columns_ = 0;
    emit(now_t_);  // the bar again, below the message
    return;
  }
  put(std::string(message) + '\n');
}

// One write per line: std::cerr is unbuffered, so `<< a << '\n'` is two
// writes, and when several ranks share a pipe (mpirun) another rank's line can
// land between them.
void ProgressBar::put(const std::string& text) {
  out_->write(text.data(), static_cast<std::streamsize>(text.size()));
  out_->flush();
}

void ProgressBar::refresh() {
  if (!closed_) emit(options_.clock());
}

void ProgressBar::close() {
  if (closed_) return;
  const double now = options_.clock();
  if (terminal_) {
    emit(now);
    put("\n");
  } else if (!printed_any_ || n_ != last_n_) {
    emit(now);
  }
  closed_ = true;
}

int ProgressBar::columns() const {
  if (options_.width > 0) return options_.width;
  if (fd_ >= 0) {
    winsize ws{};
    if (ioctl(fd_, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  }
  if (const char* env = std::getenv("COLUMNS")) {
    const int c = std::atoi(env);
    if (c > 0) return c;
  }
  return 80;
}

// tqdm: the EMA of (steps between lines) / the EMA of (seconds between lines),
// each bias-corrected (same correction: it cancels); the average when
// smoothing is 0 or no interval has been measured yet.
std::optional<double> ProgressBar::rate() const {
  if (options_.smoothing > 0 && ema_calls_ > 0 && ema_dt_ > 0) return ema_dn_ / ema_dt_;
  const double elapsed = now_t_ - start_t_;
  if (elapsed > 0 && n_ > 0) return static_cast<double>(n_) / elapsed;
  return std::nullopt;
}

std::optional<double> ProgressBar::samples_rate() const {
  if (options_.smoothing > 0 && ema_calls_ > 0 && ema_dt_ > 0) return ema_ds_ / ema_dt_;
  const double elapsed = now_t_ - start_t_;
  if (elapsed > 0 && samples_ > 0) return static_cast<double>(samples_) / elapsed;
  return std::nullopt;
}

std::string ProgressBar::format_line(int width) const {
  const auto r = rate();
  std::string right = fmt::format("{}", n_);
  if (total_ > 0) right += fmt::format("/{}", total_);
  right += fmt::format(" [{}", format_interval(now_t_ - start_t_));
  if (total_ > 0)
    right += fmt::format("<{}", r && *r > 0 ? format_interval(static_cast<double>(total_ - n_) / *r) : "?");
  right += fmt::format(", {}", rate_text(r, options_.unit));
  if (counted_samples_) {
    const auto sr = samples_rate();
    right += ", " + (sr ? format_sizeof(*sr) : std::string("?")) + " " + options_.sample_unit + "/s";
  }
  for (const auto& [k, v] : postfix_) right += ", " + k + "=" + v;
  right += "]";

  std::string left = options_.desc.empty() ? "" : options_.desc + ": ";
  if (total_ <= 0) return left + right;
  const double frac = std::min(1.0, static_cast<double>(n_) / static_cast<double>(total_));
  left += fmt::format("{:3.0f}%", frac * 100.0);
  if (!terminal_) return left + " " + right;

  // The bar takes what the text leaves of width - 1 columns (the last column
  // stays empty, so no terminal wraps); without room for it, no bar.
  const size_t avail = static_cast<size_t>(std::max(width - 1, 0));
  const size_t text = columns_of(left) + 2 + 1 + columns_of(right);  // "|" bar "| " right
  if (text < avail) return left + "|" + bar_text(frac, avail - text, options_.ascii) + "| " + right;
  return first_columns(left + " " + right, avail);
}

void ProgressBar::emit(double now) {
  now_t_ = now;
  const double dt = now - last_t_;
  const int64_t dn = n_ - last_n_;
  if (options_.smoothing > 0 && dt > 0 && dn > 0) {
    const double a = options_.smoothing;
    ema_dn_ = a * static_cast<double>(dn) + (1 - a) * ema_dn_;
    ema_ds_ = a * static_cast<double>(samples_ - last_samples_) + (1 - a) * ema_ds_;
    ema_dt_ = a * dt + (1 - a) * ema_dt_;
    ++ema_calls_;
  }
  if (dt > 0 || dn > 0) {
    last_t_ = now;
    last_n_ = n_;
    last_samples_ = samples_;
  }
  if (terminal_) {
    const std::string line = format_line(columns());
    const size_t cols = columns_of(line);
    put('\r' + line + std::string(cols < last_columns_ ? last_columns_ - cols : 0, ' '));
    last_columns_ = cols;
  } else {
    put(format_line(0) + '\n');
  }
  printed_any_ = true;
}

}  // namespace halfgrad::train
