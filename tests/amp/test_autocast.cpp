// Autocast as behaviour: which dtype each op runs in, nesting, the cast
// cache, gradient dtypes, and the errors a PyTorch user would run into.
#include <catch2/catch.hpp>

#include <halfgrad.h>

namespace hg = halfgrad;
using hg::DeviceType;
using hg::amp::CastPolicy;

namespace {
hg::Tensor w_param(hg::Shape s) { return hg::randn(s).requires_grad_(); }
}  // namespace

TEST_CASE("CPU autocast: every op of our CPU table runs in its policy's dtype", "[amp]") {
  hg::manual_seed(0);
  auto x = hg::randn({4, 8}), w = w_param({6, 8}), b = w_param({6});
  auto a3 = hg::randn({2, 4, 8}), b3 = hg::randn({2, 8, 3});
  auto m = hg::randn({8, 5}), bias = hg::randn({4, 5});
  auto target = hg::randint(0, 6, {4});
  auto probs = hg::rand({4, 6}), t01 = hg::rand({4, 6});
  for (hg::DType low : {hg::bfloat16, hg::float16}) {
    hg::amp::autocast region(DeviceType::CPU, low);
    // lower precision
    CHECK(hg::linear(x, w, b).dtype() == low);
    CHECK(hg::linear_chain(x, {w, w.t()}, {b, hg::Tensor()}, {hg::Activation::ReLU, hg::Activation::None}).dtype() ==
          low);
    CHECK(hg::mm(x, m).dtype() == low);
    CHECK(hg::matmul(x, m).dtype() == low);
    CHECK(hg::bmm(a3, b3).dtype() == low);
    CHECK(hg::addmm(bias, x, m).dtype() == low);
    // fp32: the losses, whatever their inputs
    auto logits = hg::linear(x, w, b);
    CHECK(hg::cross_entropy(logits, target).dtype() == hg::float32);
    CHECK(hg::nll_loss(hg::log_softmax(logits, 1), target).dtype() == hg::float32);
    CHECK(hg::mse_loss(logits, logits.detach()).dtype() == hg::float32);
    CHECK(hg::binary_cross_entropy(probs.to(low), t01).dtype() == hg::float32);
    CHECK(hg::binary_cross_entropy_with_logits(logits, probs.narrow(1, 0, 6)).dtype() == hg::float32);
    // promote: the widest input
    CHECK(hg::cat({logits, logits}, 0).dtype() == low);
    CHECK(hg::cat({logits, logits.to(hg::float32)}, 0).dtype() == hg::float32);
    CHECK(hg::stack({logits, logits.to(hg::float32)}, 0).dtype() == hg::float32);
    // no row: the inputs' dtypes (relu stays low, add promotes as usual)
    CHECK(hg::relu(logits).dtype() == low);
    CHECK(hg::gelu(logits, "tanh").dtype() == low);
    CHECK(hg::add(logits, logits.to(hg::float32)).dtype() == hg::float32);
    // CPU softmax has no row on the CPU list (it does on CUDA's)
    CHECK(hg::softmax(logits, 1).dtype() == low);
  }
}

