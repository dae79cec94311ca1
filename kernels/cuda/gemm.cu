// The CUDA GEMM layer (see gemm.h): cuBLASLt with one handle per device, a
// per-call workspace from the stream-ordered pool, and a plan cache so the hot
// path makes no heuristic query. The elementwise passes for what cuBLASLt cannot fuse
// (exact GELU, activation gradients, fallbacks) are in gemm_passes.cu.
//
// Row-major <-> column-major: out = A @ B runs as cuBLAS D = op(A') op(B')
// with A' = our B and B' = our A (gemm.h explains why nothing moves). Below,
// "cuA/cuB/cuD" name cuBLAS's operands, "a/b/out" ours.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <halfgrad/core/alias.h>
#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/cuda/policy.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/kernels/cuda/cublas_check.h>
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/gemm.h>
#include <halfgrad/kernels/cuda/gemm_passes.h>
#include <halfgrad/kernels/cuda/per_device.h>
#include <halfgrad/kernels/numeric_settings.h>
#include <halfgrad/kernels/plan_cache.h>
#include <halfgrad/kernels/math.h>

namespace halfgrad::kernels::cuda {
namespace {

using namespace gemm_passes;  // Act, epilogue_pass, zero, act_backward_pass, sum_rows

// ============================================================================================
// Settings

std::atomic<bool> g_fusion{true};
std::atomic<bool> g_relu_fusion{false};  // cuBLASLt's RELU maps NaN to 0: off unless allowed (gemm.h)

// ============================================================================================
// Device, stream, handle, workspace

using halfgrad::cuda::DeviceGuard;
using halfgrad::cuda::RelaxedCaptureMode;
using halfgrad::cuda::stream;

// One cuBLASLt handle per device, created on first use (PerDevice: never destroyed).
cublasLtHandle_t handle(int device) {
  static PerDevice<cublasLtHandle_t> handles;
  return handles.get(device, "matmul", [](cublasLtHandle_t& h) { HG_CUBLAS_CHECK(cublasLtCreate(&h)); });
}

// cuBLASLt's workspace (split-K partial sums, epilogue scratch). 32 MiB is
// what cuBLAS recommends for Hopper: the heuristic may choose algorithms that
// need up to this much.
constexpr uint64_t kWorkspaceBytes = uint64_t{32} << 20;

// The workspace of one call: exactly what its algorithm needs (the heuristic's
// workspaceSize, often 0), from the stream-ordered pool on the call's stream,
// freed (cudaFreeAsync) on that stream right after the GEMM is queued. Stream
// order makes that safe: the next allocation on this stream that reuses the
// block runs after the GEMM, and another stream reuses it only once the pool
// knows the free (so the GEMM) is done. Nothing is keyed by a stream handle
// (a destroyed stream's handle can come back for a new stream while the old
// one's work still runs) and nothing outlives the call; in steady state the
// pool hands back a cached block without reaching the driver. Inside a CUDA
// graph capture the pair becomes the graph's own allocation and free nodes,
// at a fixed address on every replay.
class Workspace {
 public:
  Workspace(size_t nbytes, int device) : device_(device), ptr_(nbytes > 0 ? halfgrad::cuda::allocate(nbytes, device) : nullptr) {}
  ~Workspace() { halfgrad::cuda::release(ptr_, device_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }

 private:
  int device_;
  void* ptr_;
};

// ============================================================================================
// Problem description

cudaDataType cuda_dtype(DType t) {
  switch (t) {
    case DType::Float32: return CUDA_R_32F;
    case DType::Float64: return CUDA_R_64F;
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    default: break;
  }
  fail("gemm: dtype {} is not supported (float32, float64, float16 or bfloat16)", dtype_name(t));
}

cublasComputeType_t compute_type(DType t) {
  if (t == DType::Float64) return CUBLAS_COMPUTE_64F;
  if (t == DType::Float32 && float32_matmul_allows_tf32())
    return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;  // float32 exact; float16/bfloat16 inputs with float32 accumulation
}

// One operand as cuBLAS sees it: a column-major rows x cols matrix with
// leading dimension ld, used as op(X).
struct Operand {
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
  int32_t op = CUBLAS_OP_N;
  auto operator<=>(const Operand&) const = default;
};

// The logical R x C matrix M (element (i, j) at i * sr + j * sc) as op(X) for
// a column-major X, or nothing when no such X exists (a non-unit stride on
// both sides, a zero or negative stride): the caller copies it then.
// ld must be >= X's rows (cuBLASLt rejects overlapping columns); when a dim is
// 1 its stride never moves a pointer, so any valid ld will do.
std::optional<Operand> as_column_major(int64_t R, int64_t C, int64_t sr, int64_t sc, int64_t bs) {
  if (sr < 0 || sc < 0 || bs < 0) return std::nullopt;
  const bool col_ok = (sr == 1 || R == 1) && (C == 1 || sc >= R);  // X = M
  const bool row_ok = (sc == 1 || C == 1) && (R == 1 || sr >= C);  // X = M^T
  const Operand col{R, C, C == 1 ? R : sc, bs, CUBLAS_OP_N};
  const Operand row{C, R, R == 1 ? C : sr, bs, CUBLAS_OP_T};
  // Prefer the orientation with a real unit stride (a vector fits either).
  if (col_ok && sr == 1 && R > 1) return col;
  if (row_ok && sc == 1 && C > 1) return row;
  if (col_ok) return col;
  if (row_ok) return row;
  return std::nullopt;
}

// Largest power of two (<= 256) dividing the pointer and every byte offset
// the kernel steps by. cuBLASLt chooses vectorised kernels from these.
uint32_t alignment(const void* p, std::initializer_list<int64_t> byte_steps) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p);
  for (int64_t s : byte_steps) bits |= static_cast<uint64_t>(s);
  uint32_t a = 1;
  while (a < 256 && (bits & a) == 0) a <<= 1;
  return a;
}

// One cublasLtMatmul call, described by pointers.
struct Call {
  const char* op = "gemm";
  int device = 0;
  DType dtype = DType::Float32;    // a's and b's
  DType d_dtype = DType::Float32;  // out's: dtype, or float32 for a half GEMM's float32 sums
  int64_t batch = 1;
  Operand a, b, d;  // cuA (our b), cuB (our a), cuC = cuD (our out)
  const void* a_ptr = nullptr;
  const void* b_ptr = nullptr;
  void* d_ptr = nullptr;
  Tensor keep_a, keep_b;  // operands copied into scratch, alive until the call is queued
  float beta = 0.f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // bias (read), or the bias gradient (written)
  const void* aux = nullptr;   // ReLU mask or GELU input (written forward, read backward)
  int64_t aux_ld = 0;

