// Linear + activation as one op (one GEMM, the activation in its epilogue):
// forward against the float64 composition, backward by finite differences,
// and the same values and gradients as linear followed by relu / gelu (exact
// or tanh) in every dtype.
#include "test_util.h"

#include <halfgrad/amp/autocast.h>

namespace hg = halfgrad;
using namespace hgtest;

namespace {
const std::vector<hg::Activation> kActs = {hg::Activation::None, hg::Activation::ReLU, hg::Activation::GELU,
                                           hg::Activation::GELUTanh};

std::vector<double> reference(const Tensor& x, const Tensor& w, const Tensor& b, hg::Activation act) {
  const int64_t n = x.shape()[0], in = x.shape()[1], out = w.shape()[0];
  const auto xv = values(x), wv = values(w), bv = values(b);
  std::vector<double> y(n * out);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double s = bv[j];
      for (int64_t p = 0; p < in; ++p) s += xv[i * in + p] * wv[j * in + p];
      if (act == hg::Activation::ReLU) s = s > 0 ? s : 0;
      if (act == hg::Activation::GELU) s = 0.5 * s * (1 + std::erf(s / std::sqrt(2.0)));
      if (act == hg::Activation::GELUTanh)
        s = 0.5 * s * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (s + 0.044715 * s * s * s)));
      y[i * out + j] = s;
    }
  return y;
}
}  // namespace

TEST_CASE("linear with ReLU or GELU matches the float64 composition in every dtype", "[ops][linear]") {
  for (DType dt : kFloatDTypes)
    for (auto act : kActs) {
      INFO(dname(dt) << " activation " << static_cast<int>(act));
      auto x = uniform({7, 13}, dt), w = uniform({5, 13}, dt), b = uniform({5}, dt);
      auto y = hg::linear(x, w, b, act);
      CHECK(y.dtype() == dt);
      HG_CHECK_CLOSE(y, reference(x, w, b, act));
    }
}

TEST_CASE("linear with an activation equals linear then the activation, and handles 3-d input", "[ops][linear]") {
  auto x = uniform({2, 3, 8}, DType::Float32), w = uniform({4, 8}, DType::Float32), b = uniform({4}, DType::Float32);
  auto fused = hg::linear(x, w, b, hg::Activation::ReLU);
  CHECK(fused.shape() == Shape{2, 3, 4});
  HG_CHECK_CLOSE(fused, values(hg::relu(hg::linear(x, w, b))));
  auto g = hg::linear(x, w, Tensor(), hg::Activation::GELU);
  HG_CHECK_CLOSE(g, values(hg::gelu(hg::linear(x, w))));
  auto gt = hg::linear(x, w, b, hg::Activation::GELUTanh);
  CHECK(gt.shape() == Shape{2, 3, 4});
  HG_CHECK_CLOSE(gt, values(hg::gelu(hg::linear(x, w, b), "tanh")));
}

// The fused op against the two ops it replaces, forward and backward, on
// inputs exactly representable in every dtype (drawn in bfloat16).
TEST_CASE("linear with GELUTanh equals linear then gelu(approximate=tanh) in every dtype, with gradients",
          "[ops][linear][backward]") {
  const Tensor x0 = uniform({9, 12}, DType::BFloat16), w0 = uniform({16, 12}, DType::BFloat16, -0.5, 0.5);
  const Tensor b0 = uniform({16}, DType::BFloat16), g0 = uniform({9, 16}, DType::BFloat16, -1, 1);
  for (DType dt : kFloatDTypes) {
    INFO(dname(dt));
    const auto leaves = [&] {
      return std::vector<Tensor>{x0.to(dt).requires_grad_(), w0.to(dt).requires_grad_(), b0.to(dt).requires_grad_()};
    };
    const auto fused = leaves(), unfused = leaves();
    const Tensor yf = hg::linear(fused[0], fused[1], fused[2], hg::Activation::GELUTanh);
    const Tensor yu = hg::gelu(hg::linear(unfused[0], unfused[1], unfused[2]), "tanh");
    CHECK(yf.dtype() == dt);
    HG_CHECK_CLOSE(yf, values(yu));
    // and the same as a call that records nothing (no pre-activation kept)
    {
      hg::no_grad off;
      HG_CHECK_CLOSE(hg::linear(fused[0], fused[1], fused[2], hg::Activation::GELUTanh), values(yu));
    }
    yf.backward(g0.to(dt));
    yu.backward(g0.to(dt));
    for (size_t i = 0; i < 3; ++i) {
      INFO("gradient of input " << i);
      CHECK(fused[i].grad().dtype() == dt);
      HG_CHECK_CLOSE_TOL(fused[i].grad(), values(unfused[i].grad()), 2 * tol(dt));
    }
  }
}

TEST_CASE("linear with an activation: gradients by finite differences", "[ops][linear][backward]") {
  for (auto act : kActs) {
    INFO("activation " << static_cast<int>(act));
    auto x = leaf_away({4, 6}), w = leaf({3, 6}), b = leaf({3});
    HG_GRADCHECK([act](const std::vector<Tensor>& in) { return hg::linear(in[0], in[1], in[2], act); }, {x, w, b});
    auto x3 = leaf({2, 2, 6}), w2 = leaf({3, 6});
    HG_GRADCHECK([act](const std::vector<Tensor>& in) { return hg::linear(in[0], in[1], Tensor(), act); }, {x3, w2});
  }
}

TEST_CASE("linear_relu and the linear_gelus run in the lower-precision dtype under autocast", "[ops][linear][amp]") {
  auto x = hg::randn({4, 8}), w = hg::randn({3, 8}).requires_grad_(), b = hg::randn({3}).requires_grad_();
  hg::Tensor y;
  {
    hg::amp::autocast region(hg::DeviceType::CPU);
    y = hg::linear(x, w, b, hg::Activation::ReLU);
    CHECK(hg::linear(x, w, b, hg::Activation::GELU).dtype() == hg::bfloat16);
    CHECK(hg::linear(x, w, b, hg::Activation::GELUTanh).dtype() == hg::bfloat16);
  }
  CHECK(y.dtype() == hg::bfloat16);
  hg::sum(y.to(hg::float32)).backward();
  CHECK(w.grad().dtype() == hg::float32);
  CHECK(b.grad().dtype() == hg::float32);
}

TEST_CASE("linear reads a strided bias correctly", "[ops][linear]") {
  auto x = uniform({4, 6}, DType::Float32), w = uniform({3, 6}, DType::Float32);
  auto wide = uniform({3, 2}, DType::Float32);
  const Tensor strided_bias = wide.select(1, 0);  // stride 2
  REQUIRE_FALSE(strided_bias.is_contiguous());
  for (auto act : kActs)
    HG_CHECK_CLOSE(hg::linear(x, w, strided_bias, act), values(hg::linear(x, w, strided_bias.contiguous(), act)));
}
