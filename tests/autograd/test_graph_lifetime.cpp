// Graph lifetime and sharing: very long graphs are freed without deep
// recursion, and backward from several threads into one leaf adds up.
#include <catch2/catch.hpp>

#include <thread>

#include <halfgrad/autograd/engine.h>
#include "test_util.h"

using namespace halfgrad;

namespace {
// total = total + x, n times: a chain of n add nodes.
Tensor long_chain(const Tensor& x, int n) {
  Tensor total = zeros({1}, TensorOptions().dtype(float32));
  for (int i = 0; i < n; ++i) total = add(total, x);
  return total;
}
}  // namespace

TEST_CASE("dropping a 300k-node graph does not overflow the stack", "[autograd][engine][lifetime]") {
  constexpr int n = 300000;
  SECTION("dropped without backward") {
    const auto r = hgtest::run_in_child([] {
      Tensor x = ones({1}).requires_grad_();
      Tensor total = long_chain(x, n);
      total = Tensor();  // the whole chain goes here
    });
    INFO(r.describe());
    CHECK(r.returned);
  }
  SECTION("dropped after backward") {
    const auto r = hgtest::run_in_child([] {
      Tensor x = ones({1}).requires_grad_();
      Tensor total = long_chain(x, n);
      total.sum().backward();
      HG_CHECK(x.grad().item<float>() == float(n), "grad {}", x.grad().item<float>());
      total = Tensor();
    });
    INFO(r.describe());
    CHECK(r.returned);
  }
}

TEST_CASE("a node shared by a dropped graph stays intact", "[autograd][engine][lifetime]") {
  Tensor x = hgtest::leaf({3});
  Tensor shared = mul(x, 2.0);  // its node is referenced by both graphs below
  Tensor a = add(long_chain(shared, 1000), shared);
  Tensor b = exp(shared);
  a = Tensor();  // frees a's chain, must not touch shared's node or its edges
  b.sum().backward();
  std::vector<double> want;
  for (double v : hgtest::values(x)) want.push_back(2 * std::exp(2 * v));
  HG_CHECK_CLOSE(x.grad(), want);
}

TEST_CASE("backward from two threads into one leaf adds every gradient", "[autograd][engine][threads]") {
  // Each thread builds and runs its own graphs; only the leaf (and its
  // AccumulateGrad node) is shared, as in PyTorch's multithreaded backward.
  const auto r = hgtest::run_in_child([] {
    constexpr int iters = 3000;
    for (int round = 0; round < 3; ++round) {
      Tensor x = ones({4}, TensorOptions().dtype(float64)).requires_grad_();
      auto worker = [&x](double c) {
        for (int i = 0; i < iters; ++i) mul(x, c).sum().backward();
      };
      std::thread t1(worker, 1.0), t2(worker, 2.0);
      t1.join();
      t2.join();
      for (double g : hgtest::values(x.grad()))
        HG_CHECK(g == 3.0 * iters, "round {}: accumulated grad {} (expected {})", round, g, 3.0 * iters);
    }
  });
  INFO(r.describe());
  CHECK(r.returned);
}
