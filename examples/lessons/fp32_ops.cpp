// Lesson 4 of docs/amp.md: why some ops are on autocast's float32 list.
//
// Autocast runs matmuls and convolutions in float16 and keeps exp, log,
// softmax, the losses and large sums in float32. Here each of those runs both
// ways on the same float32 inputs, under float16 autocast: once with the op
// forced to float16 (amp::set_policy(..., LowerPrecision), overriding the
// table) and once in float32 (the fp32 row, as PyTorch's CUDA table has it),
// each against float64. float16's range ends at 65504 and its smallest
// subnormal is 2^-24 = 6e-8: an exp past e^11.09, a probability below 6e-8,
// or a sum past 65504 leaves it.
//
// The program checks its own numbers and exits non-zero if they differ from
// what this text says (CTest runs it).
#include <halfgrad.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace hg = halfgrad;

namespace {

struct Case {
  std::string what, op;  // op: the policy-table row to override
  std::function<hg::Tensor()> run;
  std::function<double()> exact;  // float64
};

// The op under float16 autocast with its row set to `policy`.
double run_with(const Case& c, hg::amp::CastPolicy policy) {
  hg::amp::set_policy(hg::kCPU, c.op, policy);
  double v;
  {
    hg::amp::autocast region(hg::kCPU, hg::kHalf);
    v = c.run().to(hg::kDouble).item<double>();
  }
  hg::amp::reset_policies();
  return v;
}

}  // namespace

int main() {
  const auto logits = hg::tensor(std::vector<float>{12.0f, 0.0f, -8.0f}).reshape({1, 3});
  const auto wrong = hg::tensor(std::vector<int64_t>{2});  // a confident wrong answer: loss 20
  const std::vector<Case> cases{
      {"exp(12)", "exp", [] { return hg::exp(hg::full({1}, 12.0)); }, [] { return std::exp(12.0); }},
      {"log(1e-8), a small probability", "log", [] { return hg::log(hg::full({1}, 1e-8)); },
       [] { return std::log(1e-8); }},
      {"softmax([12, 0, -8])[2]", "softmax",
       [&] { return hg::softmax(logits, 1).index({0, 2}); },
       [] { return std::exp(-20.0) / (1.0 + std::exp(-12.0) + std::exp(-20.0)); }},
      {"cross_entropy, sum of 4096 losses of 20", "cross_entropy",
       [&] {
         return hg::cross_entropy(logits.expand({4096, 3}), wrong.expand({4096}),
                                  hg::CrossEntropyOptions{.reduction = hg::Reduction::Sum});
       },
       [] { return 4096 * (20.0 + std::log1p(std::exp(-12.0) + std::exp(-20.0))); }},
      {"mse_loss(300, 0), a squared error", "mse_loss",
       [] { return hg::mse_loss(hg::full({1}, 300.0), hg::zeros({1})); }, [] { return 90000.0; }},
      {"sum of 100,000 ones", "sum", [] { return hg::sum(hg::ones({100000})); }, [] { return 100000.0; }},
  };
  fmt::print("under float16 autocast, each op forced to float16 and kept in float32, against float64\n\n");
  fmt::print("{:<36} {:>14} {:>14} {:>14} {:>10} {:>10}\n", "op", "float64", "float16", "float32", "err16", "err32");
  bool ok = true;
  for (const Case& c : cases) {
    const double exact = c.exact();
    const double h = run_with(c, hg::amp::CastPolicy::LowerPrecision), f = run_with(c, hg::amp::CastPolicy::Fp32);
    const double e16 = std::fabs(h - exact) / std::fabs(exact), e32 = std::fabs(f - exact) / std::fabs(exact);
    fmt::print("{:<36} {:>14.7g} {:>14.7g} {:>14.7g} {:>10.2g} {:>10.2g}\n", c.what, exact, h, f, e16, e32);
    // the lesson: float32 within 1e-6; float16 off by far more than its 2^-11 rounding, or not finite
    ok = ok && e32 < 1e-6 && (!std::isfinite(h) || h == 0.0 || e16 > 1e-3);
  }
  fmt::print("\nfloat16 answers: exp overflows to inf, the small probability and its log underflow, a\n"
             "summed loss, a squared error and a long sum pass 65504; float32 keeps all of them within 1e-6.\n");
  fmt::print("{}\n", ok ? "as the lesson says: these ops need float32" : "UNEXPECTED: the numbers above differ");
  return ok ? 0 : 1;
}
