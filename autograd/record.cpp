// The autograd layer of an op call (dispatch/layers.h): when grad mode is on
// and an input requires grad, the dispatcher hands the call's result here,
// and a FunctionNode holding the saved tensors and the backward formula
// becomes its grad_fn. Registered into the dispatcher at load time.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <halfgrad/autograd/engine.h>
#include <halfgrad/dispatch/layers.h>

namespace halfgrad::autograd {

namespace {

using dispatch::Save;

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

}  // namespace

Tensor record_node(std::string name, const std::vector<Tensor>& inputs, Tensor out, BackwardFn backward, Save save,
                   std::vector<Tensor> extras) {
  auto node = std::make_shared<FunctionNode>();
  node->name = std::move(name);
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
    node->next.push_back(t.defined() && t.requires_grad() ? gradient_edge(t) : nullptr);
    node->saved.needs_grad.push_back(node->next.back() != nullptr);
    node->saved.grad_dtypes.push_back(grad_dtype_of(t));
    node->input_meta.push_back(t.defined()
                                   ? InputMeta{t.shape(), t.dtype(), t.device(), node->saved.grad_dtypes.back()}
                                   : InputMeta{{}, DType::Float32, Device::cpu(), DType::Float32});
    if (save_inputs) node->saved.inputs.emplace_back(t);
  }
  // The output is saved detached: holding it with its grad_fn would be a cycle.
  if (static_cast<unsigned>(save) & static_cast<unsigned>(Save::Output)) node->saved.out = SavedTensor(out, /*detach=*/true);
  for (const Tensor& t : extras) node->saved.extras.emplace_back(t, /*detach=*/true);  // kernel state, not differentiable
  // The forward result may be an alias of an input (views): give the output
  // its own handle so setting grad_fn does not touch the input.
  for (const auto& t : inputs)
    if (out.is_same(t)) out = out.detach();
  out.unsafe_impl()->grad_fn = std::move(node);
  return out;
}

namespace {

Tensor record(OpId op, const std::vector<Tensor>& inputs, Tensor out, BackwardFn backward, Save save,
              std::vector<Tensor> extras) {
  return record_node(std::string(op_name(op)), inputs, std::move(out), std::move(backward), save, std::move(extras));
}

[[maybe_unused]] const bool registered = [] {
  dispatch::register_recorder(&record);
  return true;
}();

}  // namespace

}  // namespace halfgrad::autograd
