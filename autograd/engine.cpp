// The backward engine: count how many edges lead into each node, then run
// nodes in topological order (a node runs once all of its consumers have
// delivered their gradients), summing gradients that meet at one node.
#include <mutex>
#include <unordered_map>

#include <halfgrad/autograd/engine.h>
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

// The pass itself (below): dependency counts, then the nodes in order.
void run_graph(const Tensor& root, const Tensor& grad, bool retain_graph);

void queue_callback(std::function<void()> fn) {
  HG_CHECK(g_callbacks != nullptr,
           "autograd::queue_callback: no backward pass is running on this thread (call it from a hook during "
           "backward)");
  g_callbacks->push_back(std::move(fn));
}

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  std::vector<std::function<void()>> callbacks;
  auto* outer = g_callbacks;
  g_callbacks = &callbacks;
  struct Restore {
    std::vector<std::function<void()>>** slot;
    std::vector<std::function<void()>>* prev;
    ~Restore() { *slot = prev; }
  } restore{&g_callbacks, outer};
  run_graph(root, grad, retain_graph);
  // callbacks may queue more (run in order until none is left)
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto fn = std::move(callbacks[i]);
    fn();
  }
}

void run_graph(const Tensor& root, const Tensor& grad, bool retain_graph) {
  auto root_node = gradient_edge(root);
  HG_CHECK(root_node != nullptr,
           "backward: tensor {} does not require grad and has no grad_fn. Did you call requires_grad_() on "
           "the parameters, or compute the loss under no_grad?",
           root.describe());

  // One entry per node reached: how many edges into it are still to run, and
  // the gradient summed for it so far (one map, not one per field: each entry
  // is a heap node).
  struct Slot {
    int deps = 0;
    bool seen = false;
    Tensor pending;
  };
  std::unordered_map<Node*, Slot> slots;
  slots.reserve(32);

  // Pass 1: dependency counts.
  std::vector<Node*> stack{root_node.get()};
  slots[root_node.get()].seen = true;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next) {
      if (!e) continue;
      Slot& s = slots[e.get()];
      ++s.deps;
      if (!s.seen) {
        s.seen = true;
        stack.push_back(e.get());
      }
    }
  }

  // Pass 2: run. Backward formulas record nothing and are never autocast:
  // each runs in the dtypes its forward ran in.
  NoGradGuard no_grad;
  dispatch::ExcludeGuard no_autocast(dispatch::Layer::Autocast);
  slots[root_node.get()].pending = grad;
  std::vector<std::shared_ptr<Node>> ready{root_node};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Tensor g = std::move(slots[node.get()].pending);  // the slot stays: its deps are 0 now
    Grads grads;
    if (dispatch::watching_backward()) {  // amp::DetectNonFinite
      {
        dispatch::ExcludeGuard formula(dispatch::kAllLayers);  // its inner ops are not the user's
        grads = node->apply(g, retain_graph);
      }
      // only the gradients backward passes on: a formula may also compute one
      // for an input that needs none (a scalar wrapped as a tensor), unused
      Grads used(grads.size());
      for (size_t i = 0; i < grads.size() && i < node->next.size(); ++i)
        if (node->next[i]) used[i] = grads[i];
      dispatch::after_backward(node->name, g, used);
    } else {
      grads = node->apply(g, retain_graph);
    }
    g = Tensor();  // drop our reference so AccumulateGrad can take ownership
    if (!retain_graph) node->release();
    for (size_t i = 0; i < node->next.size() && i < grads.size(); ++i) {
      auto& next = node->next[i];
      if (!next || !grads[i].defined()) {
        if (next && --slots[next.get()].deps == 0) ready.push_back(next);
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
}

}  // namespace halfgrad::autograd

namespace halfgrad {

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
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
  autograd::run_backward(*this, g, retain_graph);
}

}  // namespace halfgrad