TEST_CASE("The CUDA table has PyTorch's rows for the ops we have", "[amp]") {
  for (const char* op : {"linear", "mm", "matmul", "bmm", "addmm", "conv2d"})
    CHECK(hg::amp::lookup_policy(DeviceType::CUDA, op) == CastPolicy::LowerPrecision);
  for (const char* op : {"cross_entropy", "nll_loss", "mse_loss", "softmax", "log_softmax", "sum", "exp", "log", "pow",
                         "binary_cross_entropy_with_logits", "layer_norm"})
    CHECK(hg::amp::lookup_policy(DeviceType::CUDA, op) == CastPolicy::Fp32);
  for (const char* op : {"cat", "stack", "addcmul", "dot"})
    CHECK(hg::amp::lookup_policy(DeviceType::CUDA, op) == CastPolicy::Promote);
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, "binary_cross_entropy") == CastPolicy::Banned);
  CHECK(hg::amp::lookup_policy(DeviceType::CPU, "binary_cross_entropy") == CastPolicy::Fp32);
  CHECK_FALSE(hg::amp::lookup_policy(DeviceType::CUDA, "relu").has_value());
  // Linear+activation ops (and chains of them) take linear's row; gelu (either form) has none, as in PyTorch
  for (DeviceType d : {DeviceType::CUDA, DeviceType::CPU}) {
    for (const char* op : {"linear_relu", "linear_gelu", "linear_gelu_tanh", "linear_chain"})
      CHECK(hg::amp::lookup_policy(d, op) == CastPolicy::LowerPrecision);
    CHECK_FALSE(hg::amp::lookup_policy(d, "gelu").has_value());
  }
  CHECK_FALSE(hg::amp::lookup_policy(DeviceType::CPU, "exp").has_value());
  const std::string md = hg::amp::policy_markdown();
  CHECK_THAT(md, Catch::Matchers::Contains("### CUDA") && Catch::Matchers::Contains("`linear`"));
}

TEST_CASE("Policy rows can be overridden at run time and reset", "[amp]") {
  auto x = hg::randn({3, 4}).to(hg::bfloat16);
  hg::amp::set_policy(DeviceType::CPU, "exp", CastPolicy::Fp32);
  {
    hg::amp::autocast region(DeviceType::CPU);
    CHECK(hg::exp(x).dtype() == hg::float32);
  }
  hg::amp::set_policy(DeviceType::CPU, "linear", std::nullopt);  // remove a row
  {
    hg::amp::autocast region(DeviceType::CPU);
    auto w = hg::randn({2, 4});
    CHECK(hg::linear(hg::randn({3, 4}), w).dtype() == hg::float32);
  }
  hg::amp::reset_policies();
  hg::amp::autocast region(DeviceType::CPU);
  CHECK(hg::exp(x).dtype() == hg::bfloat16);
  CHECK(hg::linear(hg::randn({3, 4}), hg::randn({2, 4})).dtype() == hg::bfloat16);
}

TEST_CASE("Only floating, non-float64 tensors on the region's device are cast", "[amp]") {
  hg::amp::autocast region(DeviceType::CPU);
  auto x64 = hg::randn({3, 4}, hg::float64), w64 = hg::randn({2, 4}, hg::float64);
  CHECK(hg::linear(x64, w64).dtype() == hg::float64);
  // a CUDA region leaves CPU tensors alone (where CUDA is available: without
  // it the region is off, as PyTorch's, and tests/amp/test_autocast_no_cuda.cpp
  // checks that)
  hg::amp::autocast off_cpu(DeviceType::CPU, std::nullopt, /*enabled=*/false);
  hg::amp::autocast cuda_region(DeviceType::CUDA);
  CHECK(cuda_region.enabled() == hg::cuda::is_available());
  CHECK(hg::amp::is_autocast_enabled(DeviceType::CUDA) == hg::cuda::is_available());
  CHECK(hg::linear(hg::randn({3, 4}), hg::randn({2, 4})).dtype() == hg::float32);
}

TEST_CASE("Regions nest, enabled=false turns autocast off inside, leaving restores", "[amp]") {
  auto x = hg::randn({3, 4}), w = hg::randn({2, 4});
  CHECK_FALSE(hg::amp::is_autocast_enabled(DeviceType::CPU));
  {
    hg::amp::autocast outer(DeviceType::CPU);
    CHECK(hg::linear(x, w).dtype() == hg::bfloat16);
    {
      hg::amp::autocast inner(DeviceType::CPU, hg::float16);
      CHECK(hg::linear(x, w).dtype() == hg::float16);
      {
        hg::amp::autocast off(DeviceType::CPU, std::nullopt, /*enabled=*/false);
        CHECK(hg::linear(x, w).dtype() == hg::float32);
      }
      CHECK(hg::linear(x, w).dtype() == hg::float16);
    }
    CHECK(hg::amp::autocast_dtype(DeviceType::CPU) == hg::bfloat16);
    CHECK(hg::linear(x, w).dtype() == hg::bfloat16);
  }
  CHECK_FALSE(hg::amp::is_autocast_enabled(DeviceType::CPU));
  CHECK(hg::linear(x, w).dtype() == hg::float32);
}

