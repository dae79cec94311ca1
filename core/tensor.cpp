#include <halfgrad/core/alias.h>
#include <halfgrad/core/tensor.h>

#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>

#include <halfgrad/core/cuda/runtime.h>

namespace halfgrad {

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }
std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

int64_t shape_numel(const Shape& s, std::string_view op) {
  // The product of the non-zero sizes must fit, not just the element count:
  // then every stride and partial product of an existing tensor fits too.
  int64_t n = 1;
  bool empty = false;
  for (int64_t d : s) {
    HG_CHECK(d >= 0, "{}: negative size {} in shape {}; sizes must be >= 0", op, d, shape_str(s));
    if (d == 0) {
      empty = true;
    } else {
      HG_CHECK(!__builtin_mul_overflow(n, d, &n),
               "{}: shape {} has more elements than int64 can count (the product of its sizes overflows); no tensor "
               "can be this large",
               op, shape_str(s));
    }
  }
  return empty ? 0 : n;
}

int64_t shape_nbytes(const Shape& s, DType dtype, std::string_view op) {
  int64_t bytes = 0;
  HG_CHECK(!__builtin_mul_overflow(shape_numel(s, op), static_cast<int64_t>(itemsize(dtype)), &bytes),
           "{}: a {} tensor of shape {} needs more than 2^63 bytes (the byte count overflows); no tensor can be this "
           "large",
           op, dtype_name(dtype), shape_str(s));
  return bytes;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

namespace {
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  HG_CHECK(dim >= -n && dim < n, "{}: dimension {} out of range for a tensor of {} dims (expected {} to {})",
           what, dim, ndim, -n, n - 1);
  return dim < 0 ? dim + n : dim;
}
}  // namespace

int64_t Tensor::size(int64_t d) const {
  HG_CHECK(dim() > 0, "size: tensor {} has no dimensions", describe());
  return shape()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  HG_CHECK(dim() > 0, "stride: tensor {} has no dimensions", describe());
  return strides()[wrap_dim(d, dim(), "stride")];
}

std::string_view memory_format_name(MemoryFormat f) {
  switch (f) {
    case MemoryFormat::Contiguous: return "contiguous";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::ChannelsLast3d: return "channels_last_3d";
  }
  return "?";
}

