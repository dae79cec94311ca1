// CUDA autocast: every op of our CUDA table runs in its policy's dtype on
// CUDA tensors. Runs where a GPU is usable; CTest reports it skipped elsewhere.
#include <catch2/catch.hpp>

#include <halfgrad.h>

namespace hg = halfgrad;

TEST_CASE("CUDA autocast: every op of our CUDA table runs in its policy's dtype", "[cuda]") {
  const hg::Device dev = hg::Device::cuda();
  hg::manual_seed(0);
  auto x = hg::randn({4, 8}, dev), w = hg::randn({6, 8}, dev).requires_grad_(), b = hg::randn({6}, dev).requires_grad_();
  auto a3 = hg::randn({2, 4, 8}, dev), b3 = hg::randn({2, 8, 3}, dev), m = hg::randn({8, 5}, dev);
  auto bias = hg::randn({4, 5}, dev);
  auto target = hg::randint(0, 6, {4}, dev);
  for (hg::DType low : {hg::float16, hg::bfloat16}) {
    hg::amp::autocast region(hg::DeviceType::CUDA, low);
    // lower precision: the matmul family and the fused Linear+activation
    CHECK(hg::linear(x, w, b).dtype() == low);
    CHECK(hg::linear(x, w, b, hg::Activation::ReLU).dtype() == low);
    CHECK(hg::linear_chain(x, {w, w.t()}, {b, hg::Tensor()}, {hg::Activation::GELUTanh, hg::Activation::ReLU})
              .dtype() == low);
    CHECK(hg::mm(x, m).dtype() == low);
    CHECK(hg::matmul(x, m).dtype() == low);
    CHECK(hg::bmm(a3, b3).dtype() == low);
    CHECK(hg::addmm(bias, x, m).dtype() == low);
    // fp32: range- and precision-sensitive ops take low-precision inputs to float32
    auto logits = hg::linear(x, w, b);
    CHECK(hg::cross_entropy(logits, target).dtype() == hg::float32);
    CHECK(hg::softmax(logits, 1).dtype() == hg::float32);
    CHECK(hg::log_softmax(logits, 1).dtype() == hg::float32);
    CHECK(hg::exp(logits).dtype() == hg::float32);
    CHECK(hg::log(hg::abs(logits)).dtype() == hg::float32);
    CHECK(hg::sum(logits).dtype() == hg::float32);
    CHECK(hg::pow(logits, 2.0).dtype() == hg::float32);
    CHECK(hg::mse_loss(logits, logits.detach()).dtype() == hg::float32);
    CHECK(hg::binary_cross_entropy_with_logits(logits, hg::rand({4, 6}, dev)).dtype() == hg::float32);
    // promote: the widest input
    CHECK(hg::cat({logits, logits}, 0).dtype() == low);
    CHECK(hg::cat({logits, logits.to(hg::float32)}, 0).dtype() == hg::float32);
    CHECK(hg::stack({logits, logits}, 0).dtype() == low);
    // banned on CUDA
    REQUIRE_THROWS_AS(hg::binary_cross_entropy(hg::rand({4, 6}, dev), hg::rand({4, 6}, dev)), hg::Error);
    // no row: input dtypes
    CHECK(hg::relu(logits).dtype() == low);
  }
}
