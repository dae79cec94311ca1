// The ops of test_reduce_min_norm_logical.cpp and test_mod_clamp.cpp on a CUDA device
// against the CPU backend on the same values: min/argmin/max(dim) tuples on
// every reduce kernel path (warp rows, block rows, split rows, packed
// layouts), ties and NaN; amax/amin, logsumexp, norm, all/any, isclose and
// friends; remainder/fmod (int64 too); clamp with tensor bounds; backward.
// Run only where a GPU is usable ("[cuda]").
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda_compare.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hgtest::values;
using hgtest::cuda::dev;
using hgtest::cuda::expect_same;
using hgtest::cuda::float_and_int;
using hgtest::cuda::kCuda;
using hgtest::cuda::leaf_on;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();


std::string dn(DType dt) { return hgtest::dname(dt); }

}  // namespace

TEST_CASE("CUDA min, argmin and the max/min tuples on every reduce path, ties and NaN", "[cuda][ops][reduce][min]") {
  struct Case {
    std::string name;
    Shape shape;
    int64_t dim;
  };
  const std::vector<Case> cases = {
      {"warp per row", {300, 100}, 1},   {"block per row", {64, 3000}, 1}, {"split rows", {2, 200000}, 1},
      {"middle dim (packed)", {8, 50, 9}, 1}, {"leading dim", {70, 33}, 0},  {"negative dim", {5, 6, 7}, -1},
  };
  for (DType dt : float_and_int())
    for (const auto& c : cases) {
      // integers in [-3, 3]: many ties, the first index must win
      const Tensor x = hgtest::uniform(c.shape, dt, -3, 3), xg = dev(x);
      const std::string what = dn(dt) + " " + c.name;
      for (bool keepdim : {false, true}) {
        const auto [v, i] = hg::min(x, c.dim, keepdim);
        const auto [vg, ig] = hg::min(xg, c.dim, keepdim);
        expect_same(vg, v, "min values " + what, true);
        expect_same(ig, i, "min indices " + what);
        const auto [mv, mi] = hg::max(x, c.dim, keepdim);
        const auto [mvg, mig] = hg::max(xg, c.dim, keepdim);
        expect_same(mvg, mv, "max values " + what, true);
        expect_same(mig, mi, "max indices " + what);
        expect_same(hg::argmin(xg, c.dim, keepdim), hg::argmin(x, c.dim, keepdim), "argmin " + what);
      }
      expect_same(hg::min(xg), hg::min(x), "min all " + what, true);
      expect_same(hg::argmin(xg), hg::argmin(x), "argmin all " + what);
    }
  for (DType dt : hgtest::kFloatDTypes) {
    Tensor x = hgtest::uniform({6, 9}, dt, -2, 2);
    for (const auto& [i, j] : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {1, 6}, {4, 0}, {5, 8}})
      x.narrow(0, i, 1).narrow(1, j, 1).fill_(NAN);
    const Tensor xg = dev(x);
    for (int64_t d : {0, 1}) {
      expect_same(std::get<0>(hg::min(xg, d)), std::get<0>(hg::min(x, d)), "min with NaN " + dn(dt), true);
      expect_same(hg::argmin(xg, d), hg::argmin(x, d), "argmin with NaN " + dn(dt));
    }
    expect_same(hg::min(xg), hg::min(x), "min all with NaN " + dn(dt), true);
    // a long row split over blocks: the minimum twice, the first wins; then NaN
    const int64_t n = (int64_t{1} << 20) + 3;
    Tensor y = hgtest::uniform({n}, dt, 0, 2);
    y.narrow(0, 300000, 1).fill_(-5);
    y.narrow(0, 900000, 1).fill_(-5);
    expect_same(hg::argmin(dev(y)), hg::argmin(y), "argmin of 2^20 " + dn(dt));
    expect_same(hg::min(dev(y)), hg::min(y), "min of 2^20 " + dn(dt), true);
    y.narrow(0, 800000, 1).fill_(NAN);
    expect_same(hg::argmin(dev(y)), hg::argmin(y), "argmin of 2^20 with NaN " + dn(dt));
  }
}

