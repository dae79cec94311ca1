// The CUDA convolutions (kernels::conv_forward / conv_backward_data /
// conv_backward_weight, contracts in kernels/kernels.h) on cuDNN 9's backend
// (graph) API, host code only:
//
//   tensor descriptors (our dims and strides, byte alignment, unique ids)
//   -> a convolution descriptor (cross-correlation, float32 compute; float64
//      for float64) -> one CONVOLUTION_FORWARD / BACKWARD_DATA /
//      BACKWARD_FILTER operation -> an operation graph -> heuristics (mode A,
//      then mode FALLBACK) -> the first engine config that passes our numerical
//      filter and finalizes -> an execution plan and its workspace size.
//
// The finalized plan is cached per key (op, dtype, dims, strides, alignment,
// geometry, device, TF32 setting, bias blending) in a kernels::PlanCache, so an
// engine is chosen once per shape; a key with no engine is cached as such.
// Each call then builds a variant pack (device pointers + a workspace tensor
// from the pool allocator) and runs the plan on halfgrad::cuda::current_stream() with
// the device's one cuDNN handle. Nothing synchronises with the host.
//
// Layouts: a tensor may be dense NC* (contiguous) or channels-last; its
// canonical strides go into the descriptor as they are. 1-d convolutions run
// as 2-d ones with a leading spatial dim of size 1 (as PyTorch does). Where no
// engine takes a problem as it is: asymmetric padding becomes explicit zeros
// around a copy (cuDNN then sees symmetric padding), and channels-last, mixed
// or misaligned tensors run on contiguous, 16-byte aligned copies. Negative
// padding (a transposed convolution with output_padding >= stride), which cuDNN
// rejects, never reaches it: the run sees only the part of x that outputs read.
// A descriptor cuDNN does not finalize is "no engine" for the problem, not a throw.
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <halfgrad/core/alias.h>
#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/error.h>
#include <halfgrad/kernels/cuda/cudnn_conv.h>
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/cudnn_backend.h>
#include <halfgrad/kernels/cuda/cudnn_check.h>
#include <halfgrad/kernels/cuda/per_device.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/kernels/numeric_settings.h>
#include <halfgrad/kernels/plan_cache.h>

namespace halfgrad::kernels::cuda {

namespace {

using halfgrad::cuda::DeviceGuard;
using halfgrad::cuda::RelaxedCaptureMode;

std::atomic<uint64_t> g_built{0}, g_hits{0}, g_blended{0}, g_added{0}, g_layout_copies{0}, g_padded{0}, g_cropped{0};

enum class Kind : uint8_t { Forward, BackwardData, BackwardFilter };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Forward: return "conv_forward";
    case Kind::BackwardData: return "conv_backward_data";
    case Kind::BackwardFilter: return "conv_backward_weight";
  }
  return "conv";
}

// ============================================================================================
// The shared cuDNN handle and descriptor (kernels/cuda/cudnn_backend.h), by their local names.

using Desc = CudnnDesc;
using DeviceState = CudnnDevice;
DeviceState& device_state(int device) { return cudnn_device(device); }

void set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, const char* attr,
              cudnnBackendAttributeType_t type, int64_t count, const void* value, const std::string& context) {
  HG_CUDNN_CHECK_CTX(cudnnBackendSetAttribute(d, name, type, count, value),
                     fmt::format("{} (attribute {})", context, attr));
}
#define HG_SET(desc, name, type, count, value) set_attr((desc), name, #name, type, (count), (value), context)

cudnnDataType_t cudnn_dtype(DType t) {
  switch (t) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: break;  // int64, bool, fp8
  }
  fail("conv: dtype {} has no cuDNN convolution (float32, float16, bfloat16; float64 where an engine takes it)",
       dtype_name(t));
}

// ============================================================================================
// Tensors as cuDNN sees them

enum class Layout : uint8_t { Contiguous, ChannelsLast };

// Is t dense with dims ordered `order` (innermost first)? Size-1 dims may have any stride.
bool dense_in_order(const Tensor& t, const int* order, int rank) {
  int64_t expected = 1;
  for (int i = 0; i < rank; ++i) {
    const int d = order[i];
    if (t.shape()[d] != 1 && t.strides()[d] != expected) return false;
    expected *= t.shape()[d];
  }
  return true;
}

bool has_layout(const Tensor& t, Layout l) {
  const int rank = static_cast<int>(t.dim());
  int order[5];
  if (l == Layout::Contiguous) {
    for (int i = 0; i < rank; ++i) order[i] = rank - 1 - i;
  } else {
    order[0] = 1;  // C innermost, then the spatial dims, then N
    for (int i = 1; i < rank - 1; ++i) order[i] = rank - i;
    order[rank - 1] = 0;
  }
  return dense_in_order(t, order, rank);
}

