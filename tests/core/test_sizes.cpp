// Element counts and view bounds: a shape whose element count (or byte count)
// overflows 64 bits, a negative size, and view arguments whose arithmetic
// overflows are Errors. Before these checks they allocated a few bytes for a
// huge tensor and later reads and writes went out of bounds, so each case
// runs in a child process.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

using hgtest::expect_errors;
}  // namespace

TEST_CASE("a shape whose element or byte count overflows is an Error", "[tensor][sizes]") {
  expect_errors({
      // 3 x 6148914691236517206 wraps to 2 elements: 8 bytes, then out-of-bounds reads
      {"zeros({3, 6148914691236517206})",
       [] { (void)zeros({3, 6148914691236517206}).select(1, 100).sum(); }, {"[3, 6148914691236517206]", "overflow"}},
      // 2^62 x 4 wraps to 0 elements: no storage, and sum writes to address 0
      {"zeros({1 << 62, 4})", [] { (void)zeros({int64_t{1} << 62, 4}).sum({1}); }, {"overflow"}},
      {"zeros({INT64_MAX, 2})", [] { (void)zeros({kMax, 2}); }, {"overflow"}},
      // the element count fits, the byte count (x 4 bytes) does not
      {"empty({1 << 61})", [] { (void)empty({int64_t{1} << 61}); }, {"[2305843009213693952]", "bytes"}},
      {"empty({-1, 2})", [] { (void)empty({-1, 2}); }, {"negative", "[-1, 2]"}},
      {"ones({2, 1}).expand({1 << 62, 2, 4})", [] { (void)ones({2, 1}).expand({int64_t{1} << 62, 2, 4}); },
       {"overflow"}},
  });
  // PyTorch accepts zeros(0, 2**62, 4) but not zeros(2**62, 4, 0): the product of
  // the non-zero sizes must fit in either order, so that strides fit too
  REQUIRE_THROWS_WITH(zeros({0, int64_t{1} << 62, 4}), Contains("overflow"));
  REQUIRE_THROWS_WITH(zeros({int64_t{1} << 62, 4, 0}), Contains("overflow"));
  // an empty tensor may have a huge dimension (PyTorch: zeros(0, 2**63 - 1))
  const Tensor e = zeros({0, kMax});
  CHECK(e.numel() == 0);
  CHECK(e.sum().item<double>() == 0.0);
}

TEST_CASE("narrow, expand, select and view check their arguments without overflow", "[tensor][sizes]") {
  expect_errors({
      // PyTorch: "start (1) + length (9223372036854775807) exceeds dimension size (5)."
      {"narrow(0, 1, INT64_MAX)", [] { (void)zeros({5}).narrow(0, 1, kMax).sum(); }, {"narrow", "5"}},
      {"narrow(0, 2, -1)", [] { (void)zeros({5}).narrow(0, 2, -1); }, {"narrow"}},
      {"narrow(0, INT64_MAX, 1)", [] { (void)zeros({5}).narrow(0, kMax, 1); }, {"narrow"}},
      {"narrow(0, INT64_MIN, 1)", [] { (void)zeros({5}).narrow(0, kMin, 1); }, {"narrow"}},
      // only -1 (keep this size) may be negative, and not in a new leading dim
      {"expand({-5, 3})", [] { (void)zeros({1, 3}).expand({-5, 3}).sum(); }, {"expand", "-5"}},
      {"expand({-1, 3}) of [3]", [] { (void)zeros({3}).expand({-1, 3}); }, {"expand", "-1"}},
      {"select(0, INT64_MIN)", [] { (void)zeros({5}).select(0, kMin); }, {"select"}},
      {"view({1 << 62, 4})", [] { (void)zeros({6}).view({int64_t{1} << 62, 4}); }, {"view"}},
      {"view({-1, 1 << 62, 4})", [] { (void)zeros({8}).view({-1, int64_t{1} << 62, 4}); }, {"view"}},
      {"cat of two [0, INT64_MAX] along 1", [] { (void)cat({zeros({0, kMax}), zeros({0, kMax})}, 1); },
       {"cat", "int64"}},
      {"view({-2, -3})", [] { (void)zeros({6}).view({-2, -3}); }, {"view"}},
  });
  CHECK(zeros({1, 3}).expand({-1, 3}).shape() == Shape{1, 3});
  CHECK(zeros({3}).expand({2, -1}).shape() == Shape{2, 3});
  CHECK(zeros({5}).narrow(0, 5, 0).numel() == 0);
  CHECK(zeros({5}).narrow(0, -1, 1).numel() == 1);
}

TEST_CASE("a raw view whose reach overflows is an Error", "[tensor][sizes]") {
  const Tensor x = zeros({6});
  REQUIRE_THROWS_AS(alias_with(x, {2, 2}, {kMax, 1}, 0), Error);
  REQUIRE_THROWS_AS(alias_with(x, {3}, {kMin / 2}, 0), Error);
  REQUIRE_THROWS_AS(alias_with(x, {2, int64_t{1} << 62}, {0, 0}, 0), Error);
  REQUIRE_THROWS_AS(alias_with(x, {2}, {1}, kMax), Error);
}