  // "gemm: float16 [64 x 32] @ [32 x 16] (cuBLASLt: ...)", in our row-major terms.
  std::string describe() const {
    const int64_t m = d.cols, n = d.rows, k = b.op == CUBLAS_OP_N ? b.rows : b.cols;  // op(cuB) is k x m
    return fmt::format("{}: {} {}[{} x {}] @ [{} x {}] (cuBLASLt: transa={} transb={} lda={} ldb={} ldd={}, "
                       "epilogue {}{})",
                       op, dtype_name(dtype), batch > 1 ? fmt::format("{} x ", batch) : std::string(), m, k, k, n,
                       a.op == CUBLAS_OP_N ? 'N' : 'T', b.op == CUBLAS_OP_N ? 'N' : 'T', a.ld, b.ld, d.ld,
                       static_cast<unsigned>(epilogue),
                       aux != nullptr ? fmt::format(", aux ld {}", aux_ld) : std::string());
  }
};

// ============================================================================================
// Plan cache: layouts + heuristic result per problem

struct PlanKey {
  int device;
  int32_t data_type;  // cudaDataType
  int32_t d_type;     // cudaDataType of C and D
  int32_t compute;    // cublasComputeType_t
  int64_t batch;
  Operand a, b, d;
  uint32_t epilogue;
  int64_t aux_ld;
  // The heuristic's choice depends on alignment; the bias and aux pointers'
  // alignment too (cuBLASLt reads their values during the query).
  uint32_t align_a, align_b, align_d, align_bias, align_aux;
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  // Built once, then only read (by any number of threads at once).
  cublasLtMatrixLayoutOpaque_t a{}, b{}, d{};
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;  // what algo needs (<= kWorkspaceBytes)
  bool supported = false;      // false: no algorithm for this epilogue (the caller falls back)
};

PlanKey key_of(const Call& c) {
  auto operand_alignment = [&](const void* p, const Operand& o, DType t) {
    const int64_t es = static_cast<int64_t>(itemsize(t));
    return alignment(p, {o.cols > 1 ? o.ld * es : 0, c.batch > 1 ? o.batch_stride * es : 0});
  };
  PlanKey k{};
  k.device = c.device;
  k.data_type = cuda_dtype(c.dtype);
  k.d_type = cuda_dtype(c.d_dtype);
  k.compute = compute_type(c.dtype);
  k.batch = c.batch;
  k.a = c.a;
  k.b = c.b;
  k.d = c.d;
  k.epilogue = static_cast<uint32_t>(c.epilogue);
  k.aux_ld = c.aux_ld;
  k.align_a = operand_alignment(c.a_ptr, c.a, c.dtype);
  k.align_b = operand_alignment(c.b_ptr, c.b, c.dtype);
  k.align_d = operand_alignment(c.d_ptr, c.d, c.d_dtype);
  k.align_bias = c.bias != nullptr ? alignment(c.bias, {}) : 0;
  k.align_aux = c.aux != nullptr ? alignment(c.aux, {}) : 0;  // its ld is in the key (and in bits for a mask)
  return k;
}

template <typename V>
void set_layout_attr(cublasLtMatrixLayoutOpaque_t* l, cublasLtMatrixLayoutAttribute_t attr, const V& v) {
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof(v)));
}

void init_layout(cublasLtMatrixLayoutOpaque_t* l, cudaDataType type, const Operand& o, int64_t batch) {
  HG_CUBLAS_CHECK(
      cublasLtMatrixLayoutInit(l, type, static_cast<uint64_t>(o.rows), static_cast<uint64_t>(o.cols), o.ld));
  if (batch > 1) {
    set_layout_attr(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set_layout_attr(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, static_cast<int64_t>(o.batch_stride));
  }
}

template <typename V>
void set_desc_attr(cublasLtMatmulDescOpaque_t* d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

// The operation descriptor. Built per call on the stack (no allocation: a few
// stores): it carries the bias/aux pointers, which change from call to call,
// so a cached one could not be shared by two threads.
void build_desc(cublasLtMatmulDescOpaque_t* desc, const PlanKey& key, const Call& c) {
  const cudaDataType scale = key.data_type == CUDA_R_64F ? CUDA_R_64F : CUDA_R_32F;
  HG_CUBLAS_CHECK(cublasLtMatmulDescInit(desc, static_cast<cublasComputeType_t>(key.compute), scale));
  set_desc_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(c.a.op));
  set_desc_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(c.b.op));
  set_desc_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(c.epilogue));
  if (c.bias != nullptr) set_desc_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
  if (c.aux != nullptr) {
    set_desc_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
    set_desc_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(c.aux_ld));
  }
}

std::shared_ptr<const Plan> create_plan(const PlanKey& key, const Call& c) {
  RelaxedCaptureMode relaxed;  // a cache miss inside a graph capture: the query is host work only
  auto plan = std::make_shared<Plan>();
  const auto type = static_cast<cudaDataType>(key.data_type);
  init_layout(&plan->a, type, key.a, key.batch);
  init_layout(&plan->b, type, key.b, key.batch);
  init_layout(&plan->d, static_cast<cudaDataType>(key.d_type), key.d, key.batch);

  cublasLtMatmulDescOpaque_t desc;
  build_desc(&desc, key, c);
  cublasLtMatmulPreferenceOpaque_t pref;
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &kWorkspaceBytes, sizeof(kWorkspaceBytes)));
  if (is_low_precision(c.dtype)) {
    // Split-K partial sums of half outputs may otherwise be added in the
    // output type (INPLACE, OUTPUT_TYPE); keep them in float32 as the
    // numerics contract says. Algorithms without split-K always qualify.
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    HG_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)));
  }
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d}};
  for (const auto& [attr, value] : aligns)
    HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, attr, &value, sizeof(value)));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle(key.device), &desc, &plan->a, &plan->b, &plan->d,
                                                           &plan->d, &pref, 1, &result, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan->algo = result.algo;
    plan->workspace_bytes = std::min<size_t>(result.workspaceSize, kWorkspaceBytes);
    plan->supported = true;
  } else if (c.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
    // A plain GEMM with valid layouts always has an algorithm: this is a bug or a broken install.
    if (st != CUBLAS_STATUS_SUCCESS)
      halfgrad::cuda::detail::throw_cublas_error(st, "cublasLtMatmulAlgoGetHeuristic", c.describe(), __FILE__, __LINE__);
    fail("{}: cuBLASLt found no algorithm (heuristic returned {} results, state {}). Make the operands contiguous "
         "(.contiguous()) and retry; if it persists, report it with this message.",
         c.describe(), found, cublasLtGetStatusName(result.state));
  }
  // else: this epilogue (or this dtype with it) has no kernel: a plan that says so,
  // cached like the others so the query is not repeated.
  return plan;
}

