// Why loss scaling exists, in numbers: a small gradient flowing back through
// a float16 activation underflows to zero; scaled by the GradScaler it
// survives, and the optimizer divides the scale out again. Then an overflow:
// the step is skipped and the scale backs off.
#include <halfgrad.h>

namespace hg = halfgrad;

int main() {
  const double tiny = 1e-8;  // float16's smallest subnormal is 2^-24 = 5.96e-8
  // A float16 activation feeding a float32 loss, as under autocast.
  auto loss_of = [&](const hg::Tensor& act) { return hg::sum(hg::mul(act.to(hg::float32), tiny)); };

  auto act = hg::ones({1}, hg::float16).requires_grad_();
  loss_of(act).backward();
  fmt::print("without scaling: d loss / d act = {:.3g} (float16: the true 1e-08 underflowed)\n",
             act.grad().item<float>());

  hg::amp::GradScaler scaler;
  auto act2 = hg::ones({1}, hg::float16).requires_grad_();
  scaler.scale(loss_of(act2)).backward();
  const float g = act2.grad().item<float>();
  fmt::print("with scale {}: d loss / d act = {:.6g} in float16, / {} = {:.4g}\n", scaler.get_scale(), g,
             scaler.get_scale(), g / scaler.get_scale());

  // An inf in a gradient: the step is skipped and the scale halves.
  auto w = hg::ones({2}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 0.1});
  scaler.scale(hg::sum(hg::mul(w, hg::tensor(std::vector<float>{1.0f, INFINITY})))).backward();
  auto step = scaler.step(opt);
  scaler.update();
  fmt::print("inf gradient: step {}, weights still {}, scale now {}\n", step.applied() ? "applied" : "skipped",
             w.detach().sum().item<float>() == 2.0f ? "[1, 1]" : "changed", scaler.get_scale());
}
