#pragma once
// The layers an op call passes on its way to the kernel, in a fixed order, as
// PyTorch's dispatch keys (c10/core/DispatchKey.h: "autocasting precedes
// VariableTypeId"; "all backends are oblivious to autograd"). The dispatcher
// knows the order, not the features: amp/ registers the non-finite watch and
// autocast, autograd/ the recorder, each once at load time (a static object in
// their .cpp). No file here includes a layer above it.
//
//   dispatch::call(op, inputs)
//     NonFiniteWatch.before   notes the policy row the call came in with
//     Autocast.before         casts the floating inputs by the policy table
//     device checks
//     forward                 every layer excluded, grad mode off
//     NonFiniteWatch.after    checks the output for inf/NaN
//     record                  when grad mode is on and an input requires grad
//
// A layer runs only where it is active (its own cheap thread-local test) and
// not excluded on this thread (ExcludeGuard: inside an op's forward, a
// composite's body, the backward pass).
#include <cstdint>
#include <string>
#include <vector>

#include <halfgrad/core/tensor.h>
#include <halfgrad/dispatch/node.h>
#include <halfgrad/dispatch/op_id.h>

namespace halfgrad::dispatch {

enum class Layer : uint8_t { NonFiniteWatch, Autocast, kCount };
using LayerSet = uint8_t;
constexpr LayerSet bit(Layer l) { return static_cast<LayerSet>(1u << static_cast<unsigned>(l)); }
inline constexpr LayerSet kAllLayers = bit(Layer::NonFiniteWatch) | bit(Layer::Autocast);

// What a layer does; any entry may be null.
struct Interceptor {
  bool (*active)() = nullptr;  // anything to do on this thread now?
  // Before the device checks: may replace the inputs (autocast's casts), and
  // keep a note of this call for its `after` (calls nest: a cast is an op).
  void (*before)(OpId op, std::vector<Tensor>& inputs, std::string& note) = nullptr;
  // After the forward, given the inputs as the kernel saw them.
  void (*after)(OpId op, const std::vector<Tensor>& inputs, const Tensor& out, const std::string& note) = nullptr;
  // After a backward formula: its incoming gradient and the ones it passes on.
  void (*after_backward)(const std::string& node, const Tensor& grad_output, const std::vector<Tensor>& grads) = nullptr;
};
// Called once per layer, at load time, by the feature that fills it.
void register_layer(Layer layer, const Interceptor& interceptor);

// The dispatcher's calls into a layer's entries (a null entry does nothing).
void layer_before(Layer layer, OpId op, std::vector<Tensor>& inputs, std::string& note);
void layer_after(Layer layer, OpId op, const std::vector<Tensor>& inputs, const Tensor& out, const std::string& note);

// Whether `layer` is excluded on this thread.
bool excluded(Layer layer);
// Whether `layer` will run on this thread now: registered, active, not excluded.
bool on(Layer layer);

// Adds `layers` to this thread's excluded set; returns the set before, for
// restore_excluded (ExcludeGuard does both; a public header that must not
// include this one keeps the returned set).
LayerSet exclude(LayerSet layers);
void restore_excluded(LayerSet previous);
// Removes `layers` from this thread's excluded set; returns the set before
// (amp::custom_bwd lets autocast run inside a custom Function's backward).
LayerSet include(LayerSet layers);

// Excludes `layers` on this thread while alive (nests; restores on exit).
class ExcludeGuard {
 public:
  explicit ExcludeGuard(LayerSet layers) : prev_(exclude(layers)) {}
  explicit ExcludeGuard(Layer layer) : ExcludeGuard(bit(layer)) {}
  ~ExcludeGuard() { restore_excluded(prev_); }
  ExcludeGuard(const ExcludeGuard&) = delete;
  ExcludeGuard& operator=(const ExcludeGuard&) = delete;

 private:
  LayerSet prev_;
};

// For the backward engine: whether any layer watches backward formulas now,
// and telling them about one that ran (the formula itself runs excluded).
bool watching_backward();
void after_backward(const std::string& node, const Tensor& grad_output, const std::vector<Tensor>& grads);

// The autograd layer: records a FunctionNode for `out`, the result of `op` on
// `inputs` (autograd/record.cpp registers it). `extras` is what the forward
// kept with save_for_backward.
enum class Save : unsigned { Nothing = 0, Inputs = 1, Output = 2, Both = 3 };
using Recorder = Tensor (*)(OpId op, const std::vector<Tensor>& inputs, Tensor out, autograd::BackwardFn backward,
                            Save save, std::vector<Tensor> extras);
void register_recorder(Recorder recorder);
Recorder recorder();

}  // namespace halfgrad::dispatch
