// pow of int64 tensors by a scalar: exponentiation by squaring that wraps
// around like PyTorch's (two's complement), and PyTorch's errors.
#include <catch2/catch.hpp>

#include <halfgrad/kernels/math.h>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::ivalues;

TEST_CASE("int64 pow by a huge exponent is fast and wraps around as in PyTorch", "[ops][elementwise][int64][pow]") {
  const Tensor x = hgtest::make({2, 3, -1, 1, 0, -3}, {6}, int64);
  // torch.pow(torch.tensor([2, 3, -1, 1, 0, -3]), 10**12): one multiply per
  // unit of exponent would take hours.
  const Tensor y = pow(x, 1e12);
  CHECK(y.dtype() == int64);
  CHECK(ivalues(y) == std::vector<int64_t>{0, 8078920949372764161, 1, 1, 0, 8078920949372764161});
  CHECK(ivalues(pow(hgtest::make({-3}, {1}, int64), 1e12 + 1)) == std::vector<int64_t>{-5790018774408740867});
  const Tensor b = hgtest::make({2, 3, -3, 0}, {4}, int64);
  CHECK(ivalues(pow(b, 62)) == std::vector<int64_t>{4611686018427387904, 5069619362125685561, 5069619362125685561, 0});
  CHECK(ivalues(pow(b, 63)) ==
        std::vector<int64_t>{INT64_MIN, -3237885987332494933, 3237885987332494933, 0});
  CHECK(ivalues(pow(b, 0)) == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(ivalues(pow(hgtest::make({3}, {1}, int64), 100)) == std::vector<int64_t>{-2984622845537545263});
}

TEST_CASE("int64 pow by a negative integral scalar is an Error, as in PyTorch", "[ops][elementwise][int64][pow]") {
  const Tensor x = hgtest::make({2, 1, -1}, {3}, int64);
  // torch.pow(torch.tensor([2, 1, -1]), -1) raises this message.
  CHECK_THROWS_WITH(pow(x, -1.0), Contains("Integers to negative integer powers are not allowed") &&
                                      Contains("int64") && Contains("float"));
  CHECK_THROWS_WITH(pow(x, -1e30), Contains("Integers to negative integer powers are not allowed"));
  // beyond int64 (Python raises "Overflow when unpacking long")
  CHECK_THROWS_WITH(pow(x, 1e19), Contains("pow") && Contains("int64"));
  // a float tensor is unaffected
  HG_CHECK_EXACT(pow(x.to(float32), -1.0), (std::vector<double>{0.5, 1, -1}));
}

TEST_CASE("int64 pow by a fractional scalar gives float32, and scalar / int64 tensor works",
          "[ops][elementwise][int64][pow]") {
  const Tensor x = hgtest::make({4, 9}, {2}, int64);
  const Tensor r = pow(x, 0.5);  // torch.pow(torch.tensor([4, 9]), 0.5): float32
  CHECK(r.dtype() == float32);
  HG_CHECK_EXACT(r, (std::vector<double>{2, 3}));
  const Tensor q = 1.0 / x;  // torch: 1.0 / tensor([4, 9]) is float32 [0.25, 0.1111]
  CHECK(q.dtype() == float32);
  HG_CHECK_CLOSE(q, (std::vector<double>{0.25, 1.0 / 9}));
}

TEST_CASE("the shared integer pow follows PyTorch's powi for negative exponents", "[ops][elementwise][int64][pow]") {
  // torch.pow(torch.tensor([2, 1, -1, -1, 0]), torch.tensor([-1, -5, -3, -4, -1])) on int64 tensors
  using halfgrad::math::pow_;
  CHECK(pow_(int64_t{2}, int64_t{-1}) == 0);
  CHECK(pow_(int64_t{1}, int64_t{-5}) == 1);
  CHECK(pow_(int64_t{-1}, int64_t{-3}) == -1);
  CHECK(pow_(int64_t{-1}, int64_t{-4}) == 1);
  CHECK(pow_(int64_t{0}, int64_t{-1}) == 0);
  CHECK(pow_(int64_t{-2}, INT64_MAX) == 0);
  CHECK(pow_(int64_t{-1}, INT64_MIN) == 1);
}
