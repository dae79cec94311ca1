// amp::Monitor (amp/monitor.h). One recorded step, in time:
//   arm()            after the previous step: forward hooks on every module,
//                    the statistics tensor zeroed
//   forward          each module's output adds to its row (on its device)
//   backward         each gradient's arrival is numbered (a host counter)
//   scaler.step()    on_step: the gradients add to their rows (unscaled and
//                    as scaled), one copy to the host makes the record,
//                    hooks off; a skipped step is explained
#include <halfgrad/amp/monitor.h>

#include <algorithm>
#include <cfloat>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <halfgrad/amp/anomaly_hooks.h>
#include <halfgrad/amp/autocast.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/autograd/hooks.h>
#include <halfgrad/core/atomic_file.h>
#include <halfgrad/core/error.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::amp {

namespace {
constexpr int64_t kRow = Log2Histogram::kStatsSize;
}

double dtype_max(DType dtype) {
  switch (dtype) {
    case DType::Float16: return static_cast<float>(std::numeric_limits<Half>::max());
    case DType::BFloat16: return static_cast<float>(std::numeric_limits<BFloat16>::max());
    case DType::Float32: return std::numeric_limits<float>::max();
    case DType::Float64: return std::numeric_limits<double>::max();
    default: break;
  }
  fail("dtype_max: {} is not a floating dtype", dtype_name(dtype));
}

Monitor::Monitor(std::vector<std::pair<std::string, Tensor>> named_parameters, std::vector<MonitorHookTarget> modules,
                 GradScaler& scaler, MonitorOptions options,
                 const std::vector<std::pair<std::string, Tensor>>& named_buffers)
    : params_(std::move(named_parameters)), modules_(std::move(modules)), scaler_(scaler), options_(std::move(options)) {
  // fp8 layers: the three buffers nn::Linear::enable_fp8 registers, found by name.
  auto find = [&](const std::string& key) -> const Tensor* {
    for (const auto& [k, t] : named_buffers)
      if (k == key) return &t;
    return nullptr;
  };
  const std::string suffix = "fp8_scale";
  for (const auto& [key, t] : named_buffers) {
    if (key.size() < suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string prefix = key.substr(0, key.size() - suffix.size());  // "fc1." or ""
    const Tensor* h = find(prefix + "fp8_amax_history");
    const Tensor* s = find(prefix + "fp8_saturated");
    if (!h || !s || !t.defined()) continue;
    fp8_layers_.push_back({prefix.empty() ? "(model)" : prefix.substr(0, prefix.size() - 1), t, *h, *s, {}});
  }
  HG_CHECK(options_.every >= 0, "amp::Monitor: every = {} must be >= 0 (0: record only after record_next())",
           options_.every);
  grad_hook_ids_.assign(params_.size(), -1);
  arrival_.assign(params_.size(), -1);
  if (options_.explain_skips.value_or(true))  // unset: decided per step by the flag's device
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i].second;
      if (p.defined() && p.requires_grad() && !p.grad_fn())
        grad_hook_ids_[i] = autograd::register_post_accumulate_grad_hook(p, [this, i](const Tensor&) {
          if (arrival_[i] < 0) arrival_[i] = arrivals_++;
        });
    }
  if (options_.detect_anomaly) detect_ = std::make_unique<DetectNonFinite>();
  observer_id_ = scaler_.add_step_observer([this](const ScalerStep& h) { on_step(h); });
  scaler_.set_explain([this] { return last_skip(); });
  if (options_.every > 0) arm();  // step 0 is recorded
}

Monitor::~Monitor() {
  disarm();
  scaler_.remove_step_observer(observer_id_);
  scaler_.set_explain(nullptr);
  for (size_t i = 0; i < params_.size(); ++i)
    if (grad_hook_ids_[i] >= 0) autograd::remove_post_accumulate_grad_hook(params_[i].second, grad_hook_ids_[i]);
}

void Monitor::record_next() {
  if (!armed_) arm();
}

void Monitor::arm() {
  armed_ = true;
  if (activation_stats_.defined()) activation_stats_.zero_();
  activation_calls_.assign(modules_.size(), 0);
  activation_dtypes_.assign(modules_.size(), DType::Float32);
  if (!options_.activations) return;
  forward_hook_ids_.assign(modules_.size(), -1);
  for (size_t j = 0; j < modules_.size(); ++j)
    forward_hook_ids_[j] = modules_[j].add([this, j](const Tensor& out) {
      // evaluation (under no_grad) between two steps is not this step's forward
      if (!armed_ || !autograd::grad_enabled() || !out.defined() || !is_floating(out.dtype())) return;
      // the monitor's own ops are not the model's: no autocast, no trace, no anomaly checks, no graph
      const NoGradGuard no_grad;
      const AutocastOff no_autocast;
      const SuppressNonFiniteChecks quiet;
      if (!activation_stats_.defined())
        activation_stats_ = zeros({static_cast<int64_t>(modules_.size()), kRow}, TensorOptions(DType::Int64, out.device()));
      HG_CHECK(activation_stats_.device() == out.device(),
               "amp::Monitor: the output of {} ({}) is on another device than earlier outputs ({}); the monitor "
               "watches a model on one device",
               modules_[j].name, out.describe(), activation_stats_.device().str());
      accumulate_log2_histogram(out.detach(), activation_stats_.select(0, static_cast<int64_t>(j)));
      if (activation_calls_[j]++ == 0) activation_dtypes_[j] = out.dtype();
    });
}

