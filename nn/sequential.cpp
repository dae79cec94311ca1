#include "nn/sequential.h"

namespace halfgrad::nn {

void Sequential::append(Module* m, std::function<Tensor(const Tensor&)> step, std::shared_ptr<Module> owned) {
  const std::string name = std::to_string(modules_.size());
  if (owned) register_module(name, std::move(owned));
  else register_module(name, *m);
  modules_.push_back(m);
  steps_.push_back(std::move(step));
}

Tensor Sequential::forward(const Tensor& x) const {
  Tensor y = x;
  for (const auto& step : steps_) y = step(y);
  return y;
}

Module& Sequential::operator[](size_t i) const {
  HG_CHECK(i < modules_.size(), "Sequential: index {} out of range for {} modules", i, modules_.size());
  return *modules_[i];
}

}  // namespace halfgrad::nn
