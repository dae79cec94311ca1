// The backward engine: count how many edges lead into each node, then run
// nodes in topological order (a node runs once all of its consumers have
// delivered their gradients), summing gradients that meet at one node.
#include <algorithm>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <halfgrad/autograd/engine.h>
#include <halfgrad/autograd/grad.h>
#include <halfgrad/autograd/hooks.h>
#include <halfgrad/dispatch/grad_mode.h>
#include <halfgrad/dispatch/layers.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::autograd {

Grads AccumulateGrad::apply(const Tensor& grad_output, bool) {
  auto impl = leaf.lock();
  if (!impl) return {};
  decltype(hooks) run;  // a copy, taken under the lock: a hook may remove itself
  {
    std::lock_guard<std::mutex> lock(mutex);  // one lock for the gradient and the hooks
    accumulate(*impl, grad_output);
    if (!hooks.empty()) run = hooks;
  }
  const Tensor leaf_tensor(impl);
  for (const auto& [id, fn] : run) fn(leaf_tensor);
  return {};
}

// Called with `mutex` held.
void AccumulateGrad::accumulate(TensorImpl& leaf_impl, const Tensor& grad_output) {
  auto* impl = &leaf_impl;
  const Tensor& g = grad_output;
  // The leaf owns its .grad: never alias a tensor someone else may still
  // hold (one grad can reach two leaves, e.g. from add), since the optimizer
  // and the loss scaler change .grad in place. The engine's own reference is
  // the one count allowed (it drops it after this call).
  const bool exclusive = g.impl_ptr().use_count() == 1 && g.storage() && g.storage().use_count() == 1 &&
                         g.is_contiguous();
  // `mutex` orders backward passes into this leaf; set_grad / zero_grad take
  // only the leaf's grad_mutex, so the pointer is read and written under it
  // (the add runs outside it: no op runs under a tensor's grad lock).
  for (;;) {
    std::shared_ptr<TensorImpl> current;
    {
      std::lock_guard<std::mutex> lock(impl->grad_mutex);
      current = impl->grad;
    }
    std::shared_ptr<TensorImpl> next =
        !current ? (exclusive ? g.impl_ptr() : g.clone().impl_ptr()) : add(Tensor(current), g).impl_ptr();
    std::lock_guard<std::mutex> lock(impl->grad_mutex);
    if (impl->grad == current) {
      impl->grad = std::move(next);
      return;
    }
    // a set_grad / zero_grad came in between: add into what it left instead
  }
}

int64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook fn) {
  HG_CHECK(leaf.defined() && leaf.requires_grad() && !leaf.grad_fn(),
           "register_post_accumulate_grad_hook: {} is not a leaf that requires grad (hooks run when backward "
           "writes a leaf's .grad; call requires_grad_() on a leaf, e.g. a parameter)",
           leaf.defined() ? leaf.describe() : "an undefined tensor");
  HG_CHECK(fn != nullptr, "register_post_accumulate_grad_hook: the hook is empty");
  auto acc = std::static_pointer_cast<AccumulateGrad>(gradient_edge(leaf));
  std::lock_guard<std::mutex> lock(acc->mutex);
  acc->hooks.emplace_back(acc->next_hook_id, std::move(fn));
  return acc->next_hook_id++;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, int64_t id) {
  if (!leaf.defined() || !leaf.unsafe_impl()->grad_accumulator) return;
  auto acc = std::static_pointer_cast<AccumulateGrad>(leaf.unsafe_impl()->grad_accumulator);
  std::lock_guard<std::mutex> lock(acc->mutex);
  std::erase_if(acc->hooks, [id](const auto& h) { return h.first == id; });
}

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined()) return nullptr;
  if (t.grad_fn()) return t.grad_fn();
  if (!t.requires_grad()) return nullptr;
  // Graphs built in several threads may share a leaf: create its one
  // accumulator under a lock.
  static std::mutex accumulator_mutex;
  std::lock_guard<std::mutex> lock(accumulator_mutex);
  auto* impl = t.unsafe_impl();
  if (!impl->grad_accumulator) {
    auto acc = std::make_shared<AccumulateGrad>();
    acc->name = "AccumulateGrad";
    acc->leaf = t.impl_ptr();
    impl->grad_accumulator = acc;
  }
  return impl->grad_accumulator;
}

namespace {
// The callbacks queued during the backward running on this thread; null
// outside one. Nested backward passes (a backward inside a hook) keep their own.
thread_local std::vector<std::function<void()>>* g_callbacks = nullptr;
}  // namespace

// The pass itself (below).
struct Pass {
  std::vector<std::pair<Tensor, Tensor>> roots;  // (tensor, its incoming gradient)
  bool retain_graph = false;
  bool create_graph = false;  // formulas run in grad mode: their results have a graph
  // autograd::grad: the gradients reaching these tensors are returned instead
  // of accumulated, and only the nodes on a path to one of them run.
  const std::vector<Tensor>* inputs = nullptr;
};
Grads run_graph(const Pass& pass);

