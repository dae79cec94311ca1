// CUDA elementwise kernels: the per-element math of kernels/math.h (the same
// functions the CPU backend runs) inside the loops of kernels/cuda/loops.cuh.
// Half types load as float, compute in float and round once on the store.
#include <cstring>
#include <limits>

#include <halfgrad/kernels/cpu/cpu_kernels.h>  // cpu::convert: fill values round exactly as on the CPU
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>
#include <halfgrad/kernels/math.h>

namespace halfgrad::kernels::cuda {

using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {

template <UnaryOp Op, typename A>
struct UnaryF {
  A a, b;
  __device__ __forceinline__ A operator()(A x) const { return math::unary_fn<Op>(x, a, b); }
};

template <BinaryOp Op, typename A>
struct BinaryF {
  A alpha;
  __device__ __forceinline__ A operator()(A x, A y) const { return math::binary_fn<Op>(x, y, alpha); }
};

template <BinaryOp Op, typename A>
struct CompareF {
  __device__ __forceinline__ bool operator()(A x, A y) const { return math::compare_fn<Op>(x, y); }
};

// On storage bits: where never converts, so NaN payloads survive as on the CPU.
template <typename S>
struct WhereF {
  __device__ __forceinline__ S operator()(bool c, S x, S y) const { return c ? x : y; }
};

template <typename S>
struct ConstF {
  S v;
  __device__ __forceinline__ S operator()() const { return v; }
};

template <typename S>
struct IdentityF {
  __device__ __forceinline__ S operator()(S x) const { return x; }
};

// cpu::convert on compute types: through S's compute type; bool is x != 0.
template <typename D, typename S>
struct CastF {
  __device__ __forceinline__ acc_t<D> operator()(acc_t<S> x) const {
    if constexpr (std::is_same_v<D, bool>) return x != acc_t<S>(0);
    else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<acc_t<S>>) return float_to_int64(x);
    else return static_cast<acc_t<D>>(x);
  }
};

void check_dtype(const char* op, const Tensor& t, DType want) {
  HG_CHECK(t.dtype() == want, "{}: expected {} for {} (the op casts its inputs before calling the kernel)", op,
           dtype_name(want), t.describe());
}

// The bit pattern of a dtype as a raw unsigned element.
template <size_t Bytes>
void raw_copy(const Tensor& dst, const Tensor& src) {
  elementwise<raw_t<Bytes>, raw_t<Bytes>>("copy", IdentityF<raw_t<Bytes>>{}, dst, src);
}

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out, kernels::UnaryParams p) {
  check_dtype("unary", out, in.dtype());
  HG_DISPATCH_NUMERIC(in.dtype(), "unary", [&] {
    using A = acc_t<scalar_t>;
    // Integer clamp bounds: NaN (no bound) becomes the type's extreme (as the CPU).
    auto bound = [](double v, bool upper) -> A {
      if constexpr (std::is_integral_v<A>) {
        if (v != v) return upper ? std::numeric_limits<A>::max() : std::numeric_limits<A>::min();
        return saturate_to_int64(v);  // as the CPU: 1e30 is no bound, not undefined
      } else {
        return static_cast<A>(v);
      }
    };
    const A a = bound(p.a, false), b = bound(p.b, true);
    auto run = [&]<UnaryOp Op>() {
      if constexpr (std::is_integral_v<A> && !math::unary_supports_int(Op)) {
        fail("unary: op is not defined for integer tensors ({})", in.describe());
      } else {
        elementwise<scalar_t, scalar_t>("unary", UnaryF<Op, A>{a, b}, out, in);
      }
    };
    HG_UNARY_OP_SWITCH(op, run);
    fail("unary: unknown op {} for {}", static_cast<int>(op), in.describe());
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  check_dtype("binary", b, a.dtype());
  HG_DISPATCH_NUMERIC(a.dtype(), "binary", [&] {
    using A = acc_t<scalar_t>;
    if (out.dtype() == DType::Bool) {
      auto compare = [&]<BinaryOp Op>() {
        elementwise<bool, scalar_t, scalar_t>("compare", CompareF<Op, A>{}, out, a, b);
      };
      HG_COMPARE_OP_SWITCH(op, compare);
    } else {
      check_dtype("binary", out, a.dtype());
      const A al = static_cast<A>(alpha);
      auto arith = [&]<BinaryOp Op>() {
        // div and pow promote integers to float32 before the kernel (ops/elementwise.cpp)
        if constexpr (std::is_integral_v<A> && math::binary_needs_float(Op)) {
          fail("binary: op {} of int64 tensors ({}) has no kernel; cast to a float dtype first", static_cast<int>(Op),
               a.describe());
        } else {
          elementwise<scalar_t, scalar_t, scalar_t>("binary", BinaryF<Op, A>{al}, out, a, b);
        }
      };
      HG_ARITH_OP_SWITCH(op, arith);
    }
    fail("binary: op {} cannot write {} from {}", static_cast<int>(op), out.describe(), a.describe());
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_dtype("where", cond, DType::Bool);
  check_dtype("where", b, a.dtype());
  check_dtype("where", out, a.dtype());
  // Selection moves bits: one kernel per element size, not per dtype.
  auto run = [&]<typename S>() { elementwise<S, bool, S, S>("where", WhereF<S>{}, out, cond, a, b); };
  switch (itemsize(a.dtype())) {
    case 1: return run.template operator()<uint8_t>();
    case 2: return run.template operator()<uint16_t>();
    case 4: return run.template operator()<uint32_t>();
    default: return run.template operator()<uint64_t>();
  }
}

void fill(const Tensor& out, double value) {
  const int device = common_device("fill", {&out});
  if (out.numel() == 0) return;
  if (out.is_contiguous())  // the runtime's fill: a memset when the bytes allow
    return halfgrad::cuda::fill(out.data_ptr(), out.dtype(), static_cast<size_t>(out.numel()), value, device);
  HG_DISPATCH_STORAGE(out.dtype(), "fill", [&] {
    const scalar_t v = cpu::convert<scalar_t>(value);
    using R = raw_t<sizeof(scalar_t)>;
    R bits;
    std::memcpy(&bits, &v, sizeof(R));
    elementwise<R>("fill", ConstF<R>{bits}, out);
  });
}

void copy(const Tensor& dst, const Tensor& src) {
  HG_CHECK(dst.shape() == src.shape(), "copy: shapes differ: {} and {}", dst.describe(), src.describe());
  const int device = common_device("copy", {&dst, &src});
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype()) {
    if (dst.is_contiguous() && src.is_contiguous()) {
      DeviceGuard guard(device);
      HG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.numel() * itemsize(dst.dtype()),
                                    cudaMemcpyDeviceToDevice, stream()));
      return;
    }
    switch (itemsize(dst.dtype())) {
      case 1: return raw_copy<1>(dst, src);
      case 2: return raw_copy<2>(dst, src);
      case 4: return raw_copy<4>(dst, src);
      default: return raw_copy<8>(dst, src);
    }
  }
  HG_DISPATCH_STORAGE(dst.dtype(), "copy", [&] {
    using D = scalar_t;
    HG_DISPATCH_STORAGE(src.dtype(), "copy", [&] {
      if constexpr (!std::is_same_v<D, scalar_t>)  // same dtypes were handled above
        elementwise<D, scalar_t>("copy", CastF<D, scalar_t>{}, dst, src);
    });
  });
}

}  // namespace halfgrad::kernels::cuda