Shape strides_for(const Shape& s, MemoryFormat f, std::string_view op) {
  if (f == MemoryFormat::Contiguous) return contiguous_strides(s);
  const size_t rank = f == MemoryFormat::ChannelsLast ? 4 : 5;
  HG_CHECK(s.size() == rank,
           "{}: memory format {} needs a {}-d tensor [N, C, {}], got shape {}; use MemoryFormat::{} for a {}-d one",
           op, memory_format_name(f), rank, rank == 4 ? "H, W" : "D, H, W", shape_str(s),
           s.size() == 4 ? "ChannelsLast" : s.size() == 5 ? "ChannelsLast3d" : "Contiguous", s.size());
  // memory order N, spatial..., C: C innermost, then the spatial dims last to first, then N
  Shape st(rank);
  int64_t acc = 1;
  st[1] = acc;
  acc *= std::max<int64_t>(s[1], 1);
  for (size_t i = rank; i-- > 2;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  st[0] = acc;
  return st;
}

Shape memory_order(const Shape& shape, const Shape& strides) {
  // size-1 dims go last: their stride is arbitrary, and the loops drop them
  Shape order, ones;
  for (size_t d = 0; d < shape.size(); ++d) (shape[d] == 1 ? ones : order).push_back(static_cast<int64_t>(d));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  order.insert(order.end(), ones.begin(), ones.end());
  return order;
}

bool in_memory_order(const Shape& shape, const Shape& strides) {
  int64_t prev = -1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (prev >= 0 && strides[d] > strides[static_cast<size_t>(prev)]) return false;
    prev = static_cast<int64_t>(d);
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat f) const {
  if (f == MemoryFormat::Contiguous) return is_contiguous();
  if (dim() != (f == MemoryFormat::ChannelsLast ? 4 : 5)) return false;
  if (numel() == 0) return true;
  const Shape expected = strides_for(shape(), f);
  for (int64_t d = 0; d < dim(); ++d)
    if (shape()[d] != 1 && strides()[d] != expected[d]) return false;
  return true;
}

MemoryFormat Tensor::suggest_memory_format() const {
  if (dim() != 4 && dim() != 5) return MemoryFormat::Contiguous;
  const MemoryFormat cl = dim() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d;
  return is_contiguous(cl) && !is_contiguous() ? cl : MemoryFormat::Contiguous;
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // as PyTorch: no element is out of place (strides of [2, 0] are [1, 1])
  int64_t expected = 1;
  for (size_t i = shape().size(); i-- > 0;) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  return fmt::format("{}{} {}", dtype_name(dtype()), shape_str(shape()), device().str());
}

void* Tensor::data_ptr() const {
  auto& s = impl().storage;
  if (!s || !s->data) return nullptr;
  return static_cast<char*>(s->data) + offset() * static_cast<int64_t>(itemsize(dtype()));
}

bool Tensor::requires_grad() const { return impl().requires_grad || impl().grad_fn != nullptr; }

Tensor& Tensor::requires_grad_(bool r) {
  HG_CHECK(is_leaf() || r, "requires_grad_: only leaf tensors can stop requiring grad; use detach() instead");
  HG_CHECK(!r || is_floating(dtype()),
           "requires_grad_: only floating tensors can require gradients, this one is {}", describe());
  impl().requires_grad = r;
  return *this;
}

Tensor make_tensor(const Shape& shape, TensorOptions options) {
  return make_tensor(shape, options, MemoryFormat::Contiguous);
}

Tensor make_tensor(const Shape& shape, TensorOptions options, MemoryFormat format) {
  const int64_t nbytes = shape_nbytes(shape, options.dtype(), "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = strides_for(shape, format, "empty");
  impl->dtype = options.dtype();
  impl->device = options.device();
  impl->storage = allocate_storage(static_cast<size_t>(nbytes), options.device());
  impl->requires_grad = options.requires_grad();
  if (options.requires_grad()) Tensor(impl).requires_grad_(true);
  return Tensor(std::move(impl));
}

Tensor alias_with(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  // A view must stay inside its storage (as_strided's check in PyTorch): the
  // lowest and highest elements it reaches, negative strides included.
  HG_CHECK(shape.size() == strides.size(), "view: shape {} and strides {} differ in rank (of {})", shape_str(shape),
           shape_str(strides), base.describe());
  for (int64_t n : shape) {
    HG_CHECK(n >= 0, "view: negative size in shape {} (of {})", shape_str(shape), base.describe());
  }
  if (shape_numel(shape, "view") > 0 && base.storage()) {
    int64_t first = offset, last = offset;
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t reach = 0;
      bool overflow = __builtin_mul_overflow(shape[i] - 1, strides[i], &reach);
      int64_t& end = reach < 0 ? first : last;
      overflow = overflow || __builtin_add_overflow(end, reach, &end);
      HG_CHECK(!overflow, "view: shape {} with strides {} at offset {} reaches past int64 (of {})", shape_str(shape),
               shape_str(strides), offset, base.describe());
    }
    const int64_t capacity = static_cast<int64_t>(base.storage()->nbytes / itemsize(base.dtype()));
    HG_CHECK(first >= 0 && last < capacity,
             "view: shape {} with strides {} at offset {} reaches elements {}..{}, outside the {} elements of the "
             "storage of {}",
             shape_str(shape), shape_str(strides), offset, first, last, capacity, base.describe());
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  return Tensor(std::move(impl));
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    HG_CHECK(g.impl_ != impl_, "set_grad: can't assign Variable as its own grad ({}); assign g.clone()", describe());
    HG_CHECK(g.dtype() == dtype(),
             "set_grad: assigned grad has data of a different type: {} for the tensor {}; convert it first with "
             "g.to({})",
             g.describe(), describe(), dtype_name(dtype()));
    HG_CHECK(g.shape() == shape(), "set_grad: assigned grad has data of a different size: {} for the tensor {}",
             g.describe(), describe());
    HG_CHECK(g.device() == device(),
             "set_grad: assigned grad has data located on a different device: {} for the tensor {}; move it "
             "first with g.to({})",
             g.describe(), describe(), device().str());
  }
  std::shared_ptr<TensorImpl> old;  // released after the lock, not under it
  std::lock_guard<std::mutex> lock(impl().grad_mutex);
  old = std::exchange(impl().grad, g.impl_);
}

Tensor Tensor::grad() const {
  std::lock_guard<std::mutex> lock(impl().grad_mutex);
  return Tensor(impl().grad);
}

Tensor Tensor::detach() const { return alias_with(*this, shape(), strides(), offset()); }

namespace {
// As PyTorch's checked_convert: a value outside the target type's range is an
// Error (a floating target takes inf and NaN; int64 takes neither), instead
// of a silent inf or an undefined conversion.
void check_item_range(const Tensor& t, double v, double limit, bool floating, const char* type) {
  const bool ok = floating ? !std::isfinite(v) || std::fabs(v) <= limit : v >= -limit && v < limit;
  HG_CHECK(ok,
           "item: value {} of {} cannot be converted to type {} without overflow; read it as item<double>() "
           "instead",
           v, t.describe(), type);
}
}  // namespace

template <typename T>
T Tensor::item() const {
  HG_CHECK(numel() == 1, "item: expected a tensor with one element, got {}", describe());
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  // Read the one element in its own dtype, then convert like a C++ cast.
  return HG_DISPATCH_STORAGE(host.dtype(), "item", [&]() -> T {
    using A = acc_t<scalar_t>;
    const A v = static_cast<A>(*static_cast<const scalar_t*>(host.data_ptr()));
    if constexpr (std::is_same_v<T, int64_t> && std::is_floating_point_v<A>)
      check_item_range(*this, static_cast<double>(v), 0x1p63, false, "int64");
    else if constexpr (std::is_same_v<T, float> && std::is_same_v<A, double>)
      check_item_range(*this, v, std::numeric_limits<float>::max(), true, "float32");
    return static_cast<T>(v);
  });
}

template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;
template <>
Half Tensor::item<Half>() const {
  const double v = item<double>();
  check_item_range(*this, v, 65504.0, true, "float16");
  return Half(static_cast<float>(v));
}
template <>
BFloat16 Tensor::item<BFloat16>() const {
  const double v = item<double>();
  check_item_range(*this, v, 0x1.fep127, true, "bfloat16");
  return BFloat16(static_cast<float>(v));
}

}  // namespace halfgrad
