#pragma once
// Tensor: a cheap ref-counted handle to (storage, shape, strides, offset,
// dtype, device) plus autograd metadata. Copying a Tensor copies the handle;
// views share storage. Ops live in ops/ and are declared in ops/ops.h; the
// methods here are thin forwards to them, as in PyTorch.
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <halfgrad/core/allocator.h>
#include <halfgrad/core/device.h>
#include <halfgrad/core/dtype.h>
#include <halfgrad/core/error.h>
#include <halfgrad/core/indexing.h>
#include <halfgrad/core/shape.h>

namespace halfgrad {

namespace autograd {
struct Node;
}

std::string shape_str(const Shape& s);  // "[2, 3]"
std::ostream& operator<<(std::ostream& os, const Shape& s);  // prints shape_str
// Elements of shape `s`: the one count every tensor's shape passes through
// (make_tensor and every view). A negative size, or sizes whose product overflows
// int64, is an Error naming `op`.
int64_t shape_numel(const Shape& s, std::string_view op = "numel");
// Bytes of a contiguous `dtype` tensor of shape `s`; an overflow is an Error naming `op`.
int64_t shape_nbytes(const Shape& s, DType dtype, std::string_view op = "empty");
Shape contiguous_strides(const Shape& s);

// How a tensor's elements lie in memory, as PyTorch's torch.memory_format:
// Contiguous is row-major [N, C, H, W]; ChannelsLast keeps a 4-d tensor's
// channels innermost (memory order N, H, W, C: strides [HWC, 1, WC, C]),
// ChannelsLast3d does the same for 5-d [N, C, D, H, W]. The shape (and so every
// index) is the same in all of them; only the strides differ. Ops keep the
// layout of their input (docs/convnets.md, "Channels-last").
enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast, ChannelsLast3d };
// The dims of a tensor outermost first in memory (a stable sort by stride,
// largest first): [0, 1, 2, 3] for a row-major [N, C, H, W], [0, 2, 3, 1] for
// a channels-last one. The elementwise loops walk dims in this order of their
// output, so every layout is walked in memory order.
Shape memory_order(const Shape& shape, const Shape& strides);
// Whether memory_order would be 0, 1, 2, ... (row-major-like strides): the
// loops' fast check, with no allocation.
bool in_memory_order(const Shape& shape, const Shape& strides);
std::string_view memory_format_name(MemoryFormat f);
// The strides of `s` in format f (Contiguous for a rank f does not fit); an
// Error for ChannelsLast on a tensor that is not 4-d (5-d for ChannelsLast3d).
Shape strides_for(const Shape& s, MemoryFormat f, std::string_view op = "contiguous");

// How to make a tensor: dtype, device, requires_grad. Implicit from a DType or
// a Device so that `randn({2, 3}, device)` and `zeros({4}, float16)` read well.
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}    // NOLINT(implicit)
  TensorOptions(Device d) : device_(d) {}  // NOLINT(implicit)
  TensorOptions(DeviceType t) : device_(t) {}  // NOLINT(implicit) zeros({2}, kCUDA), as LibTorch
  TensorOptions(DType t, Device d) : dtype_(t), device_(d) {}
  TensorOptions dtype(DType d) const { auto o = *this; o.dtype_ = d; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r) const { auto o = *this; o.requires_grad_ = r; return o; }
  DType dtype() const { return dtype_.value_or(DType::Float32); }
  bool has_dtype() const { return dtype_.has_value(); }
  // The dtype if one was given, else the factory's own default (int64 for randint).
  TensorOptions with_default_dtype(DType d) const { return has_dtype() ? *this : dtype(d); }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }

 private:
  std::optional<DType> dtype_;  // unset: float32, or the factory's default
  Device device_ = Device::cpu();
  bool requires_grad_ = false;
};

