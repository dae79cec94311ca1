// Lesson 2 of docs/amp.md: lost updates, or why AMP keeps float32 master weights.
//
// A weight of 1.0 gets 1,000 SGD updates of lr x grad = 1e-4 each: it should
// end at 0.9. Stored in float16, every update is smaller than half the gap
// between 1.0 and the next float16 below it (2^-11 = 4.9e-4), so 1.0 - 1e-4
// rounds back to 1.0 and the weight never moves. Stored in float32 (the
// master weight AMP updates), the updates accumulate; the float16 copy the
// forward pass reads is made from it, so it moves too.
//
// The program checks its own numbers and exits non-zero if they differ from
// what this text says (CTest runs it).
#include <halfgrad.h>

#include <cmath>

namespace hg = halfgrad;

namespace {

constexpr double kLr = 1e-4;
constexpr int kSteps = 1000;

// A one-element weight of `dtype` after kSteps SGD steps on loss = w (gradient 1).
double train(hg::DType dtype) {
  auto w = hg::ones({1}, dtype).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = kLr});
  for (int i = 0; i < kSteps; ++i) {
    opt.zero_grad();
    w.sum().backward();
    opt.step();
  }
  return w.detach().to(hg::kDouble).item<double>();
}

// The gap between 1.0 and the next smaller value of a format with `bits`
// significant bits (float16: 11, bfloat16: 8, float32: 24).
double gap_below_one(int bits) { return std::ldexp(1.0, -bits); }

}  // namespace

int main() {
  fmt::print("a weight of 1.0, {} SGD steps of lr x grad = {:g} (it should end at {:g})\n\n", kSteps, kLr,
             1.0 - kSteps * kLr);
  const double w16 = train(hg::kHalf), wbf16 = train(hg::kBFloat16), w32 = train(hg::kFloat);
  fmt::print("{:<26} {:>12} {:>22} {:>12}\n", "stored as", "gap below 1", "half the gap > 1e-4?", "weight after");
  fmt::print("{:<26} {:>12.3g} {:>22} {:>12.7g}\n", "float16", gap_below_one(11),
             gap_below_one(11) / 2 > kLr ? "yes: update lost" : "no", w16);
  fmt::print("{:<26} {:>12.3g} {:>22} {:>12.7g}\n", "bfloat16", gap_below_one(8),
             gap_below_one(8) / 2 > kLr ? "yes: update lost" : "no", wbf16);
  fmt::print("{:<26} {:>12.3g} {:>22} {:>12.7g}\n", "float32 (AMP master)", gap_below_one(24),
             gap_below_one(24) / 2 > kLr ? "yes: update lost" : "no", w32);
  // Under AMP the forward reads a float16 copy of the master weight: it moves.
  const double copy16 = hg::full({1}, w32).to(hg::kHalf).to(hg::kDouble).item<double>();
  fmt::print("\nthe float16 copy of the float32 master weight (what an AMP forward reads): {:.7g}\n", copy16);
  fmt::print("float16 weight changed by {:g}; float32 master weight changed by {:.6f}\n", 1.0 - w16, 1.0 - w32);

  // The lesson's claims, checked.
  const bool ok = w16 == 1.0 && wbf16 == 1.0 && std::fabs((1.0 - w32) - kSteps * kLr) < 1e-4 &&
                  std::fabs(copy16 - 0.9) < gap_below_one(11);
  fmt::print("{}\n", ok ? "as the lesson says: float16 and bfloat16 weights unchanged, float32 changed by 0.1"
                        : "UNEXPECTED: the numbers above differ from the lesson");
  return ok ? 0 : 1;
}
