#pragma once
// Device-side building blocks of the CUDA backend (.cu files only):
//  - Elem<T>: how an element is stored and what it computes in (half types
//    load as float and round once on the way out, bit-identical to core/half.h);
//  - elementwise(): out[i] = f(in0[i], in1[i], ...) for up to 3 inputs of
//    out's shape with arbitrary strides (expanded inputs have stride 0).
//    Dimensions that are contiguous for every operand are merged on the host;
//    if the result is one dense run (inputs may also be scalars), a kernel with
//    16-byte loads/stores runs, else a grid-stride kernel that turns each
//    linear index into per-operand offsets (OffsetCalc, <= 8 merged dims,
//    32-bit index math; larger tensors, and layouts with more merged dims,
//    are split on the host);
//  - warp/block all-reduce helpers for the reduction and softmax kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/dtype.h>
#include <halfgrad/core/macros.h>
#include <halfgrad/core/half.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad::kernels::cuda {


constexpr int kMaxDims = 8;    // merged dims the strided kernel handles
constexpr int kThreads = 256;  // threads per block of the 1-d kernels

using halfgrad::cuda::stream;  // the stream every halfgrad kernel is queued on

using halfgrad::cuda::DeviceGuard;

// Every tensor must live on the same CUDA device as the first; returns it.
inline int common_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor& first = **ts.begin();
  for (const Tensor* t : ts) {
    HG_CHECK(t->device().is_cuda(), "{}: the CUDA backend was given {}, which is not on a CUDA device", op,
             t->describe());
    HG_CHECK(t->device() == first.device(),
             "{}: tensors are on different devices ({} and {}); move them to one device with .to() first", op,
             first.describe(), t->describe());
  }
  return first.device().index();
}

// Streaming multiprocessors per device (cached): sizes grids so one wave
// fills the GPU and grid-stride loops cover the rest.
inline int sm_count(int device) {
  static const std::vector<int> counts = [] {
    std::vector<int> c(static_cast<size_t>(std::max(halfgrad::cuda::device_count(), 0)), 0);
    for (size_t d = 0; d < c.size(); ++d)
      HG_CUDA_CHECK(cudaDeviceGetAttribute(&c[d], cudaDevAttrMultiProcessorCount, static_cast<int>(d)));
    return c;
  }();
  return device >= 0 && static_cast<size_t>(device) < counts.size() ? std::max(counts[device], 1) : 1;
}

// Blocks for `items` work items of `per_block` each, capped at a few waves.
inline unsigned grid_for(int64_t items, int64_t per_block, int device) {
  const int64_t want = std::max<int64_t>((items + per_block - 1) / per_block, 1);
  return static_cast<unsigned>(std::min<int64_t>(want, int64_t{sm_count(device)} * 32));
}

// ---- element types ------------------------------------------------------------------------
// storage: the bits in memory; acc: what the math runs in (acc_t of core/dtype.h).
template <typename T>
struct Elem {
  using storage = T;
  using acc = T;
  static __device__ __forceinline__ acc load(storage s) { return s; }
  static __device__ __forceinline__ storage store(acc a) { return a; }
};

template <>
struct Elem<Half> {
  using storage = uint16_t;
  using acc = float;
  // The hardware conversions are exact IEEE (round to nearest even,
  // subnormals kept, overflow to inf); NaNs are built by hand with the bits
  // core/half.h gives them (payload kept on the way in; sign plus the quiet
  // bit on the way out), so results match the CPU backend bit for bit.
  static __device__ __forceinline__ float load(uint16_t h) {
    const uint32_t u = h;
    if ((u & 0x7fffu) > 0x7c00u) return __uint_as_float(((u & 0x8000u) << 16) | 0x7f800000u | ((u & 0x3ffu) << 13));
    return __half2float(__ushort_as_half(h));
  }
  static __device__ __forceinline__ uint16_t store(float f) {
    if (f != f) return static_cast<uint16_t>(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(f));
  }
};

template <>
struct Elem<BFloat16> {
  using storage = uint16_t;
  using acc = float;
  // core/half.h's conversions are a shift and a branch-free rounding: as
  // cheap as the intrinsics and identical to the CPU backend.
  static __device__ __forceinline__ float load(uint16_t b) { return bfloat16_bits_to_float(b); }
  static __device__ __forceinline__ uint16_t store(float f) { return float_to_bfloat16_bits(f); }
};

