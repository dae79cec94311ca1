#include <halfgrad/nn/module.h>

#include <cxxabi.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <ostream>
#include <typeinfo>
#include <unordered_set>

#include <halfgrad/autograd/grad_mode.h>

namespace halfgrad::nn {

Module::Module(Module&& other)
    : params_((other.check_movable(), std::move(other.params_))),
      buffers_(std::move(other.buffers_)),
      children_(std::move(other.children_)),
      training_(other.training_),
      forward_hooks_(std::move(other.forward_hooks_)),
      next_hook_id_(other.next_hook_id_) {
  other.forward_hooks_.clear();
  other.params_.clear();
  other.buffers_.clear();
  other.children_.clear();
}

// A member child lives inside the module being moved: the moved-to module would
// point into the old object. Checked before any member moves.
void Module::check_movable() const {
  for (const Child& c : children_)
    HG_CHECK(c.owned != nullptr,
             "{}: cannot move a module whose sub-module '{}' is a member (registered with register_module(name, "
             "member)); construct it in place (std::make_shared, Sequential::emplace_back) instead of moving it",
             type_name(), c.name);
}

int64_t Module::register_forward_hook(ForwardHook fn) {
  HG_CHECK(fn != nullptr, "{}::register_forward_hook: the hook is empty", type_name());
  forward_hooks_.emplace_back(next_hook_id_, std::move(fn));
  return next_hook_id_++;
}

void Module::remove_forward_hook(int64_t id) {
  std::erase_if(forward_hooks_, [id](const auto& h) { return h.first == id; });
}

void Module::run_forward_hooks(const Tensor& output) const {
  // a copy: a hook may remove itself (or others) while they run
  const auto hooks = forward_hooks_;
  for (const auto& [id, fn] : hooks) fn(*this, output);
}

namespace {

std::string join_key(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Points `t`'s handle at `src`'s data (PyTorch's `t.data = src`): every copy
// of the handle sees the new dtype/device, and autograd metadata (requires
// grad, .grad, the accumulator) stays with the handle.
void set_data(const Tensor& t, const Tensor& src) {
  TensorImpl& d = *t.unsafe_impl();
  const TensorImpl& s = *src.unsafe_impl();
  d.storage = s.storage;
  d.shape = s.shape;
  d.strides = s.strides;
  d.offset = s.offset;
  d.dtype = s.dtype;
  d.device = s.device;
}

// The cast runs on the CPU side of a move, where every dtype has a kernel.
Tensor converted(const Tensor& t, std::optional<Device> device, std::optional<DType> dtype) {
  auto cast = [&](const Tensor& x) { return dtype && x.is_floating_point() ? x.to(*dtype) : x; };
  if (t.device().is_cpu()) return device ? cast(t).to(*device) : cast(t);
  return cast(device ? t.to(*device) : t);
}

}  // namespace

// ---- registration ----------------------------------------------------------------

void Module::check_new_name(const char* what, const std::string& name) const {
  HG_CHECK(!name.empty(), "{}: the name must not be empty", what);
  HG_CHECK(name.find('.') == std::string::npos,
           "{}: name \"{}\" must not contain '.' (dots separate module names in state_dict keys)", what, name);
  auto taken = [&](const auto& list) {
    for (const auto& e : list)
      if (e.name == name) return true;
    return false;
  };
  HG_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_),
           "{}: {} already has a parameter, buffer or module named \"{}\"; pick another name", what, type_name(),
           name);
}

Tensor& Module::register_parameter(const std::string& name, Tensor& param, bool requires_grad) {
  check_new_name("register_parameter", name);
  if (param.defined()) {
    // A parameter is a leaf: the optimizer updates it and .grad collects in it.
    if (!param.is_leaf()) param = param.detach();
    if (requires_grad && param.is_floating_point()) param.requires_grad_(true);
  }
  params_.push_back({name, param, true});
  return param;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& buffer, bool persistent) {
  check_new_name("register_buffer", name);
  // The module's own handle on the caller's storage: to() rewrites the
  // module's handle in place, and must not move or cast the caller's tensor
  // with it (PyTorch gives the module a new tensor: `_buffers[k] = fn(buf)`).
  if (buffer.defined()) {
    const bool grad = buffer.is_leaf() && buffer.requires_grad();
    buffer = buffer.detach();
    if (grad) buffer.requires_grad_(true);
  }
  buffers_.push_back({name, buffer, persistent});
  return buffer;
}

void Module::add_child(const std::string& name, Module* child, std::shared_ptr<Module> owned) {
  check_new_name("register_module", name);
  HG_CHECK(child != this, "register_module: {} cannot be its own child \"{}\"", type_name(), name);
  children_.push_back({name, child, std::move(owned)});
}

// ---- traversal ---------------------------------------------------------------------

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const auto& c : children_) out.emplace_back(c.name, c.module);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out;
  std::unordered_set<const Module*> seen;
  // Depth first, parent before children; a module shared by two parents once.
  auto visit = [&](auto&& self, const std::string& prefix, Module* m) -> void {
    if (!seen.insert(m).second) return;
    out.emplace_back(prefix, m);
    for (const auto& c : m->children_) self(self, join_key(prefix, c.name), c.module);
  };
  visit(visit, "", const_cast<Module*>(this));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_tensors(bool recurse, bool buffers) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  const auto modules = recurse ? named_modules()
                               : std::vector<std::pair<std::string, Module*>>{{"", const_cast<Module*>(this)}};
  for (const auto& [prefix, m] : modules) {
    for (const auto& s : buffers ? m->buffers_ : m->params_) {
      if (!s.tensor.defined() || !seen.insert(s.tensor.unsafe_impl()).second) continue;
      out.emplace_back(join_key(prefix, s.name), s.tensor);
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  return named_tensors(recurse, false);
}
std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  return named_tensors(recurse, true);
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  std::unordered_set<const Module*> seen;  // PyTorch's children(): each child once
  for (const auto& c : children_)
    if (seen.insert(c.module).second) c.module->apply(fn);
  fn(*this);
  return *this;
}

