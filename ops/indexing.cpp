// Indexing and gathering: index_select, gather, scatter, scatter_add,
// masked_fill, where with scalars, one_hot (reading and writing by index,
// x[i], x.index({...}), x.index_put_({...}, v), is in index_expr.cpp). Gather and scatter run one
// pair of kernels (kernels/kernels.h): index_select is a gather with the index
// expanded (stride 0) over the other dims, and its backward (PyTorch's
// index_add into zeros) a scatter_add with the same expanded index. The
// masked ops run the `where` kernel.
#include <algorithm>
#include <cmath>
#include <vector>

#include <halfgrad/dispatch/grad_mode.h>
#include <halfgrad/core/alias.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/indexing_detail.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;
using kernels::ScatterMode;

namespace {

// The kernels take tensors of >= 1 dims: a 0-d tensor as a [1] view of itself.
Tensor k1(const Tensor& t) { return t.dim() == 0 ? alias_with(t, {1}, {1}, t.offset()) : t; }
int64_t nd(const Tensor& t) { return std::max<int64_t>(t.dim(), 1); }
int64_t size_k1(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.shape()[d]; }

void check_index_dtype(const char* op, const char* what, const Tensor& index) {
  HG_CHECK(index.dtype() == DType::Int64, "{}: {} must be an int64 tensor, got {}; cast it with .to(kLong)", op, what,
           index.describe());
}

// PyTorch's shape rules of gather/scatter: index has input's number of dims,
// index.size(d) <= input.size(d) for d != dim, and <= src.size(d) for every d.
void check_gather_shapes(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor* src) {
  check_index_dtype(op, "index", index);
  HG_CHECK(nd(index) == nd(x),
           "{}: Index tensor must have the same number of dimensions as input tensor: index {}, input {}", op,
           index.describe(), x.describe());
  if (src) {
    HG_CHECK(nd(*src) == nd(x), "{}: src {} must have the same number of dimensions as input {}", op,
             src->describe(), x.describe());
    HG_CHECK(src->dtype() == x.dtype(),
             "{}: Expected self.dtype to be equal to src.dtype: input {}, src {}; cast src with .to({})", op,
             x.describe(), src->describe(), dtype_name(x.dtype()));
  }
  for (int64_t d = 0; d < nd(x); ++d) {
    HG_CHECK(d == dim || size_k1(index, d) <= size_k1(x, d),
             "{}: Size does not match at dimension {}: expected index {} to be smaller than input {} apart from "
             "dimension {}",
             op, d, index.describe(), x.describe(), dim);
    HG_CHECK(!src || size_k1(index, d) <= size_k1(*src, d),
             "{}: Size does not match at dimension {}: expected index {} to be smaller than src {}", op, d,
             index.describe(), src->describe());
  }
}

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

}  // namespace

// The scatter kernel into `self` (in place, any strides); float16/bfloat16
// accumulate in a float32 copy and round once.
void indexing_detail::scatter_kernel(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode,
                    const char* op) {
  if (mode == ScatterMode::Add && is_half(self.dtype())) {
    const TensorOptions f32(DType::Float32, self.device());
    Tensor acc = make_tensor(self.shape(), f32), s32 = make_tensor(src.shape(), f32);
    kernels::copy(acc, self);
    kernels::copy(s32, src);
    kernels::scatter(k1(acc), dim, k1(index), k1(s32), mode, op);
    kernels::copy(self, acc);
    return;
  }
  kernels::scatter(k1(self), dim, k1(index), k1(src), mode, op);
}

namespace {
using indexing_detail::scatter_kernel;

// A copy of x with src scattered into it.
Tensor scatter_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode,
                    const char* op) {
  Tensor out = make_tensor(x.shape(), x.options());
  kernels::copy(out, x);
  scatter_kernel(out, dim, index, src, mode, op);
  return out;
}

