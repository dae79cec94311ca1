// Views, copies, casts and joins. Views alias their input's storage; their
// backward formulas put the gradient back into the input's shape.
#include <numeric>

#include <halfgrad/core/alias.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/dispatch/grad_mode.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/grad_ops.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;

namespace {
// A differentiable view: forward aliases `self` with new geometry.
Tensor make_view(OpId op, const Tensor& self, Shape shape, Shape strides, int64_t offset,
                 dispatch::Backward backward) {
  return dispatch::call(
      op, {self}, [&](const std::vector<Tensor>& in) { return alias_with(in[0], shape, strides, offset); },
      std::move(backward), Save::Nothing);
}
}  // namespace

namespace {
// view and reshape: the new shape (one -1 inferred) must hold the same
// elements; errors name the op the user called.
Shape resolve_shape(std::string_view op, const Tensor& self, const Shape& new_shape) {
  Shape shape = new_shape;
  int64_t infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    HG_CHECK(shape[i] >= -1, "{}: invalid shape {} (a size is negative; only one -1, inferred, is allowed)", op,
             shape_str(new_shape));
    if (shape[i] != -1) continue;
    HG_CHECK(infer < 0, "{}: only one dimension can be -1, got {}", op, shape_str(new_shape));
    infer = static_cast<int64_t>(i);
    shape[i] = 1;
  }
  const int64_t known = shape_numel(shape, op);  // overflow is an Error
  if (infer >= 0) {
    HG_CHECK(known != 0 && self.numel() % known == 0, "{}: shape {} is invalid for {} ({} elements)", op,
             shape_str(new_shape), self.describe(), self.numel());
    shape[infer] = self.numel() / known;
  }
  HG_CHECK(shape_numel(shape) == self.numel(), "{}: shape {} is invalid for {} ({} elements)", op,
           shape_str(new_shape), self.describe(), self.numel());
  return shape;
}

Tensor view_contiguous(const Tensor& self, const Shape& shape) {
  const Shape in_shape = self.shape();
  return make_view(OpId::view, self, shape, contiguous_strides(shape), self.offset(),
                   [in_shape](const Saved&, const Tensor& g) -> Grads { return {g.reshape(in_shape)}; });
}
}  // namespace

