#include <halfgrad/core/alias.h>
#include <halfgrad/ops/util.h>

#include <algorithm>

#include <halfgrad/dispatch/grad_mode.h>
#include <halfgrad/kernels/kernels.h>

namespace halfgrad::ops {

int64_t wrap_dim(std::string_view op, int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  HG_CHECK(dim >= -n && dim < n, "{}: dimension {} is out of range for a tensor with {} dims (expected {} to {})", op,
           dim, ndim, -n, n - 1);
  return dim < 0 ? dim + n : dim;
}

std::vector<int64_t> normalize_dims(std::string_view op, const Shape& dims, int64_t ndim) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(op, d, ndim));
  std::sort(out.begin(), out.end());
  HG_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "{}: a dimension appears twice in {}", op,
           shape_str(dims));
  if (ndim == 0) out.clear();
  return out;
}

void check_defined(std::string_view op, std::initializer_list<std::pair<std::string_view, const Tensor*>> args) {
  for (const auto& [name, t] : args)
    HG_CHECK(t->defined(), "{}: {} is an undefined tensor (default-constructed or moved-from); pass a tensor", op,
             name);
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  // in a formula under create_graph, a gradient that has a graph keeps it
  if (t.requires_grad() && autograd::grad_enabled()) return t.expand(shape);
  check_broadcasts_to("broadcast_to", "tensor", t.shape(), shape);
  const size_t lead = shape.size() - t.shape().size();
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < t.shape().size(); ++i)
    strides[lead + i] = t.shape()[i] == 1 && shape[lead + i] != 1 ? 0 : t.strides()[i];
  return alias_with(t, shape, strides, t.offset());
}

MemoryFormat output_format(const Shape& shape, std::initializer_list<const Tensor*> inputs) {
  if (shape.size() != 4 && shape.size() != 5) return MemoryFormat::Contiguous;
  const MemoryFormat cl = shape.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d;
  for (const Tensor* t : inputs) {
    if (!t->defined() || t->shape() != shape) continue;
    const bool row_major = t->is_contiguous(), channels_last = t->is_contiguous(cl);
    if (row_major != channels_last) return channels_last ? cl : MemoryFormat::Contiguous;
  }
  return MemoryFormat::Contiguous;
}

Tensor empty_like(const Tensor& t, TensorOptions o) { return make_tensor(t.shape(), o, t.suggest_memory_format()); }

Tensor scalar_tensor(double value, DType dtype, Device device) {
  Tensor t = make_tensor({}, TensorOptions(dtype, device));
  kernels::fill(t, value);
  return t;
}

void check_same_dtype(std::string_view op, const std::vector<Tensor>& inputs) {
  const Tensor* first = nullptr;
  for (const auto& t : inputs) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
      continue;
    }
    HG_CHECK(t.dtype() == first->dtype(),
             "{}: expected all inputs to have the same dtype, but got {} and {}. Cast one of them first (e.g. "
             "x.to(float32)), or run the op inside `amp::autocast`, which casts the inputs of {} for you.",
             op, first->describe(), t.describe(), op);
  }
}

// A view whose innermost stride is 1 or whose row stride is 1 (what the GEMM
// takes without copying); anything else is made contiguous first.
Tensor gemm_operand(const Tensor& t) {
  const int64_t n = t.dim();
  const bool rows_ok = t.strides()[n - 1] == 1 || t.shape()[n - 1] == 1;
  const bool cols_ok = t.strides()[n - 2] == 1 || t.shape()[n - 2] == 1;
  return rows_ok || cols_ok ? t : t.contiguous();
}

Shape keepdim_shape(const Shape& in, const std::vector<int64_t>& dims) {
  Shape s = in;
  for (int64_t d : dims) s[d] = 1;
  return s;
}

Shape squeezed_shape(const Shape& in, const std::vector<int64_t>& dims) {
  Shape s;
  size_t k = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    if (k < dims.size() && dims[k] == d) {
      ++k;
      continue;
    }
    s.push_back(in[d]);
  }
  return s;
}

Generator* generator_for(std::string_view op, std::optional<Generator>& generator, Device device) {
  if (!generator) return nullptr;
  HG_CHECK(generator->device().type() == device.type(),
           "{}: expected a '{}' device type for generator but found '{}' (the tensor is drawn on {}); make the "
           "generator with hg::Generator({})",
           op, device_type_name(device.type()), device_type_name(generator->device().type()), device.str(),
           device_type_name(device.type()));
  return &*generator;
}

}  // namespace halfgrad::ops
