// autograd::register_post_accumulate_grad_hook: runs after backward wrote a
// leaf's .grad, once per accumulation, in the order backward reaches the
// leaves (the last layer's first); only leaves that require grad; removal.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;

TEST_CASE("post-accumulate-grad hooks run after .grad is written, in backward's order", "[autograd][hooks]") {
  auto w1 = hg::full({2, 2}, 0.5).requires_grad_();
  auto w2 = hg::full({2, 2}, 2.0).requires_grad_();
  std::vector<std::string> order;
  std::vector<double> grad_sums;
  hg::autograd::register_post_accumulate_grad_hook(w1, [&](const Tensor& leaf) {
    order.push_back("w1");
    REQUIRE(leaf.grad().defined());
    grad_sums.push_back(hg::sum(leaf.grad()).item<double>());
  });
  const int64_t id2 = hg::autograd::register_post_accumulate_grad_hook(w2, [&](const Tensor& leaf) {
    order.push_back("w2");
    grad_sums.push_back(hg::sum(leaf.grad()).item<double>());
  });
  const Tensor x = hg::ones({3, 2});
  // w2 is nearer the loss: backward reaches it first
  hg::sum(hg::matmul(hg::matmul(x, w1), w2)).backward();
  CHECK(order == std::vector<std::string>{"w2", "w1"});
  // d/dw2 sum(x w1 w2) = (x w1)^T 1: each entry 3 * 1.0 = 3 -> 12; d/dw1 = x^T 1 w2^T: 3 * 4 = 12 each -> 48
  CHECK(grad_sums == std::vector<double>{12.0, 48.0});
  // a second backward accumulates (and runs the hooks) again
  hg::sum(hg::matmul(hg::matmul(x, w1), w2)).backward();
  CHECK(order.size() == 4);
  CHECK(grad_sums[3] == 96.0);
  hg::autograd::remove_post_accumulate_grad_hook(w2, id2);
  hg::autograd::remove_post_accumulate_grad_hook(w2, 12345);  // unknown: ignored
  hg::sum(hg::matmul(hg::matmul(x, w1), w2)).backward();
  CHECK(order == std::vector<std::string>{"w2", "w1", "w2", "w1", "w1"});
}

TEST_CASE("post-accumulate-grad hooks need a leaf that requires grad", "[autograd][hooks]") {
  auto w = hg::ones({2}).requires_grad_();
  const Tensor y = w * 2.0;
  CHECK_THROWS_WITH(hg::autograd::register_post_accumulate_grad_hook(y, [](const Tensor&) {}),
                    Catch::Contains("is not a leaf that requires grad"));
  CHECK_THROWS_WITH(hg::autograd::register_post_accumulate_grad_hook(hg::ones({2}), [](const Tensor&) {}),
                    Catch::Contains("float32[2] cpu is not a leaf that requires grad"));
}