// The gradient of scatter's src: gather(g, dim, index), zero where src was not
// read (src may be larger than index; PyTorch's backward fails there).
Tensor src_grad(const Tensor& g, int64_t dim, const Tensor& index, const Shape& src_shape) {
  Tensor r = gather(g, dim, index);
  if (r.shape() == src_shape) return r;
  Tensor full = zeros(src_shape, g.options());
  Tensor region = full;
  for (int64_t d = 0; d < index.dim(); ++d) region = region.narrow(d, 0, index.shape()[d]);
  autograd::NoGradGuard no_grad;
  region.copy_(r);
  return full;
}

}  // namespace

Tensor indexing_detail::expanded_index(const Tensor& index, const Shape& shape, int64_t dim) {
  Shape strides(shape.size(), 0);
  strides[dim] = index.dim() == 0 ? 0 : index.strides()[0];
  return alias_with(index, shape, strides, index.offset());
}

namespace {
using indexing_detail::expanded_index;

Tensor scalar_as(const Tensor& like, double value) { return ops::scalar_tensor(value, like.dtype(), like.device()); }

}  // namespace

// ---- index_select ------------------------------------------------------------------------------
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined("index_select", {{"input", &x}, {"index", &index}});
  check_index_dtype("index_select", "index", index);
  HG_CHECK(index.dim() <= 1, "index_select: Index is supposed to be a vector (1-d or 0-d), got {}",
           index.describe());
  const int64_t d = ops::wrap_dim("index_select", dim, x.dim());
  HG_CHECK(x.dim() > 0 || index.numel() == 1,
           "index_select: a 0-d input {} takes exactly one index, got {} (the result is 0-d)", x.describe(),
           index.describe());
  const Shape x_shape = x.shape();
  Shape out_shape = x.dim() == 0 ? Shape{1} : x_shape;
  out_shape[d] = index.numel();
  return dispatch::call(
      OpId::index_select, {x, index},
      [d, out_shape](const std::vector<Tensor>& in) {
        Tensor out = make_tensor(out_shape, in[0].options());
        kernels::gather(k1(in[0]), d, expanded_index(in[1], out_shape, d), out, "index_select");
        if (dispatch::recording()) dispatch::save_for_backward(in[1]);
        return in[0].dim() == 0 ? alias_with(out, {}, {}, 0) : out;
      },
      [d, x_shape, out_shape](const Saved& s, const Tensor& g) -> Grads {
        // index_add into zeros: repeated indices add up
        const Tensor idx = expanded_index(s.extra(0), out_shape, d);
        const Shape xs = x_shape.empty() ? Shape{1} : x_shape;
        const Tensor gx = scatter_add(zeros(xs, g.options()), d, idx, g.reshape(out_shape));
        return {gx.reshape(x_shape), Tensor()};
      },
      Save::Nothing);
}