void Monitor::disarm() {
  for (size_t j = 0; j < forward_hook_ids_.size(); ++j)
    if (forward_hook_ids_[j] >= 0) modules_[j].remove(forward_hook_ids_[j]);
  forward_hook_ids_.clear();
  armed_ = false;
}

void Monitor::on_step(const ScalerStep& handshake) {
  std::optional<bool> skipped;
  if (!handshake.found_inf.defined()) skipped = false;  // a disabled scaler applies every step
  else if (options_.explain_skips.value_or(handshake.found_inf.device().is_cpu()))
    skipped = handshake.found_inf.item<float>() != 0.0f;
  if (armed_) {
    record(handshake, skipped);
    disarm();
  }
  if (skipped.value_or(false)) explain_skip(scaler_.is_enabled() ? scaler_.get_scale() : 1.0);
  ++steps_;
  std::fill(arrival_.begin(), arrival_.end(), -1);
  arrivals_ = 0;
  if (detect_) detect_->reset();
  if (options_.every > 0 && steps_ % options_.every == 0) arm();
}

void Monitor::record(const ScalerStep& handshake, std::optional<bool> skipped) {
  const NoGradGuard no_grad;
  const AutocastOff no_autocast;
  const SuppressNonFiniteChecks quiet;
  MonitorRecord rec;
  rec.step = steps_;
  rec.skipped = skipped;
  rec.scale = scaler_.is_enabled() && scaler_.scale_tensor().defined() ? scaler_.get_scale() : 1.0;
  // Rows: the gradients unscaled, then as scaled; one tensor, one read.
  const auto P = static_cast<int64_t>(params_.size());
  std::vector<size_t> with_grad;
  Tensor grad_stats;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    if (!p.defined() || !p.grad().defined() || !is_floating(p.grad().dtype())) continue;
    const Tensor g = p.grad().detach();
    if (!grad_stats.defined()) grad_stats = zeros({2 * P, kRow}, TensorOptions(DType::Int64, g.device()));
    HG_CHECK(g.device() == grad_stats.device(),
             "amp::Monitor: the gradient of {} ({}) is on another device than the others ({}); the monitor "
             "watches a model on one device",
             params_[i].first, g.describe(), grad_stats.device().str());
    Tensor unscaled = g, scaled = g;
    if (handshake.inv_scale.defined()) unscaled = mul(g, handshake.inv_scale);  // still scaled by S
    else if (handshake.found_inf.defined()) scaled = mul(g, scaler_.scale_tensor());  // unscale_ ran already
    accumulate_log2_histogram(unscaled, grad_stats.select(0, static_cast<int64_t>(i)));
    accumulate_log2_histogram(scaled, grad_stats.select(0, P + static_cast<int64_t>(i)));
    with_grad.push_back(i);
  }
  if (grad_stats.defined()) {
    const Tensor host = grad_stats.to(Device::cpu());
    const int64_t* v = host.data<int64_t>();
    for (size_t i : with_grad) {
      TensorStats s;
      s.name = params_[i].first;
      s.dtype = params_[i].second.grad().dtype();
      s.hist = Log2Histogram::from(v + static_cast<int64_t>(i) * kRow, true);
      s.scaled = Log2Histogram::from(v + (P + static_cast<int64_t>(i)) * kRow, true);
      s.calls = 1;
      rec.grads.push_back(std::move(s));
    }
  }
  if (activation_stats_.defined()) {
    const Tensor host = activation_stats_.to(Device::cpu());
    const int64_t* v = host.data<int64_t>();
    for (size_t j = 0; j < modules_.size(); ++j) {
      if (activation_calls_[j] == 0) continue;
      TensorStats s;
      s.name = modules_[j].name;
      s.dtype = activation_dtypes_[j];
      s.hist = s.scaled = Log2Histogram::from(v + static_cast<int64_t>(j) * kRow, true);
      s.calls = activation_calls_[j];
      rec.activations.push_back(std::move(s));
    }
  }
  record_fp8(rec);
  records_.push_back(std::move(rec));
}

