#include <halfgrad/nn/pooling.h>

#include <fmt/format.h>

namespace halfgrad::nn {

namespace {
// As Python prints the argument: 3, or (2, 3) for a tuple.
std::string py(const SizeArg& s) {
  return s.values().size() == 1 ? fmt::format("{}", s.values()[0]) : s.str();
}
// stride=None (or an empty list) means kernel_size, as PyTorch stores it.
SizeArg stride_or_kernel(const std::optional<SizeArg>& stride, const SizeArg& kernel) {
  return stride && !stride->values().empty() ? *stride : kernel;
}
}  // namespace

MaxPool2d::MaxPool2d(SizeArg k, std::optional<SizeArg> s, SizeArg p, SizeArg d, bool ceil)
    : kernel_size(k), stride(stride_or_kernel(s, k)), padding(std::move(p)), dilation(std::move(d)), ceil_mode(ceil) {}

Tensor MaxPool2d::forward(const Tensor& x) const {
  return max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}", py(kernel_size), py(stride),
                     py(padding), py(dilation), ceil_mode ? "True" : "False");
}

AvgPool2d::AvgPool2d(SizeArg k, std::optional<SizeArg> s, SizeArg p, bool ceil, bool include_pad,
                     std::optional<int64_t> divisor)
    : kernel_size(k),
      stride(stride_or_kernel(s, k)),
      padding(std::move(p)),
      ceil_mode(ceil),
      count_include_pad(include_pad),
      divisor_override(divisor) {}

Tensor AvgPool2d::forward(const Tensor& x) const {
  return avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}

// PyTorch's AvgPool2d shows only these three.
std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", py(kernel_size), py(stride), py(padding));
}

std::string AdaptiveAvgPool2d::extra_repr() const { return fmt::format("output_size={}", py(output_size)); }

}  // namespace halfgrad::nn