Tensor Tensor::view(const Shape& new_shape) const {
  const Shape shape = resolve_shape("view", *this, new_shape);
  HG_CHECK(is_contiguous(),
           "view: {} is not contiguous, so it cannot be viewed as {}. Use reshape(), which copies when it must.",
           describe(), shape_str(new_shape));
  return view_contiguous(*this, shape);
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  const Shape shape = resolve_shape("reshape", *this, new_shape);
  return view_contiguous(is_contiguous() ? *this : contiguous(), shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t s = ops::wrap_dim("flatten", start_dim, dim()), e = ops::wrap_dim("flatten", end_dim, dim());
  HG_CHECK(s <= e, "flatten: start_dim {} is after end_dim {}", start_dim, end_dim);
  Shape out(shape().begin(), shape().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= shape()[d];
  out.push_back(n);
  out.insert(out.end(), shape().begin() + e + 1, shape().end());
  return reshape(out);
}

Tensor Tensor::permute(const Shape& dims) const {
  HG_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: {} dims given for {}", dims.size(), describe());
  Shape shape(dims.size()), strides(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = ops::wrap_dim("permute", dims[i], dim());
    HG_CHECK(!used[d], "permute: dimension {} repeated in {}", d, shape_str(dims));
    used[d] = true;
    shape[i] = this->shape()[d];
    strides[i] = this->strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  return make_view(OpId::permute, *this, shape, strides, offset(),
                   [inverse](const Saved&, const Tensor& g) -> Grads { return {g.permute(inverse)}; });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() < 2 && (d0 == 0 || d0 == -1) && (d1 == 0 || d1 == -1)) return *this;
  Shape dims(dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[ops::wrap_dim("transpose", d0, dim())], dims[ops::wrap_dim("transpose", d1, dim())]);
  return permute(dims);
}

namespace {
// narrow's and slice's backward under create_graph: g scattered with ops into
// zeros at positions start, start + step, ... of dim d (differentiable in g).
Tensor strided_grad_ops(const Tensor& g, const Shape& in_shape, int64_t d, int64_t start, int64_t length,
                        int64_t step) {
  Shape at(g.shape().size(), 1);
  at[static_cast<size_t>(d)] = length;
  const Tensor index = add(mul(arange(length, TensorOptions(DType::Int64, g.device())), static_cast<double>(step)),
                           static_cast<double>(start));
  return scatter_add(zeros(in_shape, g.options()), d, index.reshape(at).expand(g.shape()).contiguous(), g);
}
}  // namespace

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  HG_CHECK(dim() > 0, "narrow: cannot narrow a 0-d tensor ({})", describe());
  d = ops::wrap_dim("narrow", d, dim());
  const int64_t n = shape()[d];
  HG_CHECK(start >= -n && start <= n,
           "narrow: start {} is out of range for dimension {} of size {} in {} (expected {} to {})", start, d, n,
           describe(), -n, n);
  if (start < 0) start += n;
  // length <= n - start, not start + length <= n: that sum can overflow
  HG_CHECK(length >= 0 && length <= n - start,
           "narrow: start ({}) + length ({}) exceeds dimension {} of size {} in {}", start, length, d, n, describe());
  Shape shape = this->shape();
  shape[d] = length;
  Shape in_shape = this->shape();
  return make_view(OpId::narrow, *this, shape, strides(), offset() + start * strides()[d],
                   [in_shape, d, start, length](const Saved&, const Tensor& g) -> Grads {
                     if (ops::creating_graph()) return {strided_grad_ops(g, in_shape, d, start, length, 1)};
                     Tensor full = zeros(in_shape, g.options());
                     kernels::copy(full.narrow(d, start, length), g);
                     return {full};
                   });
}

// Python's start:end:step on dimension d. step 1 is narrow; a larger step is
// its own view op (the strides of d multiplied by step), whose backward
// scatters the gradient into a zero tensor through the same strided alias.
Tensor Tensor::slice(int64_t d, std::optional<int64_t> start_opt, std::optional<int64_t> end_opt,
                     int64_t step) const {
  HG_CHECK(dim() > 0, "slice: cannot slice a 0-d tensor ({})", describe());
  d = ops::wrap_dim("slice", d, dim());
  HG_CHECK(step > 0, "slice: step must be positive, got {} for dimension {} of {} (PyTorch has no negative steps; "
           "use flip when it exists)", step, d, describe());
  const int64_t n = shape()[d];
  // Python's clamping: a negative bound counts from the end, then both clamp to [0, n]
  auto clamp_bound = [n](std::optional<int64_t> b, int64_t dflt) {
    if (!b) return dflt;
    int64_t v = *b;
    if (v < 0) v = v < -n ? 0 : v + n;
    return v > n ? n : v;
  };
  const int64_t start = clamp_bound(start_opt, 0), end = clamp_bound(end_opt, n);
  const int64_t length = end > start ? (end - start - 1) / step + 1 : 0;
  if (step == 1) return narrow(d, start, length);
  Shape shape = this->shape(), strides = this->strides();
  shape[d] = length;
  strides[d] *= step;
  const int64_t off = offset() + (length > 0 ? start * this->strides()[d] : 0);
  Shape in_shape = this->shape();
  return make_view(OpId::slice, *this, shape, strides, off,
                   [in_shape, d, start, length, step](const Saved&, const Tensor& g) -> Grads {
                     if (ops::creating_graph()) return {strided_grad_ops(g, in_shape, d, start, length, step)};
                     Tensor full = zeros(in_shape, g.options());
                     Shape st = full.strides();
                     Shape sh = in_shape;
                     sh[d] = length;
                     st[d] *= step;
                     kernels::copy(alias_with(full, sh, st, length > 0 ? start * full.strides()[d] : 0), g);
                     return {full};
                   });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  HG_CHECK(dim() > 0, "select: cannot index a 0-d tensor ({}); use item() to read its value", describe());
  d = ops::wrap_dim("select", d, dim());
  if (index < 0) index += shape()[d];
  HG_CHECK(index >= 0 && index < shape()[d], "select: index {} is out of range for dimension {} of {}", index, d,
           describe());
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = ops::wrap_dim("unsqueeze", d, dim() + 1);
  Shape shape = this->shape(), strides = this->strides();
  const int64_t st = d < dim() ? strides[d] * shape[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, st);
  Shape in_shape = this->shape();
  return make_view(OpId::unsqueeze, *this, shape, strides, offset(),
                   [in_shape](const Saved&, const Tensor& g) -> Grads { return {g.reshape(in_shape)}; });
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = ops::wrap_dim("squeeze", d, dim());
  if (shape()[d] != 1) return *this;
  Shape shape = this->shape(), strides = this->strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Shape in_shape = this->shape();
  return make_view(OpId::squeeze, *this, shape, strides, offset(),
                   [in_shape](const Saved&, const Tensor& g) -> Grads { return {g.reshape(in_shape)}; });
}

Tensor Tensor::squeeze() const {
  Shape shape, strides;
  for (int64_t i = 0; i < dim(); ++i)
    if (this->shape()[i] != 1) {
      shape.push_back(this->shape()[i]);
      strides.push_back(this->strides()[i]);
    }
  Shape in_shape = this->shape();
  return make_view(OpId::squeeze, *this, shape, strides, offset(),
                   [in_shape](const Saved&, const Tensor& g) -> Grads { return {g.reshape(in_shape)}; });
}

Tensor Tensor::expand(const Shape& shape) const {
  HG_CHECK(shape.size() >= this->shape().size(), "expand: cannot expand {} to fewer dimensions {}", describe(),
           shape_str(shape));
  Shape target = shape;
  const size_t lead = shape.size() - this->shape().size();
  for (size_t i = 0; i < target.size(); ++i) {
    // -1 keeps an existing size (PyTorch); any other negative size is an Error
    HG_CHECK(target[i] != -1 || i >= lead,
             "expand: size -1 in {} is not allowed in the new leading dimension {} of {} (-1 keeps an existing size)",
             shape_str(shape), i, describe());
    if (target[i] == -1) target[i] = this->shape()[i - lead];
    HG_CHECK(target[i] >= 0, "expand: negative size {} in {} for {} (only -1, keep the size, may be negative)",
             target[i], shape_str(shape), describe());
    if (i < lead) continue;
    HG_CHECK(this->shape()[i - lead] == target[i] || this->shape()[i - lead] == 1,
             "expand: {} cannot be expanded to {} (dimension {} is {}, not 1)", describe(), shape_str(shape), i - lead,
             this->shape()[i - lead]);
  }
  (void)shape_numel(target, "expand");  // overflow: an Error naming expand
  Tensor v;
  {
    NoGradGuard alias_only;  // the strides; the view is recorded below
    v = ops::broadcast_to(*this, target);
  }
  Shape in_shape = this->shape();
  return make_view(OpId::expand, *this, target, v.strides(), offset(),
                   [in_shape](const Saved&, const Tensor& g) -> Grads { return {sum_to(g, in_shape)}; });
}

// ---- copies and casts --------------------------------------------------------
Tensor Tensor::clone() const {
  return dispatch::call(
      OpId::clone, {*this},
      [](const std::vector<Tensor>& in) {
        Tensor out = ops::empty_like(in[0], in[0].options());
        kernels::copy(out, in[0]);
        return out;
      },
      [](const Saved&, const Tensor& g) -> Grads { return {g}; }, Save::Nothing);
}

Tensor Tensor::contiguous() const { return contiguous(MemoryFormat::Contiguous); }

Tensor Tensor::contiguous(MemoryFormat f) const {
  if (f != MemoryFormat::Contiguous) strides_for(shape(), f, "contiguous");  // the rank check, with its message
  if (is_contiguous(f)) return *this;
  return dispatch::call(
      OpId::contiguous, {*this},
      [f](const std::vector<Tensor>& in) {
        Tensor out = make_tensor(in[0].shape(), in[0].options(), f);
        kernels::copy(out, in[0]);
        return out;
      },
      [](const Saved&, const Tensor& g) -> Grads { return {g}; }, Save::Nothing);
}

// The cast op. Under autocast these are the casts the policy inserts; their
// backward turns a float16 gradient back into the input's dtype (float32 for
// master weights).
Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  const DType from = this->dtype();
  return dispatch::call(
      OpId::to, {*this},
      [dtype](const std::vector<Tensor>& in) {
        Tensor out = ops::empty_like(in[0], TensorOptions(dtype, in[0].device()));
        kernels::copy(out, in[0]);
        return out;
      },
      [from](const Saved&, const Tensor& g) -> Grads { return {g.to(from)}; }, Save::Nothing);
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  const Device from = this->device();
  return dispatch::call(
      OpId::to_device, {*this},
      [device](const std::vector<Tensor>& in) {
        // checks above run per-op; a cross-device copy is this op's purpose
        Tensor out = ops::empty_like(in[0], TensorOptions(in[0].dtype(), device));
        kernels::copy(out, in[0]);
        return out;
      },
      [from](const Saved&, const Tensor& g) -> Grads { return {g.to(from)}; }, Save::Nothing);
}

