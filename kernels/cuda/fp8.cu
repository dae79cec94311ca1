// fp8 on CUDA: the quantiser (scale, round, saturate, and the amax of the
// input in the same pass), delayed scaling's update of the scales, and the
// scaled fp8 GEMM through cuBLASLt (Hopper's fp8 tensor cores). Scales and
// amaxes stay on the device: nothing here waits for the GPU.
#include <cublasLt.h>

#include <algorithm>
#include <string>

#include <halfgrad/kernels/cuda/cublas_check.h>
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>

namespace halfgrad::kernels::cuda {

cublasLtHandle_t cublaslt_handle(int device);  // kernels/cuda/gemm.cu: one handle per device

namespace {

static_assert(kThreads % 32 == 0, "the block reductions below work per warp");

// A float >= 0 (or a positive NaN) as an int keeps its order: atomicMax on
// the bits is a float max in which NaN (0x7fc00000) beats inf.
__device__ __forceinline__ void atomic_max_abs(float* addr, float v) {
  atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v));
}

template <typename Fp8, typename In>
__global__ void quantize_kernel(const storage_t<In>* in, int64_t n, const float* scale, uint8_t* out, float* amax,
                                unsigned long long* saturated) {
  constexpr float kMax = std::is_same_v<Fp8, Float8_e4m3fn> ? kE4M3Max : kE5M2Max;
  const float s = *scale;
  float m = 0.f;
  unsigned long long sat = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = static_cast<float>(Elem<In>::load(in[i]));
    const float a = fabsf(v);
    m = (a > m || a != a) ? a : m;
    const float x = v * s;
    sat += fabsf(x) > kMax;
    out[i] = std::is_same_v<Fp8, Float8_e4m3fn> ? float_to_e4m3fn_bits(x) : float_to_e5m2_bits(x, Fp8Overflow::Saturate);
  }
  // Block reduction, then one atomic per block.
  __shared__ float block_max[kThreads / 32];
  __shared__ unsigned long long block_sat[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    const float other = __shfl_down_sync(0xffffffffu, m, o);
    m = (other > m || other != other) ? other : m;
    sat += __shfl_down_sync(0xffffffffu, sat, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) block_max[warp] = m, block_sat[warp] = sat;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      m = (block_max[w] > m || block_max[w] != block_max[w]) ? block_max[w] : m;
      sat += block_sat[w];
    }
    atomic_max_abs(amax, m);
    if (saturated && sat) atomicAdd(saturated, sat);
  }
}

// One block per column: the history column into shared memory, its max, the
// new scale, then every row moved down one in parallel.
__global__ void update_scales_kernel(float* history, int64_t rows, int64_t n, float* scale, float* scale_inv,
                                     int64_t first, float max0, float max1, float max2, float margin_factor,
                                     bool most_recent) {
  extern __shared__ float col[];
  const int64_t c = first + blockIdx.x;
  const float fp8_max = blockIdx.x == 0 ? max0 : blockIdx.x == 1 ? max1 : max2;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) col[r] = history[r * n + c];
  __syncthreads();
  __shared__ float amax_shared;
  if (threadIdx.x == 0) {
    float amax = col[0];
    if (!most_recent)
      for (int64_t r = 1; r < rows; ++r) amax = (col[r] > amax || col[r] != col[r]) ? col[r] : amax;
    amax_shared = amax;
  }
  __syncthreads();
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) history[r * n + c] = r == 0 ? 0.f : col[r - 1];
  if (threadIdx.x == 0) {
    const float amax = amax_shared;
    const float candidate = fp8_max / amax / margin_factor;
    if (isfinite(amax) && amax > 0.f && isfinite(candidate)) scale[c] = candidate;
    scale_inv[c] = 1.0f / scale[c];
  }
}

cudaDataType fp8_type(DType t) {
  if (t == DType::Float8_e4m3fn) return CUDA_R_8F_E4M3;
  if (t == DType::Float8_e5m2) return CUDA_R_8F_E5M2;
  fail("scaled_mm: operands must be float8_e4m3fn or float8_e5m2, got {}", dtype_name(t));
}

