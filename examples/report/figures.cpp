// The report's figures, drawn by gnuplot (as scripts/plot-metrics draws the
// metrics): each is a data file and a script under DIR/figures, written to
// NAME.png and NAME.svg. The histograms put each bin at its binade's exponent
// k (|x| in [2^k, 2^(k+1))), zeros at -42 and inf/NaN at 17, with float16's
// limits drawn in: smallest subnormal 2^-24, smallest normal 2^-14, largest
// 65504 (just under 2^16). bfloat16's range (2^-133 to 2^128) lies past both
// edges: nothing a float32 model computes leaves it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include <halfgrad/core/atomic_file.h>
#include <halfgrad/core/error.h>

#include "report.h"

namespace report {

namespace {

namespace fs = std::filesystem;

int bin_x(int bin) {
  if (bin == 0) return kLowExp - 2;
  if (bin == kBins - 1) return kHighExp + 1;
  return kLowExp + bin - 2;  // bin 1 (below 2^-40) lands at -41, bin 58 (>= 2^16) at 16
}

// One text file of whitespace-separated columns.
void write_data(const std::string& path, const std::string& text) { halfgrad::atomic_write_file(path, text); }

std::string terminal_png(int w, int h) {
  static const bool cairo = [] {
    FILE* p = ::popen("gnuplot -e 'set terminal' 2>&1", "r");
    std::string out;
    char buf[4096];
    while (p && std::fgets(buf, sizeof buf, p)) out += buf;
    if (p) ::pclose(p);
    return out.find("pngcairo") != std::string::npos;
  }();
  return fmt::format("{} size {},{} noenhanced", cairo ? "pngcairo" : "png", w, h);
}

// Runs `plot` (gnuplot commands after the set-up) into NAME.png and NAME.svg.
std::string draw(const std::string& dir, const std::string& name, int w, int h, const std::string& setup,
                 const std::string& plot) {
  const std::string script = dir + "/data/" + name + ".gp";
  write_data(script, fmt::format("{}\nset terminal {}\nset output '{}/{}.png'\n{}\n"
                                 "set terminal svg size {},{} noenhanced font 'sans,11'\nset output '{}/{}.svg'\n"
                                 "replot\nset output\n",
                                 setup, terminal_png(w, h), dir, name, plot, w, h, dir, name));
  const std::string cmd = fmt::format("gnuplot '{}' 2> '{}/data/{}.log'", script, dir, name);
  if (std::system(cmd.c_str()) != 0)
    throw halfgrad::Error(fmt::format("halfgrad-report: gnuplot failed on {} (see {}/data/{}.log); is gnuplot "
                                      "installed (Debian: gnuplot-nox)?",
                                      script, dir, name));
  std::ifstream in(dir + "/" + name + ".svg");
  std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t start = svg.find("<svg");  // inline: drop the XML prolog and DOCTYPE
  return start == std::string::npos ? svg : svg.substr(start);
}

const std::string kRangeLines =
    "set arrow from -24, graph 0 to -24, graph 1 nohead dt 2 lc rgb '#c0392b'\n"
    "set arrow from -14, graph 0 to -14, graph 1 nohead dt 2 lc rgb '#e67e22'\n"
    "set arrow from 15.999, graph 0 to 15.999, graph 1 nohead dt 2 lc rgb '#c0392b'\n"
    "set label 'fp16 smallest subnormal 2^-24' at -24, graph 0.5 center rotate by 90 offset -0.8,0 tc rgb '#c0392b' font ',9'\n"
    "set label 'fp16 smallest normal 2^-14' at -14, graph 0.5 center rotate by 90 offset -0.8,0 tc rgb '#e67e22' font ',9'\n"
    "set label 'fp16 max 65504' at 15.999, graph 0.5 center rotate by 90 offset -0.8,0 tc rgb '#c0392b' font ',9'\n";

std::string xtics() {
  std::string t = fmt::format("set xtics ('0' {}, '<2^-40' {}", kLowExp - 2, kLowExp - 1);
  for (int k = -36; k <= 12; k += 4) t += fmt::format(", '2^{}' {}", k, k);
  t += fmt::format(", '>=2^16' {}, 'inf/NaN' {}) font ',9' rotate by 45 right\n", kHighExp, kHighExp + 1);
  return t + fmt::format("set xrange [{}:{}]\n", kLowExp - 2.5, kHighExp + 1.5);
}

std::vector<int64_t> summed(const std::vector<Stats>& v, bool scaled) {
  std::vector<int64_t> s(kBins, 0);
  for (const Stats& t : v)
    for (int b = 0; b < kBins; ++b) s[static_cast<size_t>(b)] += (scaled ? t.scaled_hist : t.hist)[static_cast<size_t>(b)];
  return s;
}

std::string shares(const std::vector<int64_t>& h) {
  int64_t n = 0;
  for (int64_t c : h) n += c;
  std::string out;
  for (int b = 0; b < kBins; ++b)
    out += fmt::format("{} {:.8g}\n", bin_x(b), n ? 100.0 * static_cast<double>(h[static_cast<size_t>(b)]) / n : 0.0);
  return out;
}

std::string escape_label(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '\'' ? std::string("''") : std::string(1, c);
  return o;
}

// Per tensor (a row) and bin (a column): the share of its elements, as an image.
Figure heatmap(const std::string& dir, const std::string& name, const std::string& title, const std::string& caption,
               const std::vector<Stats>& rows, bool scaled) {
  std::string data, ytics = "set ytics (";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& h = scaled ? rows[i].scaled_hist : rows[i].hist;
    for (int b = 0; b < kBins; ++b) {
      // every bin gets a cell (with image wants a full grid); empty ones at the floor colour
      data += fmt::format("{} {} {:.6g}\n", bin_x(b), i, std::max(Stats::share(h, b), 1e-6));
    }
    data += "\n";
    ytics += fmt::format("{}'{}' {}", i ? ", " : "", escape_label(rows[i].name), i);
  }
  ytics += ") font ',8'\n";
  write_data(dir + "/data/" + name + ".dat", data);
  const int h = 160 + 12 * static_cast<int>(rows.size());
  const std::string setup = fmt::format(
      "set title '{}'\nset xlabel 'log2 |x|'\n{}{}set yrange [{}:-0.5]\nset logscale cb\nset cbrange [1e-5:1]\n"
      "set cblabel 'share of the tensor'\nset palette defined (0 '#f7fbff', 1 '#6baed6', 2 '#08306b')\n{}"
      "set lmargin 28\nunset key",
      escape_label(title), xtics(), ytics, static_cast<double>(rows.size()) - 0.5, kRangeLines);
  const std::string svg = draw(dir, name, 1100, h, setup, fmt::format("plot '{}/data/{}.dat' using 1:2:3 with image", dir, name));
  return {name, title, caption, svg};
}

}  // namespace

