#include <halfgrad/ops/dispatch.h>

#include <optional>
#include <string>

#include <halfgrad/amp/anomaly_hooks.h>
#include <halfgrad/amp/autocast.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/ops/util.h>

namespace halfgrad::dispatch {

void check_same_device(std::string_view op, const std::vector<Tensor>& inputs) {
  const Tensor* first = nullptr;
  for (const auto& t : inputs) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
      continue;
    }
    HG_CHECK(t.device() == first->device(),
             "{}: expected all tensors on the same device, but got {} and {}. Move them first, e.g. "
             "t.to(Device::cuda()) or t.cpu().",
             op, first->describe(), t.describe());
  }
}

namespace {
// Saved::grad_dtypes: float32 for a narrow input made by casting a float32 tensor.
DType grad_dtype_of(const Tensor& t) {
  if (!t.defined()) return DType::Float32;
  const auto& fn = t.grad_fn();
  // bfloat16 on the CPU only (docs/numerics.md): CUDA rounds as PyTorch does, and
  // so does float16, whose rounding of small gradients to zero is what loss
  // scaling is for (and what the lessons show)
  if (t.device().is_cpu() && t.dtype() == DType::BFloat16 && fn && fn->name == op_name(OpId::to) &&
      fn->input_meta.size() == 1 &&
      fn->input_meta[0].dtype == DType::Float32)
    return DType::Float32;
  return t.dtype();
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

thread_local bool t_recording = false;                 // see recording()
thread_local std::vector<Tensor>* t_extras = nullptr;  // see save_for_backward()

// `records`: whether call() will record this op (what recording() answers
// inside); `extras` receives what the forward keeps for backward.
Tensor run_forward(const std::vector<Tensor>& inputs, const Forward& forward, bool records = false,
                   std::vector<Tensor>* extras = nullptr) {
  amp::AutocastOff no_autocast;   // composite ops are not cast twice
  autograd::NoGradGuard no_grad;  // inner ops record nothing
  struct Flag {
    bool prev;
    std::vector<Tensor>* prev_extras;
    Flag(bool now, std::vector<Tensor>* extras) : prev(t_recording), prev_extras(t_extras) {
      t_recording = now;
      t_extras = now ? extras : nullptr;
    }
    ~Flag() {
      t_recording = prev;
      t_extras = prev_extras;
    }
  } flag(records, extras);
  return forward(inputs);
}
}  // namespace

bool recording() { return t_recording; }

void save_for_backward(const Tensor& t) {
  HG_CHECK(t_recording && t_extras != nullptr,
           "save_for_backward: called outside the forward of an op that is being recorded (internal error)");
  t_extras->push_back(t);
}

// amp::DetectNonFinite (amp/anomaly.h), when a guard is waiting: the policy
// row is read before the casts, the op's own inner ops (a forward written with
// other ops, a composite's body) are not checked, its output is.
namespace {
struct NonFiniteWatch {
  OpId op;
  bool on;
  std::string row;
  std::optional<amp::SuppressNonFiniteChecks> inner;
  NonFiniteWatch(OpId o, const std::vector<Tensor>& inputs) : op(o), on(amp::detect_non_finite_active()) {
    if (on) row = amp::policy_row_now(op, inputs);
  }
  void begin() {
    if (on) inner.emplace();
  }
  void end(const std::vector<Tensor>& inputs, const Tensor& out) {
    if (!on) return;
    inner.reset();
    amp::detail_check_non_finite("forward", std::string(op_name(op)), row, inputs, {out});
  }
};
}  // namespace

Tensor call(OpId op, std::vector<Tensor> inputs, const Forward& forward, Backward backward, Save save) {
  NonFiniteWatch watch(op, inputs);
  amp::autocast_inputs(op, inputs);
  check_same_device(op_name(op), inputs);
  const bool records = autograd::grad_enabled() && any_requires_grad(inputs);
  std::vector<Tensor> extras;
  watch.begin();
  Tensor out = run_forward(inputs, forward, records, &extras);
  watch.end(inputs, out);
  // integer and bool outputs carry no gradient (as in PyTorch: x.to(int64))
  if (!records || !is_floating(out.dtype())) return out;

  auto node = std::make_shared<autograd::FunctionNode>();
  node->name = std::string(op_name(op));
  node->saved.op = node->name;
  node->backward = std::move(backward);
  const bool save_inputs = static_cast<unsigned>(save) & static_cast<unsigned>(Save::Inputs);
  node->next.reserve(inputs.size());  // one allocation per vector, not one per push
  node->saved.needs_grad.reserve(inputs.size());
  node->saved.grad_dtypes.reserve(inputs.size());
  node->input_meta.reserve(inputs.size());
  if (save_inputs) node->saved.inputs.reserve(inputs.size());
  if (!extras.empty()) node->saved.extras.reserve(extras.size());
  for (const auto& t : inputs) {
    node->next.push_back(t.defined() && t.requires_grad() ? autograd::gradient_edge(t) : nullptr);
    node->saved.needs_grad.push_back(node->next.back() != nullptr);
    node->saved.grad_dtypes.push_back(grad_dtype_of(t));
    node->input_meta.push_back(t.defined()
                                   ? autograd::InputMeta{t.shape(), t.dtype(), t.device(), node->saved.grad_dtypes.back()}
                                   : autograd::InputMeta{{}, DType::Float32, Device::cpu(), DType::Float32});
    if (save_inputs) node->saved.inputs.emplace_back(t);
  }
  // The output is saved detached: holding it with its grad_fn would be a cycle.
  if (static_cast<unsigned>(save) & static_cast<unsigned>(Save::Output)) node->saved.out = autograd::SavedTensor(out);
  for (const Tensor& t : extras) node->saved.extras.emplace_back(t);
  // The forward result may be an alias of an input (views): give the output
  // its own handle so setting grad_fn does not touch the input.
  for (const auto& t : inputs)
    if (out.is_same(t)) out = out.detach();
  out.unsafe_impl()->grad_fn = std::move(node);
  return out;
}

Tensor composite(OpId op, std::vector<Tensor> inputs, const Forward& body) {
  NonFiniteWatch watch(op, inputs);
  amp::autocast_inputs(op, inputs);
  check_same_device(op_name(op), inputs);
  Tensor out;
  {
    amp::AutocastOff no_autocast;
    watch.begin();
    out = body(inputs);
  }
  watch.end(inputs, out);
  return out;
}

Tensor call_nograd(OpId op, std::vector<Tensor> inputs, const Forward& forward) {
  NonFiniteWatch watch(op, inputs);
  amp::autocast_inputs(op, inputs);
  check_same_device(op_name(op), inputs);
  watch.begin();
  Tensor out = run_forward(inputs, forward);
  watch.end(inputs, out);
  return out;
}

namespace {
// "add" for add_: the op a user can call instead (copy_ and fill_ have none).
std::string_view out_of_place(OpId op) { return op == OpId::copy || op == OpId::fill ? "" : op_name(op); }
}  // namespace

void inplace(OpId op, const Tensor& self, std::vector<Tensor> others, const std::function<void()>& kernel,
             InplaceRules rules) {
  const std::string name = fmt::format("{}_", op_name(op));
  if (!rules.any_device) {
    others.push_back(self);
    check_same_device(name, others);
    others.pop_back();
  }
  const std::string_view instead = out_of_place(op);
  HG_CHECK(!autograd::grad_enabled() || !self.requires_grad(),
           "{}: a tensor that requires grad ({}) cannot be changed in place while grad mode is on (autograd would "
           "lose track of it). Wrap the update in `halfgrad::no_grad guard;`{}{}.",
           name, self.describe(), instead.empty() ? "" : ", or use the out-of-place ", instead);
  HG_CHECK(rules.self_may_overlap || !ops::has_internal_overlap(self),
           "{}: unsupported operation: more than one element of the written-to tensor refers to a single memory "
           "location. Please clone() the tensor before performing the operation. (It is {} with strides {}, e.g. "
           "an expand() result.)",
           name, self.describe(), shape_str(self.strides()));
  for (const auto& t : others)
    HG_CHECK(ops::overlap(self, t) != ops::Overlap::Partial,
             "{}: unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
             "single memory location. Please clone() the tensor before performing the operation. (Written {}, "
             "input {}: views of one storage that overlap.)",
             name, self.describe(), t.describe());
  for (const auto& t : others)  // the message is built only when the check fails
    if (t.shape() != self.shape() && ops::broadcast_shapes(name, self.shape(), t.shape()) != self.shape())
      ops::check_broadcasts_to(name, "the operand", t.shape(), self.shape(),
                               fmt::format("; an in-place op keeps the shape of {}{}{}", self.describe(),
                                           instead.empty() ? "" : ": use the out-of-place ", instead));
  kernel();
  self.bump_version();
}

}  // namespace halfgrad::dispatch
