// Fused scaled-dot-product attention on CUDA (kernels::fused_attention_*,
// contracts in kernels/kernel_list.h) through cuDNN 9's backend (graph) API,
// host code only. cuDNN 9.19's one-op SDPA descriptor takes no mask (a mask
// needs its subgraph attribute, cuDNN 9.21), so the graphs are written out
// as the operation patterns its runtime-fusion flash-attention engines
// recognise (the ones cudnn-frontend's composite SDPA nodes build):
//
//   forward    S = (Q @ K^T) * scale  [causal: row >= col ? S : -inf]
//              M = rowmax(S), E = exp(S - M), Z = rowsum(E)
//              stats = M + log(Z)                  (float32, saved for backward)
//              P = E / Z (rounded to the io dtype), O = P @ V
//   backward   D = rowsum(dO * O)                  (float32, in a scratch tensor)
//              P = exp((Q @ K^T) * scale [masked] - stats)
//              dV = P^T @ dO,  dS = P * (dO @ V^T - D) * scale
//              dK = dS^T @ Q,  dQ = dS @ K         (dQ through a float32 accumulator)
//
// Every intermediate is a virtual tensor (never in memory) in float32, but P
// and dS where they feed a matmul as its A operand in the io dtype. The scale,
// -inf and 1 are by-value scalars (host floats read at each run), so one plan
// serves every scale.
//
// Whether cuDNN takes a problem is asked, never assumed: the graph is built,
// finalized, and the heuristics' engine configs are tried until one
// finalizes into an execution plan. Any refusal along the way (a descriptor
// that does not finalize, no engine config) makes the problem "unsupported",
// with cuDNN's reason kept for the caller, who then takes the math path. The
// outcome is cached per kernels/cuda/cudnn_sdpa.h's key in a
// kernels::PlanCache, so each problem is planned once; runs build a variant
// pack and execute on halfgrad::cuda::current_stream() with no host sync.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/error.h>
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/cudnn_backend.h>
#include <halfgrad/kernels/cuda/cudnn_check.h>
#include <halfgrad/kernels/cuda/cudnn_sdpa.h>
#include <halfgrad/kernels/cuda/per_device.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/kernels/plan_cache.h>