// LibTorch's free spellings, so `randn({2, 3}, dtype(kBFloat16).device(kCUDA))`
// reads as `torch::randn({2, 3}, torch::dtype(torch::kBFloat16).device(torch::kCUDA))`.
inline TensorOptions dtype(DType d) { return TensorOptions(d); }
inline TensorOptions device(Device d) { return TensorOptions(d); }
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  Device device;
  // autograd
  bool requires_grad = false;                     // for leaves; non-leaves require grad iff grad_fn is set
  std::shared_ptr<TensorImpl> grad;               // leaf .grad: read and written under grad_mutex
  std::mutex grad_mutex;  // set_grad, grad() and backward's accumulation may run in different threads
  std::shared_ptr<autograd::Node> grad_fn;        // the Node that produced this tensor (non-leaf)
  std::shared_ptr<autograd::Node> grad_accumulator;  // leaf: the node that writes .grad
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- metadata ---------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().device; }
  const Shape& shape() const { return impl().shape; }
  const Shape& sizes() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t numel() const { return shape_numel(impl().shape); }
  int64_t offset() const { return impl().offset; }
  bool is_contiguous() const;
  // Dense in format f: is_contiguous(ChannelsLast) on a channels-last tensor.
  // Size-1 dims may have any stride, so a [N, C, 1, 1] tensor is both.
  bool is_contiguous(MemoryFormat f) const;
  // ChannelsLast(3d) when the tensor is dense channels-last and not also
  // row-major contiguous, else Contiguous: the layout ops keep for their outputs.
  MemoryFormat suggest_memory_format() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  TensorOptions options() const { return TensorOptions(dtype(), device()); }
  // "float32[2, 3] cpu": used in every error message.
  std::string describe() const;

  // Raw data: the first element of this view (a device address for a CUDA
  // tensor, for kernels and libraries; never dereference it on the host).
  void* data_ptr() const;
  // Typed host access: the elements of a CPU tensor. A CUDA tensor's memory
  // cannot be read on the host (it would crash), so that is an Error.
  template <typename T>
  T* data() const {
    HG_CHECK(dtype_of<T>::value == dtype(), "data<T>: tensor is {}, asked for {}", dtype_name(dtype()),
             dtype_name(dtype_of<T>::value));
    HG_CHECK(device().is_cpu(),
             "data<T>: {} lives on {}, and its memory cannot be read on the host; read a host copy (.cpu()), "
             "or use data_ptr() for the device address",
             describe(), device().str());
    return static_cast<T*>(data_ptr());
  }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  uint64_t version() const { return impl().storage ? impl().storage->version : 0; }
  void bump_version() const {
    if (impl().storage) ++impl().storage->version;
  }
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // Value of a one-element tensor (synchronises with the device).
  template <typename T>
  T item() const;
  // item() without a type: the value as a double (LibTorch's item() gives a
  // Scalar; halfgrad's widest scalar is double). An int64 beyond 2^53 rounds:
  // use item<int64_t>() for those.
  double item() const;
  // Every value, in logical (row-major) order whatever the strides, converted to
  // T as to(dtype) converts (PyTorch's tolist(), flattened). Copies to the CPU.
  // T: float, double, int64_t, bool, Half, BFloat16.
  template <typename T>
  std::vector<T> to_vector() const;

  // --- autograd ---------------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool r = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const;  // a copy of the handle, taken under the leaf's grad lock
  // g (or undefined, to clear) must match this tensor's shape, dtype and
  // device, as PyTorch checks at `x.grad = g`.
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  // Backward from this tensor: a scalar needs no gradient, anything else does.
  // create_graph: the gradients written to .grad have a graph of their own
  // (a second backward can run through them); it also keeps this graph
  // (PyTorch: retain_graph defaults to create_graph). autograd::grad
  // (<halfgrad/autograd/grad.h>) returns gradients instead of accumulating them.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  Tensor detach() const;  // same storage, no history

  // --- views (share storage) -------------------------------------------
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return dim() < 2 ? *this : transpose(0, 1); }  // 0-d and 1-d: unchanged
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  // LibTorch's slice: elements start, start+step, ... before end of dimension
  // `dim` (Python's start:end:step, bounds clamped). step 1 is narrow; a larger
  // step is a strided view (op "slice"). Both are differentiable views.
  Tensor slice(int64_t dim = 0, std::optional<int64_t> start = std::nullopt, std::optional<int64_t> end = std::nullopt,
               int64_t step = 1) const;
  // x[i]: select(0, i), a view (negative i counts from the end). Reading only.
  Tensor operator[](int64_t index) const;
  // LibTorch's x.index({Slice(0, 2), None, Ellipsis, -1}) (core/indexing.h):
  // integers select, slices narrow (or stride), None unsqueezes, Ellipsis
  // fills; the result is a view of this tensor. One tensor index may appear:
  // a bool mask (x.index({mask}) is Python's x[mask], a 1-d selection of the
  // true elements) or an int64 index tensor (index_select on that dimension);
  // then the result is a new tensor (differentiable, not a view). The mask's
  // true count is read on the host (a device sync on CUDA, as in PyTorch).
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  // x[indices] = values (LibTorch's index_put_; ops/indexing.cpp): `values`
  // broadcasts to the shape x.index(indices) would have. With `accumulate`,
  // values are added (repeated indices add up); without, a repeated index
  // keeps the last value on the CPU and an unspecified one on CUDA. An in-place
  // op: an Error on a tensor that requires grad in grad mode, and on values
  // that require grad (index_put_ is not recorded by autograd).
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, double value);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, double value);

  // --- copies and casts -------------------------------------------------
  Tensor contiguous() const;
  // A copy in format f (this tensor when it already is): x.contiguous(
  // MemoryFormat::ChannelsLast) is PyTorch's x.to(memory_format=torch.channels_last).
  Tensor contiguous(MemoryFormat f) const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor half() const { return to(DType::Float16); }
  Tensor bfloat16() const { return to(DType::BFloat16); }
  // float() and double() are C++ keywords: to(kFloat), to(kDouble), as in LibTorch.

  // --- in-place (bump the version counter; never recorded by autograd) ---
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(double value);
  // True division in place: self must be floating (PyTorch: an int64 result of
  // true division cannot be written back).
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value);

  // --- math as methods (forwards to ops/) ---------------------------------
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor pow(double exponent) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor neg() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor max() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // (values, int64 indices)
  Tensor min() const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;  // (values, int64 indices)
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin() const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor amax(const Shape& dims = {}, bool keepdim = false) const;
  Tensor amin(const Shape& dims = {}, bool keepdim = false) const;
  Tensor logsumexp(const Shape& dims, bool keepdim = false) const;
  Tensor norm(double p = 2.0, const Shape& dims = {}, bool keepdim = false) const;
  Tensor all() const;
  Tensor all(int64_t dim, bool keepdim = false) const;
  Tensor any() const;
  Tensor any(int64_t dim, bool keepdim = false) const;
  bool equal(const Tensor& other) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  Tensor isclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor remainder(const Tensor& other) const;
  Tensor remainder(double other) const;
  Tensor fmod(const Tensor& other) const;
  Tensor fmod(double other) const;
  Tensor clamp(std::optional<double> min, std::optional<double> max) const;
  Tensor clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max) const;
  Tensor clamp_min(double min) const;
  Tensor clamp_min(const Tensor& min) const;
  Tensor clamp_max(double max) const;
  Tensor clamp_max(const Tensor& max) const;
  Tensor sum(int64_t dim, bool keepdim = false) const { return sum(Shape{dim}, keepdim); }
  // indexing and gathering (ops/indexing_ops.h)
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter(int64_t dim, const Tensor& index, double value) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value) const;
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& scatter_(int64_t dim, const Tensor& index, double value);
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& masked_fill_(const Tensor& mask, const Tensor& value);
  Tensor mean(int64_t dim, bool keepdim = false) const { return mean(Shape{dim}, keepdim); }
  // ops/sort_ops.h (defined in ops/sort.cpp)
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;

 private:
  TensorImpl& impl() const {
    HG_CHECK(impl_ != nullptr, "Tensor: use of an undefined tensor (default-constructed or moved-from)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// A new, uninitialised tensor (contiguous, or in `format`).
Tensor make_tensor(const Shape& shape, TensorOptions options = {});
Tensor make_tensor(const Shape& shape, TensorOptions options, MemoryFormat format);

// `os << t` prints what fmt::format("{}", t) does (core/format.h); defined in ops/print.cpp.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

extern template float Tensor::item<float>() const;
extern template double Tensor::item<double>() const;
extern template int64_t Tensor::item<int64_t>() const;
extern template bool Tensor::item<bool>() const;
template <> Half Tensor::item<Half>() const;
template <> BFloat16 Tensor::item<BFloat16>() const;

}  // namespace halfgrad
