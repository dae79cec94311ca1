// Module::register_forward_hook: a hook sees each call's output, in
// Sequential too, where a hooked layer is not fused (so the hook sees its own
// module's output, not the fused op's); removal; a moved layer keeps its hooks.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;

TEST_CASE("a forward hook sees every call's output and can be removed", "[nn][hooks]") {
  hg::manual_seed(1);
  hg::nn::Linear lin(3, 2);
  std::vector<Tensor> seen;
  const int64_t id = lin.register_forward_hook([&](const hg::nn::Module& m, const Tensor& out) {
    CHECK(m.type_name() == "Linear");
    seen.push_back(out);
  });
  CHECK(lin.has_forward_hooks());
  const Tensor x = hg::randn({4, 3});
  const Tensor y = lin(x);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].impl_ptr() == y.impl_ptr());  // the output itself, not a copy
  lin(x);
  CHECK(seen.size() == 2);
  lin.forward(x);  // forward() is the layer's computation; hooks belong to the call
  CHECK(seen.size() == 2);
  lin.remove_forward_hook(id);
  lin.remove_forward_hook(id + 100);  // unknown: ignored
  CHECK_FALSE(lin.has_forward_hooks());
  lin(x);
  CHECK(seen.size() == 2);
  CHECK_THROWS_WITH(lin.register_forward_hook(nullptr), Catch::Contains("the hook is empty"));
}

TEST_CASE("Sequential: a hooked Linear is not fused with its ReLU, so its hook sees the pre-activation",
          "[nn][hooks]") {
  hg::manual_seed(2);
  hg::nn::Sequential model(hg::nn::Linear(4, 16), hg::nn::ReLU(), hg::nn::Linear(16, 3));
  const Tensor x = hg::randn({8, 4});
  const Tensor fused = model(x);
  Tensor pre, act;
  model[0].register_forward_hook([&](const hg::nn::Module&, const Tensor& out) { pre = out; });
  model[1].register_forward_hook([&](const hg::nn::Module&, const Tensor& out) { act = out; });
  const Tensor unfused = model(x);
  REQUIRE(pre.defined());
  REQUIRE(act.defined());
  CHECK(pre.shape() == hg::Shape{8, 16});
  CHECK(hg::min(pre).item<float>() < 0.0f);  // before the ReLU
  CHECK(hg::min(act).item<float>() >= 0.0f);
  CHECK(hg::allclose(act, hg::relu(pre)));
  CHECK(hg::allclose(fused, unfused, 1e-5, 1e-6));  // the same model either way
}

TEST_CASE("a leaf layer moved into a Sequential keeps its forward hooks", "[nn][hooks]") {
  hg::nn::ReLU relu;
  int calls = 0;
  relu.register_forward_hook([&](const hg::nn::Module&, const Tensor&) { ++calls; });
  hg::nn::Sequential model(std::move(relu));
  model(hg::ones({2, 2}));
  CHECK(calls == 1);
}