// One tensor of the problem: 4 or 5 dims (a 1-d conv's [N, C, L] as [N, C, 1, L])
// with the canonical strides of its layout, and its pointer's byte alignment.
struct View {
  Tensor t;  // the caller's tensor (keeps the storage alive)
  int rank = 4;
  int64_t dims[5] = {}, strides[5] = {};
  Layout layout = Layout::Contiguous;
  int64_t align = 16;
  void* ptr() const { return t.data_ptr(); }
};

// `preferred`: the layout to pick when t has both (size-1 dims), so that the
// tensors of one problem agree where they can.
View make_view(const Tensor& t, Layout preferred, const char* op, const char* role) {
  HG_CHECK(t.dim() >= 3 && t.dim() <= 5, "{}: {} {} must have 3 to 5 dims ([N, C, *spatial])", op, role,
           t.describe());
  const Layout other = preferred == Layout::Contiguous ? Layout::ChannelsLast : Layout::Contiguous;
  View v;
  v.t = t;
  if (has_layout(t, preferred)) {
    v.layout = preferred;
  } else if (has_layout(t, other)) {
    v.layout = other;
  } else {
    fail("{}: {} {} with strides {} is neither dense NC* (contiguous) nor channels-last; the conv kernels take only "
         "those layouts (call .contiguous() first)",
         op, role, t.describe(), shape_str(t.strides()));
  }
  v.rank = t.dim() == 3 ? 4 : static_cast<int>(t.dim());
  if (t.dim() == 3) {
    v.dims[0] = t.shape()[0], v.dims[1] = t.shape()[1], v.dims[2] = 1, v.dims[3] = t.shape()[2];
  } else {
    for (int i = 0; i < v.rank; ++i) v.dims[i] = t.shape()[i];
  }
  int64_t s = 1;
  if (v.layout == Layout::Contiguous) {
    for (int i = v.rank - 1; i >= 0; --i) v.strides[i] = s, s *= v.dims[i];
  } else {
    v.strides[1] = s, s *= v.dims[1];
    for (int i = v.rank - 1; i >= 2; --i) v.strides[i] = s, s *= v.dims[i];
    v.strides[0] = s;
  }
  // cuDNN's vectorised loads need the alignment it is told: the largest power
  // of two (up to 16 bytes) dividing the address (a view may start mid-block).
  const auto addr = reinterpret_cast<uintptr_t>(t.data_ptr());
  v.align = 16;
  while (v.align > 1 && addr % static_cast<uintptr_t>(v.align) != 0) v.align /= 2;
  return v;
}

// The geometry as cuDNN takes it: 2 or 3 spatial dims (a 1-d conv gets a leading
// spatial dim with stride 1, dilation 1, no padding).
struct Spatial {
  int n = 2;
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pre[3] = {0, 0, 0}, post[3] = {0, 0, 0};
};

Spatial spatial(const kernels::ConvGeometry& g) {
  Spatial s;
  const int shift = g.nd == 1 ? 1 : 0;
  s.n = g.nd == 1 ? 2 : g.nd;
  for (int i = 0; i < g.nd; ++i) {
    s.stride[i + shift] = g.stride[i];
    s.dilation[i + shift] = g.dilation[i];
    s.pre[i + shift] = g.pad_before[i];
    s.post[i + shift] = g.pad_after[i];
  }
  return s;
}

std::string geometry_str(const kernels::ConvGeometry& g) {
  auto list = [&](const int64_t* v) {
    std::string s = "[";
    for (int i = 0; i < g.nd; ++i) s += fmt::format("{}{}", i ? ", " : "", v[i]);
    return s + "]";
  };
  return fmt::format("stride {}, padding {} before and {} after, dilation {}, groups {}", list(g.stride),
                     list(g.pad_before), list(g.pad_after), list(g.dilation), g.groups);
}

// The problem in cuDNN's names: X [N, C, *in], W [K, C / groups, *k], Y [N, K, *out].
// Forward reads X, W and writes Y; backward data reads Y (dy), W and writes X
// (dx); backward filter reads X, Y (dy) and writes W (dw).
struct Problem {
  Kind kind;
  View x, w, y;
  kernels::ConvGeometry g;
  double beta = 0;  // 1: blend into what the output holds (the forward's bias)
  bool tf32 = false;  // float32 may use TF32 tensor cores (cudnn_allow_tf32(), read once per call)
  DType dtype() const { return x.t.dtype(); }
  int device() const { return x.t.device().index(); }
  std::string describe() const {
    return fmt::format("{} of x {} (strides {}), w {} (strides {}), y {} (strides {}); {}", kind_name(kind),
                       x.t.describe(), shape_str(x.t.strides()), w.t.describe(), shape_str(w.t.strides()),
                       y.t.describe(), shape_str(y.t.strides()), geometry_str(g));
  }
};

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';

