#pragma once
// Flatten: merges dims start_dim..end_dim (by default all but the batch dim).
#include <fmt/format.h>

#include <halfgrad/nn/module.h>

namespace halfgrad::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) const { return x.flatten(start_dim, end_dim); }
  Tensor operator()(const Tensor& x) const { return with_forward_hooks(forward(x)); }
  std::string extra_repr() const override { return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim); }

  int64_t start_dim, end_dim;
};

}  // namespace halfgrad::nn
