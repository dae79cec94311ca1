// amp::DetectNonFinite (amp/anomaly.h): a thread-local guard, and the check
// it registers as the dispatcher's NonFiniteWatch layer: after each op's
// forward and each backward formula (dispatch/layers.h).
#include <halfgrad/amp/anomaly.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <halfgrad/amp/anomaly_hooks.h>
#include <halfgrad/amp/op_policy.h>

#include <halfgrad/amp/autocast.h>
#include <halfgrad/amp/policy.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::amp {

namespace {
thread_local DetectNonFinite* t_detect = nullptr;

// How the output's dtype was chosen, from the row autocast applied.
std::string policy_text(const std::string& row, const Tensor& out) {
  if (row == "off") return "autocast off: the inputs' dtype";
  if (row == "none") return "no row in the policy table: the inputs' dtype";
  if (row == "backward") return "a backward runs in its forward's dtypes";
  return fmt::format("{} by the policy table ({})", dtype_name(out.dtype()), row);
}
}  // namespace

DetectNonFinite::DetectNonFinite() : prev_(t_detect) { t_detect = this; }
DetectNonFinite::~DetectNonFinite() { t_detect = prev_; }
const std::optional<NonFiniteOrigin>& DetectNonFinite::first() const { return first_; }
void DetectNonFinite::reset() { first_.reset(); }

std::string DetectNonFinite::describe() const {
  if (!first_) return "no non-finite value seen";
  const NonFiniteOrigin& f = *first_;
  return fmt::format("first non-finite value: {} of {} -> {} ({}) holds {} inf, {} NaN; {}: {}", f.phase, f.op,
                     f.tensor, f.policy, f.inf, f.nan, f.phase == "forward" ? "inputs" : "incoming gradient",
                     f.inputs.empty() ? std::string("none") : fmt::format("{}", fmt::join(f.inputs, ", ")));
}

bool detect_non_finite_active() {
  return t_detect != nullptr && !dispatch::excluded(dispatch::Layer::NonFiniteWatch) && !t_detect->first();
}

std::string policy_row_now(OpId op, const std::vector<Tensor>& inputs) {
  const Tensor* first = nullptr;
  for (const Tensor& t : inputs)
    if (t.defined()) {
      first = &t;
      break;
    }
  const DeviceType dev = first ? first->device().type() : DeviceType::CPU;
  if (!is_autocast_enabled(dev)) return "off";
  const std::optional<CastPolicy> p = lookup_policy(dev, op);
  return p ? std::string(policy_name(*p)) : "none";
}

void detail_check_non_finite(const char* phase, const std::string& op, const std::string& policy_row,
                             const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  if (!detect_non_finite_active()) return;
  SuppressNonFiniteChecks checking;  // the check's own ops are not checked
  autograd::NoGradGuard no_grad;
  AutocastOff no_autocast;
  for (const Tensor& t : outputs) {
    if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) continue;
    const int64_t inf = sum(isinf(t)).item<int64_t>(), nan = sum(isnan(t)).item<int64_t>();
    if (inf + nan == 0) continue;
    NonFiniteOrigin o;
    o.phase = phase;
    o.op = op;
    o.tensor = t.describe();
    o.policy = policy_text(policy_row, t);
    for (const Tensor& in : inputs)
      if (in.defined()) o.inputs.push_back(in.describe());
    o.inf = inf;
    o.nan = nan;
    t_detect->first_ = std::move(o);
    return;
  }
}

namespace {
// The layer: the row is read before autocast casts the inputs; the op's own
// inner ops (a forward written with other ops, a composite's body, a backward
// formula) run with the layer excluded, so only its output is checked.
[[maybe_unused]] const bool registered = [] {
  dispatch::register_layer(
      dispatch::Layer::NonFiniteWatch,
      {.active = [] { return t_detect != nullptr && !t_detect->first(); },
       .before = [](OpId op, std::vector<Tensor>& inputs, std::string& row) { row = policy_row_now(op, inputs); },
       .after =
           [](OpId op, const std::vector<Tensor>& inputs, const Tensor& out, const std::string& row) {
             detail_check_non_finite("forward", std::string(op_name(op)), row, inputs, {out});
           },
       .after_backward =
           [](const std::string& node, const Tensor& grad_output, const std::vector<Tensor>& grads) {
             detail_check_non_finite("backward", node, "backward", {grad_output}, grads);
           }});
  return true;
}();
}  // namespace

}  // namespace halfgrad::amp