int64_t Module::num_parameters(bool only_trainable) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!only_trainable || p.requires_grad()) n += p.numel();
  return n;
}

namespace {
std::vector<Tensor> values(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& [k, t] : named) out.push_back(t);
  return out;
}
}  // namespace

std::vector<Tensor> Module::parameters(bool recurse) const { return values(named_parameters(recurse)); }
std::vector<Tensor> Module::buffers(bool recurse) const { return values(named_buffers(recurse)); }

// ---- mode, device, dtype -------------------------------------------------------------

Module& Module::train(bool on) {
  for (const auto& [name, m] : named_modules()) m->training_ = on;
  return *this;
}

void Module::convert(std::optional<Device> device, std::optional<DType> dtype) {
  NoGradGuard no_grad;
  std::unordered_set<const TensorImpl*> done;
  for (const auto& [prefix, m] : named_modules()) {
    for (auto* list : {&m->params_, &m->buffers_}) {
      for (auto& s : *list) {
        Tensor& t = s.tensor;
        if (!t.defined() || !done.insert(t.unsafe_impl()).second) continue;
        const Tensor moved = converted(t, device, dtype);
        if (!moved.is_same(t)) set_data(t, moved);
        // .grad follows its parameter, as in PyTorch.
        if (const Tensor g = t.grad(); g.defined()) {
          const Tensor g2 = converted(g, device, dtype);
          if (!g2.is_same(g)) t.set_grad(g2);
        }
      }
    }
  }
}

Module& Module::to(Device device) {
  convert(device, std::nullopt);
  return *this;
}

Module& Module::to(DType dtype) {
  HG_CHECK(is_floating(dtype),
           "Module::to: only floating dtypes are accepted (float32, float64, float16, bfloat16), got {}. Integer "
           "buffers keep their dtype anyway.",
           dtype_name(dtype));
  convert(std::nullopt, dtype);
  return *this;
}

