// Reading and writing by index, PyTorch's x[i], x.index({...}) and
// x.index_put_({...}, v): integers, slices, None, an ellipsis and one tensor
// index (int64 or a bool mask) are planned into views plus at most one
// gather or scatter (the kernels of indexing.cpp, through indexing_detail.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include <halfgrad/core/alias.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/dispatch/grad_mode.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/indexing_detail.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;
using indexing_detail::check_values_no_grad;
using indexing_detail::expanded_index;
using indexing_detail::operand_for;
using indexing_detail::scatter_kernel;
using kernels::ScatterMode;

// ---- reading and writing by index -----------------------------------------------------------------
indexing::TensorIndex::TensorIndex(const char* s) : v_(Ellipsis) {
  HG_CHECK(s != nullptr && std::string_view(s) == "...",
           "index: the only string index is \"...\" (Ellipsis), got \"{}\"; use Slice(start, stop, step), None, "
           "Ellipsis, an integer or a tensor",
           s ? s : "(null)");
}

indexing::TensorIndex::TensorIndex(const Tensor& t) : v_(t.impl_ptr()) {
  HG_CHECK(t.defined(), "index: an undefined tensor cannot be an index");
}

Tensor indexing::TensorIndex::tensor() const { return Tensor(std::get<std::shared_ptr<TensorImpl>>(v_)); }

namespace {
// One integer index on dimension d of t, named `op` in the error (PyTorch's
// "index 5 is out of bounds for dimension 0 with size 3"), which names the
// dimension `self_d` of the tensor `self` the user indexed.
Tensor select_checked(std::string_view op, const Tensor& t, int64_t d, int64_t i, const Tensor& self,
                      int64_t self_d) {
  HG_CHECK(t.dim() > 0, "{}: cannot index a 0-d tensor ({}) with an integer; use item() to read its value", op,
           t.describe());
  const int64_t n = t.shape()[d];
  HG_CHECK(i >= -n && i < n, "{}: index {} is out of bounds for dimension {} with size {} of {} (expected {} to {})",
           op, i, self_d, n, self.describe(), -n, n - 1);
  return t.select(d, i);
}

// The indices with every one but the tensor index applied (views); the
// tensor index's dims are kept, at `d` of `view`.
struct Plan {
  Tensor view;
  int64_t d = -1;       // first dim of `view` the tensor index covers
  int64_t k = 0;        // how many (a mask's dims; 1 for an int64 index)
  Tensor t;             // the tensor index, undefined if none
  int64_t self_d = 0;   // the first dim of self it covers (messages)
};

Plan plan(const char* op, const Tensor& self, const std::vector<indexing::TensorIndex>& indices) {
  int64_t consumed = 0, ellipses = 0, tensors = 0;
  for (const auto& ix : indices) {
    consumed += ix.is_integer() || ix.is_slice();
    ellipses += ix.is_ellipsis();
    if (ix.is_tensor()) {
      const Tensor t = ix.tensor();
      ++tensors;
      HG_CHECK(t.dtype() == DType::Bool || t.dtype() == DType::Int64,
               "{}: tensors used as indices must be int64 or bool, got {} for {}", op, t.describe(), self.describe());
      HG_CHECK(t.dtype() != DType::Bool || t.dim() > 0,
               "{}: a 0-d bool index ({}) is not supported; index {} with a bool mask of >= 1 dims", op,
               t.describe(), self.describe());
      consumed += t.dtype() == DType::Bool ? t.dim() : 1;
    }
  }
  HG_CHECK(ellipses <= 1, "{}: an index can only have a single ellipsis (...), got {} for {}", op, ellipses,
           self.describe());
  HG_CHECK(tensors <= 1,
           "{}: only one tensor index per index is supported, got {} for {}; combine them into one (a bool mask "
           "over several dims, or one int64 index into a flattened view)",
           op, tensors, self.describe());
  HG_CHECK(consumed <= self.dim(), "{}: too many indices for {}: {} dimensions indexed, the tensor has {}", op,
           self.describe(), consumed, self.dim());
  Plan p;
  Tensor out = self;
  int64_t d = 0, self_d = 0;
  for (const auto& ix : indices) {
    if (ix.is_integer()) {
      out = select_checked(op, out, d, ix.integer(), self, self_d++);
    } else if (ix.is_slice()) {
      const auto& s = ix.slice();
      HG_CHECK(s.step > 0, "{}: slice step must be positive, got {} for dimension {} of {}", op, s.step, self_d,
               self.describe());
      out = out.slice(d, s.start, s.stop, s.step);
      ++d;
      ++self_d;
    } else if (ix.is_none()) {
      out = out.unsqueeze(d);
      ++d;
    } else if (ix.is_tensor()) {
      p.t = ix.tensor();
      p.d = d;
      p.self_d = self_d;
      p.k = p.t.dtype() == DType::Bool ? p.t.dim() : 1;
      if (p.t.dtype() == DType::Bool)
        for (int64_t i = 0; i < p.k; ++i)
          HG_CHECK(p.t.shape()[i] == out.shape()[d + i],
                   "{}: The shape of the mask {} at index {} does not match the shape of the indexed tensor {} at "
                   "index {}",
                   op, shape_str(p.t.shape()), i, self.describe(), self_d + i);
      d += p.k;
      self_d += p.k;
    } else {  // Ellipsis: the dimensions no index names
      d += self.dim() - consumed;
      self_d += self.dim() - consumed;
    }
  }
  p.view = out;
  if (p.t.defined() && p.t.dtype() == DType::Int64 && p.t.device().is_cpu()) {
    // An index on the host is checked here, naming the user's index (no sync,
    // also for a CUDA tensor); one on CUDA is left to the kernels (index_select).
    const int64_t n = out.shape()[p.d];
    for (int64_t i : p.t.to_vector<int64_t>())
      HG_CHECK(i >= -n && i < n, "{}: index {} is out of bounds for dimension {} with size {} of {} (expected {} to {})",
               op, i, p.self_d, n, self.describe(), -n, n - 1);
  }
  if (p.t.defined()) {
    HG_CHECK(p.t.device() == out.device() || p.t.device().is_cpu(),
             "{}: the index {} must be on the indexed tensor's device ({}) or on the CPU", op, p.t.describe(),
             out.describe());
    p.t = p.t.detach().to(out.device());
  }
  return p;
}

// The flat (row-major) positions of the true elements of a bool mask, as an
// int64 1-d tensor on `device`. The count is read on the host (a sync on CUDA).
Tensor mask_positions(const Tensor& mask, Device device) {
  const std::vector<bool> m = mask.to_vector<bool>();
  std::vector<int64_t> pos;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]) pos.push_back(static_cast<int64_t>(i));
  const int64_t n = static_cast<int64_t>(pos.size());
  return tensor(pos, {n}).to(device);
}

