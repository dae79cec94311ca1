// Factories: new tensors filled by a kernel. They have no inputs, so there is
// nothing to autocast or record; `requires_grad` in the options makes a leaf.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>

#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad()) t.requires_grad_(true);
  return t;
}
TensorOptions plain(const TensorOptions& o) { return TensorOptions(o.dtype(), o.device()); }

// Largest finite value and mantissa digits of a floating dtype.
struct FloatLimits {
  long double max;
  int digits;
};
FloatLimits float_limits(DType dt) {
  switch (dt) {
    case DType::Float16: return {65504.0L, 11};
    case DType::BFloat16: return {0x1.fep127L, 8};
    case DType::Float32: return {std::numeric_limits<float>::max(), 24};
    default: return {std::numeric_limits<double>::max(), 53};
  }
}

// v as the kernels round it into dt (int64 -> double -> compute type -> dt),
// held exactly (long double has a 64-bit mantissa on x86).
long double rounded_in(DType dt, int64_t v) {
  return HG_DISPATCH_FLOATING(dt, "randint", [&]() -> long double {
    const scalar_t r = static_cast<scalar_t>(static_cast<acc_t<scalar_t>>(static_cast<double>(v)));
    return static_cast<long double>(static_cast<acc_t<scalar_t>>(r));
  });
}

// floor(log2(|x|)) for x != 0 (|x| in unsigned arithmetic: INT64_MIN too).
int log2_magnitude(int64_t x) {
  uint64_t v = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  int n = 0;
  while (v >>= 1) ++n;
  return n;
}

// PyTorch's random_from_to for floating dtypes: `from` and `to - 1` must be
// finite in the dtype; then move `to` down (and `from` up) until no draw can
// round to `to` (bfloat16 holds 999 only as 1000: high 1000 becomes 996).
void fit_range_to_float(DType dt, int64_t& low, int64_t& high) {
  const FloatLimits lim = float_limits(dt);
  HG_CHECK(low >= -lim.max && low <= lim.max, "randint: from ({}) is out of bounds for {} (largest finite value {})",
           low, dtype_name(dt), static_cast<double>(lim.max));
  HG_CHECK(high - 1 >= -lim.max && high - 1 <= lim.max,
           "randint: to - 1 ({}) is out of bounds for {} (largest finite value {}); draw int64 and convert, or "
           "use a wider dtype",
           high - 1, dtype_name(dt), static_cast<double>(lim.max));
  const long double low_plus_1 = rounded_in(dt, low + 1);
  if (low_plus_1 < low) {
    const int n = log2_magnitude(low + 1);
    low = static_cast<int64_t>(low_plus_1 + std::ldexp(1.0L, n - lim.digits + 1));
  }
  const long double high_minus_1 = rounded_in(dt, high - 1);
  if (high_minus_1 >= high) {
    const int n = log2_magnitude(high - 1);
    high = static_cast<int64_t>(high_minus_1 - std::ldexp(1.0L, n - lim.digits + 1));
  }
  HG_CHECK(low < high, "randint: low cast to {} ({}) must be less than high cast to {} ({})", dtype_name(dt), low,
           dtype_name(dt), high);
}

template <typename T>
Tensor from_values(const std::vector<T>& values, const Shape& shape, const TensorOptions& o) {
  Shape s = shape.empty() ? Shape{static_cast<int64_t>(values.size())} : shape;
  HG_CHECK(shape_numel(s) == static_cast<int64_t>(values.size()), "tensor: {} values do not fill shape {}",
           values.size(), shape_str(s));
  Tensor host = make_tensor(s, TensorOptions(dtype_of<T>::value, Device::cpu()));
  std::copy(values.begin(), values.end(), static_cast<T*>(host.data_ptr()));
  Tensor out = make_tensor(s, plain(o));
  kernels::copy(out, host);
  return finish(out, o);
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions o) { return finish(make_tensor(shape, plain(o)), o); }

// PyTorch's check (c10::overflows) before a fill value becomes an int64: a
// value outside [-2^63, 2^63), NaN or an infinity is an error, not INT64_MIN.
// (Floating dtypes keep the cast's rounding: 65519 fills a float16 as 65504.)
static void check_fill_value(const char* op, double value, DType dt) {
  if (dt != DType::Int64) return;
  HG_CHECK(value >= -0x1p63 && value < 0x1p63,
           "{}: value {} cannot be converted to type int64 without overflow (PyTorch: \"value cannot be converted to "
           "type int64_t without overflow\"); pass a value in [-2^63, 2^63) or a floating dtype",
           op, value);
}

Tensor full(const Shape& shape, double value, TensorOptions o) {
  check_fill_value("full", value, plain(o).dtype());
  Tensor t = make_tensor(shape, plain(o));
  kernels::fill(t, value);
  return finish(t, o);
}
Tensor zeros(const Shape& shape, TensorOptions o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, TensorOptions o) { return full(shape, 1.0, o); }

Tensor arange(int64_t end, TensorOptions o) {
  return arange(0.0, static_cast<double>(end), 1.0, o.with_default_dtype(DType::Int64));
}

Tensor arange(double start, double end, double step, TensorOptions o) {
  HG_CHECK(step != 0, "arange: step must not be zero");
  const double count = std::ceil((end - start) / step);
  HG_CHECK(std::isfinite(count) && count < 1e12,
           "arange: the range [{}, {}) with step {} is infinite or too large ({} elements)", start, end, step, count);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  Tensor host = from_values(values, {n}, TensorOptions(DType::Float64));
  Tensor out = make_tensor({n}, plain(o));
  kernels::copy(out, host);
  return finish(out, o);
}

