// AMP on the CPU: a weight cast from float32 by autocast gets its gradient
// straight from the GEMM's float32 sums (Saved::grad_dtypes): checked against
// a float64 product of the same bfloat16 operands, for linear and for a fused
// Sequential, and for a cast used by two ops whose gradients come back in
// float32 and in bfloat16 (summed in float32).
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>

#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;

namespace {
// ||a - b|| / ||b|| in float64
double rel_err(const Tensor& a, const Tensor& b) {
  const Tensor d = a.to(hg::kDouble) - b.to(hg::kDouble);
  return std::sqrt((d * d).sum().item()) / std::sqrt((b.to(hg::kDouble) * b.to(hg::kDouble)).sum().item());
}
Tensor bf16_exact(const Tensor& t) { return t.to(hg::kBFloat16).to(hg::kDouble); }  // the operand as the GEMM sees it
}  // namespace

TEST_CASE("CPU autocast: linear's weight gradient is the GEMM's float32 sum, not rounded to bfloat16", "[amp][autocast]") {
  hg::manual_seed(21);
  const Tensor x = hg::randn({64, 48});
  const Tensor r = hg::randn({64, 16});  // dL/dy
  Tensor w = hg::randn({16, 48}).requires_grad_();
  Tensor b = hg::randn({16}).requires_grad_();
  Tensor y;
  {
    hg::amp::autocast region(hg::kCPU);
    y = hg::linear(x, w, b);
  }
  REQUIRE(y.dtype() == hg::kBFloat16);
  (y.to(hg::kFloat) * r).sum().backward();
  REQUIRE(w.grad().dtype() == hg::kFloat);
  // dW = r^T x over the bfloat16 operands, in float64: float32 sums are within ~1e-7 of it,
  // a bfloat16 rounding of them would be ~2e-3 away
  const Tensor ref = hg::matmul(bf16_exact(r).t(), bf16_exact(x));
  CHECK(rel_err(w.grad(), ref) < 1e-5);
  CHECK(rel_err(w.grad().to(hg::kBFloat16), ref) > 1e-4);  // (what the rounding would have cost)
  CHECK(std::isfinite(b.grad().abs().sum().item()));
}

TEST_CASE("CPU float16 autocast keeps PyTorch's rounding of the weight gradient (what loss scaling is for)",
          "[amp][autocast]") {
  hg::manual_seed(24);
  const Tensor x = hg::randn({64, 48});
  const Tensor r = hg::randn({64, 16});
  Tensor w = hg::randn({16, 48}).requires_grad_();
  Tensor y;
  {
    hg::amp::autocast region(hg::kCPU, hg::kHalf);
    y = hg::linear(x, w);
  }
  (y.to(hg::kFloat) * r).sum().backward();
  const Tensor h = [](const Tensor& t) { return t.to(hg::kHalf).to(hg::kDouble); }(r);
  const Tensor exact = hg::matmul(h.t(), x.to(hg::kHalf).to(hg::kDouble));
  // every element is a float16 value: rounded once to float16, then widened exactly
  CHECK(hg::equal(w.grad(), w.grad().to(hg::kHalf).to(hg::kFloat)));
  CHECK(rel_err(w.grad(), exact) < 1e-3);
}

