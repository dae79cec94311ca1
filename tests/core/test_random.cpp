// The random generator: Philox4x32-10 against its published known answers,
// the counter semantics that make draws reproducible and split-able, and the
// distributions' shapes beyond mean and variance (tests/core/test_tensor.cpp).
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <halfgrad/core/philox.h>
#include "test_util.h"

using namespace halfgrad;
using hgtest::ivalues;
using hgtest::values;

namespace {
philox::Words words(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return philox::Words{{a, b, c, d}}; }
bool same(const philox::Words& x, const philox::Words& y) { return std::equal(x.x, x.x + 4, y.x); }
}  // namespace

TEST_CASE("Philox4x32-10 gives Random123's known-answer vectors", "[random]") {
  CHECK(same(philox::philox4x32_10(words(0, 0, 0, 0), 0, 0),
             words(0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)));
  CHECK(same(philox::philox4x32_10(words(~0u, ~0u, ~0u, ~0u), ~0u, ~0u),
             words(0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)));
  CHECK(same(philox::philox4x32_10(words(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), 0xa4093822, 0x299f31d0),
             words(0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)));
}

TEST_CASE("A seed fixes every draw; draws continue where the last one stopped", "[random]") {
  for (DType dt : {float32, float64, bfloat16}) {
    INFO(hgtest::dname(dt));
    manual_seed(42);
    const auto whole = values(randn({1000}, dt));
    manual_seed(42);
    auto first = values(randn({300}, dt));
    const auto rest = values(randn({700}, dt));
    first.insert(first.end(), rest.begin(), rest.end());
    CHECK(first == whole);  // element i is counter i, whatever the split
    manual_seed(43);
    CHECK(values(randn({1000}, dt)) != whole);
  }
  CHECK(initial_seed() == 43);
}

TEST_CASE("rand fills equal-width bins evenly", "[random]") {
  manual_seed(3);
  const auto v = values(rand({400000}));
  std::vector<int64_t> bins(20, 0);
  for (double x : v) ++bins[static_cast<size_t>(x * 20)];
  // chi-square with 19 degrees of freedom: 43.8 is its 0.999 quantile
  const double expected = v.size() / 20.0;
  double chi2 = 0;
  for (int64_t b : bins) chi2 += (b - expected) * (b - expected) / expected;
  CHECK(chi2 < 43.8);
}

TEST_CASE("randn's tails match the normal distribution's", "[random]") {
  manual_seed(4);
  const auto v = values(randn({400000}, float64));
  const double n = static_cast<double>(v.size());
  // P(|z| > 1) = 0.3173, P(|z| > 2) = 0.0455, P(|z| > 3) = 0.0027
  for (auto [k, p] : {std::pair{1.0, 0.3173}, {2.0, 0.0455}, {3.0, 0.0027}}) {
    const double seen = std::count_if(v.begin(), v.end(), [k = k](double x) { return std::abs(x) > k; }) / n;
    INFO("P(|z| > " << k << ")");
    CHECK(seen == Approx(p).margin(5 * std::sqrt(p * (1 - p) / n)));
  }
  // symmetric: as many above zero as below
  const double above = std::count_if(v.begin(), v.end(), [](double x) { return x > 0; }) / n;
  CHECK(above == Approx(0.5).margin(0.005));
}

TEST_CASE("randint covers its range, low included, high excluded, even past 2^53", "[random]") {
  manual_seed(5);
  const auto small = ivalues(randint(-3, 4, {10000}));
  CHECK(std::set<int64_t>(small.begin(), small.end()) == std::set<int64_t>{-3, -2, -1, 0, 1, 2, 3});
  // a range past double's 53-bit mantissa keeps its low bits (no detour through double)
  const int64_t big = int64_t{1} << 62;
  const auto v = ivalues(randint(0, big, {1000}));
  CHECK(std::all_of(v.begin(), v.end(), [&](int64_t x) { return x >= 0 && x < big; }));
  CHECK(std::any_of(v.begin(), v.end(), [](int64_t x) { return (x & 1023) != 0; }));
  // floating dtypes get the same integers
  manual_seed(6);
  const auto i = ivalues(randint(0, 100, {500}));
  manual_seed(6);
  const auto f = values(randint(0, 100, {500}, float32));
  CHECK(std::equal(i.begin(), i.end(), f.begin(), [](int64_t a, double b) { return static_cast<double>(a) == b; }));
}

TEST_CASE("Large draws run in parallel and still equal the element-by-element formula", "[random]") {
  manual_seed(7);
  const int64_t n = 300000;  // past the threshold for threads
  const auto v = values(rand({n}, float64));
  for (int64_t i : {int64_t{0}, int64_t{1}, n / 2, n - 1})
    CHECK(v[static_cast<size_t>(i)] == philox::uniform(philox::draw(7, 0, static_cast<uint64_t>(i)), 0.0, 1.0));
}