// ============================================================================================
// Plans

struct Plan {
  std::vector<Desc> keep;  // tensors, convolution, operation, graph, engine config: alive with the plan
  cudnnBackendDescriptor_t plan = nullptr;  // the last of `keep` when found
  int64_t workspace = 0;
  bool found = false;
  std::string why;  // no engine: the last status cuDNN gave
};

using Key = std::vector<int64_t>;

Key make_key(const Problem& p) {
  Key k;
  k.reserve(64);
  k.insert(k.end(), {static_cast<int64_t>(p.kind), static_cast<int64_t>(p.dtype()), p.device(), p.tf32 ? 1 : 0,
                     p.beta != 0 ? 1 : 0, p.x.rank});
  for (const View* v : {&p.x, &p.w, &p.y}) {
    k.insert(k.end(), v->dims, v->dims + v->rank);
    k.insert(k.end(), v->strides, v->strides + v->rank);
    k.push_back(v->align);
  }
  const Spatial s = spatial(p.g);
  for (const int64_t* a : {s.stride, s.dilation, s.pre, s.post}) k.insert(k.end(), a, a + s.n);
  return k;
}

std::string status_str(cudnnStatus_t st) {
  const std::string last = halfgrad::cuda::detail::cudnn_last_error();
  return fmt::format("{}{}{}", cudnnGetErrorString(st), last.empty() ? "" : ": ", last);
}

// Finalizes a descriptor of the problem. A failure means cuDNN does not take these
// dims, strides or this geometry: not an error here but "no engine" (`why` says which
// descriptor and what cuDNN said), so that the caller can fall back or raise an Error
// that names the problem.
bool finalized(cudnnBackendDescriptor_t d, const char* what, std::string& why) {
  const cudnnStatus_t st = cudnnBackendFinalize(d);
  if (st == CUDNN_STATUS_SUCCESS) return true;
  why = fmt::format("the {} descriptor does not finalize: {}", what, status_str(st));
  return false;
}

Desc tensor_desc(const View& v, int64_t uid, cudnnDataType_t dt, const std::string& context) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, context);
  HG_SET(d.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  HG_SET(d.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, v.rank, v.dims);
  HG_SET(d.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, v.rank, v.strides);
  HG_SET(d.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  HG_SET(d.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &v.align);
  return d;  // finalized by the caller (build_plan)
}

// Would this engine config break the numerics we promise? Tensor cores on
// float32 unless TF32 is allowed (PyTorch's filter for allow_tf32 = False),
// inputs converted down to a narrower type (PyTorch filters these always), and
// reductions in less than float32 (the contract: products accumulate in float32).
bool rejected(cudnnBackendDescriptor_t cfg, DType dtype, bool tf32_ok, const std::string& context) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, context);
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                               engine.ptr()) != CUDNN_STATUS_SUCCESS)
    return true;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
    return true;
  for (int64_t i = 0; i < std::min<int64_t>(n, CUDNN_NUMERICAL_NOTE_TYPE_COUNT); ++i) {
    switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        if (dtype == DType::Float32 && !tf32_ok) return true;
        break;
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return true;
      default: break;
    }
  }
  return false;
}

// Building a plan, step by step: each step adds its descriptors to the plan
// (which keeps them alive) and returns the one the next step needs, or
// nullptr with plan.why saying why cuDNN declined (then no engine: the caller
// takes a fallback).

// The x, w and y tensor descriptors (plan.keep[0..2]).
bool add_tensors(const Problem& p, Plan& plan, const std::string& context) {
  const cudnnDataType_t dt = cudnn_dtype(p.dtype());
  plan.keep.push_back(tensor_desc(p.x, kUidX, dt, context));
  plan.keep.push_back(tensor_desc(p.w, kUidW, dt, context));
  plan.keep.push_back(tensor_desc(p.y, kUidY, dt, context));
  return finalized(plan.keep[0].get(), "x tensor", plan.why) && finalized(plan.keep[1].get(), "w tensor", plan.why) &&
         finalized(plan.keep[2].get(), "y tensor", plan.why);
}