namespace halfgrad::kernels::cuda {

namespace {

using halfgrad::cuda::DeviceGuard;
using halfgrad::cuda::RelaxedCaptureMode;
using Dims = std::array<int64_t, 4>;

std::atomic<uint64_t> g_built{0}, g_hits{0}, g_unsupported{0};

// ============================================================================================
// The shared cuDNN handle and descriptor (kernels/cuda/cudnn_backend.h), by their local names.

using Desc = CudnnDesc;
using DeviceState = CudnnDevice;
DeviceState& device_state(int device) { return cudnn_device(device); }

cudnnDataType_t io_type(DType t) {
  return t == DType::BFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;  // the callers checked: one of the two
}

Dims contiguous_strides(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }
Dims dims_of(const Tensor& t) { return {t.shape()[0], t.shape()[1], t.shape()[2], t.shape()[3]}; }
Dims strides_of(const Tensor& t) { return {t.strides()[0], t.strides()[1], t.strides()[2], t.strides()[3]}; }
Dims swap_last(Dims d) {
  std::swap(d[2], d[3]);
  return d;
}

// The fixed tensors of both graphs (virtual ones are numbered from kFirstVirtual).
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kRowSum, kDQAccum, kScale, kNegInf, kOne };
constexpr int64_t kFirstVirtual = 100;

// What a problem was planned into: the descriptors (alive with the plan), the
// execution plan and its workspace, or why there is none.
struct Plan {
  std::vector<Desc> keep;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  bool found = false;
  std::string why;
};

// Builds one operation graph into a Plan. Every cuDNN call is checked and a
// failure throws (an Error naming the call, cuDNN's message and the problem);
// build_plan turns that into "unsupported" with the message as the reason.
class GraphBuilder {
 public:
  GraphBuilder(Plan& plan, std::string context) : plan_(plan), context_(std::move(context)) {}

  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t dt, const Dims& dims, const Dims& strides,
                                  int64_t align = 16, bool is_virtual = false, bool by_value = false) {
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, context_);
    set(d.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, "TENSOR_DATA_TYPE", CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(d.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, "TENSOR_DIMENSIONS", CUDNN_TYPE_INT64, 4, dims.data());
    set(d.get(), CUDNN_ATTR_TENSOR_STRIDES, "TENSOR_STRIDES", CUDNN_TYPE_INT64, 4, strides.data());
    set(d.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, "TENSOR_UNIQUE_ID", CUDNN_TYPE_INT64, 1, &uid);
    set(d.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, "TENSOR_BYTE_ALIGNMENT", CUDNN_TYPE_INT64, 1, &align);
    if (is_virtual) {
      const bool yes = true;
      set(d.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, "TENSOR_IS_VIRTUAL", CUDNN_TYPE_BOOLEAN, 1, &yes);
    }
    if (by_value) {
      const bool yes = true;
      set(d.get(), CUDNN_ATTR_TENSOR_IS_BY_VALUE, "TENSOR_IS_BY_VALUE", CUDNN_TYPE_BOOLEAN, 1, &yes);
    }
    return keep(std::move(d), "tensor");
  }
  // An intermediate that never reaches memory.
  cudnnBackendDescriptor_t virt(cudnnDataType_t dt, const Dims& dims, const Dims& strides) {
    return tensor(next_virtual_++, dt, dims, strides, 16, true);
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t dt, const Dims& dims) {
    return virt(dt, dims, contiguous_strides(dims));
  }
  // A float32 scalar passed by value at each run (the variant pack points at a host float).
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, 16, false, true);
  }

  // c = a @ b over the last two dims, accumulated in float32.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR, context_);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(mm.get(), CUDNN_ATTR_MATMUL_COMP_TYPE, "MATMUL_COMP_TYPE", CUDNN_TYPE_DATA_TYPE, 1, &compute);
    cudnnBackendDescriptor_t mmd = keep(std::move(mm), "matmul");
    Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, context_);
    set(op.get(), CUDNN_ATTR_OPERATION_MATMUL_ADESC, "MATMUL_ADESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    set(op.get(), CUDNN_ATTR_OPERATION_MATMUL_BDESC, "MATMUL_BDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    set(op.get(), CUDNN_ATTR_OPERATION_MATMUL_CDESC, "MATMUL_CDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    set(op.get(), CUDNN_ATTR_OPERATION_MATMUL_DESC, "MATMUL_DESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mmd);
    add_op(std::move(op), "matmul");
  }

  // y = mode(x[, b]) (b undefined for unary modes); t: BINARY_SELECT's mask
  // (y = t ? x : b); axis: GEN_INDEX's dim.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t t = nullptr, int64_t axis = -1,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, context_);
    set(pw.get(), CUDNN_ATTR_POINTWISE_MODE, "POINTWISE_MODE", CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, "POINTWISE_MATH_PREC", CUDNN_TYPE_DATA_TYPE, 1, &precision);
    if (axis >= 0) set(pw.get(), CUDNN_ATTR_POINTWISE_AXIS, "POINTWISE_AXIS", CUDNN_TYPE_INT64, 1, &axis);
    cudnnBackendDescriptor_t pwd = keep(std::move(pw), "pointwise");
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, context_);
    set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, "POINTWISE_PW_DESCRIPTOR",
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
    set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, "POINTWISE_XDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, "POINTWISE_BDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, "POINTWISE_YDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    if (t) set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_TDESC, "POINTWISE_TDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    add_op(std::move(op), "pointwise");
  }

  // y = x reduced (max or sum, in float32) over the dims where y has size 1.
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, context_);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(red.get(), CUDNN_ATTR_REDUCTION_OPERATOR, "REDUCTION_OPERATOR", CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set(red.get(), CUDNN_ATTR_REDUCTION_COMP_TYPE, "REDUCTION_COMP_TYPE", CUDNN_TYPE_DATA_TYPE, 1, &compute);
    cudnnBackendDescriptor_t redd = keep(std::move(red), "reduction");
    Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, context_);
    set(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_XDESC, "REDUCTION_XDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_YDESC, "REDUCTION_YDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    set(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_DESC, "REDUCTION_DESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &redd);
    add_op(std::move(op), "reduction");
  }

  // y = x seen with y's dims and strides (the transposes of P, dS and K^T).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, context_);
    set(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_XDESC, "RESHAPE_XDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_YDESC, "RESHAPE_YDESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(std::move(op), "reshape");
  }

  // The operation graph, then the first engine config of the heuristics'
  // ranked lists (mode A, then FALLBACK) that finalizes into an execution
  // plan. No config: plan.why says what cuDNN said last (not a throw).
  void finish(cudnnHandle_t handle) {
    Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, context_);
    set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, "OPERATIONGRAPH_OPS", CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(ops_.size()), ops_.data());
    set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, "OPERATIONGRAPH_HANDLE", CUDNN_TYPE_HANDLE, 1, &handle);
    cudnnBackendDescriptor_t gd = keep(std::move(graph), "operation graph");
    plan_.why = "the heuristics offer no engine config";
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, context_);
      set(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, "ENGINEHEUR_OPERATION_GRAPH",
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gd);
      set(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, "ENGINEHEUR_MODE", CUDNN_TYPE_HEUR_MODE, 1, &mode);
      cudnnStatus_t st = cudnnBackendFinalize(heur.get());
      if (st != CUDNN_STATUS_SUCCESS) {
        plan_.why = "the heuristics do not finalize: " + status_str(st);
        continue;
      }
      int64_t count = 0;
      st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                    &count, nullptr);
      if (st != CUDNN_STATUS_SUCCESS || count <= 0) {
        if (st != CUDNN_STATUS_SUCCESS) plan_.why = "the heuristics give no results: " + status_str(st);
        continue;
      }
      std::vector<Desc> cfgs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, context_);
        raw.push_back(cfgs.back().get());
      }
      int64_t got = 0;
      st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                    &got, raw.data());
      if (st != CUDNN_STATUS_SUCCESS) {
        plan_.why = "the heuristics give no results: " + status_str(st);
        continue;
      }
      for (int64_t i = 0; i < std::min(got, count); ++i) {
        Desc exec(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, context_);
        set(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, "EXECUTION_PLAN_HANDLE", CUDNN_TYPE_HANDLE, 1, &handle);
        set(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, "EXECUTION_PLAN_ENGINE_CONFIG",
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
        st = cudnnBackendFinalize(exec.get());
        if (st != CUDNN_STATUS_SUCCESS) {  // this engine does not take the graph: the next one
          plan_.why = "no engine config finalizes; the last: " + status_str(st);
          continue;
        }
        int64_t ws = 0, n = 0;
        HG_CUDNN_CHECK_CTX(cudnnBackendGetAttribute(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                    CUDNN_TYPE_INT64, 1, &n, &ws),
                           context_);
        plan_.workspace = std::max<int64_t>(ws, 0);
        plan_.keep.push_back(std::move(cfgs[i]));  // the chosen config lives with the plan
        plan_.plan = keep(std::move(exec), "execution plan");
        plan_.found = true;
        plan_.why.clear();
        return;
      }
    }
  }

  static std::string status_str(cudnnStatus_t st) {
    const std::string last = halfgrad::cuda::detail::cudnn_last_error();
    return fmt::format("{}{}{}", cudnnGetErrorString(st), last.empty() ? "" : ": ", last);
  }

 private:
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, const char* attr,
           cudnnBackendAttributeType_t type, int64_t count, const void* value) {
    HG_CUDNN_CHECK_CTX(cudnnBackendSetAttribute(d, name, type, count, value),
                       fmt::format("{} (attribute {})", context_, attr));
  }
  // Finalizes d and keeps it alive with the plan.
  cudnnBackendDescriptor_t keep(Desc d, const char* what) {
    HG_CUDNN_CHECK_CTX(cudnnBackendFinalize(d.get()), fmt::format("{} (finalizing a {} descriptor)", context_, what));
    plan_.keep.push_back(std::move(d));
    return plan_.keep.back().get();
  }
  void add_op(Desc op, const char* what) { ops_.push_back(keep(std::move(op), what)); }

  Plan& plan_;
  std::string context_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