// ---- gather / scatter --------------------------------------------------------------------------
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined("gather", {{"input", &x}, {"index", &index}});
  const int64_t d = ops::wrap_dim("gather", dim, x.dim());
  check_gather_shapes("gather", x, d, index, nullptr);
  const Shape x_shape = x.shape();
  return dispatch::call(
      OpId::gather, {x, index},
      [d](const std::vector<Tensor>& in) {
        Tensor out = make_tensor(in[1].shape(), in[0].options());
        kernels::gather(k1(in[0]), d, k1(in[1]), k1(out), "gather");
        if (dispatch::recording()) dispatch::save_for_backward(in[1]);
        return out;
      },
      [d, x_shape](const Saved& s, const Tensor& g) -> Grads {
        return {scatter_add(zeros(x_shape, g.options()), d, s.extra(0), g), Tensor()};
      },
      Save::Nothing);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  ops::check_defined("scatter", {{"input", &x}, {"index", &index}, {"src", &src}});
  const int64_t d = ops::wrap_dim("scatter", dim, x.dim());
  check_gather_shapes("scatter", x, d, index, &src);
  const Shape src_shape = src.shape();
  return dispatch::call(
      OpId::scatter, {x, index, src},
      [d](const std::vector<Tensor>& in) {
        if (dispatch::recording()) dispatch::save_for_backward(in[1]);
        return scatter_copy(in[0], d, in[1], in[2], ScatterMode::Assign, "scatter");
      },
      [d, src_shape](const Saved& s, const Tensor& g) -> Grads {
        const Tensor& idx = s.extra(0);
        return {s.needs_grad[0] ? scatter(g, d, idx, 0.0) : Tensor(), Tensor(),
                s.needs_grad[2] ? src_grad(g, d, idx, src_shape) : Tensor()};
      },
      Save::Nothing);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  ops::check_defined("scatter", {{"input", &x}, {"index", &index}});
  const int64_t d = ops::wrap_dim("scatter", dim, x.dim());
  check_gather_shapes("scatter", x, d, index, nullptr);
  return dispatch::call(
      OpId::scatter, {x, index},
      [d, value](const std::vector<Tensor>& in) {
        if (dispatch::recording()) dispatch::save_for_backward(in[1]);
        const Tensor src = ops::broadcast_to(scalar_as(in[0], value), k1(in[1]).shape());
        return scatter_copy(in[0], d, in[1], src, ScatterMode::Assign, "scatter");
      },
      [d](const Saved& s, const Tensor& g) -> Grads { return {scatter(g, d, s.extra(0), 0.0), Tensor()}; },
      Save::Nothing);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  ops::check_defined("scatter_add", {{"input", &x}, {"index", &index}, {"src", &src}});
  const int64_t d = ops::wrap_dim("scatter_add", dim, x.dim());
  check_index_dtype("scatter_add", "index", index);
  const Shape src_shape = src.shape();
  return dispatch::call(
      OpId::scatter_add, {x, index, src},
      [d](const std::vector<Tensor>& in) {
        // after autocast (which may promote x and src to one dtype)
        check_gather_shapes("scatter_add", in[0], d, in[1], &in[2]);
        if (dispatch::recording()) dispatch::save_for_backward(in[1]);
        return scatter_copy(in[0], d, in[1], in[2], ScatterMode::Add, "scatter_add");
      },
      [d, src_shape](const Saved& s, const Tensor& g) -> Grads {
        return {g, Tensor(), s.needs_grad[2] ? src_grad(g, d, s.extra(0), src_shape) : Tensor()};
      },
      Save::Nothing);
}