// An int64 index on a dim of size n: negatives count from the end (Python's
// x[idx]); the range was checked in plan() for a host index.
Tensor wrap_index(const Tensor& t, int64_t n) { return where(lt(t, 0.0), add(t, static_cast<double>(n)), t); }

Shape splice(const Shape& s, int64_t d, int64_t k, const Shape& mid) {
  Shape r(s.begin(), s.begin() + d);
  r.insert(r.end(), mid.begin(), mid.end());
  r.insert(r.end(), s.begin() + d + k, s.end());
  return r;
}
}  // namespace

Tensor Tensor::operator[](int64_t i) const { return select_checked("operator[]", *this, 0, i, *this, 0); }

Tensor Tensor::index(std::initializer_list<indexing::TensorIndex> indices) const {
  return index(std::vector<indexing::TensorIndex>(indices));
}

Tensor Tensor::index(const std::vector<indexing::TensorIndex>& indices) const {
  const Plan p = plan("index", *this, indices);
  if (!p.t.defined()) return p.view;
  const Tensor& v = p.view;
  if (p.t.dtype() == DType::Bool) {
    // x[mask]: the masked dims flattened into one, then index_select
    int64_t count = 1;
    for (int64_t i = 0; i < p.k; ++i) count *= v.shape()[p.d + i];
    const Tensor flat = v.reshape(splice(v.shape(), p.d, p.k, {count}));
    return halfgrad::index_select(flat, p.d, mask_positions(p.t, v.device()));
  }
  const Tensor idx = wrap_index(p.t, v.shape()[p.d]);
  const Tensor r = halfgrad::index_select(v, p.d, idx.reshape({-1}));
  return r.reshape(splice(v.shape(), p.d, 1, p.t.shape()));
}