std::vector<Figure> draw_figures(const Run& run, const std::string& out_dir) {
  const std::string dir = out_dir + "/figures";
  fs::create_directories(dir + "/data");
  std::vector<Figure> figs;

  // 1. loss and loss scale against step, skipped steps marked
  std::string loss, scale, skipped;
  for (const MetricsRow& r : run.metrics) {
    if (r.epoch) continue;
    if (std::isfinite(r.loss)) loss += fmt::format("{} {:.8g}\n", r.step, r.loss);
    if (std::isfinite(r.loss_scale)) scale += fmt::format("{} {:.8g}\n", r.step, r.loss_scale);
  }
  for (const Skip& s : run.skips) skipped += fmt::format("{} {:.8g}\n", s.step, s.scale);
  if (run.skips.empty())  // without the monitor's lines: the CSV's skipped counts per read
    for (const MetricsRow& r : run.metrics)
      if (!r.epoch && r.skipped > 0 && std::isfinite(r.loss_scale)) skipped += fmt::format("{} {:.8g}\n", r.step, r.loss_scale);
  if (!loss.empty()) {
    write_data(dir + "/data/loss.dat", loss);
    std::string plot = fmt::format("plot '{}/data/loss.dat' using 1:2 with lines lw 1.5 lc rgb '#1f77b4' title 'training loss'", dir);
    std::string setup = "set title 'loss and loss scale'\nset xlabel 'step'\nset ylabel 'loss'\nset grid\nset key top right";
    if (!scale.empty()) {
      write_data(dir + "/data/scale.dat", scale);
      setup += "\nset y2label 'loss scale'\nset logscale y2 2\nset format y2 '2^%L'\nset y2tics\nset ytics nomirror";
      plot += fmt::format(", '{}/data/scale.dat' using 1:2 with steps lw 1.5 lc rgb '#2ca02c' title 'loss scale' axes x1y2", dir);
      if (!skipped.empty()) {
        write_data(dir + "/data/skipped.dat", skipped);
        plot += fmt::format(", '{}/data/skipped.dat' using 1:2 with points pt 7 ps 1.2 lc rgb '#d62728' title "
                            "'skipped step (at its scale)' axes x1y2",
                            dir);
      }
    }
    figs.push_back({"loss_scale", "Loss and loss scale",
                    "The training loss (mean over each read) and the GradScaler's scale on a log2 axis; red points are "
                    "skipped steps (an inf/NaN gradient: no update, the scale halves).",
                    draw(dir, "loss_scale", 1000, 480, setup, plot)});
  }

  if (run.records.empty()) return figs;
  const Record& first = run.records.front();
  const Record& last = run.records.back();

  // 2. all gradients against float16's range: Micikevicius et al. (2018), Figure 3, from this model
  if (!last.grads.empty()) {
    write_data(dir + "/data/grads_first.dat", shares(summed(first.grads, false)));
    write_data(dir + "/data/grads_last.dat", shares(summed(last.grads, false)));
    write_data(dir + "/data/grads_last_scaled.dat", shares(summed(last.grads, true)));
    const std::string setup = "set title 'all weight gradients, log2 |g|'\nset ylabel '% of elements'\nset grid\n"
                              "set key top right\n" + xtics() + kRangeLines;
    std::string plot = fmt::format(
        "plot '{0}/data/grads_first.dat' using 1:2 with steps lw 2 lc rgb '#7f7f7f' title 'step {1} (unscaled)', "
        "'{0}/data/grads_last.dat' using 1:2 with steps lw 2 lc rgb '#1f77b4' title 'step {2} (unscaled)'",
        dir, first.step, last.step);
    if (last.scale != 1.0)  // at scale 1 the curve would repeat the one before
      plot += fmt::format(", '{0}/data/grads_last_scaled.dat' using 1:2 with steps lw 2 lc rgb '#2ca02c' title 'step {1} "
                          "as backward held them (x scale {2:g})'",
                          dir, last.step, last.scale);
    figs.push_back({"grads", "Gradients against float16's range",
                    "Every parameter's gradient, binned by binade. Left of the red line, float16 would hold 0; between "
                    "the lines, only a subnormal with fewer significant bits. The green curve is the same gradients "
                    "times the loss scale, as backward computed them: scaling moves them into float16's normal range. "
                    "bfloat16 (2^-133 to 2^128) spans past both edges.",
                    draw(dir, "grads", 1000, 480, setup, plot)});
  }
  if (!last.activations.empty()) {
    write_data(dir + "/data/acts_first.dat", shares(summed(first.activations, false)));
    write_data(dir + "/data/acts_last.dat", shares(summed(last.activations, false)));
    const std::string setup = "set title 'all module outputs, log2 |x|'\nset ylabel '% of elements'\nset grid\n"
                              "set key top right\n" + xtics() + kRangeLines;
    const std::string plot = fmt::format(
        "plot '{0}/data/acts_first.dat' using 1:2 with steps lw 2 lc rgb '#7f7f7f' title 'step {1}', "
        "'{0}/data/acts_last.dat' using 1:2 with steps lw 2 lc rgb '#ff7f0e' title 'step {2}'",
        dir, first.step, last.step);
    figs.push_back({"activations", "Activations against float16's range",
                    "Every module's forward output (in the dtype autocast ran it in), binned by binade. An output past "
                    "65504 in float16 is inf (the last bin).",
                    draw(dir, "activations", 1000, 480, setup, plot)});
  }

  // 3. per layer, first and last record
  for (const auto& [rec, when] : {std::pair{&first, "first"}, std::pair{&last, "last"}}) {
    if (!rec->grads.empty())
      figs.push_back(heatmap(dir, fmt::format("grads_layers_{}", when),
                             fmt::format("gradients per parameter, step {} (unscaled)", rec->step),
                             fmt::format("Each parameter's gradient at the {} record (step {}): the share of its "
                                         "elements in each binade.",
                                         when, rec->step),
                             rec->grads, false));
    if (!rec->activations.empty())
      figs.push_back(heatmap(dir, fmt::format("activations_layers_{}", when),
                             fmt::format("outputs per module, step {}", rec->step),
                             fmt::format("Each module's output at the {} record (step {}).", when, rec->step),
                             rec->activations, false));
    if (&first == &last) break;
  }
  return figs;
}

}  // namespace report
