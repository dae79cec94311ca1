// The GEMM epilogue counters of gemm.h: plain host code (no CUDA), so they are
// testable without a GPU.
#include <atomic>

#include <halfgrad/kernels/cuda/gemm.h>

namespace halfgrad::kernels::cuda {
namespace {
std::atomic<uint64_t> g_fused[kFusedEpilogueKinds];
std::atomic<uint64_t> g_fallback[kFusedEpilogueKinds];
std::atomic<uint64_t> g_plain{0};
}  // namespace

const char* fused_epilogue_name(FusedEpilogue e) {
  switch (e) {
    case FusedEpilogue::Bias: return "BIAS";
    case FusedEpilogue::Relu: return "RELU";
    case FusedEpilogue::ReluMask: return "RELU_AUX";
    case FusedEpilogue::GeluTanh: return "GELU";
    case FusedEpilogue::GeluTanhAux: return "GELU_AUX";
    case FusedEpilogue::BiasGrad: return "BGRADB";
    case FusedEpilogue::DRelu: return "DRELU";
    case FusedEpilogue::DReluBiasGrad: return "DRELU_BGRAD";
    case FusedEpilogue::DGelu: return "DGELU";
    case FusedEpilogue::DGeluBiasGrad: return "DGELU_BGRAD";
  }
  return "?";
}

GemmCounts gemm_counts() {
  GemmCounts c;
  for (int i = 0; i < kFusedEpilogueKinds; ++i) {
    c.fused[i] = g_fused[i].load(std::memory_order_relaxed);
    c.fallback[i] = g_fallback[i].load(std::memory_order_relaxed);
  }
  c.plain = g_plain.load(std::memory_order_relaxed);
  return c;
}

void reset_gemm_counts() {
  for (int i = 0; i < kFusedEpilogueKinds; ++i) {
    g_fused[i].store(0, std::memory_order_relaxed);
    g_fallback[i].store(0, std::memory_order_relaxed);
  }
  g_plain.store(0, std::memory_order_relaxed);
}

namespace detail {
void count_epilogue(FusedEpilogue e, bool fused) {
  const int i = static_cast<int>(e);
  if (i < 0 || i >= kFusedEpilogueKinds) return;
  (fused ? g_fused : g_fallback)[i].fetch_add(1, std::memory_order_relaxed);
}
void count_plain() { g_plain.fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

}  // namespace halfgrad::kernels::cuda