std::shared_ptr<const Plan> find_or_create_plan(const PlanKey& key, const Call& c) {
  // Shapes in training are few; inference over many batch sizes could grow
  // the map without bound, so it starts over past this many entries.
  static PlanCache<PlanKey, Plan> plans(4096);
  return plans.get(key, [&](const PlanKey& k) { return create_plan(k, c); });
}

// The counter slot (gemm.h) of a fused epilogue.
FusedEpilogue counter_of(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BIAS: return FusedEpilogue::Bias;
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_RELU_BIAS: return FusedEpilogue::Relu;
    case CUBLASLT_EPILOGUE_RELU_AUX:
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return FusedEpilogue::ReluMask;
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_BIAS: return FusedEpilogue::GeluTanh;
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return FusedEpilogue::GeluTanhAux;
    case CUBLASLT_EPILOGUE_BGRADB: return FusedEpilogue::BiasGrad;
    case CUBLASLT_EPILOGUE_DRELU: return FusedEpilogue::DRelu;
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return FusedEpilogue::DReluBiasGrad;
    case CUBLASLT_EPILOGUE_DGELU: return FusedEpilogue::DGelu;
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return FusedEpilogue::DGeluBiasGrad;
    default: break;
  }
  fail("gemm: internal error: epilogue {} has no counter", static_cast<unsigned>(e));
}

// The cuBLASLt epilogue the layer asks for a counter kind (counter_of's inverse): the
// forward kinds with or without the bias they add, the *BiasGrad kinds with the bias
// gradient they reduce (always), DRelu and DGelu without one.
cublasLtEpilogue_t epilogue_of(FusedEpilogue kind, bool bias) {
  switch (kind) {
    case FusedEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case FusedEpilogue::Relu: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case FusedEpilogue::ReluMask: return bias ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX;
    case FusedEpilogue::GeluTanh: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case FusedEpilogue::GeluTanhAux: return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case FusedEpilogue::BiasGrad: return CUBLASLT_EPILOGUE_BGRADB;
    case FusedEpilogue::DRelu: return CUBLASLT_EPILOGUE_DRELU;
    case FusedEpilogue::DReluBiasGrad: return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case FusedEpilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
    case FusedEpilogue::DGeluBiasGrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  }
  fail("gemm: internal error: epilogue kind {} has no cuBLASLt epilogue", static_cast<int>(kind));
}

// Runs the call. Returns false (and does nothing) when cuBLASLt has no
// algorithm for its epilogue; the caller then runs the plain GEMM and an
// elementwise pass. A plain GEMM without an algorithm is an Error. Counts the
// call (gemm.h, GemmCounts): fused or fallback when an epilogue was asked for.
bool run(const Call& c) {
  const PlanKey key = key_of(c);  // once: the precision setting may change meanwhile
  const std::shared_ptr<const Plan> plan = find_or_create_plan(key, c);
  if (c.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
    if (plan->supported) detail::count_plain();
  } else {
    detail::count_epilogue(counter_of(c.epilogue), plan->supported);
  }
  if (!plan->supported) return false;
  cublasLtMatmulDescOpaque_t desc;
  build_desc(&desc, key, c);
  const double alpha64 = 1.0, beta64 = c.beta;  // scale type follows the compute type:
  const float alpha32 = 1.f, beta32 = c.beta;   // double for float64, float otherwise
  const bool f64 = c.dtype == DType::Float64;
  cudaStream_t s = stream();
  auto* layouts = const_cast<Plan*>(plan.get());  // cublasLtMatmul takes non-const handles; it only reads them
  const Workspace ws(plan->workspace_bytes, c.device);  // released on s after the GEMM (also on a throw)
  HG_CUBLAS_CHECK_CTX(
      cublasLtMatmul(handle(c.device), &desc, f64 ? static_cast<const void*>(&alpha64) : &alpha32, c.a_ptr,
                     &layouts->a, c.b_ptr, &layouts->b, f64 ? static_cast<const void*>(&beta64) : &beta32, c.d_ptr,
                     &layouts->d, c.d_ptr, &layouts->d, &plan->algo, ws.get(), plan->workspace_bytes, s),
      c.describe());
  return true;
}

void run_or_throw(const Call& c) {
  if (!run(c)) fail("{}: cuBLASLt has no algorithm for this call", c.describe());
}

// ============================================================================================
// Tensors -> Call

struct Strides3 {
  int64_t bs = 0, rs = 0, cs = 0;
};
Strides3 strides3(const Tensor& t) {
  const auto& s = t.strides();
  if (t.dim() == 3) return {t.shape()[0] == 1 ? 0 : s[0], s[1], s[2]};
  return {0, s[0], s[1]};
}

// A contiguous copy of an operand cuBLASLt cannot read in place. A shared
// (stride-0) batch copies one matrix and stays shared.
Tensor pack(const Tensor& t) {
  if (t.dim() == 3 && strides3(t).bs == 0) {
    const int64_t rows = t.shape()[1], cols = t.shape()[2];
    Tensor one = make_tensor({rows, cols}, t.options());
    cuda::copy(one, alias_with(t, {rows, cols}, {t.strides()[1], t.strides()[2]}, t.offset()));
    return alias_with(one, t.shape(), {0, cols, 1}, 0);
  }
  Tensor dense = make_tensor(t.shape(), t.options());
  cuda::copy(dense, t);
  return dense;
}

constexpr int64_t kInt32Max = 2147483647;