// The convolution descriptor: geometry and compute type.
cudnnBackendDescriptor_t add_convolution(const Problem& p, Plan& plan, const std::string& context) {
  const bool f64 = p.dtype() == DType::Float64;
  // Half types compute (accumulate) in float32; float64 in float64.
  const cudnnDataType_t compute = f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const Spatial s = spatial(p.g);
  const int64_t nspatial = s.n;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;  // PyTorch's convolution (no kernel flip)
  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, context);
  HG_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  HG_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  HG_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nspatial);
  HG_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nspatial, s.dilation);
  HG_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nspatial, s.stride);
  HG_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nspatial, s.pre);
  HG_SET(conv.get(), CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nspatial, s.post);
  if (!finalized(conv.get(), "convolution", plan.why)) return nullptr;
  plan.keep.push_back(std::move(conv));
  return plan.keep.back().get();

}

// The one forward / backward-data / backward-filter operation over x, w, y.
cudnnBackendDescriptor_t add_operation(const Problem& p, Plan& plan, cudnnBackendDescriptor_t cd,
                                       const std::string& context) {
  cudnnBackendDescriptor_t xd = plan.keep[0].get(), wd = plan.keep[1].get(), yd = plan.keep[2].get();
  const bool f64 = p.dtype() == DType::Float64;
  cudnnBackendDescriptorType_t op_type = CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
  cudnnBackendAttributeName_t a_x = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                              a_w = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                              a_y = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                              a_conv = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                              a_alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                              a_beta = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA;
  switch (p.kind) {
    case Kind::Forward: break;
    case Kind::BackwardData:
      op_type = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
      a_x = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, a_w = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
      a_y = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, a_conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
      a_alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
      a_beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA;
      break;
    case Kind::BackwardFilter:
      op_type = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
      a_x = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, a_w = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
      a_y = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
      a_conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
      a_alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
      a_beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA;
      break;
  }
  Desc op(op_type, context);
  set_attr(op.get(), a_x, "X/DX", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd, context);
  set_attr(op.get(), a_w, "W/DW", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd, context);
  set_attr(op.get(), a_y, "Y/DY", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd, context);
  set_attr(op.get(), a_conv, "CONV_DESC", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, context);
  // alpha and beta in the compute type's host type
  const double alpha64 = 1.0, beta64 = p.beta;
  const float alpha32 = 1.0f, beta32 = static_cast<float>(p.beta);
  const cudnnBackendAttributeType_t scalar = f64 ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  set_attr(op.get(), a_alpha, "ALPHA", scalar, 1, f64 ? static_cast<const void*>(&alpha64) : &alpha32, context);
  set_attr(op.get(), a_beta, "BETA", scalar, 1, f64 ? static_cast<const void*>(&beta64) : &beta32, context);
  cudnnStatus_t st = cudnnBackendFinalize(op.get());
  if (st != CUDNN_STATUS_SUCCESS) {  // cuDNN rejects the problem itself
    plan.why = "the operation does not finalize: " + status_str(st);
    return nullptr;
  }
  plan.keep.push_back(std::move(op));
  return plan.keep.back().get();

}

// The operation graph of that one operation.
cudnnBackendDescriptor_t add_graph(Plan& plan, cudnnBackendDescriptor_t opd, cudnnHandle_t handle,
                                   const std::string& context) {
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, context);
  HG_SET(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &opd);
  HG_SET(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  const cudnnStatus_t st = cudnnBackendFinalize(graph.get());
  if (st != CUDNN_STATUS_SUCCESS) {
    plan.why = "the operation graph does not finalize: " + status_str(st);
    return nullptr;
  }
  plan.keep.push_back(std::move(graph));
  return plan.keep.back().get();

}

// The engine: the first config of the heuristics' ranked list that passes our
// numerical filter (rejected) and finalizes into an execution plan.
void choose_engine(const Problem& p, Plan& plan, cudnnBackendDescriptor_t gd, cudnnHandle_t handle,
                   const std::string& context) {
  plan.why = "no engine config";
  // Mode A's ranked list first; FALLBACK's (engines that take more problems, slower) if none of A's finalizes.
  for (const cudnnBackendHeurMode_t heur_mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, context);
    HG_SET(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gd);
    HG_SET(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
    cudnnStatus_t st = cudnnBackendFinalize(heur.get());
    if (st != CUDNN_STATUS_SUCCESS) {
      plan.why = "the heuristics do not finalize: " + status_str(st);
      continue;
    }
    int64_t count = 0;
    st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                  nullptr);
    if (st != CUDNN_STATUS_SUCCESS || count <= 0) {
      if (st != CUDNN_STATUS_SUCCESS) plan.why = "the heuristics give no results: " + status_str(st);
      continue;
    }
    std::vector<Desc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, context);
      raw.push_back(cfgs.back().get());
    }
    int64_t got = 0;
    st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                  &got, raw.data());
    if (st != CUDNN_STATUS_SUCCESS) {
      plan.why = "the heuristics give no results: " + status_str(st);
      continue;
    }
    int filtered = 0;
    for (int64_t i = 0; i < std::min(got, count); ++i) {
      if (rejected(raw[i], p.dtype(), p.tf32, context)) {
        ++filtered;
        continue;
      }
      Desc exec(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, context);
      HG_SET(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      HG_SET(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
      st = cudnnBackendFinalize(exec.get());
      if (st != CUDNN_STATUS_SUCCESS) {  // this engine does not take the problem: the next one
        plan.why = "no engine config finalizes; the last: " + status_str(st);
        continue;
      }
      int64_t ws = 0, n = 0;
      HG_CUDNN_CHECK_CTX(cudnnBackendGetAttribute(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                  CUDNN_TYPE_INT64, 1, &n, &ws),
                         context);
      plan.workspace = std::max<int64_t>(ws, 0);
      plan.keep.push_back(std::move(cfgs[i]));  // the chosen config lives with the plan
      plan.keep.push_back(std::move(exec));
      plan.plan = plan.keep.back().get();
      plan.found = true;
      plan.why.clear();
      return;
    }
    if (filtered > 0 && filtered == std::min(got, count))
      plan.why = fmt::format("all {} engine configs were filtered out (tensor cores on float32 with "
                              "cudnn_allow_tf32() false, down-converted inputs, reduced-precision reductions)",
                              filtered);
  }
}