// Cast on the CPU side of a move (the host has every cast kernel).
Tensor Tensor::to(Device device, DType dtype) const {
  return this->device().is_cpu() ? to(dtype).to(device) : to(device).to(dtype);
}

// ---- in-place ------------------------------------------------------------------
Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  dispatch::inplace(OpId::fill, *this, {}, [&] { kernels::fill(*this, value); }, {.self_may_overlap = true});
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  // copy_ is the one in-place op that may cross devices.
  dispatch::inplace(
      OpId::copy, *this, {src},
      [&] {
        // the same elements: nothing to do (and memcpy must not overlap), as in PyTorch
        if (src.dtype() == dtype() && ops::overlap(*this, src) == ops::Overlap::Full) return;
        kernels::copy(*this, ops::broadcast_to(src, shape()));
      },
      {.any_device = true});
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  Tensor o = other.dtype() == dtype() ? other : other.to(dtype());
  dispatch::inplace(OpId::add, *this, {o}, [&] {
    kernels::binary(kernels::BinaryOp::Add, *this, ops::broadcast_to(o, shape()), *this, alpha);
  });
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  Tensor o = other.dtype() == dtype() ? other : other.to(dtype());
  dispatch::inplace(OpId::mul, *this, {o},
                    [&] { kernels::binary(kernels::BinaryOp::Mul, *this, ops::broadcast_to(o, shape()), *this); });
  return *this;
}