// out = a @ b as a Call (no epilogue yet). Shapes are already checked.
Call make_call(const char* op, const Tensor& a_in, const Tensor& b_in, const Tensor& out) {
  Call c;
  c.op = op;
  c.device = out.device().index();
  c.dtype = a_in.dtype();
  c.d_dtype = out.dtype();
  const int nd = static_cast<int>(out.dim());
  c.batch = nd == 3 ? out.shape()[0] : 1;
  const int64_t m = out.shape()[nd - 2], n = out.shape()[nd - 1], k = a_in.shape()[nd - 1];
  HG_CHECK(m <= kInt32Max && n <= kInt32Max && k <= kInt32Max && c.batch <= kInt32Max,
           "{}: [{} x {}] @ [{} x {}] (batch {}) has a dimension past 2^31 - 1, the most cuBLASLt takes; split the "
           "problem",
           op, m, k, k, n, c.batch);
  const auto bs_if_batched = [&](const Strides3& s) { return c.batch > 1 ? s.bs : 0; };

  // cuA = our b seen as the n x k matrix b^T: element (j, p) at j * b_cs + p * b_rs.
  Tensor b = b_in;
  std::optional<Operand> cu_a = as_column_major(n, k, strides3(b).cs, strides3(b).rs, bs_if_batched(strides3(b)));
  if (!cu_a) {
    b = pack(b);
    cu_a = as_column_major(n, k, strides3(b).cs, strides3(b).rs, bs_if_batched(strides3(b)));
  }
  // cuB = our a seen as the k x m matrix a^T.
  Tensor a = a_in;
  std::optional<Operand> cu_b = as_column_major(k, m, strides3(a).cs, strides3(a).rs, bs_if_batched(strides3(a)));
  if (!cu_b) {
    a = pack(a);
    cu_b = as_column_major(k, m, strides3(a).cs, strides3(a).rs, bs_if_batched(strides3(a)));
  }
  HG_CHECK(cu_a && cu_b, "{}: internal error: a packed operand has no cuBLASLt layout", op);

  // cuD = out^T, n x m column-major: out's rows must be contiguous (not copied: it is written).
  const Strides3 so = strides3(out);
  HG_CHECK((so.cs == 1 || n == 1) && (m == 1 || so.rs >= n) && (c.batch == 1 || so.bs > 0),
           "{}: the output {} (strides {}) must have contiguous, non-overlapping rows; write into a contiguous "
           "tensor and copy",
           op, out.describe(), shape_str(out.strides()));
  c.a = *cu_a;
  c.b = *cu_b;
  c.d = Operand{n, m, m == 1 ? n : so.rs, bs_if_batched(so), CUBLAS_OP_N};
  c.a_ptr = b.data_ptr();
  c.b_ptr = a.data_ptr();
  c.d_ptr = out.data_ptr();
  c.keep_a = b;
  c.keep_b = a;
  return c;
}

// ============================================================================================
// Checks

void check_cuda(const char* op, const char* what, const Tensor& t, const Tensor& ref) {
  HG_CHECK(t.defined(), "{}: {} is undefined", op, what);
  HG_CHECK(t.device().is_cuda() && t.device() == ref.device(),
           "{}: {} {} must be on {} like the other operands; move it with .to(device)", op, what, t.describe(),
           ref.device().str());
  HG_CHECK(t.dtype() == ref.dtype(),
           "{}: {} {} has dtype {}, the other operands {}: cast first (.to(dtype)) or run under amp::autocast", op,
           what, t.describe(), dtype_name(t.dtype()), dtype_name(ref.dtype()));
}

void check_shape(const char* op, const char* what, const Tensor& t, const Shape& expected) {
  HG_CHECK(t.shape() == expected, "{}: {} must have shape {}, got {}", op, what, shape_str(expected), t.describe());
}

Act act_of(Epilogue e) {
  switch (e) {
    case Epilogue::None:
    case Epilogue::Bias: return Act::Identity;
    case Epilogue::BiasRelu: return Act::Relu;
    case Epilogue::BiasGelu: return Act::GeluErf;
    case Epilogue::BiasGeluTanh: return Act::GeluTanh;
  }
  return Act::Identity;
}

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::None: return "None";
    case Epilogue::Bias: return "Bias";
    case Epilogue::BiasRelu: return "BiasRelu";
    case Epilogue::BiasGelu: return "BiasGelu";
    case Epilogue::BiasGeluTanh: return "BiasGeluTanh";
  }
  return "?";
}

bool is_mask(const Tensor& t) { return t.defined() && t.dtype() == DType::Bool; }

// A ReLU mask for a [rows, features] activation: its leading dimension in bits.
int64_t check_mask(const char* op, const Tensor& mask, int64_t rows, int64_t features, Device device) {
  const int64_t bytes = mask.dim() == 2 ? mask.shape()[1] : -1;
  HG_CHECK(mask.device() == device && mask.dim() == 2 && mask.shape()[0] == rows && bytes * 8 >= features &&
               bytes % 16 == 0 && mask.strides()[1] == 1 && (rows == 1 || mask.strides()[0] == bytes),
           "{}: the ReLU mask {} does not fit a [{}, {}] activation on {}; make it with "
           "make_relu_mask({}, {}, device)",
           op, mask.describe(), rows, features, device.str(), rows, features);
  return bytes * 8;
}

// A saved y or z: [rows, features] on like's device, in like's dtype (any strides).
void check_saved(const char* op, const char* what, const Tensor& t, int64_t rows, int64_t features,
                 const Tensor& like) {
  check_cuda(op, what, t, like);
  check_shape(op, what, t, {rows, features});
}

bool aligned(const Tensor& t) { return halfgrad::cuda::policy::epilogue_pointer_aligned(t.data_ptr()); }

// cuBLASLt's GELU aux: leading dimension a multiple of 8, >= features, and (as every
// epilogue pointer) 16-byte aligned.
std::optional<int64_t> gelu_aux_ld(const Tensor& z) {
  const int64_t rows = z.shape()[0], features = z.shape()[1];
  if (!aligned(z)) return std::nullopt;
  if (features > 1 && z.strides()[1] != 1) return std::nullopt;
  const int64_t ld = rows == 1 ? (features + 7) / 8 * 8 : z.strides()[0];
  if (ld % 8 != 0 || ld < features) return std::nullopt;
  return ld;
}

// Can `t` be cuBLAS's D (contiguous, non-overlapping rows)?
bool rows_contiguous(const Tensor& t) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  return (cols == 1 || t.strides()[1] == 1) && (rows == 1 || t.strides()[0] >= cols);
}

Tensor transposed(const Tensor& t) {  // 2-d, no dispatcher: kernels stay below it
  return alias_with(t, {t.shape()[1], t.shape()[0]}, {t.strides()[1], t.strides()[0]}, t.offset());
}

// The bias as cuBLASLt's epilogue reads it: contiguous and 16-byte aligned (a view
// at an odd offset is copied).
Tensor contiguous_bias(const Tensor& bias) {
  if (!bias.defined() || ((bias.shape()[0] <= 1 || bias.strides()[0] == 1) && aligned(bias))) return bias;
  Tensor dense = make_tensor(bias.shape(), bias.options());
  cuda::copy(dense, bias);
  return dense;
}

