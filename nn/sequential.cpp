#include "nn/sequential.h"

#include "nn/activation.h"
#include "nn/linear.h"

namespace halfgrad::nn {

void Sequential::append(Module* m, std::function<Tensor(const Tensor&)> step, std::shared_ptr<Module> owned) {
  const std::string name = std::to_string(modules_.size());
  if (owned) register_module(name, std::move(owned));
  else register_module(name, *m);
  modules_.push_back(m);
  steps_.push_back(std::move(step));
}

// A Linear followed by a ReLU or GELU runs as one fused op (one GEMM with the
// bias and activation in its epilogue; GELU("tanh") is the form cuBLASLt
// fuses); the modules, their names and the state dict stay exactly as registered.
Tensor Sequential::forward(const Tensor& x) const {
  Tensor y = x;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const auto* lin = dynamic_cast<const Linear*>(modules_[i]);
    if (lin && lin->activation == Activation::None && i + 1 < modules_.size()) {
      const Module* next = modules_[i + 1];
      const auto* gelu = dynamic_cast<const GELU*>(next);
      const Activation act = dynamic_cast<const ReLU*>(next) ? Activation::ReLU
                             : !gelu                         ? Activation::None
                             : gelu->approximate == "tanh"   ? Activation::GELUTanh
                                                             : Activation::GELU;
      if (act != Activation::None) {
        y = lin->forward(y, act);
        ++i;
        continue;
      }
    }
    y = steps_[i](y);
  }
  return y;
}

Module& Sequential::operator[](size_t i) const {
  HG_CHECK(i < modules_.size(), "Sequential: index {} out of range for {} modules", i, modules_.size());
  return *modules_[i];
}

}  // namespace halfgrad::nn
