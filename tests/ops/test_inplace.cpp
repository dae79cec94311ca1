// In-place ops (add_, mul_, copy_, fill_) against PyTorch 1.13: `other` must
// broadcast TO self's shape, the written tensor may not have two elements on
// one memory location, and an input may not partly overlap it (full identity,
// x.add_(x), is fine). The bad cases run in a child process: before these
// checks they wrote past the heap or read garbage.
#include <catch2/catch.hpp>

#include <halfgrad/ops/util.h>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::values;

namespace {
// 0, 1, ..., n-1 as float32 in the given shape.
Tensor iota(const Shape& shape) { return arange(0.0, static_cast<double>(hgtest::numel(shape)), 1.0).view(shape); }

using hgtest::expect_errors;

const char* const kInternal = "more than one element of the written-to tensor refers to a single memory location";
const char* const kPartial = "some elements of the input tensor and the written-to tensor refer to a single memory";
}  // namespace

TEST_CASE("in-place ops accept only an other that broadcasts to self's shape", "[ops][inplace]") {
  expect_errors({
      // PyTorch: "output with shape [3] doesn't match the broadcast shape [2, 3]"
      {"zeros(3).add_(ones(2,3))", [] { zeros({3}).add_(ones({2, 3})); }, {"add_", "[3]", "[2, 3]"}},
      // PyTorch: "The size of tensor a (3) must match the size of tensor b (4)"
      {"zeros(3).add_(t4)", [] { zeros({3}).add_(iota({4})); }, {"add_", "[3]", "[4]"}},
      {"zeros(2,3).add_(arange(6).view(3,2))", [] { zeros({2, 3}).add_(iota({3, 2})); }, {"add_", "[3, 2]"}},
      {"ones(2,2).mul_(t4)", [] { ones({2, 2}).mul_(iota({4})); }, {"mul_", "[2, 2]", "[4]"}},
      {"zeros(2,3).add_(ones(1,2,3))", [] { zeros({2, 3}).add_(ones({1, 2, 3})); }, {"add_", "[1, 2, 3]"}},
      {"zeros(2,3).copy_(ones(1,1,3))", [] { zeros({2, 3}).copy_(ones({1, 1, 3})); }, {"copy_", "[1, 1, 3]"}},
      {"zeros(2,3).copy_(ones(6))", [] { zeros({2, 3}).copy_(ones({6})); }, {"copy_", "[6]"}},
  });
  // what does broadcast to self still works
  Tensor x = ones({2, 2});
  x.mul_(hgtest::make({1, 2}, {2}, float32));
  CHECK(values(x) == std::vector<double>{1, 2, 1, 2});
  x.add_(full({}, 1.0)).add_(ones({2, 1}));
  CHECK(values(x) == std::vector<double>{3, 4, 3, 4});
}

TEST_CASE("broadcast_to rejects a target of fewer dims or another shape", "[ops][inplace]") {
  // the internal view every broadcasting op uses: it assumed a valid target
  expect_errors({
      {"broadcast_to([2, 3] -> [3])", [] { (void)ops::broadcast_to(ones({2, 3}), {3}).sum(); },
       {"broadcast_to", "[2, 3]", "[3]"}},
      {"broadcast_to([2, 3] -> [2, 1])", [] { (void)ops::broadcast_to(ones({2, 3}), {2, 1}); },
       {"broadcast_to", "[2, 1]"}},
      {"broadcast_to([2, 3] -> [4, 3])", [] { (void)ops::broadcast_to(ones({2, 3}), {4, 3}); },
       {"broadcast_to", "[4, 3]"}},
  });
  const Tensor b = ops::broadcast_to(hgtest::make({1, 2, 3}, {1, 3}, float32), {2, 2, 3});
  CHECK(b.strides() == Shape{0, 0, 1});
  CHECK(values(b) == std::vector<double>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  REQUIRE_THROWS_WITH(ones({2, 3}).expand({4, 3}), Contains("expand") && Contains("[4, 3]"));
}

TEST_CASE("in-place writes into a tensor with self-overlapping elements are refused", "[ops][inplace]") {
  expect_errors({
      {"expanded add_", [] { zeros({1, 3}).expand({4, 3}).add_(ones({4, 3})); }, {"add_", kInternal, "clone()"}},
      {"expanded mul_", [] { zeros({1, 3}).expand({4, 3}).mul_(2.0); }, {"mul_", kInternal}},
      {"expanded copy_", [] { zeros({1, 3}).expand({4, 3}).copy_(ones({4, 3})); }, {"copy_", kInternal}},
  });
  // fill_ and zero_ write one value, so an expanded tensor is fine (as in PyTorch)
  Tensor base = zeros({1, 3});
  base.expand({4, 3}).fill_(2.0);
  CHECK(values(base) == std::vector<double>{2, 2, 2});
  base.expand({4, 3}).zero_();
  CHECK(values(base) == std::vector<double>{0, 0, 0});
  // an empty or single-element expanded view has no two elements on one location
  zeros({1, 1}).expand({1, 1}).add_(ones({1, 1}));
  zeros({1, 3}).expand({0, 3}).add_(ones({0, 3}));
}

TEST_CASE("in-place ops refuse an input that partly overlaps the written tensor", "[ops][inplace]") {
  expect_errors({
      {"x[1:].copy_(x[:-1])", [] {
         Tensor x = iota({8});
         x.narrow(0, 1, 7).copy_(x.narrow(0, 0, 7));
       }, {"copy_", kPartial, "clone()"}},
      {"x.copy_(x.t())", [] {
         Tensor x = iota({3, 3});
         x.copy_(x.t());
       }, {"copy_", kPartial}},
      {"x[1:].add_(x[:-1])", [] {
         Tensor x = iota({8});
         x.narrow(0, 1, 7).add_(x.narrow(0, 0, 7));
       }, {"add_", kPartial}},
      {"x.add_(x[0])", [] {
         Tensor x = iota({2, 3});
         x.add_(x.select(0, 0));
       }, {"add_", kPartial}},
      {"x.mul_(x[0, 0])", [] {
         Tensor x = iota({2, 3});
         x.mul_(x.select(0, 0).select(0, 0));
       }, {"mul_", kPartial}},
      {"x.copy_(x[0, 0])", [] {
         Tensor x = iota({2, 3});
         x.copy_(x.select(0, 0).select(0, 0));
       }, {"copy_", kPartial}},
  });
}

TEST_CASE("in-place ops on the same memory or disjoint parts of it work as in PyTorch", "[ops][inplace]") {
  Tensor x = iota({8});
  x.add_(x);  // full identity
  CHECK(values(x) == std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14});
  x.copy_(x);
  x.copy_(x.view({8}));  // another handle on the same elements
  CHECK(values(x) == std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14});
  Tensor y = iota({8});
  y.narrow(0, 0, 4).add_(y.narrow(0, 4, 4));  // disjoint halves
  CHECK(values(y) == std::vector<double>{4, 6, 8, 10, 4, 5, 6, 7});
  // interleaved views are not dense: PyTorch does not look further (and these do not overlap)
  Tensor z = iota({8});
  alias_with(z, {4}, {2}, 0).copy_(alias_with(z, {4}, {2}, 1));
  CHECK(values(z) == std::vector<double>{1, 1, 3, 3, 5, 5, 7, 7});
}
