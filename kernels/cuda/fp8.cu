// fp8 on CUDA: the quantiser (scale, round, saturate, and the amax of the
// input in the same pass), delayed scaling's update of the scales, and the
// scaled fp8 GEMM through cuBLASLt (Hopper's fp8 tensor cores). Scales and
// amaxes stay on the device: nothing here waits for the GPU.
#include <cublasLt.h>

#include <algorithm>
#include <memory>
#include <string>

#include <halfgrad/kernels/cuda/cublas_check.h>
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/gemm_passes.h>
#include <halfgrad/kernels/plan_cache.h>
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
  const float s = scale ? *scale : 1.f;
  float m = 0.f;
  unsigned long long sat = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = static_cast<float>(Elem<In>::load(in[i]));
    const float a = fabsf(v);
    m = (a > m || a != a) ? a : m;
    const float x = v * s;
    sat += fabsf(x) > kMax;
    if (out)  // null: only the amax (scaled_mm's fallback for AMAX_D)
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
void set_attr(cublasLtMatmulDescOpaque_t* d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

uint32_t alignment_of(const void* p) {
  const auto bits = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && bits % a != 0) a /= 2;
  return a;
}

// One fp8 problem as cuBLASLt sees it, and what its heuristic answered.
struct Fp8PlanKey {
  int device;
  int64_t m, n, k, ld_b, ld_a;
  int a_dtype, b_dtype, out_dtype;
  bool bias, amax;
  uint32_t align_a, align_b, align_out, align_bias;
  auto operator<=>(const Fp8PlanKey&) const = default;
};

struct Fp8Plan {
  cublasLtMatrixLayoutOpaque_t a, b, d;
  cublasLtMatmulDescOpaque_t desc;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
  bool supported = false;
  std::string why;  // when not: the heuristic's status
};

// cuBLASLt takes layouts by non-const pointer but only reads them: a cached plan's serve as they are.
cublasLtMatrixLayout_t layout(const cublasLtMatrixLayoutOpaque_t& l) {
  return const_cast<cublasLtMatrixLayoutOpaque_t*>(&l);
}

void init_layout(cublasLtMatrixLayoutOpaque_t* l, cudaDataType type, int64_t rows, int64_t cols, int64_t ld) {
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
}

std::shared_ptr<const Fp8Plan> create_fp8_plan(const Fp8PlanKey& key) {
  halfgrad::cuda::RelaxedCaptureMode relaxed;  // host work only, also inside a graph capture
  auto plan = std::make_shared<Fp8Plan>();
  const auto out_dtype = static_cast<DType>(key.out_dtype);
  const cudaDataType td = out_type(out_dtype);
  // cuBLAS's A is our b (stored k x n, used transposed), its B our a (stored k x m), D is out (n x m).
  init_layout(&plan->a, fp8_type(static_cast<DType>(key.b_dtype)), key.k, key.n, key.ld_b);
  init_layout(&plan->b, fp8_type(static_cast<DType>(key.a_dtype)), key.k, key.m, key.ld_a);
  init_layout(&plan->d, td, key.n, key.m, key.n);
  HG_CUBLAS_CHECK(cublasLtMatmulDescInit(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(&plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T});
  set_attr(&plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N});
  set_attr(&plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{0});  // Hopper's exact fp32 accumulation
  if (key.bias) {
    set_attr(&plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BIAS});
    set_attr(&plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(td));
  }
  if (key.amax) {  // the pointer itself is set per call; the heuristic must know it is wanted
    void* placeholder = nullptr;
    set_attr(&plan->desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, placeholder);
  }
  cublasLtMatmulPreferenceOpaque_t pref;
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
  const uint64_t workspace_cap = uint64_t{32} << 20;
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_cap, sizeof(workspace_cap)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_out},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_out}};
  for (const auto& [attr, value] : aligns)
    HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, attr, &value, sizeof(value)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(key.device), &plan->desc, &plan->a,
                                                           &plan->b, &plan->d, &plan->d, &pref, 1, &result, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan->algo = result.algo;
    plan->workspace_bytes = std::min<size_t>(result.workspaceSize, workspace_cap);
    plan->supported = true;
  } else {
    plan->why = fmt::format("heuristic status {}, {} algorithms{}{}", cublasLtGetStatusName(st), found,
                            key.bias ? ", with the bias epilogue" : "", key.amax ? ", with the output's amax" : "");
  }
  return plan;
}

