#pragma once
// Custom autograd Functions: PyTorch's torch.autograd.Function, in the shape
// of LibTorch's torch::autograd::Function<T>. A struct with a static forward
// and a static backward, run through apply():
//
//   struct MyExp : hg::autograd::Function<MyExp> {
//     static hg::Tensor forward(hg::autograd::FunctionCtx& ctx, const hg::Tensor& x) {
//       hg::Tensor y = hg::exp(x);
//       ctx.save_for_backward({y});
//       return y;
//     }
//     static std::vector<hg::Tensor> backward(hg::autograd::FunctionCtx& ctx, const hg::Tensor& grad) {
//       return {grad * ctx.saved_tensors()[0]};
//     }
//   };
//   hg::Tensor y = MyExp::apply(x);  // y.grad_fn() is a node named "MyExp"
//
// - forward runs with grad mode off (its ops record nothing; autocast applies
//   as it is: amp::custom_fwd changes that); its arguments may be tensors,
//   std::vector<Tensor> and anything else (passed through).
// - backward gets the gradient of the output and returns one gradient per
//   Tensor argument of forward, in order (an undefined Tensor for one that
//   needs none; ctx.needs_input_grad(i) says which are wanted).
// - One output, as every halfgrad op has (a Function returning several
//   tensors in PyTorch becomes several Functions, or one returning a cat).
// - Under create_graph, backward runs in grad mode: written with ops, it is
//   differentiable again (saved outputs are re-attached to the node).
#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include <halfgrad/core/device.h>
#include <halfgrad/core/dtype.h>
#include <halfgrad/core/tensor.h>
#include <halfgrad/dispatch/grad_mode.h>

namespace halfgrad::autograd {

class FunctionCtx;

namespace detail {
template <class T>
void collect_tensors(std::vector<Tensor>& out, const T& arg) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) {
    out.push_back(arg);
  } else if constexpr (std::is_same_v<std::decay_t<T>, std::vector<Tensor>>) {
    out.insert(out.end(), arg.begin(), arg.end());
  }
}
using CustomBackward = std::function<std::vector<Tensor>(FunctionCtx&, const Tensor&)>;
// The non-template half of apply (autograd/function.cpp).
void begin_apply(FunctionCtx& ctx, const std::type_info& type, const std::vector<Tensor>& inputs);
Tensor finish_apply(std::shared_ptr<FunctionCtx> ctx, const std::vector<Tensor>& inputs, Tensor out,
                    CustomBackward backward);
}  // namespace detail

class FunctionCtx {
 public:
  // Tensors backward will read (inputs, outputs, or intermediates), checked
  // for in-place changes when read back (PyTorch's version counter).
  void save_for_backward(std::vector<Tensor> tensors);
  std::vector<Tensor> saved_tensors() const;
  // The output carries no gradient (its requires_grad is false), as for
  // indices or masks; PyTorch's ctx.mark_non_differentiable.
  void mark_non_differentiable(const Tensor& output);
  // Whether input i (the i-th Tensor argument of forward) needs a gradient.
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  // Anything else backward needs (PyTorch's ctx.saved_data): e.g.
  // ctx.saved_data["scale"] = 2.0; then std::any_cast<double>(ctx.saved_data["scale"]).
  std::unordered_map<std::string, std::any> saved_data;
  // Autocast as forward saw it: written by amp::custom_fwd, read by amp::custom_bwd.
  struct Autocast {
    bool used = false;  // forward ran with autocast enabled for `device`
    DeviceType device = DeviceType::CPU;
    DType dtype = DType::BFloat16;
  } autocast;

 private:
  friend void detail::begin_apply(FunctionCtx&, const std::type_info&, const std::vector<Tensor>&);
  friend Tensor detail::finish_apply(std::shared_ptr<FunctionCtx>, const std::vector<Tensor>&, Tensor,
                                     detail::CustomBackward);
  std::string name_;  // the Function's, for messages
  std::vector<Tensor> saved_;
  std::vector<uint64_t> versions_;
  std::vector<bool> is_output_;  // saved_[i] is the output (kept detached: see saved_tensors)
  std::vector<bool> needs_input_grad_;
  const void* non_differentiable_ = nullptr;  // the marked output's impl
  std::weak_ptr<Node> node_;
};


template <class Derived>
struct Function {
  template <class... Args>
  static Tensor apply(Args&&... args) {
    auto ctx = std::make_shared<FunctionCtx>();
    std::vector<Tensor> inputs;
    (detail::collect_tensors(inputs, args), ...);
    detail::begin_apply(*ctx, typeid(Derived), inputs);
    Tensor out;
    {
      NoGradGuard no_grad;  // forward's own ops record nothing
      out = Derived::forward(*ctx, std::forward<Args>(args)...);
    }
    return detail::finish_apply(std::move(ctx), inputs, std::move(out), &Derived::backward);
  }
};

}  // namespace halfgrad::autograd