TEST_CASE("CUDA amax, amin, logsumexp, norm, all and any over dims", "[cuda][ops][reduce]") {
  for (DType dt : hgtest::kFloatDTypes) {
    const Tensor base = hgtest::uniform({6, 4, 5}, dt, -3, 3);
    for (const auto& [layout, x] : std::vector<std::pair<std::string, Tensor>>{
             {"contiguous", base}, {"permuted", base.permute({1, 2, 0})}}) {
      const Tensor xg = dev(x);
      for (const Shape& dims : {Shape{0}, Shape{-1}, Shape{0, 2}, Shape{}})
        for (bool keepdim : {false, true}) {
          const std::string what = dn(dt) + " " + layout + " dims " + hg::shape_str(dims) + (keepdim ? " keepdim" : "");
          expect_same(hg::amax(xg, dims, keepdim), hg::amax(x, dims, keepdim), "amax " + what, true);
          expect_same(hg::amin(xg, dims, keepdim), hg::amin(x, dims, keepdim), "amin " + what, true);
          expect_same(hg::logsumexp(xg, dims, keepdim), hg::logsumexp(x, dims, keepdim), "logsumexp " + what);
          for (double p : {1.0, 2.0, kInf, -kInf, 0.0, 3.0})
            expect_same(hg::norm(xg, p, dims, keepdim), hg::norm(x, p, dims, keepdim),
                        "norm p " + std::to_string(p) + " " + what, std::isinf(p));
        }
      for (int64_t d : {0, 1, -1}) {
        expect_same(hg::all(hg::gt(xg, -2.5), d), hg::all(hg::gt(x, -2.5), d), "all " + dn(dt));
        expect_same(hg::any(hg::gt(xg, 2.5), d, true), hg::any(hg::gt(x, 2.5), d, true), "any " + dn(dt));
        expect_same(hg::all(xg, d), hg::all(x, d), "all of values " + dn(dt));
      }
      expect_same(hg::any(xg), hg::any(x), "any all " + dn(dt));
    }
    // -inf rows, inf, NaN
    const Tensor e = hgtest::make({-kInf, -kInf, kInf, 1, NAN, 1, 1000, 1000}, {4, 2}, dt);
    expect_same(hg::logsumexp(dev(e), {1}), hg::logsumexp(e, {1}), "logsumexp edge rows " + dn(dt));
    expect_same(hg::norm(dev(e), 2, {1}), hg::norm(e, 2, {1}), "norm edge rows " + dn(dt));
    expect_same(hg::isnan(dev(e)), hg::isnan(e), "isnan " + dn(dt));
    expect_same(hg::isinf(dev(e)), hg::isinf(e), "isinf " + dn(dt));
    expect_same(hg::isfinite(dev(e)), hg::isfinite(e), "isfinite " + dn(dt));
    const Tensor b = hg::add(base, 1e-3);
    expect_same(hg::isclose(dev(base), dev(b), 1e-3, 1e-3), hg::isclose(base, b, 1e-3, 1e-3), "isclose " + dn(dt));
    CHECK(hg::allclose(dev(base), dev(base)));
    CHECK(hg::equal(dev(base), dev(base.clone())));
    CHECK_FALSE(hg::equal(dev(base), dev(b)));
  }
  // int64: amax/amin exact, all/any
  const Tensor i = hgtest::uniform({7, 9}, DType::Int64, -5, 5);
  expect_same(hg::amax(dev(i), {1}), hg::amax(i, {1}), "amax int64");
  expect_same(hg::amin(dev(i), {0}), hg::amin(i, {0}), "amin int64");
  expect_same(hg::all(dev(i), 1), hg::all(i, 1), "all int64");
  expect_same(hg::logsumexp(dev(i), {1}), hg::logsumexp(i, {1}), "logsumexp int64 (float32)");
}

TEST_CASE("CUDA remainder, fmod and clamp with tensor bounds match the CPU", "[cuda][ops][elementwise]") {
  for (DType dt : float_and_int()) {
    const bool is_int = dt == DType::Int64;
    const Tensor a = hgtest::uniform({5, 40}, dt, -50, 50).t();  // strided
    const Tensor b = is_int ? hgtest::make({3, -3, 7, -1, 2}, {5}, dt) : hgtest::make({1.5, -2.25, 0.75, -3, 9}, {5}, dt);
    expect_same(hg::remainder(dev(a), dev(b)), hg::remainder(a, b), "remainder " + dn(dt));
    expect_same(hg::fmod(dev(a), dev(b)), hg::fmod(a, b), "fmod " + dn(dt));
    expect_same(hg::remainder(dev(a), -4.0), hg::remainder(a, -4.0), "remainder scalar " + dn(dt));
    const Tensor lo = hgtest::uniform({1, 5}, dt, -30, 0), hi = hgtest::uniform({40, 1}, dt, -5, 30);
    expect_same(hg::clamp(dev(a), dev(lo), dev(hi)), hg::clamp(a, lo, hi), "clamp " + dn(dt), true);
    expect_same(hg::clamp_min(dev(a), dev(lo)), hg::clamp_min(a, lo), "clamp_min " + dn(dt), true);
  }
  // an int64 divisor of 0 on CUDA: 0 (no device error, no host sync)
  const Tensor z = hg::tensor(std::vector<int64_t>{5, -5}).to(kCuda);
  const Tensor zero = hg::zeros({2}, hg::TensorOptions(DType::Int64, kCuda));
  CHECK(hgtest::ivalues(hg::remainder(z, zero)) == std::vector<int64_t>{0, 0});
  CHECK(hgtest::ivalues(hg::fmod(z, zero)) == std::vector<int64_t>{0, 0});
}

TEST_CASE("CUDA gradients of min, amax, logsumexp, norm, remainder and clamp match the CPU", "[cuda][backward]") {
  const Tensor v = hgtest::uniform({6, 7}, DType::Float64, 0.3, 2);
  const Tensor lo = hgtest::uniform({7}, DType::Float64, 0.5, 1), hi = hgtest::uniform({6, 1}, DType::Float64, 1, 1.8);
  auto f = [](const Tensor& x, const Tensor& l, const Tensor& h) {
    const Tensor a = std::get<0>(hg::min(x, 1)).sum() + hg::amax(x, {0}).sum() + hg::logsumexp(x, {1}).sum();
    const Tensor b = hg::norm(x, 2, {0}).sum() + hg::norm(x, 1).sum() + hg::norm(x, kInf, {1}).sum();
    const Tensor c = hg::remainder(x, 0.7).sum() + hg::mul(hg::clamp(x, l, h), x).sum();
    return a + b + c;
  };
  std::vector<Tensor> grads[2];
  for (int k = 0; k < 2; ++k) {
    const hg::Device d = k == 0 ? hg::Device::cpu() : kCuda;
    const Tensor x = leaf_on(v, d), l = leaf_on(lo, d), h = leaf_on(hi, d);
    f(x, l, h).backward();
    grads[k] = {x.grad(), l.grad(), h.grad()};
  }
  for (size_t i = 0; i < 3; ++i) expect_same(grads[1][i], grads[0][i], "gradient " + std::to_string(i));
}