// ============================================================================================
// The two graphs

struct Problem {
  bool backward;
  Tensor q, k, v;
  bool causal;
  int64_t B() const { return q.shape()[0]; }
  int64_t H() const { return q.shape()[1]; }
  int64_t L() const { return q.shape()[2]; }
  int64_t S() const { return k.shape()[2]; }
  int64_t E() const { return q.shape()[3]; }
  int64_t Ev() const { return v.shape()[3]; }
  std::string describe() const {
    return fmt::format("scaled_dot_product_attention (cuDNN fused {}) of query {} (strides {}), key {} (strides {}), "
                       "value {} (strides {}){}",
                       backward ? "backward" : "forward", q.describe(), shape_str(q.strides()), k.describe(),
                       shape_str(k.strides()), v.describe(), shape_str(v.strides()), causal ? ", causal" : "");
  }
};

// The causal mask on scores s: keep s where row >= col, else -inf.
cudnnBackendDescriptor_t causal_mask(GraphBuilder& g, cudnnBackendDescriptor_t s, const Dims& sd) {
  cudnnBackendDescriptor_t neg_inf = g.scalar(kNegInf);
  cudnnBackendDescriptor_t row = g.virt(CUDNN_DATA_INT32, sd), col = g.virt(CUDNN_DATA_INT32, sd);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, nullptr, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, nullptr, 3);
  cudnnBackendDescriptor_t keep = g.virt(CUDNN_DATA_BOOLEAN, sd);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, nullptr, -1, CUDNN_DATA_BOOLEAN);
  cudnnBackendDescriptor_t masked = g.virt(CUDNN_DATA_FLOAT, sd);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, masked, keep);
  return masked;
}