std::shared_ptr<Plan> build_plan(const Problem& p, cudnnHandle_t handle) {
  const std::string context = p.describe();
  auto plan = std::make_shared<Plan>();
  if (!add_tensors(p, *plan, context)) return plan;
  const cudnnBackendDescriptor_t conv = add_convolution(p, *plan, context);
  if (!conv) return plan;
  const cudnnBackendDescriptor_t op = add_operation(p, *plan, conv, context);
  if (!op) return plan;
  const cudnnBackendDescriptor_t graph = add_graph(*plan, op, handle, context);
  if (!graph) return plan;
  choose_engine(p, *plan, graph, handle, context);
  return plan;
}

std::shared_ptr<const Plan> find_plan(const Problem& p, cudnnHandle_t handle) {
  // Never destroyed: plans hold cuDNN objects, freed with the process.
  static auto* const plans = new PlanCache<Key, Plan>();
  bool built = false;
  std::shared_ptr<const Plan> plan = plans->get(
      make_key(p),
      [&](const Key&) -> std::shared_ptr<const Plan> {
        // cuDNN may allocate while it finalizes (runtime-compiled engines):
        // allowed during a CUDA graph capture in relaxed mode, as gemm.cu's
        // one-time setup.
        RelaxedCaptureMode relaxed;
        return build_plan(p, handle);
      },
      &built);
  (built ? g_built : g_hits).fetch_add(1, std::memory_order_relaxed);
  return plan;
}

// ============================================================================================
// Running

void execute(const Problem& p, const Plan& plan, DeviceState& ds) {
  // The workspace: a tensor from the stream-ordered pool on this stream, freed
  // (on the same stream) when it goes out of scope after the launch: stream
  // order keeps it alive for the convolution (see gemm.cu's Workspace).
  Tensor ws;
  if (plan.workspace > 0)
    ws = make_tensor({(plan.workspace + 15) / 16 * 4}, TensorOptions(DType::Float32, p.x.t.device()));
  void* ws_ptr = ws.defined() ? ws.data_ptr() : nullptr;
  const int64_t uids[3] = {kUidX, kUidW, kUidY};
  void* ptrs[3] = {p.x.ptr(), p.w.ptr(), p.y.ptr()};
  const std::string context = "running the plan";
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, context);
  HG_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  HG_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  HG_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws_ptr);
  HG_CUDNN_CHECK_CTX(cudnnBackendFinalize(pack.get()), p.describe());
  std::lock_guard<std::mutex> lock(ds.run);
  HG_CUDNN_CHECK_CTX(cudnnSetStream(ds.handle, halfgrad::cuda::stream()), p.describe());
  HG_CUDNN_CHECK_CTX(cudnnBackendExecute(ds.handle, plan.plan, pack.get()), p.describe());
}

[[noreturn]] void no_engine(const Problem& p, const Plan& plan) {
  if (p.dtype() == DType::Float64)
    fail("{}: cuDNN has no float64 engine for {} ({}); run float64 convolutions on the CPU (.cpu()) or use float32 "
         "on CUDA",
         kind_name(p.kind), p.describe(), plan.why);
  fail("{}: cuDNN has no engine for {} ({}); try another dtype or layout (.contiguous()), or run it on the CPU "
       "(.cpu())",
       kind_name(p.kind), p.describe(), plan.why);
}

