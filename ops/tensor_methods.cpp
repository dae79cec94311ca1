// Tensor methods that are the free functions of ops/ops.h under PyTorch's
// method spelling (x.softmax(1) is softmax(x, 1)), item() and to_vector(), and
// values as vectors. Indexing (x[i], x.index, x.index_put_) is in ops/indexing.cpp.
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

// Reading and writing by index (x[i], x.index, x.index_put_) is in ops/indexing.cpp.

}  // namespace halfgrad