void build_forward(const Problem& p, GraphBuilder& g) {
  const cudnnDataType_t io = io_type(p.q.dtype()), f32 = CUDNN_DATA_FLOAT;
  const int64_t B = p.B(), H = p.H(), L = p.L(), S = p.S(), E = p.E(), Ev = p.Ev();
  const Dims sd{B, H, L, S}, rows{B, H, L, 1};
  cudnnBackendDescriptor_t q = g.tensor(kQ, io, dims_of(p.q), strides_of(p.q), byte_alignment(p.q.data_ptr()));
  // K^T: K's memory with its last two dims swapped
  cudnnBackendDescriptor_t kt =
      g.tensor(kK, io, {B, H, E, S}, swap_last(strides_of(p.k)), byte_alignment(p.k.data_ptr()));
  cudnnBackendDescriptor_t v = g.tensor(kV, io, dims_of(p.v), strides_of(p.v), byte_alignment(p.v.data_ptr()));
  cudnnBackendDescriptor_t o = g.tensor(kO, io, {B, H, L, Ev}, contiguous_strides({B, H, L, Ev}));
  cudnnBackendDescriptor_t stats = g.tensor(kStats, f32, rows, contiguous_strides(rows));
  cudnnBackendDescriptor_t scale = g.scalar(kScale);

  cudnnBackendDescriptor_t qk = g.virt(f32, sd), s = g.virt(f32, sd);
  g.matmul(q, kt, qk);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, scale, s);
  if (p.causal) s = causal_mask(g, s, sd);
  cudnnBackendDescriptor_t m = g.virt(f32, rows), shifted = g.virt(f32, sd), e = g.virt(f32, sd),
                           z = g.virt(f32, rows), log_z = g.virt(f32, rows);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, m);
  g.pointwise(CUDNN_POINTWISE_SUB, s, m, shifted);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, e);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  g.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, log_z);
  g.pointwise(CUDNN_POINTWISE_ADD, m, log_z, stats);
  // P in the io dtype: the second matmul's A operand must be (cuDNN's fused-attention pattern)
  cudnnBackendDescriptor_t prob = g.virt(io, sd);
  g.pointwise(CUDNN_POINTWISE_DIV, e, z, prob);
  g.matmul(prob, v, o);
}

