// A NaN must survive a fused Linear + ReLU as it survives relu() (PyTorch:
// relu(NaN) = NaN). oneDNN's ReLU post-op maps NaN to 0, which hid a broken
// input from train_classifier's non-finite-loss stop: we apply ReLU ourselves.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>

#include "test_util.h"

namespace hg = halfgrad;

TEST_CASE("Linear + ReLU (fused and in a chain) keeps a NaN input's NaN", "[ops][linear]") {
  for (hg::DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const hg::Tensor w = hgtest::uniform({6, 4}, dt, -1, 1), b = hgtest::uniform({6}, dt, -1, 1);
    hg::Tensor x = hgtest::uniform({3, 4}, dt, -1, 1);
    x = hg::where(hg::arange(3).view({3, 1}) == 1, std::nan(""), x);  // row 1 is NaN
    const hg::Tensor fused = hg::linear(x, w, b, hg::Activation::ReLU);
    const auto v = hgtest::values(fused);
    for (int64_t j = 0; j < 6; ++j) {
      CHECK(std::isnan(v[6 + j]));
      CHECK(!std::isnan(v[j]));
      CHECK(v[j] >= 0);
    }
    const hg::Tensor chain = hg::linear_chain(x, {w, hgtest::uniform({2, 6}, dt, -1, 1)}, {b, hg::Tensor()},
                                              {hg::Activation::ReLU, hg::Activation::None});
    const auto c = hgtest::values(chain);
    CHECK(std::isnan(c[2]));
    CHECK(std::isnan(c[3]));
    CHECK(!std::isnan(c[0]));
  }
}
