// Custom autograd Functions (autograd/function.h): the node apply() records,
// and the context's saved tensors.
#include <halfgrad/autograd/function.h>

#include <cxxabi.h>

#include <cstdlib>

#include <halfgrad/autograd/engine.h>

namespace halfgrad::autograd {

namespace {
std::string demangled(const std::type_info& type) {
  int status = 0;
  char* name = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && name ? name : type.name();
  std::free(name);
  // the struct's own name, without its namespaces (template arguments kept)
  const size_t args = out.find('<');
  const size_t last = out.rfind("::", args);
  return last == std::string::npos ? out : out.substr(last + 2);
}
}  // namespace

void FunctionCtx::save_for_backward(std::vector<Tensor> tensors) {
  saved_ = std::move(tensors);
  versions_.clear();
  for (const Tensor& t : saved_) versions_.push_back(t.defined() ? t.version() : 0);
  is_output_.assign(saved_.size(), false);
}

std::vector<Tensor> FunctionCtx::saved_tensors() const {
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  for (size_t i = 0; i < saved_.size(); ++i) {
    const Tensor& t = saved_[i];
    HG_CHECK(!t.defined() || t.version() == versions_[i],
             "{} backward: saved tensor {} ({}) has been modified by an in-place operation since forward saved it "
             "(version {}, expected {}). Clone it before changing it, or save a copy.",
             name_, i, t.describe(), t.version(), versions_[i]);
    // the output, kept detached (with its grad_fn it would keep its own node
    // alive); under create_graph it is this node's output again
    if (is_output_[i] && grad_enabled()) {
      if (auto node = node_.lock()) {
        Tensor attached = t.detach();
        attached.unsafe_impl()->grad_fn = std::move(node);
        out.push_back(std::move(attached));
        continue;
      }
    }
    out.push_back(t);
  }
  return out;
}

void FunctionCtx::mark_non_differentiable(const Tensor& output) {
  HG_CHECK(output.defined(), "{}: mark_non_differentiable got an undefined tensor", name_);
  non_differentiable_ = output.unsafe_impl();
}

namespace detail {

void begin_apply(FunctionCtx& ctx, const std::type_info& type, const std::vector<Tensor>& inputs) {
  ctx.name_ = demangled(type);
  const bool grad = grad_enabled();
  for (const Tensor& t : inputs) ctx.needs_input_grad_.push_back(grad && t.defined() && t.requires_grad());
}

Tensor finish_apply(std::shared_ptr<FunctionCtx> ctx, const std::vector<Tensor>& inputs, Tensor out,
                    CustomBackward backward) {
  HG_CHECK(out.defined(), "{}: forward returned an undefined tensor", ctx->name_);
  bool any_needs = false;
  for (bool b : ctx->needs_input_grad_) any_needs = any_needs || b;
  const bool marked = ctx->non_differentiable_ == out.unsafe_impl();
  if (!any_needs || marked || !is_floating(out.dtype())) {
    for (const Tensor& t : inputs)  // never hand back an input's own handle as a result
      if (t.defined() && out.is_same(t)) return out.detach();
    return out;
  }
  // A saved output would own its node (node -> formula -> ctx -> output -> node).
  for (size_t i = 0; i < ctx->saved_.size(); ++i)
    if (ctx->saved_[i].defined() && ctx->saved_[i].is_same(out)) {
      ctx->saved_[i] = out.detach();
      ctx->is_output_[i] = true;
    }
  const size_t n = inputs.size();
  FunctionCtx* raw = ctx.get();
  BackwardFn formula = [ctx, backward = std::move(backward), n](Saved&, const Tensor& g) -> Grads {
    Grads grads = backward(*ctx, g);
    HG_CHECK(grads.size() == n,
             "{} backward returned {} gradients, expected {} (one per Tensor argument of forward, an undefined "
             "Tensor() for one that needs none)",
             ctx->name_, grads.size(), n);
    return grads;
  };
  Tensor result = record_node(raw->name_, inputs, std::move(out), std::move(formula), dispatch::Save::Nothing, {});
  raw->node_ = result.grad_fn();
  return result;
}

}  // namespace detail

}  // namespace halfgrad::autograd
