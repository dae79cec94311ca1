// Gather and scatter on the CPU (kernels/kernels.h): one walk over the index's
// shape with an offset per tensor. Gather and Assign copy elements by their
// size (the bits, any dtype); Add adds in the element type (float32, float64,
// int64; the op hands half types over as a float32 copy, so they round once).
// Every index is checked before anything is written.
#include <cstdint>
#include <cstring>
#include <vector>

#include <halfgrad/kernels/cpu/cpu_kernels.h>

namespace halfgrad::kernels::cpu {

namespace {

// f(o_index, o_a, o_b) for every position of `shape`, with the offsets (in
// elements) of that position in three tensors of the given strides.
template <typename F>
void walk(const Shape& shape, const Shape& s0, const Shape& s1, const Shape& s2, F&& f) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  std::vector<int64_t> pos(static_cast<size_t>(nd), 0);
  int64_t o0 = 0, o1 = 0, o2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(o0, o1, o2);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++pos[d] < shape[d]) {
        o0 += s0[d];
        o1 += s1[d];
        o2 += s2[d];
        break;
      }
      o0 -= s0[d] * (shape[d] - 1);
      o1 -= s1[d] * (shape[d] - 1);
      o2 -= s2[d] * (shape[d] - 1);
      pos[d] = 0;
    }
  }
}

// Every index in [0, size): else an Error naming the op, the dim, the index and the range.
void check_range(const char* op, const Tensor& index, int64_t dim, int64_t size, const Tensor& target) {
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  const Shape zeros(index.shape().size(), 0);
  walk(index.shape(), index.strides(), zeros, zeros, [&](int64_t o, int64_t, int64_t) {
    const int64_t k = idx[o];
    HG_CHECK(k >= 0 && k < size,
             "{}: index {} is out of bounds for dimension {} with size {} of {} (valid indices: 0 to {})", op, k,
             dim, size, target.describe(), size - 1);
  });
}

Shape zero_dim(Shape s, int64_t dim) {
  s[dim] = 0;
  return s;
}

template <typename T>
void gather_typed(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  const T* src = static_cast<const T*>(in.data_ptr());
  T* dst = static_cast<T*>(out.data_ptr());
  const int64_t step = in.strides()[dim];
  walk(index.shape(), index.strides(), zero_dim(in.strides(), dim), out.strides(),
       [&](int64_t oi, int64_t oa, int64_t ob) { dst[ob] = src[oa + idx[oi] * step]; });
}

template <typename T, bool kAdd>
void scatter_typed(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  T* dst = static_cast<T*>(self.data_ptr());
  const T* from = static_cast<const T*>(src.data_ptr());
  const int64_t step = self.strides()[dim];
  walk(index.shape(), index.strides(), zero_dim(self.strides(), dim), src.strides(),
       [&](int64_t oi, int64_t oa, int64_t ob) {
         if constexpr (kAdd) {
           dst[oa + idx[oi] * step] += from[ob];
         } else {
           dst[oa + idx[oi] * step] = from[ob];  // a repeated index: the last write wins
         }
       });
}

// Run f<U>() with U an unsigned type of the dtype's size: copies move bits.
template <template <typename> class F, typename... A>
void by_size(DType dt, A&&... a) {
  switch (itemsize(dt)) {
    case 1: return F<uint8_t>::run(a...);
    case 2: return F<uint16_t>::run(a...);
    case 4: return F<uint32_t>::run(a...);
    case 8: return F<uint64_t>::run(a...);
    default: fail("gather/scatter: unsupported element size {} of {}", itemsize(dt), dtype_name(dt));
  }
}
template <typename U>
struct GatherBits {
  static void run(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
    gather_typed<U>(in, dim, index, out);
  }
};
template <typename U>
struct AssignBits {
  static void run(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
    scatter_typed<U, false>(self, dim, index, src);
  }
};

}  // namespace

void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out, const char* op) {
  check_range(op, index, dim, in.shape()[dim], in);
  by_size<GatherBits>(in.dtype(), in, dim, index, out);
}

void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, kernels::ScatterMode mode,
             const char* op) {
  check_range(op, index, dim, self.shape()[dim], self);
  if (mode == kernels::ScatterMode::Assign) return by_size<AssignBits>(self.dtype(), self, dim, index, src);
  switch (self.dtype()) {
    case DType::Float32: return scatter_typed<float, true>(self, dim, index, src);
    case DType::Float64: return scatter_typed<double, true>(self, dim, index, src);
    case DType::Int64: return scatter_typed<int64_t, true>(self, dim, index, src);
    default:
      fail("{}: accumulating into {} is not supported by the kernel (float32, float64, int64)", op,
           self.describe());
  }
}

}  // namespace halfgrad::kernels::cpu