// The tensors' common dtype and CUDA device, checked.
void check_tensors(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  const Tensor& first = *ts.begin()->second;
  for (const auto& [name, t] : ts) {
    HG_CHECK(t->defined(), "{}: {} is undefined", op, name);
    HG_CHECK(t->device().is_cuda(), "{}: {} {} is not on a CUDA device", op, name, t->describe());
    HG_CHECK(t->device() == first.device() && t->dtype() == first.dtype(),
             "{}: {} {} differs in device or dtype from {} {}: convolution tensors share one dtype and device", op,
             name, t->describe(), ts.begin()->first, first.describe());
  }
  const DType dt = first.dtype();
  HG_CHECK(dt == DType::Float32 || dt == DType::Float16 || dt == DType::BFloat16 || dt == DType::Float64,
           "{}: dtype {} of {} has no convolution (float32, float16, bfloat16; float64 on the CPU)", op, dtype_name(dt),
           first.describe());
}

Tensor contiguous_copy(const Tensor& t) {
  Tensor c = make_tensor(t.shape(), t.options());
  copy(c, t);
  return c;
}

const Tensor& output_of(Kind kind, const Tensor& X, const Tensor& W, const Tensor& Y) {
  return kind == Kind::Forward ? Y : kind == Kind::BackwardData ? X : W;
}

bool run_padded(Kind kind, const Tensor& X, const Tensor& W, const Tensor& Y, const kernels::ConvGeometry& g,
                double beta, bool must);
bool run_cropped(Kind kind, const Tensor& X, const Tensor& W, const Tensor& Y, const kernels::ConvCrop& crop,
                 double beta, bool must);

// Runs the problem (kind, X, W, Y as in Problem) into the output; true if an
// engine took it (else an Error when `must`). `beta`: 1 blends into the
// output (the forward's bias). Where no engine takes the problem as it is, it
// reruns with explicit padding (asymmetric padding) or on contiguous, aligned
// copies (channels-last, mixed layouts, offset views), each at most once.
bool run(Kind kind, const Tensor& X, const Tensor& W, const Tensor& Y, const kernels::ConvGeometry& g, double beta,
         bool must) {
  const char* op = kind_name(kind);
  HG_CHECK(g.nd >= 1 && g.nd <= 3 && X.dim() == g.nd + 2 && W.dim() == g.nd + 2 && Y.dim() == g.nd + 2,
           "{}: x {}, w {} and y {} must have {} dims for a {}-d convolution", op, X.describe(), W.describe(),
           Y.describe(), g.nd + 2, g.nd);
  HG_CHECK(g.groups >= 1 && X.shape()[1] == W.shape()[1] * g.groups && W.shape()[0] % g.groups == 0 &&
               Y.shape()[1] == W.shape()[0] && X.shape()[0] == Y.shape()[0],
           "{}: x {}, w {} and y {} do not fit groups = {}", op, X.describe(), W.describe(), Y.describe(), g.groups);
  // Negative padding (a transposed convolution's output_padding >= stride): cuDNN
  // rejects it, so the problem runs on the part of x that outputs read (kernels.h).
  const kernels::ConvCrop crop = kernels::crop_negative_padding(g, X.shape().data() + 2);
  if (crop.cropped) return run_cropped(kind, X, W, Y, crop, beta, must);
  const Tensor& activation = kind == Kind::BackwardData ? Y : X;  // the tensor whose layout the others follow
  const Layout pref = has_layout(activation, Layout::Contiguous) ? Layout::Contiguous : Layout::ChannelsLast;
  Problem p{kind, make_view(X, pref, op, "x"), make_view(W, pref, op, "w"), make_view(Y, pref, op, "y"), g, beta,
            X.dtype() == DType::Float32 && cudnn_allow_tf32()};

  const int device = X.device().index();
  DeviceGuard guard(device);
  DeviceState& ds = device_state(device);
  const std::shared_ptr<const Plan> plan = find_plan(p, ds.handle);
  if (plan->found) {
    execute(p, *plan, ds);
    return true;
  }
  // No engine took the problem as it is. Two fallbacks, each tried once down
  // the recursion (what they cost: copies of the tensors involved).
  bool asymmetric = false;
  for (int i = 0; i < g.nd; ++i) asymmetric = asymmetric || g.pad_before[i] != g.pad_after[i];
  if (asymmetric) return run_padded(kind, X, W, Y, g, beta, must);
  bool canonical = true;
  for (const View* v : {&p.x, &p.w, &p.y}) canonical = canonical && v->layout == Layout::Contiguous && v->align == 16;
  if (!canonical) {
    // Contiguous, 16-byte aligned copies (one layout for all three tensors):
    // inputs copied in, the output written to a fresh tensor and copied back
    // (the forward's output also copied in when beta blends it).
    g_layout_copies.fetch_add(1, std::memory_order_relaxed);
    const Tensor& out = output_of(kind, X, W, Y);
    auto canon = [&](const Tensor& t, const View& v) {
      if (v.layout == Layout::Contiguous && v.align == 16) return t;
      if (&t == &out && !(kind == Kind::Forward && beta != 0)) return make_tensor(t.shape(), t.options());
      return contiguous_copy(t);
    };
    const Tensor x2 = canon(X, p.x), w2 = canon(W, p.w), y2 = canon(Y, p.y);
    if (!run(kind, x2, w2, y2, g, beta, must)) return false;
    const Tensor& out2 = output_of(kind, x2, w2, y2);
    if (out2.data_ptr() != out.data_ptr()) copy(out, out2);
    return true;
  }
  if (must) no_engine(p, *plan);
  return false;
}