void build_backward(const Problem& p, GraphBuilder& g) {
  const cudnnDataType_t io = io_type(p.q.dtype()), f32 = CUDNN_DATA_FLOAT;
  const int64_t B = p.B(), H = p.H(), L = p.L(), S = p.S(), E = p.E(), Ev = p.Ev();
  const Dims sd{B, H, L, S}, rows{B, H, L, 1}, sd_t{B, H, S, L};
  const Dims sd_t_strides{H * L * S, L * S, 1, S};  // [B, H, S, L] over S's [B, H, L, S] memory
  cudnnBackendDescriptor_t q = g.tensor(kQ, io, dims_of(p.q), strides_of(p.q), byte_alignment(p.q.data_ptr()));
  cudnnBackendDescriptor_t kt =
      g.tensor(kK, io, {B, H, E, S}, swap_last(strides_of(p.k)), byte_alignment(p.k.data_ptr()));
  cudnnBackendDescriptor_t vt =
      g.tensor(kV, io, {B, H, Ev, S}, swap_last(strides_of(p.v)), byte_alignment(p.v.data_ptr()));
  const Dims od{B, H, L, Ev};
  cudnnBackendDescriptor_t o = g.tensor(kO, io, od, contiguous_strides(od));
  cudnnBackendDescriptor_t d_o = g.tensor(kDO, io, od, contiguous_strides(od));
  cudnnBackendDescriptor_t stats = g.tensor(kStats, f32, rows, contiguous_strides(rows));
  const Dims qd{B, H, L, E}, kd{B, H, S, E}, vd{B, H, S, Ev};
  cudnnBackendDescriptor_t dq = g.tensor(kDQ, io, qd, contiguous_strides(qd));
  cudnnBackendDescriptor_t dk = g.tensor(kDK, io, kd, contiguous_strides(kd));
  cudnnBackendDescriptor_t dv = g.tensor(kDV, io, vd, contiguous_strides(vd));
  // Scratch tensors in memory (the engines need them materialised): rowsum(dO * O) and dQ in float32.
  cudnnBackendDescriptor_t row_sum = g.tensor(kRowSum, f32, rows, contiguous_strides(rows));
  cudnnBackendDescriptor_t dq_accum = g.tensor(kDQAccum, f32, qd, contiguous_strides(qd));
  cudnnBackendDescriptor_t scale = g.scalar(kScale), one = g.scalar(kOne);

  // D = rowsum(dO * O)
  cudnnBackendDescriptor_t d_o_o = g.virt(f32, od), d_sum = g.virt(f32, rows);
  g.pointwise(CUDNN_POINTWISE_MUL, d_o, o, d_o_o);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o_o, d_sum);
  g.pointwise(CUDNN_POINTWISE_MUL, d_sum, one, row_sum);
  // P = exp(S - stats), S as in the forward
  cudnnBackendDescriptor_t qk = g.virt(f32, sd), s = g.virt(f32, sd), s_lse = g.virt(f32, sd);
  g.matmul(q, kt, qk);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, scale, s);
  g.pointwise(CUDNN_POINTWISE_SUB, s, stats, s_lse);
  if (p.causal) s_lse = causal_mask(g, s_lse, sd);
  cudnnBackendDescriptor_t prob = g.virt(f32, sd);
  g.pointwise(CUDNN_POINTWISE_EXP, s_lse, nullptr, prob);
  // dV = P^T @ dO
  cudnnBackendDescriptor_t prob_t = g.virt(io, sd_t, sd_t_strides);
  g.reshape(prob, prob_t);
  g.matmul(prob_t, d_o, dv);
  // dS = P * (dO @ V^T - D) * scale
  cudnnBackendDescriptor_t dp = g.virt(f32, sd), dp_d = g.virt(f32, sd), ds_unscaled = g.virt(f32, sd),
                           ds = g.virt(f32, sd);
  g.matmul(d_o, vt, dp);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, row_sum, dp_d);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_d, prob, ds_unscaled);
  g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, scale, ds);
  // dK = dS^T @ Q
  cudnnBackendDescriptor_t ds_t = g.virt(io, sd_t, sd_t_strides);
  g.reshape(ds, ds_t);
  g.matmul(ds_t, q, dk);
  // dQ = dS @ K, accumulated in float32, then rounded into dq
  cudnnBackendDescriptor_t k_again = g.virt(io, kd, strides_of(p.k));
  g.reshape(kt, k_again);
  g.matmul(ds, k_again, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, dq);
}