TEST_CASE("CPU autocast: a fused Sequential's weight gradients are float32 sums too", "[amp][autocast]") {
  hg::manual_seed(22);
  hg::nn::Sequential model(hg::nn::Linear(48, 32), hg::nn::Linear(32, 8));  // no activation: dW1 = (r W2)^T x
  const Tensor x = hg::randn({64, 48});
  const Tensor r = hg::randn({64, 8});
  Tensor y;
  {
    hg::amp::autocast region(hg::kCPU);
    y = model(x);
  }
  (y.to(hg::kFloat) * r).sum().backward();
  const auto ps = model.named_parameters();
  const Tensor& w1 = ps[0].second;
  const Tensor& w2 = ps[2].second;
  // the last layer's: r^T h1, h1 = x W1^T + b1 as the forward computed it (bfloat16)
  Tensor h1;
  {
    hg::NoGradGuard no_grad;
    hg::amp::autocast region(hg::kCPU);
    h1 = hg::linear(x, w1, ps[1].second);
  }
  CHECK(rel_err(w2.grad(), hg::matmul(bf16_exact(r).t(), h1.to(hg::kDouble))) < 1e-5);
  // the first layer's: its incoming gradient r W2 was rounded to bfloat16 by the backward GEMM (as PyTorch's)
  const Tensor g1 = hg::matmul(bf16_exact(r), bf16_exact(w2)).to(hg::kBFloat16).to(hg::kDouble);
  CHECK(rel_err(w1.grad(), hg::matmul(g1.t(), bf16_exact(x))) < 1e-5);
}

TEST_CASE("CPU autocast: one cast weight, a float32 and a bfloat16 gradient, summed in float32", "[amp][autocast]") {
  hg::manual_seed(23);
  const Tensor x = hg::randn({32, 24});
  const Tensor r1 = hg::randn({32, 24}), r2 = hg::randn({32, 24});
  Tensor w = hg::randn({24, 24}).requires_grad_();
  Tensor y1, y2;
  {
    hg::amp::autocast region(hg::kCPU);  // both ops take the cached cast of w: one cast node
    y1 = hg::linear(x, w);               // its dW comes back in float32
    y2 = hg::matmul(x, w);               // its dW in bfloat16
  }
  ((y1.to(hg::kFloat) * r1).sum() + (y2.to(hg::kFloat) * r2).sum()).backward();
  REQUIRE(w.grad().dtype() == hg::kFloat);
  const Tensor ref = hg::matmul(bf16_exact(r1).t(), bf16_exact(x)) + hg::matmul(bf16_exact(x).t(), bf16_exact(r2));
  CHECK(rel_err(w.grad(), ref) < 1e-2);  // the matmul half was rounded to bfloat16
  CHECK(rel_err(w.grad(), ref) > 0);
}

// The bfloat16 copies of big weights cost no memory at the peak: linear_chain's
// backward frees each copy after its layer's last GEMM read it and only then
// makes the float32 gradient (kernels::ChainLayerGrad), unless the graph is
// kept for another backward (retain_graph), which must find the copies.
TEST_CASE("CPU autocast: a fused Sequential frees each weight copy before making its gradient", "[amp][autocast]") {
  namespace hm = hg::host_memory;
  hg::manual_seed(24);
  const int64_t width = 1024;
  hg::nn::Sequential model(hg::nn::Linear(width, width), hg::nn::ReLU(), hg::nn::Linear(width, width),
                           hg::nn::ReLU(), hg::nn::Linear(width, 16));
  const Tensor x = hg::randn({4, width});
  const double weights = 2.0 * width * width + 16.0 * width;  // elements
  const double grad_bytes = 4 * weights, copy_bytes = 2 * weights;
  // the rise of tensor memory in use over a backward, and the gradients it gave
  auto backward_rise = [&](bool retain) {
    model.zero_grad();
    Tensor y;
    {
      hg::amp::autocast region(hg::kCPU);
      y = model(x);
    }
    const Tensor loss = y.to(hg::kFloat).sum();
    const uint64_t before = hm::stats().in_use_bytes;
    hm::reset_peak();
    loss.backward(Tensor(), retain);
    const double rise = static_cast<double>(hm::stats().peak_in_use_bytes - before);
    std::vector<Tensor> grads;
    for (const auto& p : model.parameters()) grads.push_back(p.grad().clone());
    if (retain) {  // the kept graph runs again, to the same gradients (accumulated: twice them)
      loss.backward();
      const auto ps = model.parameters();
      for (size_t i = 0; i < ps.size(); ++i) CHECK(hg::allclose(ps[i].grad(), grads[i] * 2.0, 1e-5, 1e-6));
    }
    return std::make_pair(rise, grads);
  };
  const auto [freed, g1] = backward_rise(false);
  const auto [kept, g2] = backward_rise(true);
  INFO("rise over backward: " << freed << " bytes freeing the copies, " << kept << " keeping them; gradients "
                              << grad_bytes << ", copies " << copy_bytes);
  CHECK(kept >= grad_bytes);                      // every gradient made while the copies live
  CHECK(freed <= grad_bytes - 0.75 * copy_bytes);  // the copies went first
  for (size_t i = 0; i < g1.size(); ++i) CHECK(hg::equal(g1[i], g2[i]));
}