TEST_CASE("The decorator form runs a forward under autocast", "[amp]") {
  auto x = hg::randn({3, 4}), w = hg::randn({2, 4});
  auto y = hg::amp::autocast_fn(DeviceType::CPU, [&] { return hg::linear(x, w); });
  CHECK(y.dtype() == hg::bfloat16);
  auto forward = hg::amp::autocast_wrap(DeviceType::CPU, [&](const hg::Tensor& in) { return hg::linear(in, w); });
  CHECK(forward(x).dtype() == hg::bfloat16);
  CHECK_FALSE(hg::amp::is_autocast_enabled(DeviceType::CPU));
}

TEST_CASE("PyTorch's decorator re-enables autocast inside an enabled=false region; the model wrapper does not",
          "[amp]") {
  auto x = hg::randn({3, 4}), w = hg::randn({2, 4});
  auto body = [&] { return hg::linear(x, w); };
  // No region: both wrappers turn autocast on.
  CHECK(hg::amp::autocast_fn(DeviceType::CPU, body).dtype() == hg::bfloat16);
  CHECK(hg::amp::autocast_forward(DeviceType::CPU, body).dtype() == hg::bfloat16);
  {
    hg::amp::autocast off(DeviceType::CPU, std::nullopt, /*enabled=*/false);
    CHECK(hg::amp::autocast_disabled_by_region(DeviceType::CPU));
    CHECK_FALSE(hg::amp::autocast_disabled_by_region(DeviceType::CUDA));
    CHECK(hg::amp::autocast_fn(DeviceType::CPU, body).dtype() == hg::bfloat16);  // PyTorch's @autocast()
    CHECK(hg::amp::autocast_forward(DeviceType::CPU, body).dtype() == hg::float32);
    {
      hg::amp::autocast on(DeviceType::CPU);  // the innermost region decides
      CHECK_FALSE(hg::amp::autocast_disabled_by_region(DeviceType::CPU));
      CHECK(hg::amp::autocast_forward(DeviceType::CPU, body).dtype() == hg::bfloat16);
    }
  }
  {
    // An outer enabled region keeps its dtype and its cast cache.
    hg::amp::autocast outer(DeviceType::CPU, hg::float16);
    CHECK(hg::amp::autocast_forward(DeviceType::CPU, body).dtype() == hg::float16);
  }
  CHECK_FALSE(hg::amp::autocast_disabled_by_region(DeviceType::CPU));
  CHECK_FALSE(hg::amp::is_autocast_enabled(DeviceType::CPU));
}

TEST_CASE("Cast cache: a weight used twice is cast once, and the cache is empty after the region", "[amp]") {
  auto x = hg::randn({3, 4}), w = w_param({2, 4});
  std::vector<std::string> lines;
  hg::amp::set_trace_sink([&](const std::string& l) { lines.push_back(l); });
  {
    hg::amp::trace trace;
    hg::amp::autocast region(DeviceType::CPU);
    auto y1 = hg::linear(x, w);
    auto y2 = hg::linear(x, w);
    CHECK(hg::amp::cast_cache_size() == 1);
  }
  hg::amp::set_trace_sink(nullptr);
  CHECK(hg::amp::cast_cache_size() == 0);
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Catch::Matchers::Contains("[weight cast: new]"));
  CHECK_THAT(lines[1], Catch::Matchers::Contains("[weight cast: cached]"));
  // cache_enabled=false: nothing is kept
  hg::amp::autocast region(DeviceType::CPU, std::nullopt, true, /*cache_enabled=*/false);
  hg::linear(x, w);
  CHECK(hg::amp::cast_cache_size() == 0);
}

