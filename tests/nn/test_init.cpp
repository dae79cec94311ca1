// nn::init: uniform_ and normal_ fill in place (on the CPU without float64
// temporaries) and count as in-place writes: the tensor's version moves, so
// the autocast weight cache and saved tensors see the change.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>

#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;

TEST_CASE("init::uniform_ and normal_: the range and moments, in place, with a version bump", "[nn][init]") {
  hg::manual_seed(5);
  Tensor w = hg::empty({200, 300});
  const auto* before = w.data_ptr();
  const uint64_t v0 = w.version();
  hg::nn::init::uniform_(w, -0.25, 0.5);
  CHECK(w.data_ptr() == before);
  CHECK(w.version() > v0);
  CHECK(w.min().item() >= -0.25);
  CHECK(w.max().item() < 0.5);
  CHECK(std::abs(w.mean().item() - 0.125) < 0.005);
  const uint64_t v1 = w.version();
  hg::nn::init::normal_(w, 1.0, 2.0);
  CHECK(w.version() > v1);
  CHECK(std::abs(w.mean().item() - 1.0) < 0.02);
  const Tensor d = w - w.mean();
  CHECK(std::abs(std::sqrt((d * d).mean().item()) - 2.0) < 0.02);
}

TEST_CASE("init after a cast: autocast's cached weight cast is not reused stale", "[nn][init][autocast]") {
  hg::manual_seed(6);
  Tensor w = hg::randn({8, 4}).requires_grad_();
  const Tensor x = hg::randn({3, 4});
  hg::amp::autocast region(hg::kCPU);
  const Tensor y1 = hg::linear(x, w);
  {
    hg::NoGradGuard no_grad;
    hg::nn::init::normal_(w, 0.0, 1.0);
  }
  const Tensor y2 = hg::linear(x, w);  // must use the new values, not the cached cast of the old ones
  hg::NoGradGuard no_grad;
  const Tensor want = hg::linear(x.to(hg::kBFloat16), w.to(hg::kBFloat16));
  CHECK(hg::equal(y2, want));
  CHECK_FALSE(hg::equal(y1, y2));
}