// fp8: core/float8.h's conversions, bit-identical to the hardware's
// satfinite (e4m3fn) and IEEE (e5m2) casts and to the CPU backend.
template <>
struct Elem<Float8_e4m3fn> {
  using storage = uint8_t;
  using acc = float;
  static __device__ __forceinline__ float load(uint8_t b) { return e4m3fn_bits_to_float(b); }
  static __device__ __forceinline__ uint8_t store(float f) { return float_to_e4m3fn_bits(f); }
};

template <>
struct Elem<Float8_e5m2> {
  using storage = uint8_t;
  using acc = float;
  static __device__ __forceinline__ float load(uint8_t b) { return e5m2_bits_to_float(b); }
  static __device__ __forceinline__ uint8_t store(float f) { return float_to_e5m2_bits(f); }
};

template <typename T>
using storage_t = typename Elem<T>::storage;

// Element i of p in its compute type (acc_t: float64 for float64, float32 for
// the rest), and a value back with one rounding (batch norm, pooling).
template <typename T>
__device__ __forceinline__ acc_t<T> ld_stat(const storage_t<T>* p, int64_t i) {
  return Elem<T>::load(p[i]);
}
template <typename T>
__device__ __forceinline__ storage_t<T> st_stat(acc_t<T> v) {
  return Elem<T>::store(v);
}

// The raw unsigned type of an element size (dtype-blind copies and fills).
template <size_t Bytes>
using raw_t = std::conditional_t<Bytes == 1, uint8_t,
              std::conditional_t<Bytes == 2, uint16_t, std::conditional_t<Bytes == 4, uint32_t, uint64_t>>>;

// ---- index math ------------------------------------------------------------------------------
// n / d with a multiply-high and a shift instead of a hardware-less 32-bit
// divide (Granlund-Montgomery, as PyTorch's IntDivider). Valid for n < 2^31.
struct IntDiv {
  uint32_t d = 1, m = 1, s = 0;
  IntDiv() = default;
  explicit IntDiv(uint32_t divisor) : d(divisor) {
    while (s < 32 && (uint32_t{1} << s) < d) ++s;
    const uint64_t one = 1;
    m = static_cast<uint32_t>(((one << 32) * ((one << s) - d)) / d + 1);
  }
  HG_INLINE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, m);
#else
    const auto hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * m) >> 32);  // host: for tests
#endif
    return (hi + n) >> s;
  }
};

template <int N>
struct Ptrs {
  char* p[N];  // p[0] is the output
};

// Linear index (row-major over the merged shape) -> byte offset per operand.
template <int N>
struct OffsetCalc {
  int ndim = 0;
  IntDiv size[kMaxDims];            // innermost dim first
  int64_t stride[kMaxDims][N] = {};  // bytes

  HG_INLINE void get(uint32_t i, int64_t (&off)[N]) const {
    HG_UNROLL
    for (int k = 0; k < N; ++k) off[k] = 0;
    HG_UNROLL
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      uint32_t idx = i;
      if (d < ndim - 1) {  // the outermost dim needs no division
        const uint32_t q = size[d].div(i);
        idx = i - q * size[d].d;
        i = q;
      }
      HG_UNROLL
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(idx) * stride[d][k];
    }
  }
};

// A heterogeneous register holder (what a tuple would be, usable on the device).
template <size_t I, typename T>
struct Leaf {
  T v;
};
template <typename Seq, typename... Ts>
struct Regs;
template <size_t... I, typename... Ts>
struct Regs<std::index_sequence<I...>, Ts...> : Leaf<I, Ts>... {};
template <size_t I, typename T>
__device__ __forceinline__ T& get(Leaf<I, T>& l) {
  return l.v;
}

template <typename S, int VEC>
struct alignas(sizeof(S) * VEC) Pack {
  S v[VEC];
};
template <typename A, int VEC>
struct Arr {
  A v[VEC];
};

