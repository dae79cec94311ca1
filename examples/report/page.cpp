// The report page: one HTML file with its styles and figures (SVG) inline, so
// it opens anywhere without the folder around it.
#include <cmath>

#include <fmt/format.h>

#include "report.h"

namespace report {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string pct(double share) {
  if (share == 0) return "0";
  if (share < 1e-4) return fmt::format("{:.2g}%", 100 * share);
  return fmt::format("{:.2f}%", 100 * share);
}

std::string mb(double bytes) { return fmt::format("{:.1f} MB", bytes / (1024.0 * 1024.0)); }

double dtype_max(const std::string& dtype) {
  if (dtype == "float16") return 65504.0;
  if (dtype == "bfloat16") return 3.3895313892515355e38;
  if (dtype == "float32") return 3.4028234663852886e38;
  return 1.7976931348623157e308;
}

const char* kStyle = R"(
body { font-family: system-ui, sans-serif; max-width: 1150px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: .86em; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th { background: #f3f5f8; } td:first-child, th:first-child { text-align: left; font-family: monospace; }
.warn { background: #fdecea; } .note { color: #555; font-size: .92em; }
.skip { font-family: monospace; font-size: .85em; background: #fff6e5; padding: .4em .6em; margin: .2em 0; }
figure { margin: 1em 0 2em; } figcaption { color: #555; font-size: .9em; max-width: 900px; }
figure svg { max-width: 100%; height: auto; }
)";

std::string summary(const Run& run) {
  const auto& i = run.info;
  auto get = [&](const char* k) { return i.contains(k) ? i[k].dump() : std::string("-"); };
  std::string acc = "-";
  if (i.contains("test_accuracy") && i["test_accuracy"].is_number())
    acc = fmt::format("{:.2f}%", 100 * i["test_accuracy"].get<double>());
  return fmt::format(
      "<table><tr><th>model</th><td>{}</td></tr><tr><th>device</th><td>{}</td></tr>"
      "<tr><th>precision</th><td>{}</td></tr><tr><th>GradScaler</th><td>{}</td></tr>"
      "<tr><th>steps</th><td>{}</td></tr><tr><th>skipped steps</th><td>{}</td></tr>"
      "<tr><th>test accuracy</th><td>{}</td></tr><tr><th>peak memory</th><td>{}</td></tr>"
      "<tr><th>statistics recorded</th><td>{} records (every {} steps)</td></tr></table>",
      esc(i["model"].get<std::string>()), esc(i["device"].get<std::string>()), esc(run.precision()), esc(get("scaler")),
      get("steps"), get("skipped_steps"), acc, mb(i["peak_memory_bytes"].get<double>()), run.records.size(),
      esc(get("monitor_every")));
}

std::string grad_table(const Record& r) {
  std::string s = fmt::format(
      "<table><tr><th>parameter</th><th>dtype</th><th>max |g|</th><th>zeros</th><th>&lt; 2^-24<br>(fp16 underflow, "
      "scale 1)</th><th>&lt; 2^-14<br>(fp16 subnormal, scale 1)</th><th>&lt; 2^-24 at scale {0:g}</th>"
      "<th>&lt; 2^-14 at scale {0:g}</th><th>inf/NaN</th></tr>",
      r.scale);
  for (const Stats& g : r.grads) {
    const double nonfinite = Stats::share(g.hist, kBins - 1);
    s += fmt::format("<tr{}><td>{}</td><td>{}</td><td>{:.3g}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                     "<td>{}</td></tr>",
                     nonfinite > 0 ? " class=warn" : "", esc(g.name), g.dtype, g.max_abs, pct(Stats::share(g.hist, 0)),
                     pct(Stats::share_below(g.hist, -24)), pct(Stats::share_below(g.hist, -14)),
                     pct(Stats::share_below(g.scaled_hist, -24)), pct(Stats::share_below(g.scaled_hist, -14)),
                     pct(nonfinite));
  }
  return s + "</table>";
}

std::string activation_table(const Record& r) {
  std::string s =
      "<table><tr><th>module output</th><th>dtype</th><th>calls</th><th>max |x|</th><th>max / dtype's max</th>"
      "<th>zeros</th><th>inf/NaN</th></tr>";
  for (const Stats& a : r.activations) {
    const double nonfinite = Stats::share(a.hist, kBins - 1);
    s += fmt::format("<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{:.3g}</td><td>{:.2g}</td><td>{}</td><td>{}</td></tr>",
                     nonfinite > 0 ? " class=warn" : "", esc(a.name), a.dtype, a.calls, a.max_abs,
                     a.max_abs / dtype_max(a.dtype), pct(Stats::share(a.hist, 0)), pct(nonfinite));
  }
  return s + "</table>";
}

}  // namespace

std::string html_page(const Run& run, const std::optional<Run>& compare, const std::vector<Figure>& figures) {
  std::string body = fmt::format("<h1>halfgrad run report: {}, {}</h1>\n{}", esc(run.info["model"].get<std::string>()),
                                 esc(run.precision()), summary(run));
  for (const Figure& f : figures)
    body += fmt::format("<figure id=\"{}\"><h3>{}</h3>{}<figcaption>{} (figures/{}.png, .svg)</figcaption></figure>\n",
                        f.name, esc(f.title), f.svg, esc(f.caption), f.name);

  body += "<h2>Skipped steps</h2>\n";
  if (run.skips.empty()) body += "<p>None explained (no step was skipped, or the monitor was off).</p>\n";
  for (const Skip& s : run.skips) body += fmt::format("<div class=skip>{}</div>\n", esc(s.message));

  if (!run.records.empty()) {
    const Record& r = run.records.back();
    body += fmt::format("<h2>Gradients at step {}</h2>\n<p class=note>Unscaled (as the optimizer applies them); the "
                        "shares at the loss scale are of the gradients as backward held them (times {:g}).</p>\n{}",
                        r.step, r.scale, grad_table(r));
    body += fmt::format("<h2>Module outputs at step {}</h2>\n{}", r.step, activation_table(r));
  }

  body += "<h2>What autocast ran, op by op (the first step's forward)</h2>\n";
  if (run.ops.empty()) {
    body += "<p>No op ran under autocast (a float32 run).</p>\n";
  } else {
    body += "<table><tr><th>op</th><th>calls</th><th>input dtypes</th><th>policy row</th><th>ran in</th></tr>";
    for (const OpRow& o : run.ops)
      body += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", esc(o.op), o.calls,
                          esc(o.inputs), esc(o.policy), esc(o.ran_in));
    body += "</table>\n";
  }

  body += "<h2>Peak memory</h2>\n<table><tr><th>run</th><th>precision</th><th>peak memory</th></tr>";
  body += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>", esc(run.dir), esc(run.precision()),
                      mb(run.info["peak_memory_bytes"].get<double>()));
  if (compare) {
    body += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>", esc(compare->dir), esc(compare->precision()),
                        mb(compare->info["peak_memory_bytes"].get<double>()));
    body += fmt::format("</table><p>This run's peak is {:.2f}x the other's.</p>\n",
                        run.info["peak_memory_bytes"].get<double>() /
                            std::max(1.0, compare->info["peak_memory_bytes"].get<double>()));
  } else {
    body += "</table><p class=note>Pass another run folder (<code>halfgrad-report RUN --compare OTHER</code>, e.g. "
            "the same model in float32) to compare peaks.</p>\n";
  }
  return fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>halfgrad report: {}</title>"
                     "<style>{}</style></head><body>\n{}</body></html>\n",
                     esc(run.info["model"].get<std::string>()), kStyle, body);
}

}  // namespace report
