#pragma once
// Module: the base of every layer and model (PyTorch's nn.Module). A module
// registers its parameters, buffers and sub-modules by name; everything else
// (parameters(), state_dict(), to(), train()/eval()) walks that registry.
//
// A registered parameter or buffer is held by its own handle (sharing the
// TensorImpl with the caller's, as in libtorch), so registering a local is
// safe; the member and the module see the same tensor, but assigning another
// tensor to the member afterwards does not change what the module holds.
// Sub-modules are held by pointer to the member, as in
//   struct MLP : hg::nn::Module {
//     hg::nn::Linear linear1{10, 100};
//     MLP() { register_module("linear1", linear1); }
//   };
// so modules cannot be copied, and a module with member sub-modules cannot be
// moved (an Error: its children would point into the old object). A leaf layer
// can be moved, its registered tensors with it, so that
// `Sequential(Linear(5, 16), ReLU())` can take temporaries. A child can also be
// owned by its parent through a shared_ptr (Sequential does this).
//
// Layers have a plain member `Tensor forward(const Tensor&)` and an
// operator() that calls it and shows the output to the module's forward
// hooks (`return with_forward_hooks(forward(x));`); Module itself has no
// virtual forward because models differ in what they take and return.
#include <concepts>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <halfgrad/core/tensor.h>
#include <halfgrad/nn/state_dict.h>

namespace halfgrad::nn {

class Module;

// What load_state_dict(strict=false) skipped (strict=true makes both an Error).
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the model, not in the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, not in the model
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  // Moves the registered tensors and owned children; an Error (before anything
  // moves) when a child is a member of the module being moved.
  Module(Module&& other);

  // ---- registration: names are unique per module, non-empty, without '.' --
  // `param` becomes a leaf that requires grad (when floating and
  // requires_grad); the module keeps a handle to the same tensor. An
  // undefined tensor is allowed and skipped (it stays undefined).
  Tensor& register_parameter(const std::string& name, Tensor& param, bool requires_grad = true);
  // Buffers are state that is not trained (running statistics); a
  // non-persistent one stays out of state_dict. `buffer` is rebound to the
  // module's own handle on the same storage, so to() moves and casts the
  // module's buffer and never a tensor the caller still holds.
  Tensor& register_buffer(const std::string& name, Tensor& buffer, bool persistent = true);
  // A member sub-module, held by pointer: it must live as long as this one.
  template <typename M>
    requires std::derived_from<M, Module>
  M& register_module(const std::string& name, M& child) {
    add_child(name, &child, nullptr);
    return child;
  }
  // An owned sub-module.
  template <typename M>
    requires std::derived_from<M, Module>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    HG_CHECK(child != nullptr, "register_module: \"{}\" is a null module", name);
    add_child(name, child.get(), child);
    return child;
  }

  // ---- traversal: registration order, own entries before children's; a
  // tensor or module reachable twice is listed once (as in PyTorch) --------
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  // This module (named "") and all below it, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules() const;
  // Elements in parameters() (each shared tensor once); only_trainable: only
  // those that require grad (Hugging Face's num_parameters(only_trainable)).
  int64_t num_parameters(bool only_trainable = false) const;
  int64_t parameter_count(bool only_trainable = false) const { return num_parameters(only_trainable); }
  // Calls fn on every sub-module, then on this one (PyTorch's apply, e.g. for a
  // custom init): children in registration order, each child's subtree first
  // (post-order). As in PyTorch a child registered twice in one module is
  // visited once there, but a module shared by two parents is visited under each.
  Module& apply(const std::function<void(Module&)>& fn);

  // ---- mode: Dropout and friends read is_training() ------------------------
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // ---- device and dtype: parameters and buffers are converted in place
  // (their tensor handles keep their identity, so an optimizer made before
  // still holds them, as with PyTorch's `param.data = ...`). A dtype applies
  // to floating tensors only; integer buffers keep theirs. --------------------
  Module& to(Device device);
  Module& to(DType dtype);
  Module& to(Device device, DType dtype);

  // ---- state ----------------------------------------------------------------
  // Parameters then persistent buffers, per module, depth first. The tensors
  // share storage with the model (detached).
  StateDict state_dict() const;
  // Copies (converting dtype and device) every entry into the model under
  // no_grad. A size mismatch is always an Error; strict also rejects missing
  // and unexpected keys. Nothing is copied when there is an Error.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);

  // ---- forward hooks (PyTorch's register_forward_hook): fn(module, output)
  // runs after each call of the module through operator() (and a
  // Sequential's call of its layers), e.g. for amp::Monitor's activation
  // statistics. A Sequential does not fuse a layer that has hooks, so each
  // hook sees its own module's output. Returns an id for remove_forward_hook.
  using ForwardHook = std::function<void(const Module&, const Tensor&)>;
  int64_t register_forward_hook(ForwardHook fn);
  void remove_forward_hook(int64_t id);  // unknown ids are ignored
  bool has_forward_hooks() const { return !forward_hooks_.empty(); }
  // What a layer's operator() returns: `output`, after the hooks saw it.
  Tensor with_forward_hooks(Tensor output) const {
    if (!forward_hooks_.empty()) run_forward_hooks(output);
    return output;
  }

  // set_to_none: drop .grad (the default, as in PyTorch 2); else zero it in place.
  void zero_grad(bool set_to_none = true);

  // ---- printing -----------------------------------------------------------
  // The class name without namespaces ("Linear", "MLP").
  std::string type_name() const;
  // PyTorch's repr: the module tree with each layer's settings.
  std::string repr() const;
  // The settings a layer shows in repr ("in_features=10, out_features=100, bias=True").
  virtual std::string extra_repr() const { return ""; }

 private:
  struct TensorSlot {
    std::string name;
    Tensor tensor;  // owned handle: valid whatever happens to the caller's
    bool persistent = true;
  };
  struct Child {
    std::string name;
    Module* module;
    std::shared_ptr<Module> owned;  // null for a member
  };
  void check_new_name(const char* what, const std::string& name) const;
  void check_movable() const;  // an Error when a child is a member
  void add_child(const std::string& name, Module* child, std::shared_ptr<Module> owned);
  std::vector<std::pair<std::string, Tensor>> named_tensors(bool recurse, bool buffers) const;
  void convert(std::optional<Device> device, std::optional<DType> dtype);
  // (key, handle) of every state_dict entry, in state_dict order.
  void state_slots(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;
  std::string repr_indented(int indent) const;
  void run_forward_hooks(const Tensor& output) const;

  std::vector<TensorSlot> params_;
  std::vector<TensorSlot> buffers_;
  std::vector<Child> children_;
  bool training_ = true;
  std::vector<std::pair<int64_t, ForwardHook>> forward_hooks_;
  int64_t next_hook_id_ = 0;
};

// `std::cout << model` prints repr(), as PyTorch's print(model) (and LibTorch's
// `std::cout << *model`). A shared_ptr to a module prints the module too.
std::ostream& operator<<(std::ostream& os, const Module& m);
template <typename M>
  requires std::derived_from<M, Module>
std::ostream& operator<<(std::ostream& os, const std::shared_ptr<M>& m) {
  return os << static_cast<const Module&>(*m);
}

}  // namespace halfgrad::nn