// ---- kernels ----------------------------------------------------------------------------------
namespace detail {

template <typename Out, typename... In, typename F, size_t... I>
__device__ __forceinline__ void apply_at(const F& f, const Ptrs<1 + sizeof...(In)>& p, const int64_t* off,
                                         std::index_sequence<I...>) {
  *reinterpret_cast<storage_t<Out>*>(p.p[0] + off[0]) = Elem<Out>::store(
      f(Elem<In>::load(*reinterpret_cast<const storage_t<In>*>(p.p[I + 1] + off[I + 1]))...));
}

// VEC consecutive elements of one input from element i (or its one value, broadcast).
template <int VEC, typename T>
__device__ __forceinline__ Arr<typename Elem<T>::acc, VEC> load_vec(const char* base, int64_t i, bool scalar) {
  Arr<typename Elem<T>::acc, VEC> r;
  const auto* p = reinterpret_cast<const storage_t<T>*>(base);
  if (scalar) {
    const auto x = Elem<T>::load(*p);
#pragma unroll
    for (int k = 0; k < VEC; ++k) r.v[k] = x;
  } else {
    const Pack<storage_t<T>, VEC> pk = *reinterpret_cast<const Pack<storage_t<T>, VEC>*>(p + i);
#pragma unroll
    for (int k = 0; k < VEC; ++k) r.v[k] = Elem<T>::load(pk.v[k]);
  }
  return r;
}

template <int VEC, typename Out, typename... In, typename F, size_t... I>
__device__ __forceinline__ void apply_vec(const F& f, const Ptrs<1 + sizeof...(In)>& p, unsigned scalar_mask,
                                          int64_t i, std::index_sequence<I...> seq) {
  Regs<decltype(seq), Arr<typename Elem<In>::acc, VEC>...> in;
  ((get<I>(in) = load_vec<VEC, In>(p.p[I + 1], i, (scalar_mask >> (I + 1)) & 1u)), ...);
  Pack<storage_t<Out>, VEC> o;
#pragma unroll
  for (int k = 0; k < VEC; ++k) o.v[k] = Elem<Out>::store(f(get<I>(in).v[k]...));
  *reinterpret_cast<Pack<storage_t<Out>, VEC>*>(reinterpret_cast<storage_t<Out>*>(p.p[0]) + i) = o;
}

template <typename Out, typename... In, typename F, size_t... I>
__device__ __forceinline__ void apply_dense(const F& f, const Ptrs<1 + sizeof...(In)>& p, unsigned scalar_mask,
                                            int64_t i, std::index_sequence<I...>) {
  reinterpret_cast<storage_t<Out>*>(p.p[0])[i] = Elem<Out>::store(f(Elem<In>::load(
      reinterpret_cast<const storage_t<In>*>(p.p[I + 1])[((scalar_mask >> (I + 1)) & 1u) ? 0 : i])...));
}

}  // namespace detail

// Dense operands: each thread handles VEC elements per step with one 16-byte
// (or narrower) load per input and one store; the last n % VEC elements are
// done one by one. Inputs flagged in scalar_mask (bit I+1) are read once.
template <int VEC, typename F, typename Out, typename... In>
__global__ void __launch_bounds__(kThreads)
    vector_kernel(int64_t n, Ptrs<1 + sizeof...(In)> p, unsigned scalar_mask, F f) {
  const auto seq = std::index_sequence_for<In...>{};
  const int64_t nvec = n / VEC;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = tid; v < nvec; v += step) detail::apply_vec<VEC, Out, In...>(f, p, scalar_mask, v * VEC, seq);
  const int64_t tail = nvec * VEC + tid;
  if (tail < n) detail::apply_dense<Out, In...>(f, p, scalar_mask, tail, seq);
}

// Any strides: one element per thread per step; n < 2^31.
template <typename F, typename Out, typename... In>
__global__ void __launch_bounds__(kThreads)
    strided_kernel(uint32_t n, OffsetCalc<1 + sizeof...(In)> oc, Ptrs<1 + sizeof...(In)> p, F f) {
  constexpr int N = 1 + sizeof...(In);
  const uint32_t step = gridDim.x * blockDim.x;  // n + step < 2^32: no wrap-around
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[N];
    oc.get(i, off);
    detail::apply_at<Out, In...>(f, p, off, std::index_sequence_for<In...>{});
  }
}