cudaDataType out_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDA_R_32F;
    case DType::BFloat16: return CUDA_R_16BF;
    case DType::Float16: return CUDA_R_16F;
    default: break;
  }
  fail("scaled_mm: the output dtype must be float32, bfloat16 or float16, got {}", dtype_name(t));
}

// The row-major copy of a 2-d fp8 tensor (a contiguous scratch).
Tensor row_major(const Tensor& t) {
  if (t.stride(1) == 1 && t.stride(0) >= t.size(1)) return t;
  Tensor c = make_tensor(t.shape(), t.options());
  copy(c, t);
  return c;
}
// The column-major form of a 2-d fp8 tensor: a transposed view of a row-major [n, k].
Tensor column_major(const Tensor& t) {
  if (t.stride(0) == 1 && t.stride(1) >= t.size(0)) return t;
  Tensor c = make_tensor({t.size(1), t.size(0)}, t.options());
  copy(c, t.transpose(0, 1));
  return c.transpose(0, 1);
}

template <typename V>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

}  // namespace

void fp8_quantize(const Tensor& in, const Tensor& scale, const Tensor& out, const Tensor& amax,
                  const Tensor& saturated) {
  const int device = common_device("fp8_quantize", {&in, &scale, &out, &amax});
  HG_CHECK(out.is_contiguous() && scale.dtype() == DType::Float32 && amax.dtype() == DType::Float32,
           "fp8_quantize: expected a contiguous output and float32 scale and amax, got {}, {}, {}", out.describe(),
           scale.describe(), amax.describe());
  const int64_t n = in.numel();
  if (n == 0) return;
  HG_CHECK(in.is_contiguous(), "fp8_quantize: expected a contiguous input, got {}", in.describe());
  const Tensor& src = in;
  auto* sat = saturated.defined() ? static_cast<unsigned long long*>(saturated.data_ptr()) : nullptr;
  const unsigned grid = grid_for(n, kThreads, device);
  HG_DISPATCH_FLOATING(src.dtype(), "fp8_quantize", [&] {
    const auto* x = static_cast<const storage_t<scalar_t>*>(src.data_ptr());
    const auto* s = static_cast<const float*>(scale.data_ptr());
    auto* o = static_cast<uint8_t*>(out.data_ptr());
    auto* m = static_cast<float*>(amax.data_ptr());
    if (out.dtype() == DType::Float8_e4m3fn)
      quantize_kernel<Float8_e4m3fn, scalar_t><<<grid, kThreads, 0, stream()>>>(x, n, s, o, m, sat);
    else if (out.dtype() == DType::Float8_e5m2)
      quantize_kernel<Float8_e5m2, scalar_t><<<grid, kThreads, 0, stream()>>>(x, n, s, o, m, sat);
    else
      fail("fp8_quantize: the output must be float8_e4m3fn or float8_e5m2, got {}", out.describe());
  });
  HG_CUDA_CHECK(cudaGetLastError());
}

void fp8_update_scales(const Tensor& history, const Tensor& scale, const Tensor& scale_inv, int64_t first,
                       const std::vector<float>& fp8_max, float margin, bool most_recent) {
  common_device("fp8_update_scales", {&history, &scale, &scale_inv});
  HG_CHECK(history.dim() == 2 && history.is_contiguous() && fp8_max.size() >= 1 && fp8_max.size() <= 3,
           "fp8_update_scales: expected a contiguous [L, n] history and 1 to 3 columns, got {}", history.describe());
  const int64_t rows = history.size(0);
  const size_t shared = static_cast<size_t>(rows) * sizeof(float);
  HG_CHECK(shared <= 48 * 1024, "fp8_update_scales: an amax history of {} rows is longer than the 12288 supported",
           rows);
  auto m = [&](size_t i) { return i < fp8_max.size() ? fp8_max[i] : 0.f; };
  update_scales_kernel<<<static_cast<unsigned>(fp8_max.size()), kThreads, shared, stream()>>>(
      static_cast<float*>(history.data_ptr()), rows, history.size(1), static_cast<float*>(scale.data_ptr()),
      static_cast<float*>(scale_inv.data_ptr()), first, m(0), m(1), m(2), exp2f(margin), most_recent);
  HG_CUDA_CHECK(cudaGetLastError());
}

