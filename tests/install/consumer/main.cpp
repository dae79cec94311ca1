// An outside program: its own core/tensor.h and ops/ops.h side by side with
// halfgrad's public API, as a user's project would have them.
#include "core/tensor.h"
#include "ops/ops.h"

#include <halfgrad.h>
#include <halfgrad/autograd/gradcheck.h>  // installed, though not in the umbrella
namespace hg = halfgrad;

int main() {
  const app::Tensor mine{2, 3};
  hg::manual_seed(0);
  auto x = hg::randn({4, 3});
  auto w = hg::randn({app::numel(mine) / 3, 3}).requires_grad_();
  auto loss = hg::linear(x, w).pow(2.0).sum();
  loss.backward();
  fmt::print("loss {:.4f}, grad {}\n", loss.item<float>(), hg::shape_str(w.grad().shape()));
  return w.grad().shape() == hg::Shape{mine.rows, mine.cols} ? 0 : 1;
}
