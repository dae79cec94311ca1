// Assigning .grad directly: PyTorch's checks at assignment (a wrong size or
// dtype would otherwise surface later, inside an optimizer or kernel).
#include <catch2/catch.hpp>

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