// Asymmetric padding that no engine takes: the padding beyond the symmetric
// part, min(before, after), becomes explicit zeros around a contiguous copy of
// x (forward, backward weight), or around a larger dx that the result is cut
// from (backward data), and cuDNN sees symmetric padding only (what PyTorch
// does for its asymmetric "same" padding).
bool run_padded(Kind kind, const Tensor& X, const Tensor& W, const Tensor& Y, const kernels::ConvGeometry& g,
                double beta, bool must) {
  g_padded.fetch_add(1, std::memory_order_relaxed);
  kernels::ConvGeometry g2 = g;
  Shape big = X.shape();
  int64_t offset = 0;
  Shape strides(big.size());
  for (int i = 0; i < g.nd; ++i) {
    const int64_t sym = std::min(g.pad_before[i], g.pad_after[i]);
    big[2 + i] += g.pad_before[i] + g.pad_after[i] - 2 * sym;
    g2.pad_before[i] = g2.pad_after[i] = sym;
  }
  Tensor xp = make_tensor(big, X.options());  // contiguous
  for (int i = 0; i < g.nd; ++i)
    offset += (g.pad_before[i] - std::min(g.pad_before[i], g.pad_after[i])) * xp.strides()[2 + i];
  const Tensor interior = alias_with(xp, X.shape(), xp.strides(), xp.offset() + offset);
  if (kind == Kind::BackwardData) {
    if (!run(kind, xp, W, Y, g2, beta, must)) return false;
    copy(X, interior);
    return true;
  }
  fill(xp, 0.0);
  copy(interior, X);
  return run(kind, xp, W, Y, g2, beta, must);
}

// Negative padding cut off x (kernels::ConvCrop): the run sees x[start, start + size)
// per spatial dim, with that padding 0. x is read (forward, backward weight) from a
// dense copy of that part, or written (backward data) through a dense temporary
// copied into it, the rest of dx zero (no output reads it). Nothing read at all
// (`empty`): y keeps what it holds (beta = 1: the bias) or is 0, dx = 0, dw = 0.
bool run_cropped(Kind kind, const Tensor& X, const Tensor& W, const Tensor& Y, const kernels::ConvCrop& crop,
                 double beta, bool must) {
  g_cropped.fetch_add(1, std::memory_order_relaxed);
  if (crop.empty) {
    if (kind != Kind::Forward || beta == 0) fill(output_of(kind, X, W, Y), 0.0);
    return true;
  }
  Shape shape = X.shape();
  int64_t offset = X.offset();
  for (int i = 0; i < crop.g.nd; ++i) {
    shape[2 + i] = crop.size[i];
    offset += crop.start[i] * X.strides()[2 + i];
  }
  const Tensor part = alias_with(X, shape, X.strides(), offset);
  const Tensor dense = make_tensor(shape, X.options(), X.suggest_memory_format());
  if (kind == Kind::BackwardData) {
    if (!run(kind, dense, W, Y, crop.g, beta, must)) return false;
    fill(X, 0.0);
    copy(part, dense);
    return true;
  }
  copy(dense, part);
  return run(kind, dense, W, Y, crop.g, beta, must);
}

bool any_empty(std::initializer_list<const Tensor*> ts) {
  return std::any_of(ts.begin(), ts.end(), [](const Tensor* t) { return t->numel() == 0; });
}

// bias [C] as a view of y's shape (stride 0 except along C).
Tensor bias_as(const Tensor& bias, const Tensor& y) {
  Shape strides(y.dim(), 0);
  strides[1] = bias.strides()[0];
  return alias_with(bias, y.shape(), strides, bias.offset());
}

}  // namespace

// ============================================================================================
// Entry points

