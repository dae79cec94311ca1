// Reading a run folder (report.h). Every file is input from outside: its size
// is bounded before it is read, JSON is parsed with exceptions turned into
// messages naming the file, and every field is checked for its type and range.
#include "report.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include <halfgrad/core/error.h>

namespace report {

namespace {

constexpr uintmax_t kMaxFile = uintmax_t{512} << 20;  // 512 MB: far above any real run's files

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw halfgrad::Error(fmt::format("halfgrad-report: {}: {}", path, what));
}

std::optional<std::string> read_file(const std::string& path, bool required) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    if (required) bad(path, "missing (is this a folder written by train_classifier --report?)");
    return std::nullopt;
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxFile) bad(path, fmt::format("unreadable or larger than {} bytes", kMaxFile));
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) bad(path, "read failed");
  return text;
}

nlohmann::json parse(const std::string& path, const std::string& text, const char* format) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad(path, fmt::format("not valid JSON ({})", e.what()));
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != format)
    bad(path, fmt::format("not a {} file (its \"format\" field differs)", format));
  return j;
}

// Field accessors that name what is wrong.
const nlohmann::json& field(const std::string& path, const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) bad(path, fmt::format("missing field \"{}\"", key));
  return j.at(key);
}
std::string str(const std::string& path, const nlohmann::json& j, const char* key) {
  const auto& v = field(path, j, key);
  if (!v.is_string()) bad(path, fmt::format("field \"{}\" is not a string", key));
  return v.get<std::string>();
}
double num(const std::string& path, const nlohmann::json& j, const char* key) {
  const auto& v = field(path, j, key);
  if (!v.is_number()) bad(path, fmt::format("field \"{}\" is not a number", key));
  return v.get<double>();
}
int64_t integer(const std::string& path, const nlohmann::json& j, const char* key) {
  const auto& v = field(path, j, key);
  if (!v.is_number_integer()) bad(path, fmt::format("field \"{}\" is not an integer", key));
  return v.get<int64_t>();
}
std::vector<int64_t> counts(const std::string& path, const nlohmann::json& j, const char* key) {
  const auto& v = field(path, j, key);
  if (!v.is_array() || v.size() != kBins) bad(path, fmt::format("field \"{}\" is not an array of {} counts", key, kBins));
  std::vector<int64_t> out;
  for (const auto& c : v) {
    if (!c.is_number_integer() || c.get<int64_t>() < 0) bad(path, fmt::format("\"{}\" holds a negative or non-integer count", key));
    out.push_back(c.get<int64_t>());
  }
  return out;
}
const nlohmann::json& array(const std::string& path, const nlohmann::json& j, const char* key) {
  const auto& v = field(path, j, key);
  if (!v.is_array()) bad(path, fmt::format("field \"{}\" is not an array", key));
  return v;
}

Stats stats(const std::string& path, const nlohmann::json& j, bool gradient) {
  Stats s;
  s.name = str(path, j, "name");
  s.dtype = str(path, j, "dtype");
  s.calls = integer(path, j, "calls");
  s.max_abs = num(path, j, "max_abs");
  s.hist = counts(path, j, "hist");
  if (gradient) {
    s.scaled_max_abs = num(path, j, "scaled_max_abs");
    s.scaled_hist = counts(path, j, "scaled_hist");
  }
  return s;
}

