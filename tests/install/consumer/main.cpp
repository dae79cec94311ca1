#include <halfgrad.h>
namespace hg = halfgrad;

int main() {
  hg::manual_seed(0);
  auto x = hg::randn({4, 3});
  auto w = hg::randn({2, 3}).requires_grad_();
  auto loss = hg::linear(x, w).pow(2.0).sum();
  loss.backward();
  fmt::print("loss {:.4f}, grad {}\n", loss.item<float>(), hg::shape_str(w.grad().shape()));
  return w.grad().shape() == hg::Shape{2, 3} ? 0 : 1;
}