// One small read per fp8 layer, only on a recorded step (a sync on CUDA, as the other reads).
void Monitor::record_fp8(MonitorRecord& rec) {
  for (Fp8Layer& l : fp8_layers_) {
    if (!l.scale.defined() || l.scale.numel() != 3) continue;
    const Tensor host_scale = l.scale.to(Device::cpu()), host_amax = l.amax_history.select(0, 0).to(Device::cpu());
    const Tensor host_sat = l.saturated.to(Device::cpu());
    Fp8LayerStats s;
    s.name = l.name;
    for (int c = 0; c < 3; ++c) {
      s.scale[c] = host_scale.data<float>()[c];
      s.amax[c] = host_amax.data<float>()[c];
      s.saturated[c] = host_sat.data<int64_t>()[c] - l.seen[c];
      l.seen[c] = host_sat.data<int64_t>()[c];
    }
    rec.fp8.push_back(std::move(s));
  }
}

void Monitor::explain_skip(double scale) {
  std::vector<NonFiniteGrad> found;
  {
    const SuppressNonFiniteChecks quiet;
    found = non_finite_grads(params_);
  }
  // backward's order: the first non-finite gradient in time is nearest to where the overflow entered
  std::vector<int64_t> order;
  for (const NonFiniteGrad& f : found)
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].first == f.name) {
        order.push_back(arrival_[i] < 0 ? std::numeric_limits<int64_t>::max() : arrival_[i]);
        break;
      }
  std::string line = fmt::format("step {} skipped (scale {:g}): ", steps_, scale);
  if (found.empty()) {
    line += "no gradient holds inf or NaN now (were they changed after the scaler's check?)";
  } else {
    std::vector<size_t> idx(found.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return order[a] < order[b]; });
    const NonFiniteGrad& f = found[idx[0]];
    const char* what = f.nan == 0 ? "inf" : f.inf == 0 ? "NaN" : "inf and NaN";
    line += fmt::format("grad of {} is {}", f.name, what);
    if (found.size() > 1)
      line += fmt::format(" (first of {} non-finite gradients in backward{})", found.size(),
                          order[idx[0]] == std::numeric_limits<int64_t>::max() ? ", arrival order unknown" : "");
  }
  std::string op;
  if (detect_ && detect_->first()) line += "; " + (op = detect_->describe());
  else if (detect_) line += "; no op produced a non-finite value here (an input, a weight or another rank held it)";
  skips_.push_back({steps_, scale, line, op});
  if (options_.on_skip) options_.on_skip(line);
}

namespace {

nlohmann::json stats_json(const TensorStats& s, bool gradient) {
  auto counts = [](const Log2Histogram& h) { return std::vector<int64_t>(h.counts.begin(), h.counts.end()); };
  nlohmann::json j = {{"name", s.name},
                      {"dtype", std::string(dtype_name(s.dtype))},
                      {"calls", s.calls},
                      {"max_abs", s.hist.max_abs},
                      {"hist", counts(s.hist)}};
  if (gradient) {
    j["scaled_max_abs"] = s.scaled.max_abs;
    j["scaled_hist"] = counts(s.scaled);
  }
  return j;
}

}  // namespace

std::string Monitor::json() const {
  nlohmann::json root;
  root["format"] = "halfgrad-numerics-1";
  root["bins"] = {{"count", Log2Histogram::kBins},
                  {"low_exp", Log2Histogram::kLowExp},
                  {"high_exp", Log2Histogram::kHighExp},
                  {"layout", "0: zeros, 1: below 2^low_exp, 2 + (k - low_exp): [2^k, 2^(k+1)), then >= 2^high_exp, "
                             "then inf/NaN"}};
  root["steps"] = steps_;
  root["every"] = options_.every;
  nlohmann::json records = nlohmann::json::array();
  for (const MonitorRecord& r : records_) {
    nlohmann::json jr = {{"step", r.step}, {"scale", r.scale}};
    jr["skipped"] = r.skipped ? nlohmann::json(*r.skipped) : nlohmann::json(nullptr);
    jr["grads"] = nlohmann::json::array();
    for (const TensorStats& s : r.grads) jr["grads"].push_back(stats_json(s, true));
    jr["activations"] = nlohmann::json::array();
    for (const TensorStats& s : r.activations) jr["activations"].push_back(stats_json(s, false));
    if (!r.fp8.empty()) {
      jr["fp8"] = nlohmann::json::array();
      for (const Fp8LayerStats& s : r.fp8)
        jr["fp8"].push_back({{"name", s.name}, {"scale", s.scale}, {"amax", s.amax}, {"saturated", s.saturated}});
    }
    records.push_back(std::move(jr));
  }
  root["records"] = std::move(records);
  nlohmann::json skips = nlohmann::json::array();
  for (const SkippedStep& s : skips_) skips.push_back({{"step", s.step}, {"scale", s.scale}, {"message", s.message}});
  root["skips"] = std::move(skips);
  return root.dump(1);
}

void Monitor::write_json(const std::string& path) const { atomic_write_file(path, json()); }

}  // namespace halfgrad::amp