// ---- masked_fill and where with scalars ---------------------------------------------------------
namespace {
void check_mask(const char* op, const Tensor& mask) {
  HG_CHECK(mask.dtype() == DType::Bool, "{}: mask must be a bool tensor, got {}; build it with a comparison (x > 0)",
           op, mask.describe());
}

Tensor masked_fill_impl(const Tensor& x, const Tensor& mask, const Tensor& value) {
  const Shape shape = ops::broadcast_shapes("masked_fill", x.shape(), mask.shape());
  const Shape x_shape = x.shape();
  std::vector<Tensor> inputs = {x, mask};
  if (value.defined()) inputs.push_back(value);
  return dispatch::call(
      OpId::masked_fill, inputs,
      [shape](const std::vector<Tensor>& in) {
        Tensor out = make_tensor(shape, in[0].options());
        kernels::where(ops::broadcast_to(in[1], shape), ops::broadcast_to(in[2], shape),
                       ops::broadcast_to(in[0], shape), out);
        if (dispatch::recording()) dispatch::save_for_backward(in[1]);
        return out;
      },
      [x_shape](const Saved& s, const Tensor& g) -> Grads {
        const Tensor m = ops::broadcast_to(s.extra(0), g.shape());
        Grads r = {s.needs_grad[0] ? sum_to(where(m, 0.0, g), x_shape) : Tensor(), Tensor()};
        if (s.needs_grad.size() > 2) r.push_back(s.needs_grad[2] ? sum(where(m, g, 0.0)) : Tensor());
        return r;
      },
      Save::Nothing);
}

// A 0-d value tensor, in x's dtype, on x's device (a CPU 0-d value may fill a CUDA tensor, as in PyTorch).
Tensor fill_value(const char* op, const Tensor& x, const Tensor& value) {
  HG_CHECK(value.dim() == 0, "{}: {} only supports a 0-dimensional value tensor, but got {}", op, op,
           value.describe());
  Tensor v = value.device() == x.device() || !value.device().is_cpu() ? value : value.to(x.device());
  return v.to(x.dtype());
}
}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  ops::check_defined("masked_fill", {{"input", &x}, {"mask", &mask}});
  check_mask("masked_fill", mask);
  // the value in x's dtype, as a 0-d tensor that is not an input of the op
  const Tensor v = ops::scalar_tensor(value, x.dtype(), x.device());
  const Shape shape = ops::broadcast_shapes("masked_fill", x.shape(), mask.shape());
  const Shape x_shape = x.shape();
  return dispatch::call(
      OpId::masked_fill, {x, mask},
      [shape, v](const std::vector<Tensor>& in) {
        Tensor out = make_tensor(shape, in[0].options());
        kernels::where(ops::broadcast_to(in[1], shape), ops::broadcast_to(v, shape), ops::broadcast_to(in[0], shape),
                       out);
        if (dispatch::recording()) dispatch::save_for_backward(in[1]);
        return out;
      },
      [x_shape](const Saved& s, const Tensor& g) -> Grads {
        return {sum_to(where(ops::broadcast_to(s.extra(0), g.shape()), 0.0, g), x_shape), Tensor()};
      },
      Save::Nothing);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  ops::check_defined("masked_fill", {{"input", &x}, {"mask", &mask}, {"value", &value}});
  check_mask("masked_fill", mask);
  return masked_fill_impl(x, mask, fill_value("masked_fill", x, value));
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  ops::check_defined("where", {{"condition", &cond}, {"input", &a}});
  const DType dt = is_floating(a.dtype()) ? a.dtype() : DType::Float32;
  return where(cond, a, ops::scalar_tensor(b, dt, a.device()));
}

Tensor where(const Tensor& cond, double a, const Tensor& b) {
  ops::check_defined("where", {{"condition", &cond}, {"other", &b}});
  const DType dt = is_floating(b.dtype()) ? b.dtype() : DType::Float32;
  return where(cond, ops::scalar_tensor(a, dt, b.device()), b);
}

Tensor where(const Tensor& cond, double a, double b) {
  ops::check_defined("where", {{"condition", &cond}});
  return where(cond, ops::scalar_tensor(a, DType::Float32, cond.device()),
               ops::scalar_tensor(b, DType::Float32, cond.device()));
}

// ---- one_hot -----------------------------------------------------------------------------------
Tensor one_hot(const Tensor& index, int64_t num_classes) {
  ops::check_defined("one_hot", {{"index", &index}});
  HG_CHECK(index.dtype() == DType::Int64, "one_hot: one_hot is only applicable to index tensor (int64), got {}",
           index.describe());
  HG_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (infer) or >= 0, got {}", num_classes);
  // The range is checked on the host (a device sync on CUDA, as in PyTorch).
  const std::vector<int64_t> v = index.to_vector<int64_t>();
  HG_CHECK(!v.empty() || num_classes != -1,
           "one_hot: Can not infer total number of classes from empty tensor {}; pass num_classes", index.describe());
  int64_t lo = 0, hi = -1;
  if (!v.empty()) {
    const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
    lo = *mn;
    hi = *mx;
  }
  HG_CHECK(lo >= 0, "one_hot: Class values must be non-negative, got {} in {}", lo, index.describe());
  const int64_t c = num_classes == -1 ? hi + 1 : num_classes;
  HG_CHECK(hi < c, "one_hot: Class values must be smaller than num_classes: got {} with num_classes {} in {}", hi,
           c, index.describe());
  return dispatch::call_nograd(OpId::one_hot, {index}, [c](const std::vector<Tensor>& in) {
    const Tensor classes = arange(c, TensorOptions(DType::Int64, in[0].device()));
    return eq(in[0].unsqueeze(-1), classes).to(DType::Int64);
  });
}