TEST_CASE("Cast cache: an in-place change of the weight inside the region is seen", "[amp]") {
  auto x = hg::ones({1, 4});
  auto w = hg::ones({1, 4}).requires_grad_();
  hg::amp::autocast region(DeviceType::CPU);
  CHECK(hg::linear(x, w).item<float>() == 4.0f);
  {
    hg::no_grad guard;
    w.mul_(2.0);  // PyTorch would serve the stale cached copy here
  }
  CHECK(hg::linear(x, w).item<float>() == 8.0f);
}

TEST_CASE("Under autocast, parameter grads are float32 and activation grads are in the forward dtype", "[amp]") {
  hg::manual_seed(3);
  auto x = hg::randn({5, 4}), w1 = w_param({6, 4}), b1 = w_param({6}), w2 = w_param({3, 6});
  auto target = hg::randint(0, 3, {5});
  hg::Tensor h;
  hg::Tensor loss;
  {
    hg::amp::autocast region(DeviceType::CPU);
    h = hg::relu(hg::linear(x, w1, b1));
    loss = hg::cross_entropy(hg::linear(h, w2), target);
  }
  REQUIRE(h.dtype() == hg::bfloat16);
  loss.backward();
  CHECK(w1.grad().dtype() == hg::float32);
  CHECK(b1.grad().dtype() == hg::float32);
  CHECK(w2.grad().dtype() == hg::float32);
  // the grad of a low-precision leaf activation comes back in its own dtype
  auto act = hg::randn({5, 6}).to(hg::bfloat16).requires_grad_();
  hg::Tensor l2;
  {
    hg::amp::autocast region(DeviceType::CPU);
    l2 = hg::cross_entropy(hg::linear(act, w2), target);
  }
  l2.backward();
  CHECK(act.grad().dtype() == hg::bfloat16);
}

TEST_CASE("Autocast misuse gives clear errors", "[amp]") {
  auto p = hg::rand({4, 3}), t = hg::rand({4, 3});
  // binary_cross_entropy on probabilities is banned under CUDA autocast; the
  // policy step runs before any kernel, so an override on the CPU shows it here.
  hg::amp::set_policy(DeviceType::CPU, "binary_cross_entropy", CastPolicy::Banned);
  {
    hg::amp::autocast region(DeviceType::CPU);
    REQUIRE_THROWS_WITH(hg::binary_cross_entropy(p, t),
                        Catch::Matchers::Contains("unsafe to autocast") &&
                            Catch::Matchers::Contains("binary_cross_entropy_with_logits"));
  }
  hg::amp::reset_policies();
  // promote of float16 with bfloat16 has no common dtype
  {
    hg::amp::autocast region(DeviceType::CPU);
    auto a = hg::randn({2, 2}).to(hg::float16), b = hg::randn({2, 2}).to(hg::bfloat16);
    REQUIRE_THROWS_WITH(hg::cat({a, b}, 0), Catch::Matchers::Contains("float16 with bfloat16"));
  }
  // outside autocast, mixed dtypes in linear name autocast as the remedy
  auto x = hg::randn({3, 4}).to(hg::float16), w = hg::randn({2, 4});
  REQUIRE_THROWS_WITH(hg::linear(x, w), Catch::Matchers::Contains("amp::autocast") &&
                                            Catch::Matchers::Contains("float16") &&
                                            Catch::Matchers::Contains("float32"));
  // the region's dtype (float64 on the CPU: PyTorch's warning, the region off): tests/amp/test_autocast_dtype.cpp
}

TEST_CASE("In-place ops are not autocast", "[amp]") {
  auto a = hg::randn({3});
  hg::amp::set_policy(DeviceType::CPU, "add", CastPolicy::LowerPrecision);
  {
    hg::amp::autocast region(DeviceType::CPU);
    CHECK(hg::add(a, a).dtype() == hg::bfloat16);
    a.add_(hg::ones({3}));
    CHECK(a.dtype() == hg::float32);
  }
  hg::amp::reset_policies();
}
