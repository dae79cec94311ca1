#pragma once
// Multi-tensor launches, shared by the loss-scaler kernels (amp/cuda) and the
// fused optimizers (optim/cuda): one kernel launch covers many tensors.
//
// Layout. Every tensor is cut into chunks of kChunk elements and each block
// of the grid works on one chunk. The launch's metadata (each tensor's
// addresses and size, and where its chunks start in the grid) is a struct
// passed BY VALUE as the kernel parameter, not copied to the device first:
//  - nothing is staged through host memory, so no cudaMemcpy (pageable copies
//    are synchronous for the host) and no pinned buffer whose reuse would need
//    an event;
//  - a kernel launched during CUDA-graph capture keeps its parameters in the
//    graph, so a captured step replays with the same metadata.
// The struct stays under 4 KB, the parameter limit of every CUDA version and
// driver (12.1+ allows 32 KB, but only with a recent driver); a list longer
// than one struct holds is split into several launches.
//
// A block finds its tensor by a binary search over chunk_begin (in the
// constant bank, the same for every thread of the block, so no divergence):
// block_chunk(args). Every kernel walks its chunk with for_each_pack.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad::cuda_mt {

// Elements per block. A multiple of 8, so a chunk of a 16-byte-aligned tensor
// starts 16-byte aligned for every dtype (8 halves, 4 floats, 2 doubles) and
// vector loads stay aligned; large enough that a block's setup (search,
// reading the flags) is amortised over 64 elements per thread.
inline constexpr int64_t kChunk = 16384;
inline constexpr int kThreads = 256;
// Under the 4 KB (4096 byte) kernel-parameter limit, with room to spare.
inline constexpr size_t kMaxParamBytes = 4000;

// 16 bytes of T, loaded and stored with one vector instruction.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The floating dtypes a kernel over gradients switches on, one per tensor.
enum class FloatKind : uint8_t { F32, F16, BF16, F64 };

// A launch's list of floating tensors (the loss scaler's and clip_grad_norm_'s
// kernels extend it with their own arguments): each tensor's base address,
// size, first chunk in the grid, dtype, and whether vector loads may be used.
template <int MaxTensors>
struct FloatTensorList {
  void* data[MaxTensors];
  int64_t numel[MaxTensors];
  int32_t chunk_begin[MaxTensors + 1];
  uint8_t kind[MaxTensors];
  uint8_t vec[MaxTensors];  // base address 16-byte aligned: vector loads
  int32_t count;
};

// t's FloatKind; an Error naming `op` for a tensor that is not floating.
inline FloatKind float_kind(const Tensor& t, const char* op) {
  switch (t.dtype()) {
    case DType::Float32: return FloatKind::F32;
    case DType::Float16: return FloatKind::F16;
    case DType::BFloat16: return FloatKind::BF16;
    case DType::Float64: return FloatKind::F64;
    default:
      fail("{}: gradient {} is not a floating tensor; only float32, float16, bfloat16 and float64 gradients are "
           "supported",
           op, t.describe());
  }
}

// Stores t in slot `slot` of a FloatTensorList (pack_launches' `add`).
template <typename List>
void set_slot(List& list, int slot, const Tensor& t, const char* op) {
  list.data[slot] = t.data_ptr();
  list.numel[slot] = t.numel();
  list.kind[slot] = static_cast<uint8_t>(float_kind(t, op));
  list.vec[slot] = aligned16(t.data_ptr());
}

using cuda::stream;

#if defined(__CUDACC__)
// The tensor of this block: the last t with chunk_begin[t] <= blockIdx.x.
__device__ __forceinline__ int find_tensor(const int32_t* chunk_begin, int count) {
  const int32_t block = static_cast<int32_t>(blockIdx.x);
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (chunk_begin[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// This block's share of a launch: tensor t, elements [begin, end).
struct BlockChunk {
  int t;
  int64_t begin, end;
};
template <typename Args>
__device__ __forceinline__ BlockChunk block_chunk(const Args& a) {
  const int t = find_tensor(a.chunk_begin, a.count);
  const int64_t begin = static_cast<int64_t>(blockIdx.x - a.chunk_begin[t]) * kChunk;
  return {t, begin, ::min(a.numel[t], begin + kChunk)};  // CUDA's min: halfgrad::min is the tensor op
}

// The one chunk loop of every multi-tensor kernel: this thread's elements of
// [begin, end), threads striding by the block. With `vec` (the tensor's base
// is 16-byte aligned, and so is every chunk) whole packs first, pack(i) for
// elements i .. i + Pack<T>::kSize - 1 (one 16-byte load and store), then
// one(i) for each element left.
template <typename T, typename PackFn, typename OneFn>
__device__ __forceinline__ void for_each_pack(int64_t begin, int64_t end, bool vec, PackFn&& pack, OneFn&& one) {
  if (vec) {
    constexpr int V = Pack<T>::kSize;
    const int64_t vend = begin + (end - begin) / V * V;
    for (int64_t i = begin + static_cast<int64_t>(threadIdx.x) * V; i < vend;
         i += static_cast<int64_t>(blockDim.x) * V)
      pack(i);
    begin = vend;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) one(i);
}
#endif

using cuda::DeviceGuard;

// Packs tensors 0..n-1 into `args` launch by launch. `Args` has
// `int32_t chunk_begin[MaxTensors + 1]` and `int32_t count`.
//   numel(i)            elements of tensor i (empty tensors are left out)
//   add(args, slot, i)  stores tensor i's pointers and size in slot `slot`
//   launch(args, blocks) launches one kernel over `blocks` chunks
// A launch is flushed when the struct is full or the grid would pass 2^31 - 1
// blocks. Each launch copies `args`, so refilling it afterwards is safe.
template <int MaxTensors, typename Args, typename Numel, typename Add, typename Launch>
void pack_launches(Args& args, size_t n, Numel numel, Add add, Launch launch) {
  int count = 0;
  int64_t chunks = 0;
  auto flush = [&] {
    if (count == 0) return;
    args.count = count;
    args.chunk_begin[count] = static_cast<int32_t>(chunks);
    launch(args, static_cast<unsigned>(chunks));
    count = 0;
    chunks = 0;
  };
  for (size_t i = 0; i < n; ++i) {
    const int64_t elems = numel(i);
    if (elems == 0) continue;
    const int64_t c = (elems + kChunk - 1) / kChunk;
    HG_CHECK(c <= INT32_MAX, "multi-tensor launch: a tensor of {} elements is too large for one grid", elems);
    if (count == MaxTensors || chunks + c > INT32_MAX) flush();
    args.chunk_begin[count] = static_cast<int32_t>(chunks);
    add(args, count, i);
    ++count;
    chunks += c;
  }
  flush();
}

}  // namespace halfgrad::cuda_mt