void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const kernels::ConvGeometry& g,
                  const Tensor& y) {
  check_tensors("conv_forward", {{"x", &x}, {"w", &w}, {"y", &y}});
  if (bias.defined()) {
    check_tensors("conv_forward", {{"x", &x}, {"bias", &bias}});
    HG_CHECK(bias.dim() == 1 && y.dim() >= 2 && bias.shape()[0] == y.shape()[1],
             "conv_forward: bias {} must be [C_out] for y {}", bias.describe(), y.describe());
  }
  if (y.numel() == 0) return;
  if (any_empty({&x, &w})) {  // no products (C_in / groups == 0): y = bias, or 0
    if (bias.defined()) copy(y, bias_as(bias, y));
    else fill(y, 0.0);
    return;
  }
  if (!bias.defined()) {
    run(Kind::Forward, x, w, y, g, 0.0, true);
    return;
  }
  // The bias rides in cuDNN's blend: y holds the bias, then y = conv + 1 * y in
  // float32 (float64), rounded once. Where no engine blends, the convolution
  // runs alone and a separate pass adds the bias (two roundings for the half
  // types, as PyTorch's cudnn path, which always adds the bias afterwards).
  // Blending costs one pass that writes the bias into y (the same as the
  // separate add would cost); a shape with no blending engine is found out
  // once (the plan cache keeps "none") and pays both passes.
  const Tensor b = bias_as(bias, y);
  copy(y, b);
  if (run(Kind::Forward, x, w, y, g, 1.0, false)) {
    g_blended.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  run(Kind::Forward, x, w, y, g, 0.0, true);
  cuda::binary(kernels::BinaryOp::Add, y, b, y, 1.0);
  g_added.fetch_add(1, std::memory_order_relaxed);
}

void conv_backward_data(const Tensor& dy, const Tensor& w, const kernels::ConvGeometry& g, const Tensor& dx) {
  check_tensors("conv_backward_data", {{"dy", &dy}, {"w", &w}, {"dx", &dx}});
  if (dx.numel() == 0) return;
  if (any_empty({&dy, &w})) {  // nothing reads dx
    fill(dx, 0.0);
    return;
  }
  run(Kind::BackwardData, dx, w, dy, g, 0.0, true);
}

void conv_backward_weight(const Tensor& dy, const Tensor& x, const kernels::ConvGeometry& g, const Tensor& dw,
                          const Tensor& db) {
  check_tensors("conv_backward_weight", {{"dy", &dy}, {"x", &x}, {"dw", &dw}});
  if (db.defined()) {
    check_tensors("conv_backward_weight", {{"dy", &dy}, {"db", &db}});
    HG_CHECK(db.dim() == 1 && dy.dim() >= 2 && db.shape()[0] == dy.shape()[1],
             "conv_backward_weight: db {} must be [C_out] for dy {}", db.describe(), dy.describe());
    if (dy.numel() == 0) {
      fill(db, 0.0);
    } else {
      // db = the sum of dy over N and the spatial dims, accumulated in float32
      // (float64) by the reduction and rounded once into db's dtype: a view of
      // db as dy's shape with 1 everywhere but C.
      std::vector<int64_t> dims{0};
      for (int64_t d = 2; d < dy.dim(); ++d) dims.push_back(d);
      // (the reduction writes a contiguous output: a strided db gets a copy)
      const Tensor sum = db.is_contiguous() ? db : make_tensor(db.shape(), db.options());
      Shape shape(dy.dim(), 1), strides(dy.dim(), 0);
      shape[1] = sum.shape()[0];
      strides[1] = 1;
      cuda::reduce(kernels::ReduceOp::Sum, dy, dims, alias_with(sum, shape, strides, sum.offset()));
      if (sum.data_ptr() != db.data_ptr()) copy(db, sum);
    }
  }
  if (dw.numel() == 0) return;
  if (any_empty({&dy, &x})) {  // no products: dw = 0
    fill(dw, 0.0);
    return;
  }
  run(Kind::BackwardFilter, x, dw, dy, g, 0.0, true);
}

ConvPlanCounts conv_plan_counts() {
  ConvPlanCounts c;
  c.built = g_built.load(std::memory_order_relaxed);
  c.hits = g_hits.load(std::memory_order_relaxed);
  c.bias_blended = g_blended.load(std::memory_order_relaxed);
  c.bias_added = g_added.load(std::memory_order_relaxed);
  c.layout_copies = g_layout_copies.load(std::memory_order_relaxed);
  c.explicit_padding = g_padded.load(std::memory_order_relaxed);
  c.cropped = g_cropped.load(std::memory_order_relaxed);
  return c;
}

void reset_conv_plan_counts() {
  for (auto* c : {&g_built, &g_hits, &g_blended, &g_added, &g_layout_copies, &g_padded, &g_cropped})
    c->store(0, std::memory_order_relaxed);
}

}  // namespace halfgrad::kernels::cuda