// out = (a * scale_a) @ (b * scale_b) (+ bias) through cuBLASLt's fp8 matmul.
// Hopper's fp8 kernels take "TN" only: in cuBLAS's column-major terms A
// transposed and B not, which for row-major tensors (C^T = B^T A^T, gemm.h)
// means `a` with unit column stride and `b` with unit row stride -- the layout
// of x @ w.t() for a row-major weight, so a Linear's forward copies nothing.
// Other layouts are copied once. Which combinations of types, sizes and
// alignments have a kernel is asked of cuBLASLt (its heuristic), never assumed.
void scaled_mm(const Tensor& a_in, const Tensor& b_in, const Tensor& scale_a, const Tensor& scale_b,
               const Tensor& bias_in, const Tensor& out) {
  const int device = common_device("scaled_mm", {&a_in, &b_in, &scale_a, &scale_b, &out});
  const int64_t m = a_in.size(0), k = a_in.size(1), n = b_in.size(1);
  if (m == 0 || n == 0) return;
  const Tensor a = row_major(a_in), b = column_major(b_in);
  const cudaDataType ta = fp8_type(a.dtype()), tb = fp8_type(b.dtype()), td = out_type(out.dtype());
  auto describe = [&] {
    return fmt::format("scaled_mm({} @ {} -> {})", a_in.describe(), b_in.describe(), out.describe());
  };
  // cuBLAS's A is our b (n x k, used transposed: stored k x n, ld = b's column stride),
  // its B is our a (stored k x m, ld = a's row stride), D is out (n x m, ld = n).
  cublasLtMatrixLayout_t la, lb, ld;
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, tb, k, n, b.stride(1)));
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, ta, k, m, a.stride(0)));
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, td, n, m, n));
  cublasLtMatmulDesc_t desc;
  HG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T});
  set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N});
  // cuBLAS's A is our b, so our scale_b is its A scale.
  set_attr(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_b.data_ptr());
  set_attr(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_a.data_ptr());
  set_attr(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{0});  // Hopper's exact fp32 accumulation
  Tensor bias = bias_in;
  if (bias.defined()) {
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BIAS});
    set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data_ptr());
    set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(td));
  }
  cublasLtMatmulPreference_t pref;
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace_cap = uint64_t{32} << 20;
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_cap,
                                                       sizeof(workspace_cap)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(device), desc, la, lb, ld, ld, pref, 1, &result, &found);
  auto cleanup = [&] {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
  };
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cleanup();
    fail("{}: cuBLASLt has no fp8 kernel for this problem on this GPU (status {}). fp8 GEMMs need compute "
         "capability 8.9 or newer, not both operands float8_e5m2, and sizes whose rows are multiples of 16 bytes: "
         "pad k and n to multiples of 16, or run this layer in bfloat16",
         describe(), cublasLtGetStatusName(st));
  }
  const float alpha = 1.f, beta = 0.f;
  void* workspace = result.workspaceSize ? halfgrad::cuda::allocate(result.workspaceSize, device) : nullptr;
  const cublasStatus_t run = cublasLtMatmul(cublaslt_handle(device), desc, &alpha, b.data_ptr(), la, a.data_ptr(), lb,
                                            &beta, out.data_ptr(), ld, out.data_ptr(), ld, &result.algo, workspace,
                                            result.workspaceSize, stream());
  if (workspace) halfgrad::cuda::release(workspace, device);  // stream-ordered: safe once queued (gemm.cu)
  cleanup();
  HG_CUBLAS_CHECK_CTX(run, describe());
}

}  // namespace halfgrad::kernels::cuda