namespace {
// The dims [d, d + k) of v merged into one, as a view; undefined when their strides do not allow it.
Tensor merged_view(const Tensor& v, int64_t d, int64_t k) {
  int64_t count = 1;
  for (int64_t i = 0; i < k; ++i) count *= v.shape()[d + i];
  for (int64_t i = d; i + 1 < d + k; ++i)
    if (v.strides()[i] != v.strides()[i + 1] * v.shape()[i + 1] && count > 0) return Tensor();
  Shape strides = splice(v.strides(), d, k, {v.strides()[d + k - 1]});
  return alias_with(v, splice(v.shape(), d, k, {count}), strides, v.offset());
}

void index_put_impl(Tensor& self, const std::vector<indexing::TensorIndex>& indices, const Tensor& values0,
                    bool accumulate) {
  const char* op = "index_put_";
  Plan p = plan(op, self, indices);
  check_values_no_grad(op, values0);
  Tensor vals = values0;
  if (vals.dim() == 0 && vals.device().is_cpu() && !self.device().is_cpu()) vals = vals.to(self.device());
  dispatch::check_same_device(op, {self, vals});
  vals = operand_for(self, vals);
  const Tensor& v = p.view;
  const ScatterMode mode = accumulate ? ScatterMode::Add : ScatterMode::Assign;
  HG_CHECK(!accumulate || self.dtype() != DType::Bool, "{}: accumulate=true is not supported for the bool tensor {}",
           op, self.describe());
  if (!p.t.defined()) {  // only views: x[...] = v is a copy (or an add) into the view
    ops::check_broadcasts_to(op, "the values", vals.shape(), v.shape(), "; they must broadcast to the indexed shape");
    dispatch::inplace(OpId::index_put, self, {}, [&] {
      const Tensor b = ops::broadcast_to(vals, v.shape());
      if (accumulate)
        kernels::binary(kernels::BinaryOp::Add, v, b, v);
      else
        kernels::copy(v, b);
    });
    return;
  }
  if (p.t.dtype() == DType::Bool && vals.numel() == 1 && vals.dim() == 0 && !accumulate) {
    // x[mask] = scalar: the where kernel through the mask, no sync
    Shape mshape(static_cast<size_t>(p.d), 1);
    mshape.insert(mshape.end(), p.t.shape().begin(), p.t.shape().end());
    mshape.resize(static_cast<size_t>(v.dim()), 1);
    const Tensor m = ops::broadcast_to(p.t.reshape(mshape), v.shape());
    dispatch::inplace(OpId::index_put, self, {},
                      [&] { kernels::where(m, ops::broadcast_to(vals, v.shape()), v, v); });
    return;
  }
  // The general case: one int64 index `lin` on dim d of v with the indexed dims merged.
  Tensor lin;
  Shape shown;  // the shape x.index(indices) has, which the values broadcast to
  if (p.t.dtype() == DType::Bool) {
    lin = mask_positions(p.t, v.device());
    shown = splice(v.shape(), p.d, p.k, {lin.numel()});
  } else {
    lin = wrap_index(p.t, v.shape()[p.d]).reshape({-1}).contiguous();
    shown = splice(v.shape(), p.d, 1, p.t.shape());
  }
  const Shape flat = splice(v.shape(), p.d, p.k, {lin.numel()});
  ops::check_broadcasts_to(op, "the values", vals.shape(), shown,
                           "; they must broadcast to the shape the index selects");
  Tensor src = make_tensor(shown, vals.options());
  kernels::copy(src, ops::broadcast_to(vals, shown));
  src = alias_with(src, flat, contiguous_strides(flat), 0);
  const Tensor idx = expanded_index(lin, flat, p.d);
  dispatch::inplace(OpId::index_put, self, {}, [&] {
    Tensor w = merged_view(v, p.d, p.k);
    if (w.defined()) return scatter_kernel(w, p.d, idx, src, mode, op);
    // dims that do not merge as a view: work on a contiguous copy, then write it back
    Tensor tmp = make_tensor(v.shape(), v.options());
    kernels::copy(tmp, v);
    scatter_kernel(merged_view(tmp, p.d, p.k), p.d, idx, src, mode, op);
    kernels::copy(v, tmp);
  });
}
}  // namespace

Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values, bool accumulate) {
  ops::check_defined("index_put_", {{"values", &values}});
  index_put_impl(*this, indices, values, accumulate);
  return *this;
}
Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& values,
                           bool accumulate) {
  return index_put_(std::vector<indexing::TensorIndex>(indices), values, accumulate);
}
Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, double value) {
  index_put_impl(*this, indices, ops::scalar_tensor(value, dtype(), device()), false);
  return *this;
}
Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> indices, double value) {
  return index_put_(std::vector<indexing::TensorIndex>(indices), value);
}

}  // namespace halfgrad