// ---- in place ------------------------------------------------------------------------------------
void indexing_detail::check_values_no_grad(const char* op, const Tensor& v) {
  HG_CHECK(!autograd::grad_enabled() || !v.requires_grad(),
           "{}: the values {} require grad, but {} is not recorded by autograd (their gradient would be lost). "
           "Pass values.detach(), or build the result out of place (scatter, masked_fill, where)",
           op, v.describe(), op);
}

Tensor indexing_detail::operand_for(const Tensor& self, const Tensor& src) {
  Tensor s = src.detach().to(self.dtype());
  if (s.storage() == self.storage()) s = s.clone();
  return s;
}

namespace {
using indexing_detail::check_values_no_grad;
using indexing_detail::operand_for;

void scatter_inplace(const char* op, OpId id, Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                     ScatterMode mode) {
  const int64_t d = ops::wrap_dim(op, dim, self.dim());
  check_gather_shapes(op, self, d, index, &src);
  check_values_no_grad(op, src);
  dispatch::check_same_device(op, {self, index, src});
  const Tensor s = operand_for(self, src);
  dispatch::inplace(id, self, {}, [&] { scatter_kernel(self, d, index, s, mode, op); });
}
}  // namespace

Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) {
  ops::check_defined("scatter_", {{"index", &index}, {"src", &src}});
  scatter_inplace("scatter_", OpId::scatter, *this, dim, index, src, ScatterMode::Assign);
  return *this;
}

Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, double value) {
  ops::check_defined("scatter_", {{"index", &index}});
  const Tensor v = ops::broadcast_to(scalar_as(*this, value), index.shape());
  scatter_inplace("scatter_", OpId::scatter, *this, dim, index, v, ScatterMode::Assign);
  return *this;
}

Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) {
  ops::check_defined("scatter_add_", {{"index", &index}, {"src", &src}});
  scatter_inplace("scatter_add_", OpId::scatter_add, *this, dim, index, src, ScatterMode::Add);
  return *this;
}

Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  ops::check_defined("masked_fill_", {{"mask", &mask}});
  check_mask("masked_fill_", mask);
  const Tensor v = scalar_as(*this, value);
  const Tensor& self = *this;
  dispatch::inplace(OpId::masked_fill, self, {mask}, [&] {
    kernels::where(ops::broadcast_to(mask, self.shape()), ops::broadcast_to(v, self.shape()), self, self);
  });
  return *this;
}

Tensor& Tensor::masked_fill_(const Tensor& mask, const Tensor& value) {
  ops::check_defined("masked_fill_", {{"mask", &mask}, {"value", &value}});
  check_mask("masked_fill_", mask);
  check_values_no_grad("masked_fill_", value);
  const Tensor v = operand_for(*this, fill_value("masked_fill_", *this, value));
  const Tensor& self = *this;
  dispatch::inplace(OpId::masked_fill, self, {mask, v}, [&] {
    kernels::where(ops::broadcast_to(mask, self.shape()), ops::broadcast_to(v, self.shape()), self, self);
  });
  return *this;
}

// ---- methods -------------------------------------------------------------------------------------
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return halfgrad::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return halfgrad::gather(*this, dim, index); }
Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src) const {
  return halfgrad::scatter(*this, dim, index, src);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, double value) const {
  return halfgrad::scatter(*this, dim, index, value);
}
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return halfgrad::scatter_add(*this, dim, index, src);
}
Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return halfgrad::masked_fill(*this, mask, value); }
Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value) const {
  return halfgrad::masked_fill(*this, mask, value);
}

}  // namespace halfgrad