// Where a bias-gradient epilogue (BGRADB, DRELU_BGRAD, DGELU_BGRAD) writes: grad_bias
// itself when 16-byte aligned, else an aligned temporary copied into it afterwards
// (finish_bias_grad).
Tensor bias_grad_target(const Tensor& grad_bias) {
  return aligned(grad_bias) ? grad_bias : make_tensor(grad_bias.shape(), grad_bias.options());
}
void finish_bias_grad(const Tensor& grad_bias, const Tensor& target) {
  if (!target.is_same(grad_bias)) cuda::copy(grad_bias, target);
}

// z = a @ b + bias rounded once, then out = act(z) (and pre = z when defined), on the
// plain GEMM: the fallback where no fused epilogue runs. In float16/bfloat16 the GEMM
// writes its float32 sums (cuBLASLt's D in float32) and one pass adds the bias before
// z is rounded: rounding the product first (D in the half type, then a bias pass)
// rounds twice, and so did the GEMM with the bias in C (beta = 1) on the H200 for some
// shapes; in half types that moves z within an ulp of 0 across it (ReLU's derivative
// flips). float32/float64: the bias in C, beta = 1. `dst`: where the GEMM's z goes (out,
// or pre when that is where backward wants it); no bias and no act: dst is written once.
void plain_gemm_then(const char* op, const Tensor& a, const Tensor& b, Act act, const Tensor& bias,
                     const Tensor& pre, const Tensor& dst, const Tensor& out) {
  const bool half = is_low_precision(dst.dtype());
  if (half && bias.defined()) {
    const TensorOptions f32 = dst.options().dtype(DType::Float32);
    const Tensor acc = make_tensor(dst.shape(), f32), bias32 = make_tensor(bias.shape(), f32);
    cuda::copy(bias32, bias);
    run_or_throw(make_call(op, a, b, acc));
    epilogue_pass(Act::Identity, acc, 1.0, bias32, Tensor(), acc);  // float32 + float32: z's float32 value
    cuda::copy(dst, acc);                                        // its one rounding
  } else {
    Call c = make_call(op, a, b, dst);
    if (bias.defined()) {
      epilogue_pass(Act::Identity, dst, 0.0, bias, Tensor(), dst);  // scale 0: never reads dst
      c.beta = 1.f;
    }
    run_or_throw(c);
  }
  if (act != Act::Identity || !dst.is_same(out) || pre.defined())
    epilogue_pass(act, dst, 1.0, Tensor(), pre, out);
}

// out = a @ b (+ bias) (+ beta * out) after the checks: the plain GEMM.
void gemm_impl(const char* op, const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias_in, float beta) {
  const int nd = static_cast<int>(out.dim());
  const int64_t k = a.shape()[nd - 1];
  if (out.numel() == 0) return;
  const Tensor bias = contiguous_bias(bias_in);
  if (k == 0) return epilogue_pass(Act::Identity, out, beta, bias, Tensor(), out);  // no products
  Call c = make_call(op, a, b, out);
  c.beta = beta;
  if (bias.defined() && g_fusion.load(std::memory_order_relaxed)) {
    c.epilogue = CUBLASLT_EPILOGUE_BIAS;
    c.bias = bias.data_ptr();
    if (run(c)) return;
  }
  c.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  c.bias = nullptr;
  if (bias.defined() && beta == 0.f) return plain_gemm_then(op, a, b, Act::Identity, bias, Tensor(), out, out);
  if (bias.defined() && is_low_precision(out.dtype())) {
    // float16/bfloat16: a @ b + bias + beta * out in float32, rounded once to out's dtype, as
    // plain_gemm_then: beta * out + bias in float32 (out and bias widen exactly), the GEMM adds
    // the product to it with C and D in float32 (beta = 1: float32 sums), then one rounding.
    // (beta * out + bias rounded to the half type first and accumulated onto in C would round
    // twice: once there, and again where the half GEMM rounds its sum.)
    const TensorOptions f32 = out.options().dtype(DType::Float32);
    const Tensor acc = make_tensor(out.shape(), f32), bias32 = make_tensor(bias.shape(), f32);
    cuda::copy(acc, out);
    cuda::copy(bias32, bias);
    epilogue_pass(Act::Identity, acc, beta, bias32, Tensor(), acc);  // beta * out + bias, float32
    Call c32 = make_call(op, a, b, acc);
    c32.beta = 1.f;
    run_or_throw(c32);         // + a @ b, cuBLASLt's float32 sums
    cuda::copy(out, acc);  // the one rounding
    return;
  }
  if (bias.defined()) {
    // float32/float64: beta * out + bias first (rounded to out's dtype, the accumulation
    // type), then the GEMM adds the product (C = that, beta = 1).
    epilogue_pass(Act::Identity, out, beta, bias, Tensor(), out);
    c.beta = 1.f;
  }
  run_or_throw(c);
}

}  // namespace

// ============================================================================================
// Public entry points

cublasLtHandle_t cublaslt_handle(int device) { return handle(device); }

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, float beta) {
  constexpr const char* op = "gemm";
  HG_CHECK(out.defined() && out.device().is_cuda(), "{}: out must be a CUDA tensor, got {}", op,
           out.defined() ? out.describe() : std::string("undefined"));
  check_cuda(op, "a", a, out);
  check_cuda(op, "b", b, out);
  HG_CHECK(is_floating(out.dtype()), "{}: dtype {} is not supported (float32, float64, float16 or bfloat16)", op,
           dtype_name(out.dtype()));
  const int64_t nd = out.dim();
  HG_CHECK((nd == 2 || nd == 3) && a.dim() == nd && b.dim() == nd,
           "{}: expected a [.., m, k], b [.., k, n], out [.., m, n], all 2-d or all 3-d; got {}, {}, {}", op,
           a.describe(), b.describe(), out.describe());
  const int64_t m = out.shape()[nd - 2], n = out.shape()[nd - 1], k = a.shape()[nd - 1];
  const int64_t batch = nd == 3 ? out.shape()[0] : 1;
  const auto batch_ok = [&](const Tensor& t) { return nd == 2 || t.shape()[0] == batch || t.shape()[0] == 1; };
  HG_CHECK(a.shape()[nd - 2] == m && b.shape()[nd - 2] == k && b.shape()[nd - 1] == n && batch_ok(a) && batch_ok(b),
           "{}: shapes do not match: a {} @ b {} -> out {} (expected a [.., {}, k], b [.., k, {}])", op,
           a.describe(), b.describe(), out.describe(), m, n);
  if (bias.defined()) {
    check_cuda(op, "bias", bias, out);
    check_shape(op, "bias", bias, {n});
  }
  DeviceGuard guard(out.device().index());
  gemm_impl(op, a, b, out, bias, beta);
}

