#include <halfgrad/core/format.h>

#include <halfgrad/dispatch/node.h>

#include <cmath>
#include <ostream>

namespace halfgrad {

namespace {
constexpr int64_t kSummarizeAbove = 1000;  // PyTorch's print threshold
constexpr int64_t kEdgeItems = 3;

struct Printer {
  const Tensor& t;  // on the CPU
  bool summarize;
  std::string out;

  std::string element(int64_t offset) const {
    const void* base = t.storage()->data;
    return HG_DISPATCH_STORAGE(t.dtype(), "print", [&]() -> std::string {
      const scalar_t v = static_cast<const scalar_t*>(base)[offset];
      if constexpr (std::is_same_v<scalar_t, bool>) return v ? "True" : "False";
      else if constexpr (std::is_same_v<scalar_t, int64_t>) return fmt::format("{}", v);
      else {
        const double d = static_cast<double>(static_cast<acc_t<scalar_t>>(v));
        if (std::isnan(d)) return "nan";
        if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
        return fmt::format("{:.4f}", d);
      }
    });
  }

  void print(int64_t dim, int64_t offset, int indent) {
    if (dim == t.dim()) {
      out += element(offset);
      return;
    }
    const int64_t n = t.shape()[dim];
    out += '[';
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
        out += dim + 1 == t.dim() ? "..., " : fmt::format("...,\n{:{}}", "", indent + 1);
        i = n - kEdgeItems;
      }
      print(dim + 1, offset + i * t.strides()[dim], indent + 1);
      if (i + 1 < n) out += dim + 1 == t.dim() ? ", " : fmt::format(",\n{:{}}", "", indent + 1);
    }
    out += ']';
  }
};
}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  const Tensor host = t.device().is_cpu() ? t : t.cpu();
  Printer p{host, host.numel() > kSummarizeAbove, "tensor("};
  if (host.numel() == 0) p.out += "[]";
  else p.print(0, host.offset(), 7);
  p.out += fmt::format(", dtype={}, shape={}, device={}", dtype_name(t.dtype()), shape_str(t.shape()), t.device().str());
  if (t.grad_fn()) p.out += ", grad_fn=<" + t.grad_fn()->name + ">";
  else if (t.requires_grad()) p.out += ", requires_grad=True";
  p.out += ")";
  return p.out;
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << to_string(t); }

}  // namespace halfgrad