std::shared_ptr<const Fp8Plan> fp8_plan(const Fp8PlanKey& key) {
  static PlanCache<Fp8PlanKey, Fp8Plan> plans(1024);
  return plans.get(key, [](const Fp8PlanKey& k) { return create_fp8_plan(k); });
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
// Other layouts are copied once. Which combinations of types, sizes, bias and
// alignment have a kernel is asked of cuBLASLt's heuristic, never assumed, and
// the answer is cached per problem (as gemm.cu's plans).
void scaled_mm(const Tensor& a_in, const Tensor& b_in, const Tensor& scale_a, const Tensor& scale_b,
               const Tensor& bias, const Tensor& out, const Tensor& amax_out) {
  const int device = common_device("scaled_mm", {&a_in, &b_in, &scale_a, &scale_b, &out});
  const int64_t m = a_in.size(0), k = a_in.size(1), n = b_in.size(1);
  if (m == 0 || n == 0) return;
  const Tensor a = row_major(a_in), b = column_major(b_in);
  auto describe = [&] {
    return fmt::format("scaled_mm({} @ {} -> {})", a_in.describe(), b_in.describe(), out.describe());
  };
  Fp8PlanKey key{device, m, n, k, b.stride(1), a.stride(0), static_cast<int>(a.dtype()), static_cast<int>(b.dtype()),
                 static_cast<int>(out.dtype()), bias.defined(), amax_out.defined(),
                 alignment_of(a.data_ptr()), alignment_of(b.data_ptr()), alignment_of(out.data_ptr()),
                 bias.defined() ? alignment_of(bias.data_ptr()) : 0u};
  std::shared_ptr<const Fp8Plan> plan = fp8_plan(key);
  // The output's amax in the epilogue where cuBLASLt has it (fp8 outputs
  // surely; others by the heuristic's answer), else one reduction pass after.
  bool amax_pass = amax_out.defined() && !plan->supported;
  if (amax_pass) {
    key.amax = false;
    plan = fp8_plan(key);
  }
  // cuBLASLt's bias epilogue with an fp8 GEMM takes only some bias types (a
  // float32 output may want a bfloat16 bias): without one, a float32 output
  // gets the bias in a separate pass (one rounding, as the CPU's); a half
  // output would round twice, so that is an Error instead.
  const bool bias_pass = bias.defined() && !plan->supported && out.dtype() == DType::Float32;
  if (bias_pass) {
    key.bias = false;
    key.align_bias = 0;
    amax_pass = amax_pass || key.amax;  // the amax must see the bias: after the bias pass
    key.amax = false;
    plan = fp8_plan(key);
  }
  HG_CHECK(plan->supported,
           "{}: cuBLASLt has no fp8 kernel for this problem on this GPU ({}). fp8 GEMMs need compute capability "
           "8.9 or newer, not both operands float8_e5m2, and rows that are multiples of 16 bytes: pad k and n to "
           "multiples of 16, or run this layer in bfloat16",
           describe(), plan->why);
  const float alpha = 1.f, beta = 0.f;
  cublasLtMatmulDescOpaque_t desc = plan->desc;  // a copy: the per-call pointers go into it
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v) {
    HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&desc, attr, &v, sizeof(v)));
  };
  // cuBLAS's A is our b, so our scale_b is its A scale.
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_b.data_ptr());
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_a.data_ptr());
  if (key.bias) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data_ptr());
  if (key.amax) set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_out.data_ptr());
  void* workspace = plan->workspace_bytes ? halfgrad::cuda::allocate(plan->workspace_bytes, device) : nullptr;
  const cublasStatus_t run =
      cublasLtMatmul(cublaslt_handle(device), &desc, &alpha, b.data_ptr(), layout(plan->a), a.data_ptr(),
                     layout(plan->b), &beta, out.data_ptr(), layout(plan->d), out.data_ptr(), layout(plan->d),
                     &plan->algo, workspace, plan->workspace_bytes, stream());
  if (workspace) halfgrad::cuda::release(workspace, device);  // stream-ordered: safe once queued (gemm.cu)
  HG_CUBLAS_CHECK_CTX(run, describe());
  if (bias_pass) gemm_passes::epilogue_pass(gemm_passes::Act::Identity, out, 1.0, bias, Tensor(), out);
  if (amax_pass) {  // max |out| as stored, by the quantiser's reduction without its stores
    HG_CUDA_CHECK(cudaMemsetAsync(amax_out.data_ptr(), 0, sizeof(float), stream()));
    HG_DISPATCH_FLOATING(out.dtype(), "scaled_mm", [&] {
      quantize_kernel<Float8_e4m3fn, scalar_t><<<grid_for(out.numel(), kThreads, device), kThreads, 0, stream()>>>(
          static_cast<const storage_t<scalar_t>*>(out.data_ptr()), out.numel(), nullptr, nullptr,
          static_cast<float*>(amax_out.data_ptr()), nullptr);
    });
    HG_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace halfgrad::kernels::cuda