Tensor rand(const Shape& shape, std::optional<Generator> generator, TensorOptions o) {
  HG_CHECK(is_floating(o.dtype()), "rand: dtype must be floating, got {}", dtype_name(o.dtype()));
  Tensor t = make_tensor(shape, plain(o));
  kernels::uniform(t, 0.0, 1.0, ops::generator_for("rand", generator, t.device()));
  return finish(t, o);
}
Tensor rand(const Shape& shape, TensorOptions o) { return rand(shape, std::nullopt, o); }

Tensor randn(const Shape& shape, std::optional<Generator> generator, TensorOptions o) {
  HG_CHECK(is_floating(o.dtype()), "randn: dtype must be floating, got {}", dtype_name(o.dtype()));
  Tensor t = make_tensor(shape, plain(o));
  kernels::normal(t, 0.0, 1.0, ops::generator_for("randn", generator, t.device()));
  return finish(t, o);
}
Tensor randn(const Shape& shape, TensorOptions o) { return randn(shape, std::nullopt, o); }

Tensor randint(int64_t low, int64_t high, const Shape& shape, std::optional<Generator> generator, TensorOptions o) {
  o = o.with_default_dtype(DType::Int64);
  HG_CHECK(low < high, "randint: low ({}) must be less than high ({})", low, high);
  HG_CHECK(o.dtype() != DType::Bool, "randint: dtype bool is not supported");
  if (is_floating(o.dtype())) fit_range_to_float(o.dtype(), low, high);
  Tensor t = make_tensor(shape, plain(o));
  kernels::randint(t, low, high, ops::generator_for("randint", generator, t.device()));
  return finish(t, o);
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o) {
  return randint(low, high, shape, std::nullopt, o);
}

Tensor tensor(const std::vector<float>& v, const Shape& s, TensorOptions o) { return from_values(v, s, o); }
Tensor tensor(const std::vector<double>& v, const Shape& s, TensorOptions o) { return from_values(v, s, o); }
Tensor tensor(const std::vector<int64_t>& v, const Shape& s, TensorOptions o) { return from_values(v, s, o); }

Tensor tensor(const std::vector<Half>& v, const Shape& s, TensorOptions o) { return from_values(v, s, o); }
Tensor tensor(const std::vector<BFloat16>& v, const Shape& s, TensorOptions o) { return from_values(v, s, o); }
Tensor tensor(const std::vector<bool>& v, const Shape& s, TensorOptions o) {
  // std::vector<bool> packs bits and has no data(): go through a plain bool array.
  std::unique_ptr<bool[]> host(new bool[v.size()]);
  std::copy(v.begin(), v.end(), host.get());
  Tensor view = from_blob(host.get(), {static_cast<int64_t>(v.size())}, TensorOptions(DType::Bool));
  Shape shape = s.empty() ? Shape{static_cast<int64_t>(v.size())} : s;
  HG_CHECK(shape_numel(shape) == static_cast<int64_t>(v.size()), "tensor: {} values do not fill shape {}", v.size(),
           shape_str(shape));
  Tensor out = make_tensor(shape, plain(o));
  kernels::copy(out, view.reshape(shape));
  return finish(out, o);
}
Tensor tensor(std::initializer_list<double> v, const Shape& s, TensorOptions o) {
  return from_values(std::vector<double>(v), s, o);
}
Tensor tensor(std::initializer_list<int> v, const Shape& s, TensorOptions o) {
  return from_values(std::vector<int64_t>(v.begin(), v.end()), s, o);
}
Tensor tensor(std::initializer_list<bool> v, const Shape& s, TensorOptions o) { return tensor(std::vector<bool>(v), s, o); }

namespace {
Tensor wrap_blob(void* data, const Shape& shape, const Shape& strides, std::function<void(void*)> deleter,
                 const TensorOptions& o) {
  const DType dt = o.dtype();
  HG_CHECK(data != nullptr || shape_numel(shape, "from_blob") == 0,
           "from_blob: data is null for a {} tensor of shape {}; pass the address of its first element",
           dtype_name(dt), shape_str(shape));
  HG_CHECK(reinterpret_cast<uintptr_t>(data) % itemsize(dt) == 0,
           "from_blob: data {} is not aligned for {} ({} bytes); copy it into aligned memory first", data,
           dtype_name(dt), itemsize(dt));
  HG_CHECK(!o.requires_grad(),
           "from_blob: requires_grad in the options is not supported (as in LibTorch); call .requires_grad_() on "
           "the result");
  HG_CHECK(strides.size() == shape.size(), "from_blob: shape {} and strides {} differ in rank", shape_str(shape),
           shape_str(strides));
  // The elements reached: the storage spans from the lowest to the highest one.
  int64_t span = shape_numel(shape, "from_blob") > 0 ? 1 : 0;
  for (size_t i = 0; i < shape.size() && span > 0; ++i) {
    HG_CHECK(strides[i] >= 0, "from_blob: negative stride {} in strides {} is not supported", strides[i],
             shape_str(strides));
    span += (shape[i] - 1) * strides[i];
  }
  const int64_t nbytes = shape_nbytes({span}, dt, "from_blob");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dt;
  impl->device = o.device();
  impl->storage = std::make_shared<Storage>(data, static_cast<size_t>(nbytes), o.device(), std::move(deleter));
  return Tensor(std::move(impl));
}
}  // namespace

Tensor from_blob(void* data, const Shape& shape, TensorOptions o) {
  return wrap_blob(data, shape, contiguous_strides(shape), nullptr, o);
}
Tensor from_blob(void* data, const Shape& shape, const Shape& strides, TensorOptions o) {
  return wrap_blob(data, shape, strides, nullptr, o);
}
Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> deleter, TensorOptions o) {
  return wrap_blob(data, shape, contiguous_strides(shape), std::move(deleter), o);
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.options()); }

}  // namespace halfgrad