// ---- the host launcher ----------------------------------------------------------------------
namespace detail {

template <int N>
struct Geometry {
  std::vector<int64_t> size;                 // innermost first
  std::vector<std::array<int64_t, N>> stride;  // bytes, per operand
};

// Drop size-1 dims, merge dims that are contiguous for every operand (as
// kernels/cpu/loops.h does), innermost first.
template <int N>
Geometry<N> coalesce(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  Geometry<N> g;
  // the output's memory order: channels-last stays one run
  const Shape order = in_memory_order(shape, ts[0]->strides()) ? Shape() : memory_order(shape, ts[0]->strides());
  for (size_t i = shape.size(); i-- > 0;) {
    const size_t d = order.empty() ? i : static_cast<size_t>(order[i]);
    if (shape[d] == 1) continue;
    std::array<int64_t, N> st;
    for (int k = 0; k < N; ++k)
      st[k] = ts[k]->strides()[d] * static_cast<int64_t>(itemsize(ts[k]->dtype()));
    if (!g.size.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && st[k] == g.stride.back()[k] * g.size.back();
      if (merge) {
        g.size.back() *= shape[d];
        continue;  // the inner stride stays
      }
    }
    g.size.push_back(shape[d]);
    g.stride.push_back(st);
  }
  return g;
}

// Calls fn(piece, ptrs) for pieces of g with at most `limit` elements each:
// the outermost dim is halved until a piece fits (its second half starts
// further on in memory); dims that shrink to size 1 are dropped.
template <int N, typename Fn>
void for_each_piece(const Geometry<N>& g, const Ptrs<N>& p, int64_t limit, const Fn& fn) {
  int64_t n = 1;
  for (int64_t s : g.size) n *= s;
  if (n == 0) return;
  if (n <= limit) return fn(g, p);
  Geometry<N> a = g, b = g;
  const int64_t outer = g.size.back(), half = outer / 2;
  a.size.back() = half;
  b.size.back() = outer - half;
  Ptrs<N> pb = p;
  for (int k = 0; k < N; ++k) pb.p[k] += half * g.stride.back()[k];
  for (Geometry<N>* h : {&a, &b})
    if (h->size.back() == 1) {
      h->size.pop_back();
      h->stride.pop_back();
    }
  for_each_piece(a, p, limit, fn);
  for_each_piece(b, pb, limit, fn);
}

template <int N>
OffsetCalc<N> make_offset_calc(const Geometry<N>& g) {
  OffsetCalc<N> oc;
  oc.ndim = static_cast<int>(g.size.size());
  for (int d = 0; d < oc.ndim; ++d) {
    oc.size[d] = IntDiv(static_cast<uint32_t>(g.size[d]));
    for (int k = 0; k < N; ++k) oc.stride[d][k] = g.stride[d][k];
  }
  return oc;
}

// Calls fn(slice, ptrs) for slices of g with at most kMaxDims dims: a layout
// that needs more (a permuted view of a 9-d or larger tensor) runs one slice
// per index of its outermost dims. Rare, so a few more launches are fine.
template <int N, typename Fn>
void for_each_low_dim_slice(const Geometry<N>& g, const Ptrs<N>& p, const Fn& fn) {
  if (static_cast<int>(g.size.size()) <= kMaxDims) return fn(g, p);
  Geometry<N> inner = g;
  inner.size.pop_back();
  inner.stride.pop_back();
  Ptrs<N> q = p;
  for (int64_t i = 0; i < g.size.back(); ++i) {
    for (int k = 0; k < N; ++k) q.p[k] = p.p[k] + i * g.stride.back()[k];
    for_each_low_dim_slice<N>(inner, q, fn);
  }
}

// The strided kernel indexes in 32 bits: tensors of 2^31 elements or more
// run as several launches.
template <typename F, typename Out, typename... In>
void launch_strided(const Geometry<1 + sizeof...(In)>& g, const Ptrs<1 + sizeof...(In)>& p, const F& f,
                    int device) {
  constexpr int N = 1 + sizeof...(In);
  for_each_low_dim_slice<N>(g, p, [&](const Geometry<N>& slice, const Ptrs<N>& sp) {
    for_each_piece<N>(slice, sp, std::numeric_limits<int32_t>::max(), [&](const Geometry<N>& piece, const Ptrs<N>& pp) {
      int64_t n = 1;
      for (int64_t s : piece.size) n *= s;
      strided_kernel<F, Out, In...><<<grid_for(n, kThreads, device), kThreads, 0, stream()>>>(
          static_cast<uint32_t>(n), make_offset_calc<N>(piece), pp, f);
      HG_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace detail

// out[i] = f(Elem<In>::load(in[i])...), stored with Elem<Out>::store. Out and
// In are element types (Half, float, bool, raw_t<..>, ...); f takes and
// returns their compute types. Every input has out's shape (broadcast views
// with stride 0 are fine); all live on out's device.
template <typename Out, typename... In, typename F, typename... Ts>
void elementwise(const char* op, const F& f, const Tensor& out, const Ts&... in) {
  static_assert(sizeof...(In) == sizeof...(Ts), "elementwise: one element type per input tensor");
  constexpr int N = 1 + sizeof...(In);
  const int device = common_device(op, {&out, &in...});
  const std::array<const Tensor*, N> ts{&out, &in...};
  const std::array<size_t, N> sizes{sizeof(storage_t<Out>), sizeof(storage_t<In>)...};
  for (int k = 0; k < N; ++k) {
    HG_CHECK(ts[k]->shape() == out.shape(), "{}: input {} does not have the output's shape {}", op,
             ts[k]->describe(), out.describe());
    HG_CHECK(itemsize(ts[k]->dtype()) == sizes[k], "{}: {} does not match the kernel's element type", op,
             ts[k]->describe());
  }
  if (out.numel() == 0) return;
  DeviceGuard guard(device);
  Ptrs<N> p;
  for (int k = 0; k < N; ++k) p.p[k] = static_cast<char*>(ts[k]->data_ptr());
  detail::Geometry<N> g = detail::coalesce<N>(out.shape(), ts);

  // One dense run (every input contiguous or a broadcast scalar): 16-byte vectors.
  constexpr size_t widest = std::max({sizeof(storage_t<Out>), sizeof(storage_t<In>)...});
  constexpr int VEC = static_cast<int>(std::clamp<size_t>(16 / widest, 1, 8));
  bool dense = g.size.size() <= 1;
  unsigned scalar_mask = 0;
  bool aligned = true;
  for (int k = 0; k < N && dense; ++k) {
    const int64_t st = g.size.empty() ? static_cast<int64_t>(sizes[k]) : g.stride[0][k];
    if (k > 0 && st == 0) scalar_mask |= 1u << k;
    else dense = st == static_cast<int64_t>(sizes[k]);
    aligned = aligned && (st == 0 || reinterpret_cast<uintptr_t>(p.p[k]) % (sizes[k] * VEC) == 0);
  }
  if (dense && aligned) {
    const int64_t n = out.numel();
    vector_kernel<VEC, F, Out, In...>
        <<<grid_for(n / VEC, kThreads, device), kThreads, 0, stream()>>>(n, p, scalar_mask, f);
    HG_CUDA_CHECK(cudaGetLastError());
    return;
  }
  if (g.size.empty()) {  // a single element
    g.size.push_back(1);
    g.stride.push_back({});
  }
  detail::launch_strided<F, Out, In...>(g, p, f, device);
}

// ---- warp and block reductions ------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

// Every lane gets op over the warp's 32 values. The xor butterfly gives all
// lanes the same bits when op is commutative.
template <typename T, typename Op>
__device__ __forceinline__ T warp_allreduce(T v, const Op& op) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = op(v, shfl_xor(v, m));
  return v;
}

// Every thread of a 1-d block (a multiple of 32 threads, <= 1024) gets op over
// the block's values. smem holds >= 32 T; safe to call repeatedly.
template <typename T, typename Op>
__device__ __forceinline__ T block_allreduce(T v, const Op& op, T* smem) {
  v = warp_allreduce(v, op);
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  __syncthreads();  // a previous call may still be reading smem
  if ((threadIdx.x & 31) == 0) smem[warp] = v;
  __syncthreads();
  T r = smem[0];
  for (int w = 1; w < nwarps; ++w) r = op(r, smem[w]);  // same order in every thread: same bits
  return r;
}

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

}  // namespace halfgrad::kernels::cuda