// The same for convolutions: oneDNN's bfloat16 backward-weights kernels write
// float32 diff weights and bias, and the direct loop (the depthwise
// channels-last case, and what oneDNN declines) writes its float32 sums too.
// (conv_transpose's bias gradient is a sum of its bfloat16 output gradient.)
TEST_CASE("CPU autocast: conv's weight and bias gradients are float32 sums, not rounded to bfloat16",
          "[amp][autocast][conv]") {
  hg::manual_seed(25);
  struct C {
    const char* name;
    hg::Shape x, w;
    int64_t stride, pad, groups;
    bool bias, transposed;
  };
  const std::vector<C> cases = {
      {"3x3 stride 2", {4, 8, 12, 12}, {16, 8, 3, 3}, 2, 1, 1, true, false},
      {"pointwise", {4, 16, 9, 9}, {24, 16, 1, 1}, 1, 0, 1, false, false},
      {"depthwise 5x5", {4, 16, 7, 7}, {16, 1, 5, 5}, 1, 2, 16, false, false},
      {"depthwise 5x5 on 2x2", {8, 16, 2, 2}, {16, 1, 5, 5}, 1, 2, 16, true, false},  // oneDNN declines: direct
      {"transposed", {4, 8, 6, 6}, {8, 6, 2, 2}, 2, 0, 1, true, true},
  };
  for (const C& c : cases) {
    for (const auto layout : {hg::MemoryFormat::Contiguous, hg::MemoryFormat::ChannelsLast}) {
      INFO(c.name << (layout == hg::MemoryFormat::ChannelsLast ? ", channels-last" : ", row-major"));
      const Tensor x = hg::randn(c.x).contiguous(layout);
      Tensor w = hg::randn(c.w).requires_grad_();
      const int64_t co = c.transposed ? c.w[1] * c.groups : c.w[0];
      Tensor b = c.bias ? hg::randn({co}).requires_grad_() : Tensor();
      auto conv = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
        return c.transposed ? hg::conv_transpose2d(xi, wi, bi, c.stride, c.pad, 0, c.groups)
                            : hg::conv2d(xi, wi, bi, c.stride, c.pad, 1, c.groups);
      };
      Tensor y;
      {
        hg::amp::autocast region(hg::kCPU);
        y = conv(x, w, b);
      }
      REQUIRE(y.dtype() == hg::kBFloat16);
      const Tensor r = hg::randn(y.shape());  // dL/dy, rounded to bfloat16 by y's cast back
      (y.to(hg::kFloat) * r).sum().backward();
      // float64 autograd through the same bfloat16 operands
      Tensor w64 = bf16_exact(w.detach()).requires_grad_();
      Tensor b64 = c.bias ? bf16_exact(b.detach()).requires_grad_() : Tensor();
      (conv(bf16_exact(x), w64, b64) * bf16_exact(r)).sum().backward();
      CHECK(rel_err(w.grad(), w64.grad()) < 1e-5);
      CHECK(rel_err(w.grad().to(hg::kBFloat16), w64.grad()) > 1e-4);  // what the rounding would have cost
      if (c.bias) {  // conv's comes from the backward-weights kernel; conv_transpose's is a bfloat16 sum
        CHECK(rel_err(b.grad(), b64.grad()) < (c.transposed ? 1e-2 : 1e-5));
      }
    }
  }
}
