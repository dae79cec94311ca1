// linear_chain on CUDA against the CPU backend: ReLU, exact GELU and tanh GELU
// chains, hidden widths that are and are not multiples of 8, every dtype,
// cuBLASLt's epilogues on (mask / z read by DRELU_BGRAD / DGELU_BGRAD in the
// next layer's dx GEMM) and off (plain GEMMs and passes). Built only with the
// CUDA backend; without a usable GPU the [cuda] cases are reported skipped.
#include "test_util.h"

#if defined(HALFGRAD_WITH_CUDA)

#include <halfgrad.h>

#include <halfgrad/ops/cuda/gemm.h>

namespace hg = halfgrad;
namespace cops = halfgrad::cuda_ops;
using namespace hgtest;
using A = hg::Activation;

namespace {
const hg::Device kCuda = hg::Device::cuda();

struct FusionGuard {  // process-wide: put it back
  bool saved = cops::epilogue_fusion();
  explicit FusionGuard(bool on) { cops::set_epilogue_fusion(on); }
  ~FusionGuard() { cops::set_epilogue_fusion(saved); }
};

struct ReluFusionGuard {  // cuBLASLt's RELU epilogues (NaN -> 0) and so the mask: off by default
  bool saved = cops::relu_epilogue_fusion();
  explicit ReluFusionGuard(bool on) { cops::set_relu_epilogue_fusion(on); }
  ~ReluFusionGuard() { cops::set_relu_epilogue_fusion(saved); }
};

struct Case {
  const char* name;
  std::vector<int64_t> widths;  // in_features, then each layer's out_features
  std::vector<A> acts;
  std::vector<bool> bias;
};

// 20 and 12: widths cuBLASLt cannot take as a contiguous GELU aux (the chain pads z's rows).
const std::vector<Case> kCases = {
    {"relu", {24, 32, 20, 16}, {A::ReLU, A::ReLU, A::None}, {true, false, true}},
    {"gelu tanh", {24, 32, 20, 16}, {A::GELUTanh, A::GELUTanh, A::GELUTanh}, {true, true, false}},
    {"gelu exact", {24, 12, 32, 16}, {A::GELU, A::GELU, A::None}, {false, true, true}},
    {"mixed", {16, 20, 24, 12, 8}, {A::GELUTanh, A::ReLU, A::GELU, A::ReLU}, {true, true, true, true}},
};

// cuBLASLt's tanh GELU (forward and DGELU) may use the hardware tanh
double case_tol(const Case& c, DType dt) {
  for (A a : c.acts)
    if (a == A::GELUTanh) return std::max(2 * tol(dt), 1e-3);
  return 2 * tol(dt);
}

void check_like_cpu(const Tensor& gpu, const Tensor& cpu_result, double tolerance) {
  REQUIRE(gpu.device().is_cuda());
  CHECK(gpu.dtype() == cpu_result.dtype());
  CHECK(gpu.shape() == cpu_result.shape());
  HG_CHECK_CLOSE_TOL(gpu.cpu(), values(cpu_result), tolerance);
}

struct Leaves {
  Tensor x;
  std::vector<Tensor> w, b;
};
// New leaves holding host's values on `device` (never host's own tensors).
Leaves on(const Leaves& host, hg::Device device, bool x_grad) {
  const auto leaf = [&](const Tensor& t, bool grad) {
    if (!t.defined()) return Tensor();
    Tensor copy = device.is_cpu() ? t.clone() : t.to(device);
    return copy.requires_grad_(grad);
  };
  Leaves l{leaf(host.x, x_grad), {}, {}};
  for (const Tensor& w : host.w) l.w.push_back(leaf(w, true));
  for (const Tensor& b : host.b) l.b.push_back(leaf(b, true));
  return l;
}

// Forward and every gradient on CUDA against the CPU; `fused_backward`: the epilogue
// fusion setting during backward (turning it off after the forward drops the ReLU mask).
void check_case(const Case& c, DType dt, bool fused_forward, bool fused_backward, bool x_grad, int64_t n = 40) {
  Leaves host{uniform({n, c.widths[0]}, dt, -1, 1), {}, {}};
  for (size_t i = 0; i + 1 < c.widths.size(); ++i) {
    const double bound = 1.5 / std::sqrt(static_cast<double>(c.widths[i]));
    host.w.push_back(uniform({c.widths[i + 1], c.widths[i]}, dt, -bound, bound));
    host.b.push_back(c.bias[i] ? uniform({c.widths[i + 1]}, dt, -0.5, 0.5) : Tensor());
  }
  const Tensor g = uniform({n, c.widths.back()}, dt, -1, 1);
  const Leaves cpu = on(host, hg::Device::cpu(), x_grad), gpu = on(host, kCuda, x_grad);
  const Tensor yc = hg::linear_chain(cpu.x, cpu.w, cpu.b, c.acts);
  Tensor yd;
  {
    FusionGuard fusion(fused_forward);
    yd = hg::linear_chain(gpu.x, gpu.w, gpu.b, c.acts);
  }
  const double t = case_tol(c, dt);
  check_like_cpu(yd, yc, t);
  {
    FusionGuard fusion(fused_forward);
    hg::no_grad off;  // nothing kept: RELU_BIAS / GELU_BIAS without aux
    check_like_cpu(hg::linear_chain(gpu.x, gpu.w, gpu.b, c.acts), yc.detach(), t);
  }
  yc.backward(g);
  {
    FusionGuard fusion(fused_backward);
    yd.backward(g.to(kCuda));
  }
  CHECK(gpu.x.grad().defined() == x_grad);
  if (x_grad) check_like_cpu(gpu.x.grad(), cpu.x.grad(), t);
  for (size_t i = 0; i < host.w.size(); ++i) {
    INFO("layer " << i);
    check_like_cpu(gpu.w[i].grad(), cpu.w[i].grad(), t);
    if (host.b[i].defined()) check_like_cpu(gpu.b[i].grad(), cpu.b[i].grad(), t);
  }
}
}  // namespace

