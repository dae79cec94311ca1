// linear_chain on CUDA against the CPU backend: ReLU, exact GELU and tanh GELU
// chains, hidden widths that are and are not multiples of 8, every dtype,
// cuBLASLt's epilogues on (mask / z read by DRELU_BGRAD / DGELU_BGRAD in the
// next layer's dx GEMM) and off (plain GEMMs and passes). Built only with the
// CUDA backend; without a usable GPU the [cuda] cases are reported skipped.
#include "test_util.h"

#if defined(HALFGRAD_WITH_CUDA)

#include <halfgrad.h>

#include <halfgrad/kernels/cuda/gemm.h>

namespace hg = halfgrad;
namespace cops = halfgrad::kernels::cuda;
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

// The spacing of a dtype's values relative to their magnitude (one ulp at most).
double epsilon(DType dt) { return 2 * hgtest::unit_roundoff(dt); }

// n rows of x (drawn until found) whose every ReLU pre-activation z is clear of 0 by
// more than one ulp of each of its terms could move it: margin = e * (sum_k |h_k w_jk| +
// |b_j|), e the dtype's epsilon, plus 2^-10 below a tanh-GELU layer (cuBLASLt's may use
// the hardware tanh). relu'(z) jumps at 0, so a z closer than that may land on either
// side on the two devices (a different accumulation order, a layer input one ulp apart,
// a cuBLASLt kernel that rounds x w^T before adding the bias), and one unit on the other
// side moves a layer's gradients by several percent: a real difference in the inputs,
// not in the code under test. GELU's derivative is smooth and needs no margin. Rows are
// independent in a chain, so picking rows picks inputs.
Tensor x_clear_of_relu_kinks(const Case& c, const std::vector<Tensor>& w, const std::vector<Tensor>& b, DType dt,
                             int64_t n) {
  hg::no_grad off;
  const int64_t in = c.widths[0];
  std::vector<double> rows;
  int64_t found = 0, drawn = 0;
  while (found < n) {
    REQUIRE(drawn < 400 * std::max<int64_t>(n, 8));  // a margin this strict would be a bug of its own
    const Tensor cand = uniform({64, in}, dt, -1, 1);
    drawn += 64;
    std::vector<bool> clear(64, true);
    Tensor h = cand;
    bool below_tanh = false;
    for (size_t i = 0; i < w.size(); ++i) {
      const Tensor z = hg::linear(h, w[i], b[i]);
      if (c.acts[i] == A::ReLU) {
        const int64_t k = w[i].shape()[1], f = w[i].shape()[0];
        const auto hv = values(h), wv = values(w[i]), zv = values(z);
        const auto bv = b[i].defined() ? values(b[i]) : std::vector<double>(static_cast<size_t>(f), 0.0);
        const double e = epsilon(dt) + (below_tanh ? 0x1p-10 : 0.0);
        for (int64_t r = 0; r < 64; ++r)
          for (int64_t j = 0; j < f && clear[static_cast<size_t>(r)]; ++j) {
            double scale = std::fabs(bv[static_cast<size_t>(j)]);
            for (int64_t q = 0; q < k; ++q)
              scale += std::fabs(hv[static_cast<size_t>(r * k + q)] * wv[static_cast<size_t>(j * k + q)]);
            if (std::fabs(zv[static_cast<size_t>(r * f + j)]) <= e * scale) clear[static_cast<size_t>(r)] = false;
          }
      }
      below_tanh = below_tanh || c.acts[i] == A::GELUTanh;
      h = c.acts[i] == A::ReLU       ? hg::relu(z)
          : c.acts[i] == A::GELU     ? hg::gelu(z)
          : c.acts[i] == A::GELUTanh ? hg::gelu(z, "tanh")
                                     : z;
    }
    const auto cv = values(cand);
    for (int64_t r = 0; r < 64 && found < n; ++r)
      if (clear[static_cast<size_t>(r)]) {
        rows.insert(rows.end(), cv.begin() + r * in, cv.begin() + (r + 1) * in);
        ++found;
      }
  }
  return make(rows, {n, in}, dt);
}

// Forward and every gradient on CUDA against the CPU; `fused_backward`: the epilogue
// fusion setting during backward (turning it off after the forward drops the ReLU mask).
void check_case(const Case& c, DType dt, bool fused_forward, bool fused_backward, bool x_grad, int64_t n = 40) {
  Leaves host{Tensor(), {}, {}};
  for (size_t i = 0; i + 1 < c.widths.size(); ++i) {
    const double bound = 1.5 / std::sqrt(static_cast<double>(c.widths[i]));
    host.w.push_back(uniform({c.widths[i + 1], c.widths[i]}, dt, -bound, bound));
    host.b.push_back(c.bias[i] ? uniform({c.widths[i + 1]}, dt, -0.5, 0.5) : Tensor());
  }
  host.x = x_clear_of_relu_kinks(c, host.w, host.b, dt, n);
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
