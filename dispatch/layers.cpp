#include <halfgrad/dispatch/layers.h>

#include <halfgrad/core/error.h>

namespace halfgrad::dispatch {

namespace {
// Filled at load time, read on every op call: plain data, no locks.
Interceptor g_layers[static_cast<size_t>(Layer::kCount)];
Recorder g_recorder = nullptr;
thread_local LayerSet t_excluded = 0;

const Interceptor& layer_of(Layer l) { return g_layers[static_cast<size_t>(l)]; }
}  // namespace

void register_layer(Layer layer, const Interceptor& interceptor) { g_layers[static_cast<size_t>(layer)] = interceptor; }

void layer_before(Layer layer, OpId op, std::vector<Tensor>& inputs, std::string& note) {
  if (const auto f = layer_of(layer).before) f(op, inputs, note);
}

void layer_after(Layer layer, OpId op, const std::vector<Tensor>& inputs, const Tensor& out, const std::string& note) {
  if (const auto f = layer_of(layer).after) f(op, inputs, out, note);
}

bool excluded(Layer layer) { return (t_excluded & bit(layer)) != 0; }

bool on(Layer layer) {
  const Interceptor& l = layer_of(layer);
  return !excluded(layer) && l.active != nullptr && l.active();
}

LayerSet exclude(LayerSet layers) {
  const LayerSet prev = t_excluded;
  t_excluded = static_cast<LayerSet>(prev | layers);
  return prev;
}
void restore_excluded(LayerSet previous) { t_excluded = previous; }
LayerSet include(LayerSet layers) {
  const LayerSet prev = t_excluded;
  t_excluded = static_cast<LayerSet>(prev & ~layers);
  return prev;
}

bool watching_backward() {
  for (size_t i = 0; i < static_cast<size_t>(Layer::kCount); ++i)
    if (g_layers[i].after_backward && on(static_cast<Layer>(i))) return true;
  return false;
}

void after_backward(const std::string& node, const Tensor& grad_output, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < static_cast<size_t>(Layer::kCount); ++i)
    if (g_layers[i].after_backward && on(static_cast<Layer>(i))) g_layers[i].after_backward(node, grad_output, grads);
}

void register_recorder(Recorder recorder) { g_recorder = recorder; }

Recorder recorder() {
  HG_CHECK(g_recorder != nullptr, "dispatch: no autograd recorder is registered (internal error: autograd/record.cpp "
           "is not linked in)");
  return g_recorder;
}

}  // namespace halfgrad::dispatch