Tensor make_relu_mask(int64_t rows, int64_t features, Device device) {
  HG_CHECK(device.is_cuda(), "make_relu_mask: the mask is for cuBLASLt, so device must be CUDA, got {}", device.str());
  HG_CHECK(rows >= 0 && features >= 0, "make_relu_mask: negative size [{}, {}]", rows, features);
  const int64_t ld_bits = (features + 127) / 128 * 128;
  return make_tensor({rows, ld_bits / 8}, TensorOptions(DType::Bool, device));
}

namespace {
// The checks linear_forward and its availability query share: x2 [N, in],
// w [out, in], out [N, out], all CUDA on out's device; the dims, N, in and out.
struct LinearDims {
  int64_t rows, in, features;
};
LinearDims check_linear_args(const char* op, const Tensor& x2, const Tensor& w, const Tensor& out) {
  HG_CHECK(out.defined() && out.device().is_cuda() && out.dim() == 2,
           "{}: out must be a 2-d CUDA tensor [N, out_features], got {}", op,
           out.defined() ? out.describe() : std::string("undefined"));
  check_cuda(op, "x2", x2, out);
  check_cuda(op, "w", w, out);
  HG_CHECK(x2.dim() == 2 && w.dim() == 2 && w.shape()[1] == x2.shape()[1],
           "{}: expected x2 [N, in] and w [out, in], got {} and {}", op, x2.describe(), w.describe());
  const LinearDims d{x2.shape()[0], x2.shape()[1], w.shape()[0]};
  check_shape(op, "out", out, {d.rows, d.features});
  return d;
}
}  // namespace