void queue_callback(std::function<void()> fn) {
  HG_CHECK(g_callbacks != nullptr,
           "autograd::queue_callback: no backward pass is running on this thread (call it from a hook during "
           "backward)");
  g_callbacks->push_back(std::move(fn));
}

namespace {
Grads run_pass(const Pass& pass) {
  std::vector<std::function<void()>> callbacks;
  auto* outer = g_callbacks;
  g_callbacks = &callbacks;
  struct Restore {
    std::vector<std::function<void()>>** slot;
    std::vector<std::function<void()>>* prev;
    ~Restore() { *slot = prev; }
  } restore{&g_callbacks, outer};
  Grads out = run_graph(pass);
  // callbacks may queue more (run in order until none is left)
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto fn = std::move(callbacks[i]);
    fn();
  }
  return out;
}
}  // namespace

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph, bool create_graph) {
  run_pass(Pass{{{root, grad}}, retain_graph || create_graph, create_graph, nullptr});
}

Grads run_graph(const Pass& pass) {
  // One entry per node reached: how many edges into it are still to run, the
  // gradient summed for it so far, and (autograd::grad) whether it runs and
  // whether its gradient is one asked for. One map, not one per field: each
  // entry is a heap node.
  struct Slot {
    int deps = 0;
    bool seen = false;
    bool runs = true;      // autograd::grad: it leads to an input
    bool target = false;   // autograd::grad: an input's node (its gradient is returned)
    Tensor pending;
  };
  std::unordered_map<Node*, Slot> slots;
  slots.reserve(32);

  std::vector<std::shared_ptr<Node>> root_nodes;
  for (const auto& [root, grad] : pass.roots) {
    auto node = gradient_edge(root);
    HG_CHECK(node != nullptr,
             "backward: tensor {} does not require grad and has no grad_fn. Did you call requires_grad_() on "
             "the parameters, or compute the loss under no_grad?",
             root.describe());
    root_nodes.push_back(std::move(node));
  }
  std::vector<Node*> targets;
  if (pass.inputs) {
    for (const Tensor& t : *pass.inputs) {
      auto node = gradient_edge(t);
      targets.push_back(node.get());
      slots[node.get()].target = true;
    }
  }

  // Pass 1: every node reached, in an order where a node comes before the
  // nodes it leads to are finished (iterative: a 200k-node chain must not
  // recurse).
  std::vector<Node*> order;  // post-order: children before parents
  {
    std::vector<std::pair<Node*, size_t>> stack;
    for (auto& r : root_nodes) {
      Slot& s = slots[r.get()];
      if (s.seen) continue;
      s.seen = true;
      stack.emplace_back(r.get(), 0);
      while (!stack.empty()) {
        auto& [n, i] = stack.back();
        if (i < n->next.size()) {
          Node* c = n->next[i++].get();
          if (!c) continue;
          Slot& cs = slots[c];
          if (!cs.seen) {
            cs.seen = true;
            stack.emplace_back(c, 0);
          }
          continue;
        }
        order.push_back(n);
        stack.pop_back();
      }
    }
  }
  // autograd::grad: a node runs only if one of its edges leads to an input
  // (nothing is accumulated into any .grad, and a branch that reaches no
  // input costs nothing).
  if (pass.inputs) {
    for (Node* n : order) {
      Slot& s = slots[n];
      s.runs = false;
      for (auto& e : n->next) {
        if (!e) continue;
        const Slot& c = slots[e.get()];
        if (c.runs || c.target) {
          s.runs = true;
          break;
        }
      }
    }
  }
  auto wanted = [&](Node* n) {
    const Slot& s = slots[n];
    return s.runs || s.target;
  };
  for (Node* n : order) {
    if (!slots[n].runs) continue;
    for (auto& e : n->next)
      if (e && wanted(e.get())) ++slots[e.get()].deps;
  }

  // Pass 2: run. Backward formulas are never autocast: each runs in the dtypes
  // its forward ran in. They record nothing unless create_graph.
  std::optional<NoGradGuard> no_grad;
  if (!pass.create_graph) no_grad.emplace();
  std::optional<GradModeGuard> grad_on;
  if (pass.create_graph) grad_on.emplace(true);
  dispatch::ExcludeGuard no_autocast(dispatch::Layer::Autocast);
  std::vector<std::shared_ptr<Node>> ready;
  for (size_t r = 0; r < root_nodes.size(); ++r) {
    Node* n = root_nodes[r].get();
    if (!wanted(n)) continue;
    Slot& s = slots[n];
    const Tensor& g = pass.roots[r].second;
    s.pending = s.pending.defined() ? add(s.pending, g) : g;
    if (s.deps == 0 && std::find(ready.begin(), ready.end(), root_nodes[r]) == ready.end())
      ready.push_back(root_nodes[r]);
  }
  Grads captured;
  if (pass.inputs) captured.resize(targets.size());
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Slot& slot = slots[node.get()];
    if (slot.target)
      for (size_t i = 0; i < targets.size(); ++i)
        if (targets[i] == node.get()) captured[i] = slot.pending;
    if (!slot.runs) {
      slot.pending = Tensor();
      continue;
    }
    Tensor g = std::move(slot.pending);  // the slot stays: its deps are 0 now
    Grads grads;
    if (dispatch::watching_backward()) {  // amp::DetectNonFinite
      {
        dispatch::ExcludeGuard formula(dispatch::kAllLayers);  // its inner ops are not the user's
        grads = node->apply(g, pass.retain_graph);
      }
      // only the gradients backward passes on: a formula may also compute one
      // for an input that needs none (a scalar wrapped as a tensor), unused
      Grads used(grads.size());
      for (size_t i = 0; i < grads.size() && i < node->next.size(); ++i)
        if (node->next[i]) used[i] = grads[i];
      dispatch::after_backward(node->name, g, used);
    } else {
      grads = node->apply(g, pass.retain_graph);
    }
    g = Tensor();  // drop our reference so AccumulateGrad can take ownership
    if (!pass.retain_graph) node->release();
    for (size_t i = 0; i < node->next.size() && i < grads.size(); ++i) {
      auto& next = node->next[i];
      if (!next || !wanted(next.get())) continue;
      if (!grads[i].defined()) {
        if (--slots[next.get()].deps == 0) ready.push_back(next);
        continue;
      }
      Tensor gi = std::move(grads[i]);
      const InputMeta& meta = node->input_meta[i];
      // Gradients arrive in the dtype of the input they belong to (a float16
      // input of a promoted float32 op gets a float16 grad), as in PyTorch,
      // or in float32 where the input is a cast of a float32 tensor and the
      // formula summed in float32 (Saved::grad_dtypes): not rounded twice.
      if (gi.dtype() != meta.dtype && gi.dtype() != meta.grad_dtype) gi = gi.to(meta.dtype);
      HG_CHECK(gi.shape() == meta.shape, "{} backward: gradient {} for input {} has the wrong shape, expected {}",
               node->name, gi.describe(), i, shape_str(meta.shape));
      Slot& s = slots[next.get()];
      if (!s.pending.defined()) {
        s.pending = std::move(gi);
      } else if (s.pending.dtype() != gi.dtype()) {  // one narrow, one float32: sum in float32
        s.pending = add(s.pending.to(meta.grad_dtype), gi.to(meta.grad_dtype));
      } else {
        s.pending = add(s.pending, gi);
      }
      if (--s.deps == 0) ready.push_back(next);
    }
  }
  return captured;
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, const GradOptions& options) {
  HG_CHECK(!outputs.empty(), "autograd::grad: no outputs given (pass the tensors to differentiate, e.g. {{loss}})");
  HG_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
           "autograd::grad: got {} grad_outputs for {} outputs; pass one per output (an undefined Tensor() for "
           "the implicit ones of a scalar output) or none",
           grad_outputs.size(), outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    HG_CHECK(inputs[i].defined() && inputs[i].requires_grad(),
             "autograd::grad: input {} ({}) does not require grad; every differentiated tensor must (call "
             "requires_grad_() on a leaf, or pass a tensor computed from one)",
             i, inputs[i].defined() ? inputs[i].describe() : "an undefined tensor");
  Pass pass;
  pass.retain_graph = options.retain_graph.value_or(options.create_graph);
  pass.create_graph = options.create_graph;
  pass.inputs = &inputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    HG_CHECK(out.defined(), "autograd::grad: output {} is an undefined tensor", i);
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      HG_CHECK(out.numel() == 1,
               "autograd::grad: grad can be implicitly created only for scalar outputs, but output {} is {}. Pass "
               "grad_outputs of the same shapes.",
               i, out.describe());
      g = ones_like(out);
    } else {
      HG_CHECK(g.shape() == out.shape() && g.device() == out.device(),
               "autograd::grad: grad_output {} ({}) does not match output {} ({}) in shape or device", i,
               g.describe(), i, out.describe());
      if (g.dtype() != out.dtype()) g = g.to(out.dtype());
    }
    pass.roots.emplace_back(out, g);
  }
  Grads result = run_pass(pass);
  for (size_t i = 0; i < result.size(); ++i)
    HG_CHECK(result[i].defined() || options.allow_unused,
             "autograd::grad: input {} ({}) was not used to compute the outputs (no path from it in the graph). "
             "Pass allow_unused = true to get an undefined Tensor for it instead.",
             i, inputs[i].describe());
  return result;
}

}  // namespace halfgrad::autograd

namespace halfgrad {

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  Tensor g = gradient;
  if (!g.defined()) {
    HG_CHECK(numel() == 1,
             "backward: grad can be implicitly created only for scalar outputs, but this tensor is {}. Pass a "
             "gradient of the same shape: t.backward(grad).",
             describe());
    g = ones_like(*this);
  } else {
    HG_CHECK(g.shape() == shape(), "backward: gradient {} does not match the tensor {}", g.describe(), describe());
    HG_CHECK(g.device() == device(), "backward: gradient {} is on another device than the tensor {}", g.describe(),
             describe());
    if (g.dtype() != dtype()) g = g.to(dtype());
  }
  autograd::run_backward(*this, g, retain_graph, create_graph);
}

}  // namespace halfgrad
