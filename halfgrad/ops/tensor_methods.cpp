// Tensor methods that are the free functions of ops/ops.h under PyTorch's
// method spelling (x.softmax(1) is softmax(x, 1)), item() and to_vector(), and
// reading by index: x[i] and x.index({...}) (core/indexing.h), all views.
#include <cstring>

#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

// ---- math as methods ------------------------------------------------------------
Tensor Tensor::neg() const { return halfgrad::neg(*this); }
Tensor Tensor::sigmoid() const { return halfgrad::sigmoid(*this); }
Tensor Tensor::tanh() const { return halfgrad::tanh(*this); }
Tensor Tensor::softmax(int64_t dim) const { return halfgrad::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return halfgrad::log_softmax(*this, dim); }

// ---- values -----------------------------------------------------------------------
double Tensor::item() const { return item<double>(); }

template <typename T>
std::vector<T> Tensor::to_vector() const {
  // detach: reading values is no part of the graph; to(dtype) converts as a cast does
  const Tensor host = detach().to(Device::cpu()).to(dtype_of<T>::value).contiguous();
  const auto n = static_cast<size_t>(host.numel());
  std::vector<T> out(n);
  if (n == 0) return out;
  if constexpr (std::is_same_v<T, bool>) {
    const bool* p = static_cast<const bool*>(host.data_ptr());
    for (size_t i = 0; i < n; ++i) out[i] = p[i];
  } else {
    std::memcpy(out.data(), host.data_ptr(), n * sizeof(T));
  }
  return out;
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;

// ---- indexing -----------------------------------------------------------------------
indexing::TensorIndex::TensorIndex(const char* s) : v_(Ellipsis) {
  HG_CHECK(s != nullptr && std::string_view(s) == "...",
           "index: the only string index is \"...\" (Ellipsis), got \"{}\"; use Slice(start, stop, step), None, "
           "Ellipsis or an integer",
           s ? s : "(null)");
}

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
}  // namespace

Tensor Tensor::operator[](int64_t i) const { return select_checked("operator[]", *this, 0, i, *this, 0); }

Tensor Tensor::index(std::initializer_list<indexing::TensorIndex> indices) const {
  return index(std::vector<indexing::TensorIndex>(indices));
}

Tensor Tensor::index(const std::vector<indexing::TensorIndex>& indices) const {
  // How many dimensions the indices name (integers and slices), and where the one Ellipsis is.
  int64_t consumed = 0, ellipses = 0;
  for (const auto& ix : indices) {
    consumed += ix.is_integer() || ix.is_slice();
    ellipses += ix.is_ellipsis();
  }
  HG_CHECK(ellipses <= 1, "index: an index can only have a single ellipsis (...), got {} for {}", ellipses,
           describe());
  HG_CHECK(consumed <= dim(), "index: too many indices for {}: {} dimensions indexed, the tensor has {}", describe(),
           consumed, dim());
  Tensor out = *this;
  int64_t d = 0;       // the dimension of `out` the next index applies to
  int64_t self_d = 0;  // ... and of this tensor, for messages
  for (const auto& ix : indices) {
    if (ix.is_integer()) {
      out = select_checked("index", out, d, ix.integer(), *this, self_d++);
    } else if (ix.is_slice()) {
      const auto& s = ix.slice();
      HG_CHECK(s.step > 0, "index: slice step must be positive, got {} for dimension {} of {}", s.step, self_d,
               describe());
      out = out.slice(d, s.start, s.stop, s.step);
      ++d;
      ++self_d;
    } else if (ix.is_none()) {
      out = out.unsqueeze(d);
      ++d;
    } else {  // Ellipsis: the dimensions no index names
      d += dim() - consumed;
      self_d += dim() - consumed;
    }
  }
  return out;
}

}  // namespace halfgrad