Module& Module::to(Device device, DType dtype) {
  HG_CHECK(is_floating(dtype), "Module::to: only floating dtypes are accepted, got {}", dtype_name(dtype));
  convert(device, dtype);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (auto& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      g.zero_();
    }
  }
}

// ---- state dicts -----------------------------------------------------------------------

void Module::state_slots(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& s : params_)
    if (s.tensor.defined()) out.emplace_back(join_key(prefix, s.name), s.tensor);
  for (const auto& s : buffers_)
    if (s.persistent && s.tensor.defined()) out.emplace_back(join_key(prefix, s.name), s.tensor);
  for (const auto& c : children_) c.module->state_slots(join_key(prefix, c.name), out);
}

StateDict Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> slots;
  state_slots("", slots);
  StateDict out;
  for (const auto& [key, t] : slots) out.insert(key, t.detach());
  return out;
}

LoadResult Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> slots;
  state_slots("", slots);

  LoadResult result;
  std::vector<std::string> problems;
  bool size_mismatch = false;
  std::unordered_set<std::string> expected;
  for (const auto& [key, t] : slots) {
    expected.insert(key);
    const Tensor* src = state.find(key);
    if (!src) {
      result.missing_keys.push_back(key);
    } else if (!src->defined() || src->shape() != t.shape()) {
      size_mismatch = true;
      problems.push_back(fmt::format("size mismatch for \"{}\": the state dict has {}, the model has {}", key,
                                     src->defined() ? shape_str(src->shape()) : "an undefined tensor",
                                     shape_str(t.shape())));
    }
  }
  for (const auto& [key, t] : state)
    if (!expected.count(key)) result.unexpected_keys.push_back(key);

  const bool key_problems = strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty());
  if (key_problems) {
    for (const auto& key : result.missing_keys)
      problems.push_back(fmt::format("missing key \"{}\": the model has it, the state dict does not", key));
    for (const auto& key : result.unexpected_keys)
      problems.push_back(fmt::format("unexpected key \"{}\": the state dict has it, the model does not", key));
  }
  if (!problems.empty()) {
    std::string remedy;
    if (size_mismatch)
      remedy += "\nThe state dict comes from a model with other layer sizes: build this one with the same sizes "
                "(strict=false does not skip size mismatches).";
    if (key_problems)
      remedy += "\nLoad a state dict saved from this model's architecture, or pass strict=false to skip missing "
                "and unexpected keys.";
    fail("load_state_dict: error(s) loading the state dict into {}, nothing was loaded:\n  {}{}", type_name(),
         fmt::join(problems, "\n  "), remedy);
  }

  NoGradGuard no_grad;
  for (auto& [key, t] : slots) {
    const Tensor* src = state.find(key);
    // Loading a model's own state_dict back: the data is already there.
    const bool same = src && src->storage() == t.storage() && src->offset() == t.offset() &&
                      src->strides() == t.strides() && src->dtype() == t.dtype();
    if (src && !same) t.copy_(*src);
  }
  return result;
}

// ---- printing ----------------------------------------------------------------------------

std::string Module::type_name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // Drop namespaces, but keep a template's arguments whole.
  const size_t angle = name.find('<');
  const size_t colon = name.rfind("::", angle == std::string::npos ? std::string::npos : angle);
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

std::string Module::repr_indented(int indent) const {
  const std::string extra = extra_repr();
  if (children_.empty()) return type_name() + "(" + extra + ")";
  const std::string pad(static_cast<size_t>(indent + 2), ' ');
  std::string out = type_name() + "(";
  if (!extra.empty()) out += "\n" + pad + extra;
  for (const auto& c : children_) out += "\n" + pad + "(" + c.name + "): " + c.module->repr_indented(indent + 2);
  return out + "\n" + std::string(static_cast<size_t>(indent), ' ') + ")";
}

std::string Module::repr() const { return repr_indented(0); }

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.repr(); }

}  // namespace halfgrad::nn