std::shared_ptr<const Plan> build_plan(const Problem& p, cudnnHandle_t handle) {
  auto plan = std::make_shared<Plan>();
  GraphBuilder g(*plan, p.describe());
  try {
    if (p.backward) build_backward(p, g);
    else build_forward(p, g);
    g.finish(handle);
  } catch (const std::exception& e) {  // a descriptor cuDNN refused: this problem has no engine
    plan->found = false;
    plan->why = e.what();
  }
  if (!plan->found) g_unsupported.fetch_add(1, std::memory_order_relaxed);
  return plan;
}

std::shared_ptr<const Plan> find_plan(const Problem& p, cudnnHandle_t handle) {
  // Never destroyed: plans hold cuDNN objects, freed with the process.
  static auto* const plans = new PlanCache<std::vector<int64_t>, Plan>();
  bool built = false;
  std::shared_ptr<const Plan> plan = plans->get(
      sdpa_plan_key(p.backward, p.q, p.k, p.v, p.causal),
      [&](const std::vector<int64_t>&) {
        // cuDNN may allocate while it finalizes (runtime-compiled engines):
        // allowed during a CUDA graph capture in relaxed mode.
        RelaxedCaptureMode relaxed;
        return build_plan(p, handle);
      },
      &built);
  (built ? g_built : g_hits).fetch_add(1, std::memory_order_relaxed);
  return plan;
}

// ============================================================================================
// Running

void execute(const Problem& p, const Plan& plan, DeviceState& ds, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs) {
  // The workspace: pool memory on this stream, freed (on the same stream)
  // after the launch is queued: stream order keeps it alive for the run.
  Tensor ws;
  if (plan.workspace > 0) ws = make_tensor({(plan.workspace + 15) / 16 * 4}, TensorOptions(DType::Float32, p.q.device()));
  void* ws_ptr = ws.defined() ? ws.data_ptr() : nullptr;
  const std::string context = p.describe();
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, context);
  const auto n = static_cast<int64_t>(uids.size());
  HG_CUDNN_CHECK_CTX(cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                              uids.data()),
                     context);
  HG_CUDNN_CHECK_CTX(cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                              n, ptrs.data()),
                     context);
  HG_CUDNN_CHECK_CTX(
      cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws_ptr),
      context);
  HG_CUDNN_CHECK_CTX(cudnnBackendFinalize(pack.get()), context);
  std::lock_guard<std::mutex> lock(ds.run);
  HG_CUDNN_CHECK_CTX(cudnnSetStream(ds.handle, halfgrad::cuda::stream()), context);
  HG_CUDNN_CHECK_CTX(cudnnBackendExecute(ds.handle, plan.plan, pack.get()), context);
}

// The plan of an accepted problem (the contract), else an Error with cuDNN's reason.
std::shared_ptr<const Plan> accepted_plan(const Problem& p, DeviceState& ds) {
  std::shared_ptr<const Plan> plan = find_plan(p, ds.handle);
  if (!plan->found)
    fail("{}: cuDNN has no engine for it ({}); scaled_dot_product_attention asks "
         "kernels::fused_attention_unsupported first and takes the math path then",
         p.describe(), plan->why);
  return plan;
}

