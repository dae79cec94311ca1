// The elementwise passes of the GEMM layer (kernels/cuda/gemm_passes.h): strided
// [batch][rows][cols] views, grid-stride kernels, the shared per-element math
// of kernels/math.h (the same exact and tanh GELU that hg::gelu runs on the CPU).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include <halfgrad/core/alias.h>
#include <halfgrad/core/cuda/check.h>
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/gemm_passes.h>
#include <halfgrad/kernels/math.h>

namespace halfgrad::kernels::cuda::gemm_passes {

namespace {

using halfgrad::cuda::stream;

template <Act A, typename T>
HG_INLINE T activate(T x) {
  if constexpr (A == Act::Relu) return math::unary_fn<kernels::UnaryOp::Relu>(x, T(0), T(0));
  else if constexpr (A == Act::GeluErf) return math::gelu(x);
  else if constexpr (A == Act::GeluTanh) return math::gelu_tanh(x);
  else return x;
}

// grad * act'(z); for ReLU `s` is the output y (relu'(z) = y > 0), else z.
template <Act A, typename T>
HG_INLINE T activate_backward(T grad, T s) {
  if constexpr (A == Act::Relu) return math::binary_fn<kernels::BinaryOp::ReluBackward>(grad, s, T(1));
  else if constexpr (A == Act::GeluErf) return grad * math::gelu_grad(s);
  else if constexpr (A == Act::GeluTanh) return grad * math::gelu_tanh_grad(s);
  else return grad;
}

// A [batch][rows][cols] strided view of device memory (1-d and 2-d tensors
// are [1][1][n] and [1][r][c]).
template <typename T>
struct View {
  T* p = nullptr;
  int64_t bs = 0, rs = 0, cs = 0;
  __device__ T& at(int64_t b, int64_t r, int64_t c) const { return p[b * bs + r * rs + c * cs]; }
};

struct Extent {
  int64_t batch = 1, rows = 1, cols = 1;
  int64_t numel() const { return batch * rows * cols; }
};

Extent extent_of(const Tensor& t) {
  switch (t.dim()) {
    case 1: return {1, 1, t.shape()[0]};
    case 2: return {1, t.shape()[0], t.shape()[1]};
    case 3: return {t.shape()[0], t.shape()[1], t.shape()[2]};
    default: fail("gemm: internal error: a {}-d tensor in an epilogue pass", t.dim());
  }
}

template <typename T>
View<T> view_of(const Tensor& t) {
  if (!t.defined()) return {};
  View<T> v;
  v.p = static_cast<T*>(t.data_ptr());
  const auto& s = t.strides();
  if (t.dim() == 1) v.cs = s[0];
  if (t.dim() == 2) v.rs = s[0], v.cs = s[1];
  if (t.dim() == 3) v.bs = s[0], v.rs = s[1], v.cs = s[2];
  return v;
}

// Grid-stride over the three dims: x along columns (coalesced when cs == 1),
// y along rows, z along the batch. Rows shorter than 256 share a block.
struct Launch {
  dim3 grid, block;
};
Launch launch_for(const Extent& e) {
  const auto round32 = [](int64_t v) { return (v + 31) / 32 * 32; };
  const unsigned bx = static_cast<unsigned>(std::min<int64_t>(256, round32(e.cols)));
  const unsigned by = 256 / bx;
  Launch l;
  l.block = dim3(bx, by, 1);
  l.grid = dim3(static_cast<unsigned>(std::min<int64_t>((e.cols + bx - 1) / bx, 1024)),
                static_cast<unsigned>(std::min<int64_t>((e.rows + by - 1) / by, 65535)),
                static_cast<unsigned>(std::min<int64_t>(e.batch, 65535)));
  return l;
}

#define HG_GRID_STRIDE_3D(e)                                                                               \
  for (int64_t b = blockIdx.z; b < (e).batch; b += gridDim.z)                                             \
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < (e).rows;           \
         r += static_cast<int64_t>(gridDim.y) * blockDim.y)                                               \
      for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < (e).cols;         \
           c += static_cast<int64_t>(gridDim.x) * blockDim.x)