double cell(const std::string& path, int line, const std::string& v) {
  if (v.empty()) return std::nan("");
  try {
    size_t used = 0;
    const double d = std::stod(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return d;
  } catch (const std::exception&) {
    if (v == "nan" || v == "inf" || v == "-inf") return v == "nan" ? std::nan("") : v == "inf" ? INFINITY : -INFINITY;
    bad(path, fmt::format("line {}: \"{}\" is not a number", line, v));
  }
}

std::vector<MetricsRow> read_metrics(const std::string& path, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line != "kind,step,epoch,loss,lr,loss_scale,skipped,samples_per_s,test_loss,accuracy,seconds")
    bad(path, "does not start with the metrics header (train/metrics_csv.h)");
  std::vector<MetricsRow> rows;
  for (int n = 2; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> c;
    std::string item;
    std::istringstream ls(line);
    while (std::getline(ls, item, ',')) c.push_back(item);
    if (line.back() == ',') c.emplace_back();
    if (c.size() != 11 || (c[0] != "step" && c[0] != "epoch")) bad(path, fmt::format("line {} is not a metrics row", n));
    MetricsRow r;
    r.epoch = c[0] == "epoch";
    r.step = static_cast<int64_t>(cell(path, n, c[1]));
    r.loss = cell(path, n, c[3]);
    r.loss_scale = cell(path, n, c[5]);
    r.skipped = cell(path, n, c[6]);
    r.test_loss = cell(path, n, c[8]);
    r.accuracy = cell(path, n, c[9]);
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

int64_t Stats::total() const {
  int64_t n = 0;
  for (int64_t c : hist) n += c;
  return n;
}

double Stats::share(const std::vector<int64_t>& h, int bin) {
  int64_t n = 0;
  for (int64_t c : h) n += c;
  return n == 0 ? 0.0 : static_cast<double>(h[static_cast<size_t>(bin)]) / static_cast<double>(n);
}

double Stats::share_below(const std::vector<int64_t>& h, int k) {
  int64_t n = 0, below = h[1];
  for (int64_t c : h) n += c;
  for (int b = kLowExp; b < k; ++b) below += h[static_cast<size_t>(2 + b - kLowExp)];
  return n == 0 ? 0.0 : static_cast<double>(below) / static_cast<double>(n);
}

std::string Run::precision() const {
  return info.contains("precision") && info["precision"].is_string() ? info["precision"].get<std::string>() : "?";
}

Run load_run(const std::string& dir) {
  Run run;
  run.dir = dir;
  const std::string run_path = dir + "/run.json";
  run.info = parse(run_path, *read_file(run_path, true), "halfgrad-run-1");
  for (const char* key : {"model", "device", "precision"}) str(run_path, run.info, key);
  for (const char* key : {"steps", "peak_memory_bytes"}) integer(run_path, run.info, key);

  const std::string metrics_path = dir + "/metrics.csv";
  if (auto text = read_file(metrics_path, false)) run.metrics = read_metrics(metrics_path, *text);

  const std::string numerics_path = dir + "/numerics.json";
  if (auto text = read_file(numerics_path, false)) {
    const nlohmann::json j = parse(numerics_path, *text, "halfgrad-numerics-1");
    const auto& bins = field(numerics_path, j, "bins");
    if (integer(numerics_path, bins, "count") != kBins || integer(numerics_path, bins, "low_exp") != kLowExp ||
        integer(numerics_path, bins, "high_exp") != kHighExp)
      bad(numerics_path, "its histogram bins differ from this halfgrad-report's (another version?)");
    for (const auto& jr : array(numerics_path, j, "records")) {
      Record r;
      r.step = integer(numerics_path, jr, "step");
      r.scale = num(numerics_path, jr, "scale");
      const auto& sk = field(numerics_path, jr, "skipped");
      if (sk.is_boolean()) r.skipped = sk.get<bool>();
      for (const auto& g : array(numerics_path, jr, "grads")) r.grads.push_back(stats(numerics_path, g, true));
      for (const auto& a : array(numerics_path, jr, "activations")) r.activations.push_back(stats(numerics_path, a, false));
      run.records.push_back(std::move(r));
    }
    for (const auto& js : array(numerics_path, j, "skips"))
      run.skips.push_back({integer(numerics_path, js, "step"), num(numerics_path, js, "scale"),
                           str(numerics_path, js, "message")});
  }

  const std::string dtypes_path = dir + "/dtypes.json";
  if (auto text = read_file(dtypes_path, false)) {
    const nlohmann::json j = parse(dtypes_path, *text, "halfgrad-dtypes-1");
    for (const auto& o : array(dtypes_path, j, "ops"))
      run.ops.push_back({str(dtypes_path, o, "op"), str(dtypes_path, o, "inputs"), str(dtypes_path, o, "policy"),
                         str(dtypes_path, o, "ran_in"), integer(dtypes_path, o, "calls")});
  }
  return run;
}

}  // namespace report