TEST_CASE("cuda linear_chain and its gradients match the CPU, epilogue fusion on and off",
          "[cuda][linear][chain][backward]") {
  for (const Case& c : kCases)
    for (DType dt : kFloatDTypes)
      for (bool fused : {true, false})
        for (bool relu_fusion : {false, true}) {
          INFO(c.name << " " << dname(dt) << (fused ? " fused" : " unfused")
                      << (relu_fusion ? " cuBLASLt ReLU" : " ReLU pass"));
          ReluFusionGuard relu(relu_fusion);
          check_case(c, dt, fused, fused, /*x_grad=*/true);
        }
}

TEST_CASE("cuda linear_chain without an input gradient, and with fusion turned off between forward and backward",
          "[cuda][linear][chain][backward]") {
  for (const Case& c : kCases)
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
      INFO(c.name << " " << dname(dt));
      ReluFusionGuard relu(true);  // masks in the forward, so turning fusion off must give way to y
      check_case(c, dt, true, true, /*x_grad=*/false);
      check_case(c, dt, true, false, /*x_grad=*/true);  // a ReLU mask gives way to the output
    }
}

// Shapes where cuBLASLt may have no ReLU-mask (RELU_AUX_BIAS) or DRELU_BGRAD
// kernel: one output feature (the top dx GEMM has k = 1), one row, odd widths
// (2-byte aligned half rows). The chain then falls back to the plain GEMM and a
// pass reading the layer's output: same numbers, never an error.
TEST_CASE("cuda linear_chain falls back where cuBLASLt has no mask epilogue", "[cuda][linear][chain][backward]") {
  const std::vector<Case> edge = {
      {"relu to one output", {64, 64, 1}, {A::ReLU, A::None}, {true, true}},
      {"odd widths", {33, 33, 33, 5}, {A::ReLU, A::ReLU, A::None}, {true, true, true}},
  };
  for (const Case& c : edge)
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16})
      for (int64_t n : {1, 32}) {
        INFO(c.name << " " << dname(dt) << " batch " << n);
        ReluFusionGuard relu(true);  // the mask epilogues are what may be missing
        check_case(c, dt, true, true, /*x_grad=*/true, n);
      }
}

#endif  // HALFGRAD_WITH_CUDA
