// Assigning .grad directly: PyTorch's checks at assignment (a wrong size or
// dtype would otherwise surface later, inside an optimizer or kernel), and
// set_grad racing backward from another thread.
#include <catch2/catch.hpp>

#include <cmath>
#include <thread>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;

TEST_CASE("set_grad rejects a gradient of another shape, dtype or the tensor itself", "[autograd][set_grad]") {
  Tensor x = ones({3}).requires_grad_();
  CHECK_THROWS_WITH(x.set_grad(ones({4})), Contains("assigned grad has data of a different size") &&
                                               Contains("[4]") && Contains("[3]"));
  CHECK_THROWS_WITH(x.set_grad(ones({1, 3})), Contains("assigned grad has data of a different size"));
  CHECK_THROWS_WITH(x.set_grad(ones({3}, TensorOptions().dtype(float64))),
                    Contains("assigned grad has data of a different type") && Contains("float64") &&
                        Contains("float32"));
  CHECK_THROWS_WITH(x.set_grad(ones({3}, TensorOptions().dtype(int64))),
                    Contains("assigned grad has data of a different type"));
  CHECK_THROWS_WITH(x.set_grad(x), Contains("can't assign Variable as its own grad"));
  CHECK_FALSE(x.grad().defined());  // nothing was assigned
}

TEST_CASE("set_grad takes a matching gradient, a strided one, or none", "[autograd][set_grad]") {
  Tensor x = ones({3}).requires_grad_();
  x.set_grad(full({3}, 2.0));
  CHECK(hgtest::values(x.grad()) == std::vector<double>{2, 2, 2});
  const Tensor strided = ones({3, 2}).select(1, 0);  // stride 2
  x.set_grad(strided);
  CHECK(x.grad().is_same(strided));
  x.set_grad(Tensor());
  CHECK_FALSE(x.grad().defined());
  Tensor i = ones({2}, TensorOptions().dtype(int64));  // PyTorch allows .grad on any tensor of the same kind
  i.set_grad(zeros({2}, TensorOptions().dtype(int64)));
  CHECK(i.grad().defined());
}

TEST_CASE("set_grad and grad() from one thread while backward runs into the leaf in another", "[autograd][set_grad][threads]") {
  // zero_grad(set_to_none) from a second thread used to free .grad under
  // backward's feet (a double free); now every .grad read is whole, a sum of
  // whole backward passes (a multiple of 2), and nothing crashes. Run in a
  // child, so that a crash fails this case instead of the suite.
  const auto r = hgtest::run_in_child([] {
    constexpr int iters = 2000;
    Tensor x = ones({256}, TensorOptions().dtype(float64)).requires_grad_();
    std::thread backward_thread([&x] {
      for (int i = 0; i < iters; ++i) mul(x, 2.0).sum().backward();
    });
    int seen = 0;
    for (int i = 0; i < iters; ++i) {
      if (i % 2) {
        x.set_grad(Tensor());
      } else if (const Tensor g = x.grad(); g.defined()) {
        const double v = hgtest::values(g.select(0, 255))[0];
        HG_CHECK(v >= 2.0 && std::fmod(v, 2.0) == 0.0, "grad read {} is not a sum of whole passes", v);
        ++seen;
      }
    }
    backward_thread.join();
    x.set_grad(Tensor());
    mul(x, 2.0).sum().backward();
    for (double g : hgtest::values(x.grad())) HG_CHECK(g == 2.0, "grad after the race {} (expected 2)", g);
    (void)seen;
  });
  INFO(r.describe());
  CHECK(r.returned);
}