bool linear_forward(const Tensor& x2, const Tensor& w, const Tensor& bias_in, Epilogue epi, const Tensor& out,
                    const Tensor& aux) {
  constexpr const char* op = "linear_forward";
  const LinearDims dims = check_linear_args(op, x2, w, out);
  const int64_t rows = dims.rows, in = dims.in, features = dims.features;
  HG_CHECK(epi != Epilogue::Bias || bias_in.defined(), "{}: epilogue Bias needs a bias", op);
  if (bias_in.defined()) {
    check_cuda(op, "bias", bias_in, out);
    check_shape(op, "bias", bias_in, {features});
  }
  const Act act = act_of(epi);
  const bool mask = is_mask(aux);
  const bool want_z = aux.defined() && !mask;
  HG_CHECK(!aux.defined() || act != Act::Identity, "{}: epilogue {} takes no aux (got {})", op, epilogue_name(epi),
           aux.describe());
  HG_CHECK(!mask || act == Act::Relu, "{}: a ReLU mask was given for epilogue {}; pass z [N, out] instead", op,
           epilogue_name(epi));
  int64_t mask_ld = 0;
  if (mask) mask_ld = check_mask(op, aux, rows, features, out.device());
  if (want_z) {
    check_saved(op, "aux", aux, rows, features, out);
    HG_CHECK(features <= 1 || aux.strides()[1] == 1, "{}: aux {} needs a unit column stride (strides {})", op,
             aux.describe(), shape_str(aux.strides()));
  }
  const bool fusion = g_fusion.load(std::memory_order_relaxed);
  HG_CHECK(!mask || fusion,
           "{}: epilogue fusion is off (set_epilogue_fusion(false)), so no ReLU mask can be written; pass no aux "
           "(ReLU's backward uses the output)",
           op);
  if (out.numel() == 0) return true;

  DeviceGuard guard(out.device().index());
  const Tensor bias = contiguous_bias(bias_in);
  if (in == 0) {  // no products: y = act(bias); no mask
    epilogue_pass(act, out, 0.0, bias, mask ? Tensor() : aux, out);
    return !mask;
  }

  // Which epilogue cuBLASLt runs, where the GEMM writes, and what is left for a pass.
  const std::optional<int64_t> tanh_ld = act == Act::GeluTanh && want_z ? gelu_aux_ld(aux) : std::nullopt;
  const bool has_bias = bias.defined();
  cublasLtEpilogue_t e = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  bool act_in_epilogue = act == Act::Identity;
  const Tensor* gemm_out = &out;
  const bool relu_fusion = g_relu_fusion.load(std::memory_order_relaxed);
  const bool mask_ok = mask && aligned(aux);  // an under-aligned mask (a view) cannot be cuBLASLt's aux
  if (act == Act::Relu && !want_z && relu_fusion) {  // cuBLASLt can write a mask, not z
    e = mask_ok ? (has_bias ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX)
                : (has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU);
    act_in_epilogue = true;
  } else if (act == Act::GeluTanh && (!want_z || tanh_ld)) {
    e = want_z ? (has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
               : (has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
    act_in_epilogue = true;
  } else if (want_z && rows_contiguous(aux)) {
    gemm_out = &aux;  // exact GELU (or ReLU with z): the GEMM writes z where backward wants it
  }
  // (ReLU without cuBLASLt's RELU: BIAS, then our NaN-keeping pass; a mask stays unwritten.)

  Call c = make_call(op, x2, transposed(w), *gemm_out);
  if (fusion && e != CUBLASLT_EPILOGUE_DEFAULT) {
    c.epilogue = e;
    c.bias = has_bias ? bias.data_ptr() : nullptr;
    if (mask_ok && act_in_epilogue) {  // RELU_AUX(_BIAS)
      c.aux = aux.data_ptr();
      c.aux_ld = mask_ld;
    } else if (act_in_epilogue && want_z) {
      c.aux = aux.data_ptr();
      c.aux_ld = *tanh_ld;
    }
    if (run(c)) {
      // Done, or z (bias included) is in *gemm_out: y = act(z), copying z to aux if it is not there.
      if (!act_in_epilogue)
        epilogue_pass(act, *gemm_out, 1.0, Tensor(), want_z && gemm_out != &aux ? aux : Tensor(), out);
      return !mask || (mask_ok && act_in_epilogue);  // a mask is written only by RELU_AUX(_BIAS)
    }
    // No kernel for this epilogue with these shapes (e.g. one row or one feature):
    // the plain GEMM below. A ReLU mask then stays unwritten (we return false).
  }
  // The plain GEMM, z = x2 @ w^T + bias rounded once (plain_gemm_then), then one pass
  // for the activation and z.
  plain_gemm_then(op, x2, transposed(w), act, bias, want_z && gemm_out != &aux ? aux : Tensor(), *gemm_out, out);
  return !mask;
}

bool relu_mask_epilogue_available(const Tensor& x2, const Tensor& w, const Tensor& bias_in, const Tensor& out,
                                  const Tensor& mask) {
  constexpr const char* op = "relu_mask_epilogue_available";
  const LinearDims dims = check_linear_args(op, x2, w, out);
  const int64_t rows = dims.rows, in = dims.in, features = dims.features;
  if (bias_in.defined()) {
    check_cuda(op, "bias", bias_in, out);
    check_shape(op, "bias", bias_in, {features});
  }
  HG_CHECK(is_mask(mask), "{}: mask must come from make_relu_mask, got {}", op,
           mask.defined() ? mask.describe() : std::string("undefined"));
  const int64_t mask_ld = check_mask(op, mask, rows, features, out.device());
  // The same decisions, in the same order, as linear_forward's.
  if (!g_fusion.load(std::memory_order_relaxed)) return false;
  if (out.numel() == 0) return true;  // nothing to write
  if (in == 0 || !g_relu_fusion.load(std::memory_order_relaxed) || !aligned(mask)) return false;
  DeviceGuard guard(out.device().index());
  const Tensor bias = contiguous_bias(bias_in);
  Call c = make_call(op, x2, transposed(w), out);
  c.epilogue = bias.defined() ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX;
  c.bias = bias.defined() ? bias.data_ptr() : nullptr;
  c.aux = mask.data_ptr();
  c.aux_ld = mask_ld;
  return find_or_create_plan(key_of(c), c)->supported;
}

bool epilogue_available(FusedEpilogue kind, const Tensor& a, const Tensor& b, const Tensor& out,
                        const Tensor& bias_in, const Tensor& aux) {
  constexpr const char* op = "epilogue_available";
  HG_CHECK(out.defined() && out.device().is_cuda() && out.dim() == 2, "{}: out must be a 2-d CUDA tensor, got {}", op,
           out.defined() ? out.describe() : std::string("undefined"));
  check_cuda(op, "a", a, out);
  check_cuda(op, "b", b, out);
  const int64_t m = out.shape()[0], n = out.shape()[1];
  HG_CHECK(a.dim() == 2 && b.dim() == 2 && a.shape()[0] == m && b.shape()[1] == n && b.shape()[0] == a.shape()[1],
           "{}: expected a [m, k], b [k, n] and out [m, n], got {}, {} and {}", op, a.describe(), b.describe(),
           out.describe());
  const int64_t k = a.shape()[1];
  const char* name = fused_epilogue_name(kind);
  const bool bias_grad =
      kind == FusedEpilogue::BiasGrad || kind == FusedEpilogue::DReluBiasGrad || kind == FusedEpilogue::DGeluBiasGrad;
  const bool mask_aux =
      kind == FusedEpilogue::ReluMask || kind == FusedEpilogue::DRelu || kind == FusedEpilogue::DReluBiasGrad;
  const bool z_aux =
      kind == FusedEpilogue::GeluTanhAux || kind == FusedEpilogue::DGelu || kind == FusedEpilogue::DGeluBiasGrad;
  const bool has_bias = bias_in.defined();
  HG_CHECK(has_bias || (kind != FusedEpilogue::Bias && !bias_grad), "{}: epilogue {} needs a bias", op, name);
  HG_CHECK(!has_bias || (kind != FusedEpilogue::DRelu && kind != FusedEpilogue::DGelu),
           "{}: epilogue {} takes no bias (its *BiasGrad kind reduces one)", op, name);
  HG_CHECK(aux.defined() == (mask_aux || z_aux), "{}: epilogue {} {}", op, name,
           mask_aux ? "needs the ReLU mask as aux" : z_aux ? "needs z as aux" : "takes no aux");
  if (has_bias) {
    check_cuda(op, "bias", bias_in, out);
    check_shape(op, "bias", bias_in, {kind == FusedEpilogue::BiasGrad ? m : n});
  }
  int64_t aux_ld = 0;
  if (mask_aux) {
    HG_CHECK(is_mask(aux), "{}: the aux of {} must come from make_relu_mask, got {}", op, name, aux.describe());
    aux_ld = check_mask(op, aux, m, n, out.device());
  } else if (z_aux) {
    check_saved(op, "aux", aux, m, n, out);
  }
  // Where the layer asks nothing: no products, or operands cuBLASLt cannot take as they are.
  if (m == 0 || n == 0 || k == 0) return false;
  if (mask_aux && !aligned(aux)) return false;
  if (z_aux) {
    const std::optional<int64_t> ld = gelu_aux_ld(aux);
    if (!ld) return false;
    aux_ld = *ld;
  }
  const int64_t bias_len = has_bias ? bias_in.shape()[0] : 0;
  if (bias_grad && bias_len > 1 && bias_in.strides()[0] != 1) return false;  // reduced by a pass instead
  DeviceGuard guard(out.device().index());
  // The bias as the layer hands it over: an aligned copy (forward) or target (bias gradient).
  const Tensor bias = !has_bias ? Tensor() : bias_grad ? bias_grad_target(bias_in) : contiguous_bias(bias_in);
  Call c = make_call(op, a, b, out);
  c.epilogue = epilogue_of(kind, has_bias);
  HG_CHECK(counter_of(c.epilogue) == kind, "{}: internal error: epilogue {} maps to {}", op, name,
           fused_epilogue_name(counter_of(c.epilogue)));
  c.bias = has_bias ? bias.data_ptr() : nullptr;
  if (mask_aux || z_aux) {
    c.aux = aux.data_ptr();
    c.aux_ld = aux_ld;
  }
  return find_or_create_plan(key_of(c), c)->supported;
}

void activation_backward(Epilogue epi, const Tensor& grad_y, const Tensor& saved, const Tensor& grad_z) {
  constexpr const char* op = "activation_backward";
  HG_CHECK(grad_y.defined() && grad_y.device().is_cuda() && grad_y.dim() == 2,
           "{}: grad_y must be a 2-d CUDA tensor, got {}", op,
           grad_y.defined() ? grad_y.describe() : std::string("undefined"));
  const Act act = act_of(epi);
  const int64_t rows = grad_y.shape()[0], features = grad_y.shape()[1];
  check_cuda(op, "grad_z", grad_z, grad_y);
  check_shape(op, "grad_z", grad_z, grad_y.shape());
  DeviceGuard guard(grad_y.device().index());
  if (act == Act::Identity) {
    if (!grad_z.is_same(grad_y)) cuda::copy(grad_z, grad_y);
    return;
  }
  HG_CHECK(!is_mask(saved),
           "{}: a ReLU mask is cuBLASLt's private format, read only by its DRELU epilogue; pass the layer's output y "
           "instead",
           op);
  check_saved(op, act == Act::Relu ? "saved (the output y)" : "saved (z, the pre-activation)", saved, rows, features,
              grad_y);
  act_backward_pass(act, grad_y, saved, grad_z);
}

void linear_backward_epilogue(const Tensor& grad, const Tensor& x2, const Tensor& w, Epilogue epi,
                              const Tensor& saved, const Tensor& grad_x, const Tensor& grad_w,
                              const Tensor& grad_bias_in, const InputActivation& input) {
  constexpr const char* op = "linear_backward_epilogue";
  HG_CHECK(grad.defined() && grad.device().is_cuda() && grad.dim() == 2,
           "{}: grad must be a 2-d CUDA tensor [N, out_features], got {}", op,
           grad.defined() ? grad.describe() : std::string("undefined"));
  check_cuda(op, "x2", x2, grad);
  check_cuda(op, "w", w, grad);
  HG_CHECK(x2.dim() == 2 && w.dim() == 2, "{}: expected x2 [N, in] and w [out, in], got {} and {}", op,
           x2.describe(), w.describe());
  const int64_t rows = x2.shape()[0], in = x2.shape()[1], features = w.shape()[0];
  check_shape(op, "grad", grad, {rows, features});
  check_shape(op, "w", w, {features, in});
  const auto check_out = [&](const char* what, const Tensor& t, const Shape& shape) {
    if (!t.defined()) return;
    check_cuda(op, what, t, grad);
    check_shape(op, what, t, shape);
  };
  check_out("grad_x", grad_x, {rows, in});
  check_out("grad_w", grad_w, {features, in});
  check_out("grad_bias", grad_bias_in, {features});
  const Act in_act = act_of(input.epilogue);
  const bool in_mask = is_mask(input.saved);
  int64_t in_mask_ld = 0;
  if (in_act != Act::Identity) {
    HG_CHECK(grad_x.defined() || !input.grad_bias.defined(),
             "{}: input.grad_bias needs grad_x (the previous layer's dz is computed there)", op);
    HG_CHECK(input.saved.defined(), "{}: input epilogue {} needs input.saved", op, epilogue_name(input.epilogue));
    HG_CHECK(!in_mask || in_act == Act::Relu, "{}: a ReLU mask was given for input epilogue {}", op,
             epilogue_name(input.epilogue));
    if (in_mask) in_mask_ld = check_mask(op, input.saved, rows, in, grad.device());
    else check_saved(op, "input.saved", input.saved, rows, in, grad);
    if (input.output.defined()) check_saved(op, "input.output", input.output, rows, in, grad);
    check_out("input.grad_bias", input.grad_bias, {in});
  }
  DeviceGuard guard(grad.device().index());
  const bool fusion = g_fusion.load(std::memory_order_relaxed);

  // 1. gz = grad * act'(z)
  Tensor gz = grad;
  if (act_of(epi) != Act::Identity) {
    gz = make_tensor({rows, features}, grad.options());
    activation_backward(epi, grad, saved, gz);
  }

  // 2. grad_w = gz^T @ x2, with grad_bias = sum(gz, 0) from the same GEMM (BGRADB:
  //    cuB = our a = gz^T, and BGRADB sums cuB over k = N, one value per column of cuD = out_features).
  const bool bias_contiguous = grad_bias_in.defined() && (features <= 1 || grad_bias_in.strides()[0] == 1);
  bool bias_done = false;
  if (grad_w.defined()) {
    if (rows > 0 && features > 0 && in > 0) {
      Call c = make_call(op, transposed(gz), x2, grad_w);
      if (bias_contiguous && fusion) {
        const Tensor target = bias_grad_target(grad_bias_in);
        c.epilogue = CUBLASLT_EPILOGUE_BGRADB;
        c.bias = target.data_ptr();
        bias_done = run(c);
        if (bias_done) finish_bias_grad(grad_bias_in, target);
      }
      if (!bias_done) {
        c.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        c.bias = nullptr;
        run_or_throw(c);
      }
    } else {
      gemm_impl(op, transposed(gz), x2, grad_w, Tensor(), 0.f);  // empty, or k == N == 0: zeros
    }
  }
  if (grad_bias_in.defined() && !bias_done) sum_rows(gz, grad_bias_in);

  // 3. grad_x = gz @ w, with the input's dReLU/dGELU (and its bias gradient) in the epilogue.
  if (!grad_x.defined()) return;
  if (features == 0 || grad_x.numel() == 0) {  // no products (or nothing to write): zeros
    zero(grad_x);
    if (in_act != Act::Identity && input.grad_bias.defined()) zero(input.grad_bias);
    return;
  }
  Call c = make_call(op, gz, w, grad_x);
  if (in_act != Act::Identity && fusion) {
    const bool with_bgrad = input.grad_bias.defined() && (in <= 1 || input.grad_bias.strides()[0] == 1);
    std::optional<int64_t> ld;
    if (in_act == Act::Relu && in_mask && aligned(input.saved)) {
      c.epilogue = with_bgrad ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
      ld = in_mask_ld;
    } else if (in_act == Act::GeluTanh && (ld = gelu_aux_ld(input.saved))) {
      c.epilogue = with_bgrad ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    }
    if (ld) {
      const Tensor target = with_bgrad ? bias_grad_target(input.grad_bias) : Tensor();
      c.aux = input.saved.data_ptr();
      c.aux_ld = *ld;
      c.bias = with_bgrad ? target.data_ptr() : nullptr;
      if (run(c)) {
        if (with_bgrad) finish_bias_grad(input.grad_bias, target);
        if (input.grad_bias.defined() && !with_bgrad) sum_rows(grad_x, input.grad_bias);
        return;
      }
    }
  }
  HG_CHECK(!in_mask || input.output.defined(),
           "{}: cuBLASLt has no DRELU epilogue for {} (or fusion is off), and its ReLU mask cannot be read otherwise; "
           "pass the layer's output y too (input.output), or instead of the mask",
           op, c.describe());
  c.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  c.bias = nullptr;
  c.aux = nullptr;
  c.aux_ld = 0;
  run_or_throw(c);
  if (in_act != Act::Identity) {
    act_backward_pass(in_act, grad_x, in_mask ? input.output : input.saved, grad_x);
    if (input.grad_bias.defined()) sum_rows(grad_x, input.grad_bias);
  }
}

void set_epilogue_fusion(bool enabled) { g_fusion.store(enabled, std::memory_order_relaxed); }
bool epilogue_fusion() { return g_fusion.load(std::memory_order_relaxed); }
void set_relu_epilogue_fusion(bool allow) { g_relu_fusion.store(allow, std::memory_order_relaxed); }
bool relu_epilogue_fusion() { return g_relu_fusion.load(std::memory_order_relaxed); }

}  // namespace halfgrad::kernels::cuda
