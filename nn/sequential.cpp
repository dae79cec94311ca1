#include <halfgrad/nn/sequential.h>

#include <typeinfo>

#include <halfgrad/nn/activation.h>
#include <halfgrad/nn/linear.h>

namespace halfgrad::nn {

void Sequential::append(Module* m, std::function<Tensor(const Tensor&)> step, std::shared_ptr<Module> owned) {
  const std::string name = std::to_string(modules_.size());
  if (owned) register_module(name, std::move(owned));
  else register_module(name, *m);
  modules_.push_back(m);
  steps_.push_back(std::move(step));
}

namespace {
// `m` as a T if it is exactly a T. Fusion reproduces what Linear, ReLU and
// GELU compute; a subclass may compute something else in its own forward()
// (which Sequential calls through steps_), so it is never fused.
// A module with forward hooks is never fused either: its hooks see its output.
template <typename T>
const T* exactly(const Module* m) {
  return typeid(*m) == typeid(T) && !m->has_forward_hooks() ? static_cast<const T*>(m) : nullptr;
}

// The activation module `m` is, as a fused op's Activation (None: not one).
Activation activation_of(const Module* m) {
  if (exactly<ReLU>(m)) return Activation::ReLU;
  const auto* gelu = exactly<GELU>(m);
  if (!gelu) return Activation::None;
  return gelu->approximate == "tanh" ? Activation::GELUTanh : Activation::GELU;
}
}  // namespace

// Runs of Linear layers are fused (modules of exactly these types, not
// subclasses); the modules, their names and the state dict
// stay exactly as registered. A Linear followed by a ReLU, GELU() or
// GELU("tanh") module (or built with that activation) is one op, one GEMM with
// the bias and activation in its epilogue; two or more such layers in a row
// (the last one's activation optional) are one linear_chain, whose backward
// can fuse each hidden layer's dReLU/dGELU into the next layer's dx GEMM.
Tensor Sequential::forward(const Tensor& x) const {
  Tensor y = x;
  for (size_t i = 0; i < steps_.size();) {
    // the longest run of Linear layers starting at i, each but the last activated
    std::vector<const Linear*> layers;
    std::vector<Activation> acts;
    size_t end = i;
    while (end < modules_.size()) {
      const auto* lin = exactly<Linear>(modules_[end]);
      if (!lin) break;
      Activation act = lin->activation;
      ++end;
      if (act == Activation::None && end < modules_.size()) {
        act = activation_of(modules_[end]);
        if (act != Activation::None) ++end;
      }
      layers.push_back(lin);
      acts.push_back(act);
      if (act == Activation::None) break;
    }
    if (amp::is_fp8_enabled()) {  // fp8 GEMMs one layer at a time: no linear_chain
      y = steps_[i](y);
      ++i;
    } else if (layers.size() >= 2) {
      std::vector<Tensor> weights, biases;
      for (const Linear* lin : layers) {
        weights.push_back(lin->weight);
        biases.push_back(lin->bias);
      }
      y = linear_chain(y, weights, biases, acts);
      i = end;
    } else if (layers.size() == 1 && end == i + 2) {  // Linear + activation module: one op
      y = layers[0]->forward(y, acts[0]);
      i = end;
    } else {
      y = steps_[i](y);
      ++i;
    }
  }
  return y;
}

Module& Sequential::operator[](size_t i) const {
  HG_CHECK(i < modules_.size(), "Sequential: index {} out of range for {} modules", i, modules_.size());
  return *modules_[i];
}

}  // namespace halfgrad::nn
