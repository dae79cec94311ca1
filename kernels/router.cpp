// The router: every entry of kernels/kernel_list.h goes to kernels/cpu or
// kernels/cuda by the device of its tensors (the dispatcher has already checked
// that they share one). Built without CUDA, a CUDA tensor cannot exist
// (allocation fails first), so every call goes to the CPU. Two entries do more
// than route and are written out below: copy (between host and device) and
// reduce (checks its indices). A CPU call first applies hg::set_num_threads to
// its thread (kernels/cpu/parallel.h).
#include <halfgrad/kernels/kernels.h>

#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/layout.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/parallel.h>
#if HALFGRAD_WITH_CUDA
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#define HG_ROUTE(t, name, args)  \
  do {                           \
    if ((t).device().is_cpu()) { \
      cpu::apply_num_threads();  \
      return cpu::name args;     \
    }                            \
    return cuda::name args;      \
  } while (0)
#else
#define HG_ROUTE(t, name, args) \
  do {                          \
    cpu::apply_num_threads();   \
    return cpu::name args;      \
  } while (0)
#endif

namespace halfgrad::kernels {

#define HG_KERNEL(ret, name, params, args, device_of) \
  ret name params { HG_ROUTE(device_of, name, args); }
#define HG_KERNEL_CHECKED(...)  // below
#include <halfgrad/kernels/kernel_list.h>
#undef HG_KERNEL_CHECKED
#undef HG_KERNEL

void copy(const Tensor& dst, const Tensor& src) {
  HG_CHECK(dst.shape() == src.shape(), "copy: shapes differ: {} and {}", dst.describe(), src.describe());
  if (dst.device() == src.device()) HG_ROUTE(dst, copy, (dst, src));
  if (dst.numel() == 0) return;
  // Between host and device: bytes move as one block in one dtype and one
  // layout (row-major or channels-last); a cast or a strided layout is done on
  // the side that has the data.
  const int device = dst.device().is_cuda() ? dst.device().index() : src.device().index();
  const auto same_block = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.strides() == b.strides() && non_overlapping_and_dense(a) &&
           non_overlapping_and_dense(b);
  };
  if (same_block(dst, src) || (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous())) {
    halfgrad::cuda::copy_bytes(dst.data_ptr(), dst.device().is_cuda(), src.data_ptr(), src.device().is_cuda(),
                               static_cast<size_t>(src.numel()) * itemsize(src.dtype()), device);
    return;
  }
  if (src.device().is_cpu()) {  // host -> device: cast/pack on the host in dst's layout, then move
    const MemoryFormat f = dst.suggest_memory_format();
    Tensor staged = make_tensor(src.shape(), TensorOptions(dst.dtype(), Device::cpu()), f);
    cpu::copy(staged, src);
    if (same_block(dst, staged)) return copy(dst, staged);
    Tensor moved = make_tensor(src.shape(), TensorOptions(dst.dtype(), dst.device()), f);
    copy(moved, staged);
    return copy(dst, moved);  // device-side strided copy
  }
  // device -> host: pack on the device in the source dtype and layout, move, cast on the host
  const MemoryFormat f = src.suggest_memory_format();
  const bool packed_already = non_overlapping_and_dense(src) && src.is_contiguous(f);
  Tensor packed = packed_already ? src : make_tensor(src.shape(), src.options(), f);
  if (!packed_already) copy(packed, src);
  Tensor host = make_tensor(src.shape(), TensorOptions(src.dtype(), Device::cpu()), f);
  copy(host, packed);
  cpu::copy(dst, host);
}

void reduce(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out,
            const Tensor& indices) {
  if (indices.defined()) {
    HG_CHECK((op == ReduceOp::Max || op == ReduceOp::Min) && indices.dtype() == DType::Int64 &&
                 indices.is_contiguous() && indices.shape() == out.shape() && indices.device() == in.device(),
             "reduce: indices {} must be contiguous int64 of the output's shape {} (max/min only)",
             indices.describe(), out.describe());
  }
  HG_ROUTE(in, reduce, (op, in, dims, out, indices));
}

}  // namespace halfgrad::kernels
