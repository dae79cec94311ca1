#pragma once
// fmt::print("{}", t) shows a tensor as PyTorch does: its values (long dims
// abbreviated with "..." past 1000 elements), then dtype, shape and device.
#include <fmt/format.h>

#include <halfgrad/core/tensor.h>

namespace halfgrad {
std::string to_string(const Tensor& t);
}

template <>
struct fmt::formatter<halfgrad::Tensor> : fmt::formatter<std::string_view> {
  auto format(const halfgrad::Tensor& t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(halfgrad::to_string(t), ctx);
  }
};