bool fused_dtype(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

}  // namespace

// ============================================================================================
// Entry points

std::string fused_attention_unsupported(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttention& a,
                                        bool backward) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return "the fused kernel takes 4-d [B, H, L, E] tensors only";
  if (!fused_dtype(q.dtype()) || k.dtype() != q.dtype() || v.dtype() != q.dtype())
    return fmt::format("the fused kernel takes float16 or bfloat16 only, not {}", dtype_name(q.dtype()));
  const int device = q.device().index();
  DeviceGuard guard(device);
  DeviceState& ds = device_state(device);
  for (const bool bwd : {false, true}) {
    if (bwd && !backward) break;
    const std::shared_ptr<const Plan> plan = find_plan(Problem{bwd, q, k, v, a.causal}, ds.handle);
    if (!plan->found) return fmt::format("cuDNN has no engine for its {}: {}", bwd ? "backward" : "forward", plan->why);
  }
  return "";
}

void fused_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttention& a,
                             const Tensor& out, const Tensor& stats) {
  const Problem p{false, q, k, v, a.causal};
  const int device = q.device().index();
  DeviceGuard guard(device);
  DeviceState& ds = device_state(device);
  const std::shared_ptr<const Plan> plan = accepted_plan(p, ds);
  float scale = static_cast<float>(a.scale), neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs{q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), stats.data_ptr(), &scale};
  if (a.causal) uids.push_back(kNegInf), ptrs.push_back(&neg_inf);
  execute(p, *plan, ds, uids, ptrs);
}

void fused_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& stats, const FusedAttention& a, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv) {
  const Problem p{true, q, k, v, a.causal};
  const int device = q.device().index();
  DeviceGuard guard(device);
  DeviceState& ds = device_state(device);
  const std::shared_ptr<const Plan> plan = accepted_plan(p, ds);
  // The plan was made for 16-byte aligned dense out, dout, stats and gradients;
  // a gradient that arrives as an offset view is copied once.
  Tensor d_o = dout;
  if (byte_alignment(dout.data_ptr()) < 16) {
    d_o = make_tensor(dout.shape(), dout.options());
    cuda::copy(d_o, dout);
  }
  // The scratch tensors: rowsum(dO * O) and the float32 dQ accumulator (which
  // cuDNN before 9.6 expects zeroed; later versions clear it themselves).
  const TensorOptions f32(DType::Float32, q.device());
  const Tensor row_sum = make_tensor({p.B(), p.H(), p.L(), 1}, f32);
  const Tensor dq_accum = make_tensor({p.B(), p.H(), p.L(), p.E()}, f32);
  if (cudnnGetVersion() < 90600) cuda::fill(dq_accum, 0.0);
  float scale = static_cast<float>(a.scale), neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kRowSum, kDQAccum, kScale, kOne};
  std::vector<void*> ptrs{q.data_ptr(),  k.data_ptr(),       v.data_ptr(),        out.data_ptr(),
                          d_o.data_ptr(), stats.data_ptr(),  dq.data_ptr(),       dk.data_ptr(),
                          dv.data_ptr(),  row_sum.data_ptr(), dq_accum.data_ptr(), &scale,
                          &one};
  if (a.causal) uids.push_back(kNegInf), ptrs.push_back(&neg_inf);
  execute(p, *plan, ds, uids, ptrs);
}

SdpaPlanCounts sdpa_plan_counts() {
  SdpaPlanCounts c;
  c.built = g_built.load(std::memory_order_relaxed);
  c.hits = g_hits.load(std::memory_order_relaxed);
  c.unsupported = g_unsupported.load(std::memory_order_relaxed);
  return c;
}

void reset_sdpa_plan_counts() {
  for (auto* c : {&g_built, &g_hits, &g_unsupported}) c->store(0, std::memory_order_relaxed);
}

}  // namespace halfgrad::kernels::cuda
