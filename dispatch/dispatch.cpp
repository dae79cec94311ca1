#include <halfgrad/dispatch/dispatch.h>

#include <string>

#include <fmt/format.h>

#include <halfgrad/core/layout.h>
#include <halfgrad/dispatch/grad_mode.h>

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
  ExcludeGuard inner(kAllLayers);  // composite ops are not cast twice, inner ops not watched
  autograd::NoGradGuard no_grad;   // inner ops record nothing
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

namespace {
// The layers before the kernel (dispatch/layers.h), in their order; which of
// them run is decided once per call. `after` gets the inputs as the kernel saw them.
struct Layers {
  bool watch = on(Layer::NonFiniteWatch);
  bool autocast = on(Layer::Autocast);
  std::string watch_note, autocast_note;  // empty (no allocation) unless a layer keeps one
  void before(OpId op, std::vector<Tensor>& inputs) {
    if (watch) layer_before(Layer::NonFiniteWatch, op, inputs, watch_note);
    if (autocast) layer_before(Layer::Autocast, op, inputs, autocast_note);
  }
  void after(OpId op, const std::vector<Tensor>& inputs, const Tensor& out) const {
    if (watch) layer_after(Layer::NonFiniteWatch, op, inputs, out, watch_note);
    if (autocast) layer_after(Layer::Autocast, op, inputs, out, autocast_note);
  }
};
}  // namespace

Tensor call(OpId op, std::vector<Tensor> inputs, const Forward& forward, Backward backward, Save save) {
  Layers layers;
  layers.before(op, inputs);
  check_same_device(op_name(op), inputs);
  const bool records = autograd::grad_enabled() && any_requires_grad(inputs);
  std::vector<Tensor> extras;
  Tensor out = run_forward(inputs, forward, records, &extras);
  layers.after(op, inputs, out);
  // integer and bool outputs carry no gradient (as in PyTorch: x.to(int64))
  if (!records || !is_floating(out.dtype())) return out;
  return recorder()(op, inputs, std::move(out), std::move(backward), save, std::move(extras));
}

Tensor composite(OpId op, std::vector<Tensor> inputs, const Forward& body) {
  Layers layers;
  layers.before(op, inputs);
  check_same_device(op_name(op), inputs);
  Tensor out;
  {
    ExcludeGuard inner(kAllLayers);
    out = body(inputs);
  }
  layers.after(op, inputs, out);
  return out;
}

Tensor call_nograd(OpId op, std::vector<Tensor> inputs, const Forward& forward) {
  Layers layers;
  layers.before(op, inputs);
  check_same_device(op_name(op), inputs);
  Tensor out = run_forward(inputs, forward);
  layers.after(op, inputs, out);
  return out;
}

Backward once_differentiable(OpId op, Backward formula) {
  return [op, formula = std::move(formula)](Saved& s, const Tensor& g) -> Grads {
    if (!autograd::grad_enabled()) return formula(s, g);
    Grads grads;
    {
      autograd::NoGradGuard off;
      grads = formula(s, g);
    }
    // what the formula read: the incoming gradient, the saved inputs and output
    std::vector<Tensor> read{g};
    for (size_t i = 0; i < s.inputs.size(); ++i) read.push_back(s.input(i));
    if (s.attached_out.defined()) read.push_back(s.attached_out);
    if (!any_requires_grad(read)) return grads;
    const Backward refuse = [op](Saved&, const Tensor&) -> Grads {
      HG_CHECK(false,
               "{} backward: double backward through {} is not supported: its backward calls its kernels directly, "
               "so its gradient cannot be differentiated again (autograd::grad with create_graph = true, then a "
               "backward through that gradient, reached it). Keep {} out of the part of the model a gradient "
               "penalty differentiates, or detach() its gradient if a constant is what you mean; docs/autograd.md "
               "lists the ops that are twice differentiable.",
               op_name(op), op_name(op), op_name(op));
      return {};
    };
    for (Tensor& t : grads)
      if (t.defined()) t = recorder()(op, read, t.detach(), refuse, Save::Nothing, {});
    return grads;
  };
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
  HG_CHECK(rules.self_may_overlap || !has_internal_overlap(self),
           "{}: unsupported operation: more than one element of the written-to tensor refers to a single memory "
           "location. Please clone() the tensor before performing the operation. (It is {} with strides {}, e.g. "
           "an expand() result.)",
           name, self.describe(), shape_str(self.strides()));
  for (const auto& t : others)
    HG_CHECK(overlap(self, t) != Overlap::Partial,
             "{}: unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
             "single memory location. Please clone() the tensor before performing the operation. (Written {}, "
             "input {}: views of one storage that overlap.)",
             name, self.describe(), t.describe());
  for (const auto& t : others)  // the message is built only when the check fails
    if (t.shape() != self.shape() && broadcast_shapes(name, self.shape(), t.shape()) != self.shape())
      check_broadcasts_to(name, "the operand", t.shape(), self.shape(),
                               fmt::format("; an in-place op keeps the shape of {}{}{}", self.describe(),
                                           instead.empty() ? "" : ": use the out-of-place ", instead));
  kernel();
  self.bump_version();
}

}  // namespace halfgrad::dispatch