// out = act(scale * src + bias), and pre = scale * src + bias when pre.p is set.
// scale == 0 never reads src (beta == 0 semantics: out may hold garbage).
// src may be out itself, and pre may be src: each element is read before written.
template <typename T, Act A>
__global__ void epilogue_kernel(View<const T> src, acc_t<T> scale, const T* __restrict__ bias, View<T> pre,
                                View<T> out, Extent e) {
  using acc = acc_t<T>;
  HG_GRID_STRIDE_3D(e) {
    acc v = scale == acc(0) ? acc(0) : scale * static_cast<acc>(src.at(b, r, c));
    if (bias != nullptr) v += static_cast<acc>(bias[c]);
    if (pre.p != nullptr) pre.at(b, r, c) = static_cast<T>(v);
    out.at(b, r, c) = static_cast<T>(activate<A>(v));
  }
}

// out = grad * act'(saved); out may be grad itself.
template <typename T, Act A>
__global__ void act_backward_kernel(View<const T> grad, View<const T> saved, View<T> out, Extent e) {
  using acc = acc_t<T>;
  HG_GRID_STRIDE_3D(e) {
    out.at(b, r, c) =
        static_cast<T>(activate_backward<A>(static_cast<acc>(grad.at(b, r, c)), static_cast<acc>(saved.at(b, r, c))));
  }
}

template <typename F>
void with_act(Act act, F&& f) {
  switch (act) {
    case Act::Identity: return f.template operator()<Act::Identity>();
    case Act::Relu: return f.template operator()<Act::Relu>();
    case Act::GeluErf: return f.template operator()<Act::GeluErf>();
    case Act::GeluTanh: return f.template operator()<Act::GeluTanh>();
  }
}

// out = act(scale * src + bias) (pre = the argument of act), over out's extent.
// bias: [cols] contiguous or undefined; pre: same extent or undefined.
}  // namespace

void epilogue_pass(Act act, const Tensor& src, double scale, const Tensor& bias, const Tensor& pre, const Tensor& out) {
  const Extent e = extent_of(out);
  if (e.numel() == 0) return;
  const Launch l = launch_for(e);
  HG_DISPATCH_FLOATING(out.dtype(), "gemm epilogue", [&] {
    using acc = acc_t<scalar_t>;
    const auto* bias_p = bias.defined() ? static_cast<const scalar_t*>(bias.data_ptr()) : nullptr;
    with_act(act, [&]<Act A>() {
      epilogue_kernel<scalar_t, A><<<l.grid, l.block, 0, stream()>>>(view_of<const scalar_t>(src),
                                                                     static_cast<acc>(scale), bias_p,
                                                                     view_of<scalar_t>(pre), view_of<scalar_t>(out), e);
    });
  });
  HG_CUDA_CHECK(cudaGetLastError());
}

void zero(const Tensor& t) { epilogue_pass(Act::Identity, t, 0.0, Tensor(), Tensor(), t); }

void act_backward_pass(Act act, const Tensor& grad, const Tensor& saved, const Tensor& out) {
  const Extent e = extent_of(out);
  if (e.numel() == 0) return;
  const Launch l = launch_for(e);
  HG_DISPATCH_FLOATING(out.dtype(), "activation backward", [&] {
    with_act(act, [&]<Act A>() {
      act_backward_kernel<scalar_t, A><<<l.grid, l.block, 0, stream()>>>(
          view_of<const scalar_t>(grad), view_of<const scalar_t>(saved), view_of<scalar_t>(out), e);
    });
  });
  HG_CUDA_CHECK(cudaGetLastError());
}

// out[j] = sum_i m[i, j] (m [N, F], out [F], any stride) through the reduction
// kernels (float32 accumulation). N == 0 gives zeros.
void sum_rows(const Tensor& m, const Tensor& out) {
  if (m.shape()[0] == 0) return zero(out);
  const int64_t f = out.shape()[0];
  if (f > 1 && out.strides()[0] != 1) {  // the reduction writes contiguous outputs only
    Tensor dense = make_tensor({f}, out.options());
    sum_rows(m, dense);
    cuda::copy(out, dense);
    return;
  }
  const Tensor out2 = alias_with(out, {1, f}, {f, 1}, out.offset());
  cuda::reduce(kernels::ReduceOp::Sum, m, {0}, out2);
}


}  // namespace halfgrad::kernels::cuda::gemm_passes