Tensor& Tensor::mul_(double value) { return mul_(ops::scalar_tensor(value, dtype(), device())); }
Tensor& Tensor::add_(double value) { return add_(ops::scalar_tensor(value, dtype(), device())); }

Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  Tensor o = other.dtype() == dtype() ? other : other.to(dtype());
  dispatch::inplace(OpId::sub, *this, {o}, [&] {
    kernels::binary(kernels::BinaryOp::Sub, *this, ops::broadcast_to(o, shape()), *this, alpha);
  });
  return *this;
}

Tensor& Tensor::sub_(double value) { return sub_(ops::scalar_tensor(value, dtype(), device())); }

Tensor& Tensor::div_(const Tensor& other) {
  HG_CHECK(is_floating(dtype()),
           "div_: true division of {} gives float32, which cannot be written back into an {} tensor; use div (a "
           "new tensor) or convert first with to(kFloat)",
           describe(), dtype_name(dtype()));
  Tensor o = other.dtype() == dtype() ? other : other.to(dtype());
  dispatch::inplace(OpId::div, *this, {o},
                    [&] { kernels::binary(kernels::BinaryOp::Div, *this, ops::broadcast_to(o, shape()), *this); });
  return *this;
}

Tensor& Tensor::div_(double value) {
  HG_CHECK(is_floating(dtype()),
           "div_: true division of {} gives float32, which cannot be written back into an {} tensor; use div (a "
           "new tensor) or convert first with to(kFloat)",
           describe(), dtype_name(dtype()));
  return div_(ops::scalar_tensor(value, dtype(), device()));
}

// ---- joins ---------------------------------------------------------------------
// cat promotes inside its forward, after the autocast step (which, under
// autocast, has already brought the inputs to one dtype by its policy).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  HG_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  for (const auto& t : tensors)
    HG_CHECK(t.dim() > 0, "cat: zero-dimensional tensor {} cannot be concatenated; unsqueeze(0) it or use stack",
             t.describe());
  dim = ops::wrap_dim("cat", dim, first.dim());
  for (const auto& t : tensors) {
    HG_CHECK(t.dim() == first.dim(), "cat: all tensors need the same number of dims: {} and {}", first.describe(),
             t.describe());
    for (int64_t d = 0; d < t.dim(); ++d)
      HG_CHECK(d == dim || t.shape()[d] == first.shape()[d],
               "cat: sizes must match except in dimension {}: {} and {}", dim, first.describe(), t.describe());
  }
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const auto& t : tensors) {
    sizes.push_back(t.shape()[dim]);
    HG_CHECK(!__builtin_add_overflow(total, sizes.back(), &total),
             "cat: the sizes along dimension {} add up to more than int64 can hold", dim);
  }
  return dispatch::call(
      OpId::cat, tensors,
      [dim](const std::vector<Tensor>& in) {
        DType dtype = in[0].dtype();
        for (const auto& t : in) dtype = promote_types(dtype, t.dtype());
        Shape shape = in[0].shape();
        shape[dim] = 0;
        for (const auto& t : in) shape[dim] += t.shape()[dim];
        Tensor out = make_tensor(shape, TensorOptions(dtype, in[0].device()));
        int64_t off = 0;
        for (const auto& t : in) {
          kernels::copy(out.narrow(dim, off, t.shape()[dim]), t);  // copy converts dtypes
          off += t.shape()[dim];
        }
        return out;
      },
      [dim, sizes](const Saved&, const Tensor& g) -> Grads {
        Grads grads;  // the engine casts each to its input's dtype
        int64_t off = 0;
        for (int64_t n : sizes) {
          grads.push_back(g.narrow(dim, off, n));
          off += n;
        }
        return grads;
      },
      Save::Nothing);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  HG_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (const auto& t : tensors)
    HG_CHECK(t.shape() == tensors[0].shape(), "stack: all tensors need the same shape: {} and {}",
             tensors[0].describe(), t.describe());
  return dispatch::composite(OpId::stack, tensors, [dim](const std::vector<Tensor>& in) {
    const int64_t d = ops::wrap_dim("stack", dim, in[0].dim() + 1);
    std::vector<Tensor> parts;
    for (const auto& t : in) parts.push_back(t.unsqueeze(d));
    return cat(parts, d);
  });
}

}  // namespace halfgrad
